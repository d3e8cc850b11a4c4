package projection

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestActivityIsBounded: a run's activity lists at most maxTracked open
// things of a kind and keeps exact totals beyond them; a call that ends
// beyond the map still counts; the record is cut to maxActivityBytes
// however long its texts and ids, and reads back.
func TestActivityIsBounded(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	seq := 0
	apply := func(data topics.Payload) {
		t.Helper()
		seq++
		at = at.Add(time.Millisecond)
		ev := &topics.Event{ID: fmt.Sprintf("e%d", seq), Source: "/t", Type: data.EventType(), Time: topics.NewTime(at),
			RunID: "run-1", AgentID: "w", SchemaVersion: 1, Data: data}
		if err := ev.Validate(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := p.ApplyEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("é", topics.MaxIDLength-8)
	const calls = 3 * maxTracked
	for i := range calls {
		apply(&topics.ToolStarted{CallID: fmt.Sprintf("%s-%03d", long, i), ToolName: fmt.Sprintf("tool-%03d", i),
			CallKind: "command", Command: strings.Repeat("x ", topics.MaxSummaryLength/2)})
	}
	// The first call (listed) and the last (not listed) end.
	apply(&topics.ToolFinished{CallID: fmt.Sprintf("%s-%03d", long, 0), Outcome: "failed"})
	apply(&topics.ToolFinished{CallID: fmt.Sprintf("%s-%03d", long, calls-1), Outcome: "succeeded"})

	m, err := p.ReadModel("run-1", at, false)
	if err != nil {
		t.Fatal(err)
	}
	ts := m.ToolSummary.Value
	if ts.Started != calls || ts.Running != calls-2 || len(ts.RunningCalls) != MaxReadModelList || !ts.Truncated {
		t.Errorf("tool summary: started %d running %d listed %d truncated %v; want %d, %d, %d, true",
			ts.Started, ts.Running, len(ts.RunningCalls), ts.Truncated, calls, calls-2, MaxReadModelList)
	}
	if ts.FailedCommands != 1 || ts.Outcomes["succeeded"] != 1 || len(ts.ByTool) != MaxReadModelList {
		t.Errorf("tool summary: failed commands %d, succeeded %d, %d tools listed", ts.FailedCommands, ts.Outcomes["succeeded"], len(ts.ByTool))
	}
	// Long processes and incidents too: the record must be cut to fit.
	for i := range maxTracked {
		apply(&topics.ProcessStarted{ProcessID: fmt.Sprintf("%s-%03d", long, i), Command: strings.Repeat("y ", topics.MaxSummaryLength/2)})
		apply(&topics.IncidentOpened{IncidentID: fmt.Sprintf("%s-%03d", long, i), IncidentKind: long, Severity: "error",
			Title: strings.Repeat("z ", topics.MaxSummaryLength/2)})
	}
	r, _ := p.Run("run-1")
	if n := len(r.act.Tools.Running); n > maxTracked {
		t.Errorf("%d running calls kept, want at most %d", n, maxTracked)
	}
	enc, err := encodeActivity(r.act)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) > maxActivityBytes {
		t.Errorf("activity record of %d bytes, over %d", len(enc), maxActivityBytes)
	}
	back, err := decodeActivity(enc)
	if err != nil {
		t.Fatal(err)
	}
	// Cut or not, the totals are exact: what was not kept is counted.
	if got := int64(len(back.Tools.Running)) + back.Untracked["running_calls"]; got != calls-2 {
		t.Errorf("after the record's round trip, %d running calls accounted for, want %d", got, calls-2)
	}
	if got := int64(len(back.Processes.Running)) + back.Untracked["running_processes"]; got != maxTracked {
		t.Errorf("after the record's round trip, %d running processes accounted for, want %d", got, maxTracked)
	}
	if len(back.Processes.Running) == maxTracked {
		t.Error("the record was not cut: the test no longer makes it too large")
	}
}
