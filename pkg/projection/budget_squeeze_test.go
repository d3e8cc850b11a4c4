package projection

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
)

// TestBudgetSqueeze: a squeezed budget's limit in force is the share of its
// limit, and eviction goes by it; 1 restores it.
func TestBudgetSqueeze(t *testing.T) {
	b := NewBudget(1000)
	b.used.Store(700)
	b.Squeeze(0.5)
	if st := b.Stats(); st.InForce != 500 || st.Limit != 1000 {
		t.Fatalf("squeezed to half: %+v, want 500 in force of 1000", st)
	}
	p := &Projection{cfg: Config{Memory: b}, hotBytes: 700, published: 700}
	r := &Run{id: "old", footprint: 300}
	r2 := &Run{id: "new", footprint: 400, lastUsed: 1}
	p.runs = map[string]*Run{"old": r, "new": r2}
	p.tick = 1
	p.evict()
	if _, ok := p.runs["old"]; ok || p.hotBytes != 400 {
		t.Errorf("over the squeezed limit: runs %v, %d bytes; want the older run evicted", p.runs, p.hotBytes)
	}
	b.Squeeze(1)
	if st := b.Stats(); st.InForce != 1000 {
		t.Errorf("squeeze(1): %d in force, want the limit again", st.InForce)
	}
	var nilBudget *Budget
	nilBudget.Squeeze(0.5) // a projection without a budget: nothing to do
}

// TestEvictShedsDigestCaches: when every run has changed since the commit
// (none can be evicted) and the projection is over its share of the
// budget, the runs' digest caches are emptied, least recently used first,
// until it is under; snapshots built after are the same.
func TestEvictShedsDigestCaches(t *testing.T) {
	b := NewBudget(1 << 30)
	p, err := New(Config{Memory: b})
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for i := range 6 {
		id := fmt.Sprintf("run-%d", i)
		runs = append(runs, id)
		for _, ev := range workload.Generate(workload.Spec{RunID: id, Nodes: 80, Seed: uint64(i + 1)}) {
			p.Apply(&ev)
		}
	}
	build := func(id string) []byte {
		r, _ := p.Run(id)
		_, info, err := snapshot.Build(r, snapshot.Wake{SnapshotID: "01JM0000000000000000000000", Seq: r.Seq(), At: r.Clock()}, snapshot.Limits{}, r.Clock().Std())
		if err != nil {
			t.Fatal(err)
		}
		return info.Encoded
	}
	before := map[string][]byte{}
	var held []*Run
	for _, id := range runs {
		before[id] = build(id)
		r, _ := p.Run(id)
		held = append(held, r)
	}
	// Read after the builds, which count as uses.
	for i, r := range held {
		r.dirty = &dirt{meta: true} // changed since the commit: not evictable
		r.lastUsed = uint64(i + 1)
		p.account(r)
	}
	p.tick = uint64(len(held) + 1)
	oldest, newest := held[0], held[len(held)-1]
	if oldest.digests.Len() == 0 {
		t.Fatal("no digests cached after a build")
	}
	// Just over the budget: eviction aims at 80% of it, which the caches
	// of all runs but the newest reach (each ~13% of a run's bytes).
	p.publish()
	b.limit = p.hotBytes - 1
	target := b.limit * 8 / 10
	p.evict()
	if len(p.runs) != 6 || oldest.digests.Len() != 0 || newest.digests.Len() == 0 || p.hotBytes > target {
		t.Fatalf("after evict: %d runs, %d bytes (target %d), oldest run's cache %d, newest's %d; want 6 runs under the target, the oldest's cache empty, the newest's kept",
			len(p.runs), p.hotBytes, target, oldest.digests.Len(), newest.digests.Len())
	}
	var sum int64
	for _, r := range p.runs {
		sum += r.Footprint()
	}
	if p.hotBytes != sum {
		t.Errorf("the account (%d bytes) is not the runs' footprints (%d)", p.hotBytes, sum)
	}
	for _, id := range runs {
		if got := build(id); !bytes.Equal(got, before[id]) {
			t.Errorf("%s: the snapshot after shedding differs", id)
		}
	}
	// While over, the shed runs build without caching; once well under
	// the budget (60% of it), they cache again.
	if oldest.digests.Len() != 0 {
		t.Errorf("a shed run cached %d digests while the projection is over its budget", oldest.digests.Len())
	}
	b.limit = p.hotBytes * 2
	p.publish()
	p.evict()
	build(runs[0])
	if oldest.digests.Len() == 0 {
		t.Error("a shed run does not cache again once the projection is well under its budget")
	}
}
