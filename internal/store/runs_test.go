package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
)

// TestRunsAndNodesFromStore: a projection on Pebble, reopened so that
// nothing is in memory and with few nodes of a run kept hot, lists its runs
// by id a page at a time (the store's skip-scan, merged with a run applied
// since the reopen) and pages through every node of a run, each once, with
// what the nodes endpoint of the live view serves.
func TestRunsAndNodesFromStore(t *testing.T) {
	dir := t.TempDir()
	cfg := projection.Config{MaxHotNodesPerRun: 5}
	db := openDB(t, dir)
	p, err := projection.Open(cfg, store.New(db, 3))
	if err != nil {
		t.Fatal(err)
	}
	runs := []string{"run-b", "run-d", "run-a", "run-c"}
	for i, run := range runs {
		for _, ev := range workload.Generate(workload.Spec{RunID: run, SessionID: "s", Nodes: 30 + i, Seed: uint64(i)}) {
			p.Apply(&ev)
		}
	}
	if err := p.Commit(map[string]int64{"t": 1}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, dir)
	defer db.Close()
	if p, err = projection.Open(cfg, store.New(db, 3)); err != nil {
		t.Fatal(err)
	}
	// A run applied after the reopen is in memory only.
	for _, ev := range workload.Generate(workload.Spec{RunID: "run-bb", Nodes: 3}) {
		p.Apply(&ev)
	}

	var got []string
	after := ""
	for {
		refs, more, err := p.Runs(after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			got = append(got, r.RunID)
			if r.AsOfEventSeq == 0 || r.AsOf == nil || r.RootAgentID == nil || *r.RootAgentID != "conductor" {
				t.Errorf("run %+v", r)
			}
		}
		if !more {
			break
		}
		after = refs[len(refs)-1].RunID
	}
	if want := []string{"run-a", "run-b", "run-bb", "run-c", "run-d"}; !slices.Equal(got, want) {
		t.Errorf("runs %v, want %v", got, want)
	}

	seen := map[string]bool{}
	cursor := ""
	for {
		pg, err := p.Nodes("run-d", cursor, 7, time.Now(), false)
		if err != nil {
			t.Fatal(err)
		}
		if pg.Total != 31 { // run-d: 30+1 nodes
			t.Fatalf("total %d, want 31", pg.Total)
		}
		for _, n := range pg.Nodes {
			if seen[n.AgentID] || n.Status == "" || n.Role == "" || n.OpenRequests == nil {
				t.Errorf("node %+v (seen before: %v)", n, seen[n.AgentID])
			}
			seen[n.AgentID] = true
		}
		if cursor = pg.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != 31 {
		t.Errorf("%d nodes paged, want 31", len(seen))
	}
	if _, err := p.Nodes("run-d", "!", 0, time.Now(), false); err == nil {
		t.Error("a bad cursor was accepted")
	}
	if _, err := p.Nodes("nope", "", 0, time.Now(), false); err == nil {
		t.Error("an unknown run has nodes")
	}
}
