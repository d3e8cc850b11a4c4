package main

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/topics"
)

func replayFile(t *testing.T, path string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out, errb bytes.Buffer
	code = run(append([]string{"replay"}, args...), f, &out, &errb)
	return out.String(), errb.String(), code
}

// TestReplayExamples: replay is deterministic and every wake keeps seed 000's
// bounds with the root first.
func TestReplayExamples(t *testing.T) {
	for _, path := range []string{"../../examples/small-run.jsonl", "../../examples/thousand-nodes.jsonl"} {
		a, errs, code := replayFile(t, path)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", path, code, errs)
		}
		b, _, _ := replayFile(t, path)
		if a != b {
			t.Fatalf("%s: two replays differ", path)
		}
		wakes := 0
		sc := bufio.NewScanner(strings.NewReader(a))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			wakes++
			w, err := topics.DecodeWake(sc.Bytes())
			if err != nil {
				t.Fatalf("%s: wake %d: %v", path, wakes, err)
			}
			s := &w.AgentTreeSnapshot
			enc, _ := topics.Marshal(s)
			if len(enc) > 24000 || len(s.Nodes) > 64 {
				t.Fatalf("%s: wake %d: %d bytes, %d nodes", path, wakes, len(enc), len(s.Nodes))
			}
			if s.RootAgentID == nil || len(s.Nodes) == 0 || s.Nodes[0].AgentID != *s.RootAgentID {
				t.Fatalf("%s: wake %d: root not first", path, wakes)
			}
		}
		if wakes == 0 {
			t.Fatalf("%s: no wakes", path)
		}
		if path == "../../examples/thousand-nodes.jsonl" {
			// Some wakes of the large run must have needed truncation.
			if !strings.Contains(a, `"truncated":true`) {
				t.Errorf("%s: no wake was truncated", path)
			}
		}
	}
}

// TestReplayReportsBadLinesAndGoesOn: each bad line is named with its number
// and reason on stderr; the good lines around it are projected.
func TestReplayReportsBadLinesAndGoesOn(t *testing.T) {
	good, err := os.ReadFile("../../examples/small-run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(good)), "\n")
	bad := []string{
		lines[0],
		`{"specversion":"1.0"`, // truncated JSON
		lines[1],
		strings.Replace(lines[6], `"role":"worker"`, `"role":"wizard"`, 1),
		strings.Replace(lines[2], `"type":"tree.plan_created"`, `"type":"tree.from_the_future"`, 1),
	}
	bad = append(bad, lines[2:]...)
	var out, errb bytes.Buffer
	code := run([]string{"replay"}, strings.NewReader(strings.Join(bad, "\n")), &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (invalid lines)", code)
	}
	for _, want := range []string{"line 2: topics: invalid event", "line 4: topics: invalid event", "data.role: want one of", "line 5: skipped: topics: unknown event type", "2 invalid, 1 of unknown type"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	ref, _, _ := replayFile(t, "../../examples/small-run.jsonl")
	if strings.Count(out.String(), "\n") != strings.Count(ref, "\n") {
		t.Errorf("the good lines did not give the same wakes:\n%s\nwant\n%s", out.String(), ref)
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Fatalf("no args: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"replay", "-now", "yesterday"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "RFC 3339") {
		t.Fatalf("bad -now: exit %d", code)
	}
	if code := run([]string{"replay", "-max-nodes", "-1"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "max nodes") {
		t.Fatalf("bad limit: exit %d, %q", code, errb.String())
	}
}
