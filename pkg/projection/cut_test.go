package projection

import (
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestLongIDsStayDistinctAndMatch: two agents whose ids share their first
// 200 characters are two nodes in the snapshot, and each wake's trigger
// names its agent (and correlation id) exactly as the snapshot does, so a
// conductor can match them (docs/CONTRACT.md "Cuts").
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

// TestTriggersMatchAHalvedCut: when even the root does not fit the byte
// budget at max_string_length (here a run and a root id each of 85 U+2028,
// 255 bytes, each character 6 bytes as JSON), the snapshot cuts at a
// smaller bound, and the wake's trigger cuts
// its agent id at that same bound, so it still names the root as the
// snapshot does.
func TestTriggersMatchAHalvedCut(t *testing.T) {
	p, err := New(Config{Limits: snapshot.Limits{MaxBytes: snapshot.MinBytes}})
	if err != nil {
		t.Fatal(err)
	}
	root := strings.Repeat("\u2028", 85)
	run := root
	at := topics.NewTime(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC))
	p.Apply(&topics.Event{ID: "e0", Source: "/t", Type: topics.TypeNodeCreated, Time: at, RunID: run, AgentID: root,
		SchemaVersion: topics.CurrentSchemaVersion, Data: &topics.NodeCreated{Role: topics.RoleConductor}})
	trigs, _ := p.Apply(&topics.Event{ID: "e1", Source: "/t", Type: topics.TypeFailed, Time: at.Add(time.Second), RunID: run, AgentID: root,
		SchemaVersion: topics.CurrentSchemaVersion, Data: &topics.Failed{ErrorCode: "x"}})
	var pending Pending
	pending.Add(run, trigs)
	built, err := p.Wakes(&pending, time.Time{}, topics.Time{})
	if err != nil || len(built) != 1 {
		t.Fatalf("%d wakes, %v", len(built), err)
	}
	w, info := built[0].Wake, built[0].Info
	if info.Cut >= p.cfg.Limits.MaxStringLength || info.Cut < 1 {
		t.Fatalf("cut at %d: want a halved bound (the test's id must not fit at %d)", info.Cut, p.cfg.Limits.MaxStringLength)
	}
	got := w.AgentTreeSnapshot.Nodes[0].AgentID
	if got == "" || len(w.Triggers) == 0 || w.Triggers[0].AgentID != got {
		t.Errorf("trigger names %q, the snapshot's root is %q", w.Triggers[0].AgentID, got)
	}
}
