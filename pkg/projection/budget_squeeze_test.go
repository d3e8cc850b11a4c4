package projection

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
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

// TestFreeJournalsReused: the journals a commit empties are kept, within
// maxFreeJournal, and the next commit's runs grow into them; what they
// write is what a projection that reuses nothing writes (the histories
// read back from the store agree, entry for entry).
func TestFreeJournalsReused(t *testing.T) {
	var evs []topics.Event
	for i := range 12 {
		evs = append(evs, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%02d", i), Nodes: 60, Seed: uint64(i + 1)})...)
	}
	slices.SortStableFunc(evs, func(a, b topics.Event) int { return a.Time.Std().Compare(b.Time.Std()) })
	// Commits of sizes that vary: a run's journal outgrows the free one it
	// took in a small commit, and takes a larger one.
	commitEvery := func(p *Projection, sizes ...int) {
		t.Helper()
		next, k := sizes[0], 0
		for i := range evs {
			p.Apply(&evs[i])
			if i+1 == next || i == len(evs)-1 {
				k++
				next += sizes[k%len(sizes)]
				if err := p.Commit(map[string]int64{"agent-events": int64(i + 1)}); err != nil {
					t.Fatal(err)
				}
				s := p.store
				free := 0
				for _, j := range s.journals {
					if len(j) != 0 || cap(j) <= keptDirt {
						t.Fatalf("a free journal of %d entries, %d room: want empty ones larger than %d", len(j), cap(j), keptDirt)
					}
					for _, e := range j[:cap(j)] {
						if e != (journalEntry{}) {
							t.Fatalf("a free journal still holds %+v", e)
						}
					}
					free += cap(j)
				}
				if free != s.freeEntries || free > maxFreeJournal {
					t.Fatalf("free journals hold %d entries of room, counted %d; at most %d", free, s.freeEntries, maxFreeJournal)
				}
			}
		}
	}
	reused, plain := newMemStorage(), newMemStorage()
	p, err := Open(Config{}, reused)
	if err != nil {
		t.Fatal(err)
	}
	commitEvery(p, 100, 1200, 300, 900)
	if len(p.store.journals) == 0 {
		t.Fatal("no journal was kept after commits of hundreds of events over 12 runs")
	}
	// The same events, committed one at a time: no journal outgrows
	// keptDirt, so none is kept or reused.
	q, err := Open(Config{}, plain)
	if err != nil {
		t.Fatal(err)
	}
	commitEvery(q, 1)
	if len(q.store.journals) != 0 {
		t.Fatalf("%d journals kept by commits of one event", len(q.store.journals))
	}
	for i := range 12 {
		run := fmt.Sprintf("run-%02d", i)
		a, b := reopen(t, reused), reopen(t, plain)
		pa, err := a.History(run, "", 256)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := b.History(run, "", 256)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pa.Entries, pb.Entries) || len(pa.Entries) == 0 {
			t.Fatalf("%s: the history read back differs between commits that reuse journals and commits that do not:\n%+v\n%+v", run, pa.Entries, pb.Entries)
		}
	}
}

func reopen(t *testing.T, st Storage) *Projection {
	t.Helper()
	p, err := Open(Config{}, st)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGrowJournal: a full journal moves to a larger free one with its
// entries, and its own room is freed; with none larger, the caller grows
// it; the free room never passes maxFreeJournal.
func TestGrowJournal(t *testing.T) {
	s := &store{}
	entries := func(n int) []journalEntry {
		j := make([]journalEntry, n)
		for i := range j {
			j[i] = journalEntry{HistoryEntry: HistoryEntry{Seq: int64(i + 1), EventID: fmt.Sprintf("ev-%d", i+1)}, hash: uint64(i)}
		}
		return j
	}
	s.freeJournal(entries(100))
	s.freeJournal(entries(300))
	s.freeJournal(make([]journalEntry, 0, keptDirt)) // too small to keep
	if len(s.journals) != 2 || s.freeEntries != 400 {
		t.Fatalf("free journals %d with room %d, want 2 with 400", len(s.journals), s.freeEntries)
	}
	full := entries(200)
	grown := s.growJournal(full)
	if cap(grown) != 300 || !reflect.DeepEqual(grown, entries(200)) {
		t.Fatalf("grown: %d entries, room %d; want the 200 entries in the room of 300", len(grown), cap(grown))
	}
	if len(s.journals) != 2 || s.freeEntries != 300 || cap(s.journals[1]) != 200 || full[0] != (journalEntry{}) {
		t.Fatalf("after growing: %d free with room %d; want the 100 and the emptied 200", len(s.journals), s.freeEntries)
	}
	if g := s.growJournal(entries(400)[:400:400]); g != nil {
		t.Fatalf("grew into room %d though no free journal is larger than 400", cap(g))
	}
	s.freeJournal(make([]journalEntry, 0, maxFreeJournal))
	if s.freeEntries > maxFreeJournal {
		t.Fatalf("free room %d, more than %d", s.freeEntries, maxFreeJournal)
	}
	// Short of memory, nothing is kept, and what was is let go.
	s.lean(true)
	s.freeJournal(entries(200))
	if len(s.journals) != 0 || s.freeEntries != 0 {
		t.Fatalf("short of memory: %d free journals with room %d kept", len(s.journals), s.freeEntries)
	}
	s.lean(false)
	s.freeJournal(entries(200))
	if len(s.journals) != 1 || s.freeEntries != 200 {
		t.Fatalf("no longer short: %d free journals with room %d, want the one of 200", len(s.journals), s.freeEntries)
	}

	// A projection's commit keeps its journals' room only while its budget
	// is not lean.
	b := NewBudget(1 << 30)
	p, err := Open(Config{Memory: b}, newMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	commit := func() {
		for _, ev := range workload.Generate(workload.Spec{RunID: "run-lean", Nodes: 40, Seed: 3}) {
			p.Apply(&ev)
		}
		if err := p.Commit(map[string]int64{"agent-events": 1}); err != nil {
			t.Fatal(err)
		}
	}
	b.SetLean(true)
	commit()
	if len(p.store.journals) != 0 {
		t.Fatalf("lean budget: %d journals kept", len(p.store.journals))
	}
}
