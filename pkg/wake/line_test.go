package wake_test

import (
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// TestLine: the one-line summary says the lane, the part of a split wake,
// the triggers and the snapshot's counts; with a receipt it starts with the receipt time and
// marks staleness as recomputed at receipt, not as generated.
func TestLine(t *testing.T) {
	detail, input := "steer", &topics.TriggerInput{InputKind: "steer", Text: "stop and " + strings.Repeat("x", 100)}
	w := &topics.Wake{WakeID: "01W", RunID: "run-1", Lane: topics.LanePriority,
		Triggers: []topics.Trigger{{Kind: topics.TriggerHumanInput, AgentID: "human", Detail: &detail, Input: input},
			{Kind: topics.TriggerRequest, AgentID: "agent-7"}},
		AgentTreeSnapshot: topics.AgentTreeSnapshot{AsOfEventSeq: 42, Truncated: true,
			Summary:        topics.Summary{NodeCountTotal: 100, NodeCountIncluded: 60, OpenRequestCount: 1},
			TruncationMeta: topics.TruncationMeta{OmittedCountTotal: 40}}}
	got := wake.Line(w, wake.Received{})
	want := `WAKE! 01W run=run-1 seq=42 triggers=[human_input:human(steer) "stop and ` + strings.Repeat("x", 51) + `…", request:agent-7] ` +
		`nodes=60/100 running=0 blocked=0 failed=0 completed=0 overdue_leases=0 open_requests=1 truncated(nodes=40 handles=0 cut_strings=0)`
	if got != want {
		t.Fatalf("Line =\n%s\nwant\n%s", got, want)
	}
	w.Part = &topics.WakePart{Number: 2, Count: 79}
	if got := wake.Line(w, wake.Received{}); got != strings.Replace(want, " seq=42 triggers=[", " seq=42 part=2/79 triggers=[", 1) {
		t.Fatalf("Line of a part =\n%s", got)
	}
	w.Part = nil
	r := wake.Received{ReceivedAt: time.Date(2026, 2, 14, 10, 40, 1, 250e6, time.UTC), Stale: true, AgeMs: 12000}
	if got := wake.Line(w, r); !strings.HasPrefix(got, "10:40:01.250 WAKE! 01W") || !strings.HasSuffix(got, " STALE(age=12000ms)") {
		t.Fatalf("Line with a receipt = %s", got)
	}
}
