package projection

import (
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestLongIDsStayDistinctAndMatch: two agents whose ids share their first
// 200 characters are two nodes in the snapshot, and each wake's trigger
// names its agent (and correlation id) exactly as the snapshot does, so a
// conductor can match them (issue 20; docs/CONTRACT.md "Cuts").
func TestLongIDsStayDistinctAndMatch(t *testing.T) {
	p, _ := New(Config{})
	shared := strings.Repeat("x", 200)
	at := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	ev := func(id, agent, corr string, data topics.Payload) *topics.Event {
		at = at.Add(time.Second)
		return &topics.Event{ID: id, Source: "/t", Type: data.EventType(), Time: topics.NewTime(at), RunID: "run",
			AgentID: agent, CorrelationID: corr, SchemaVersion: topics.CurrentSchemaVersion, Data: data}
	}
	p.Apply(ev("e0", "root", "", &topics.NodeCreated{Role: topics.RoleConductor}))
	var pending Pending
	for i, agent := range []string{shared + "-a", shared + "-b"} {
		trigs, _ := p.Apply(ev("e"+string(rune('1'+i)), agent, shared+"-corr-"+agent[len(agent)-1:], &topics.Failed{ErrorCode: "x"}))
		pending.Add("run", trigs)
	}
	built, err := p.Wakes(&pending, time.Time{}, topics.Time{})
	if err != nil || len(built) != 1 {
		t.Fatalf("%d wakes, %v", len(built), err)
	}
	w := built[0].Wake
	nodes := map[string]bool{}
	for _, n := range w.AgentTreeSnapshot.Nodes {
		nodes[n.AgentID] = true
	}
	if len(w.AgentTreeSnapshot.Nodes) != 3 || len(nodes) != 3 {
		t.Fatalf("%d nodes, %d distinct ids: the two long ids collided", len(w.AgentTreeSnapshot.Nodes), len(nodes))
	}
	for _, tr := range w.Triggers {
		if !nodes[tr.AgentID] || len([]rune(tr.AgentID)) > 160 {
			t.Errorf("trigger names agent %q, which no node of the snapshot is", tr.AgentID)
		}
		if tr.CorrelationID == nil || len([]rune(*tr.CorrelationID)) > 160 || !strings.Contains(*tr.CorrelationID, "~") {
			t.Errorf("trigger's correlation id %v: want it cut as an id", tr.CorrelationID)
		}
	}
}
