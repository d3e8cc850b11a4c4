// Package examples holds the example event files users read and feed to
// "projector replay". This test keeps the generated ones reproducible and
// checks every line decodes with the Go codec (the schema test checks them
// against the JSON Schemas).
package examples

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

var update = flag.Bool("update", false, "rewrite the generated example files")

// generated are the example files made by the workload generator.
var generated = map[string]workload.Spec{
	"thousand-nodes.jsonl": {RunID: "run-thousand", SessionID: "session-7", ThreadID: "thread-7", Nodes: 1000, Fanout: 4, Seed: 1,
		BlockedShare: 0.06, FailedShare: 0.05, RunningShare: 0.12},
}

func TestGeneratedExamplesAreCurrent(t *testing.T) {
	for name, spec := range generated {
		var buf bytes.Buffer
		for _, ev := range workload.Generate(spec) {
			b, err := ev.MarshalJSON()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			buf.Write(b)
			buf.WriteByte('\n')
		}
		if *update {
			if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%s: %v (run go test ./examples -update)", name, err)
		}
		if !bytes.Equal(have, buf.Bytes()) {
			t.Errorf("%s is not what the generator makes now: run go test ./examples -update", name)
		}
	}
}

func TestEveryExampleLineDecodes(t *testing.T) {
	files, err := filepath.Glob("*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example files (%v)", err)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		line := 0
		for sc.Scan() {
			line++
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			if _, err := topics.DecodeEvent(sc.Bytes()); err != nil {
				t.Errorf("%s:%d: %v", name, line, err)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
