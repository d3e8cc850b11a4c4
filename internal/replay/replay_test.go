package replay_test

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/replay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReplayReportsIDConflicts: an event sent again is a duplicate; an
// event id reused with other content is reported by line as
// duplicate_id_conflict, counted, and not applied (the first content
// stays: no wake for it); the same id in another run is another event.
func TestReplayReportsIDConflicts(t *testing.T) {
	ev := func(id, run, agent, typ, data string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/t","type":"` + typ + `","time":"2026-02-14T10:00:00Z","runid":"` + run +
			`","agentid":"` + agent + `","schemaversion":1,"data":` + data + `}`
	}
	in := strings.Join([]string{
		ev("e1", "run-1", "root", "tree.node_created", `{"role":"conductor"}`),
		ev("e2", "run-1", "w1", "tree.node_created", `{"role":"worker","parent_agent_id":"root"}`),
		ev("e2", "run-1", "w1", "tree.node_created", `{"parent_agent_id":"root","role":"worker"}`), // sent again
		ev("e2", "run-1", "w1", "signal.failed", `{"error_code":"boom"}`),                          // another content
		ev("e2", "run-2", "w1", "signal.failed", `{"error_code":"boom"}`),                          // another run
	}, "\n")
	var out, errw bytes.Buffer
	st, err := replay.Run(strings.NewReader(in), &out, &errw, replay.Options{Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	want := replay.Stats{Lines: 5, Applied: 3, Duplicates: 1, Conflicts: 1, Wakes: 1}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if got := errw.String(); !strings.HasPrefix(got, `line 4: duplicate_id_conflict: projection: run "run-1": event id "e2" was applied as the run's event 2 with other content`) ||
		strings.Count(got, "\n") != 1 {
		t.Errorf("reports:\n%s\nwant one, line 4's conflict", got)
	}
	// The only wake is run-2's failure: run-1's conflicting failure woke
	// nobody.
	if wakes := out.String(); !strings.Contains(wakes, "run-2") || strings.Contains(wakes, "run-1") {
		t.Errorf("wakes:\n%s\nwant run-2's only", wakes)
	}
}
