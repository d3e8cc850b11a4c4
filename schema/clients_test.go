package schema_test

// The producer examples under examples/ (Python, kcat, Go, TypeScript) and
// the conductor's acknowledgement must write what the schemas describe:
// each example is run in its dry-run mode, which prints the events it would
// send, and every line must be valid against its type's schema and
// event.schema.json, and be accepted by the Go decoder.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

func TestClientExamplesValid(t *testing.T) {
	root := repoRoot(t)
	ex := func(p string) string { return filepath.Join(root, "examples", p) }
	cases := []struct {
		name string
		cmd  func(t *testing.T) *exec.Cmd
	}{
		{"python", func(t *testing.T) *exec.Cmd {
			// The example builds its events with the canopy package.
			return exec.Command(testenv.PythonSDK(t), ex("python/producer.py"), "--dry-run")
		}},
		{"kcat", func(t *testing.T) *exec.Cmd {
			cmd := exec.Command("sh", ex("kcat/produce.sh"))
			cmd.Env = append(os.Environ(), "DRY_RUN=1")
			return cmd
		}},
		{"go", func(t *testing.T) *exec.Cmd {
			cmd := exec.Command(testenv.Tool(t, "go"), "run", "./examples/producer-go", "-dry-run")
			cmd.Dir = root
			return cmd
		}},
		{"typescript", func(t *testing.T) *exec.Cmd {
			node, dir := testenv.TypeScriptExamples(t)
			return exec.Command(node, filepath.Join(dir, "producer.js"), "--dry-run")
		}},
	}
	s := newSchemas(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := c.cmd(t)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) < 10 {
				t.Fatalf("%d events, want the example's tree of at least 10:\n%s", len(lines), out)
			}
			types := map[string]bool{}
			for i, line := range lines {
				ev, err := topics.DecodeEvent([]byte(line))
				if err != nil {
					t.Errorf("line %d: the Go decoder refuses it: %v", i+1, err)
					continue
				}
				types[string(ev.Type)] = true
				for _, rel := range []string{eventSchema, typeSchema(ev.Type)} {
					if err := s.validate(rel, []byte(line)); err != nil {
						t.Errorf("line %d: %s refuses it: %v", i+1, rel, err)
					}
				}
			}
			for _, want := range []topics.EventType{topics.TypeNodeCreated, topics.TypeNodeDelegated, topics.TypeResult, topics.TypeNodeCompleted} {
				if !types[string(want)] {
					t.Errorf("no %s event: the watchdog has nothing to mark forwarded", want)
				}
			}
		})
	}
}

// TestAckEventValid: pkg/wake's acknowledgement of a real wake is valid
// against conductor.wake_received.schema.json.
func TestAckEventValid(t *testing.T) {
	s := newSchemas(t)
	wakes := wakesOf(t, projection.Config{}, decodedExamples(t))
	for _, enc := range wakes {
		w, err := topics.DecodeWake(enc)
		if err != nil {
			t.Fatal(err)
		}
		b, err := wake.AckEvent(w, "/conductors/test", "conductor", time.Date(2026, 2, 14, 11, 0, 0, 0, time.UTC)).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{eventSchema, typeSchema(topics.TypeWakeReceived)} {
			if err := s.validate(rel, b); err != nil {
				t.Errorf("%s refuses the acknowledgement %s: %v", rel, b, err)
			}
		}
	}
}
