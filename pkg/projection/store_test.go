package projection

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func openDB(t *testing.T, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestStoreResumesAsIfNeverStopped feeds the same events to a memory-only
// projection and to a store-backed one that commits at random points, is
// closed and reopened, and evicts runs from memory; both must end with the
// same state, the same wakes and the same snapshots. Duplicates across a
// restart are recognised from the store.
func TestStoreResumesAsIfNeverStopped(t *testing.T) {
	dir := t.TempDir()
	var events []topics.Event
	for i, n := range []int{40, 200, 15} {
		events = append(events, workload.Generate(workload.Spec{RunID: []string{"run-a", "run-b", "run-c"}[i], Nodes: n, Seed: uint64(i + 1), Step: 900 * time.Millisecond})...)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rng.Shuffle(len(events), func(i, j int) {
		// Keep each run's own order: shuffle only across runs.
		if events[i].RunID != events[j].RunID {
			events[i], events[j] = events[j], events[i]
		}
	})
	// Few hot nodes force eviction and reloads; a small history window makes
	// entries leave it (and the store) across commits and reloads.
	cfg := Config{MaxHotNodes: 100, HistorySize: 16}

	mem, _ := New(cfg)
	db := openDB(t, dir)
	store, err := Open(cfg, NewStore(db, 7))
	if err != nil {
		t.Fatal(err)
	}
	var memWakes, storeWakes []string
	collect := func(p *Projection, pending *Pending, into *[]string) {
		built, err := p.Wakes(pending, time.Time{}, topics.Time{})
		if err != nil {
			t.Fatal(err)
		}
		pending.Reset()
		for _, b := range built {
			enc, _ := topics.Marshal(b.Wake)
			*into = append(*into, string(enc))
		}
	}
	var mp, sp Pending
	next := int64(0)
	for i := range events {
		ev := &events[i]
		trigs, _ := mem.Apply(ev)
		mp.Add(ev.RunID, trigs)
		collect(mem, &mp, &memWakes)

		trigs, dup := store.Apply(ev)
		if dup {
			t.Fatalf("event %d reported as a duplicate", i)
		}
		sp.Add(ev.RunID, trigs)
		collect(store, &sp, &storeWakes)
		next++
		if rng.IntN(25) == 0 {
			if err := store.Commit(map[string]int64{"agent-events": next}); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(200) == 0 {
			// A clean restart: commit, close, reopen from the same directory.
			if err := store.Commit(map[string]int64{"agent-events": next}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			db = openDB(t, dir)
			if store, err = Open(cfg, NewStore(db, 7)); err != nil {
				t.Fatal(err)
			}
			offs, err := NewStore(db, 7).Offsets()
			if err != nil || offs["agent-events"] != next {
				t.Fatalf("offsets after reopen: %v %v, want %d", offs, err, next)
			}
			// Everything before the restart is a duplicate now.
			if _, dup := store.Apply(&events[rng.IntN(i+1)]); !dup {
				t.Fatal("an event applied before the restart was applied again")
			}
		}
	}
	if err := store.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if len(memWakes) != len(storeWakes) {
		t.Fatalf("%d wakes in memory, %d with the store", len(memWakes), len(storeWakes))
	}
	for i := range memWakes {
		if memWakes[i] != storeWakes[i] {
			t.Fatalf("wake %d differs:\nmemory: %s\nstore:  %s", i, memWakes[i], storeWakes[i])
		}
	}
	// Timers fire the same for runs that are not in memory.
	db.Close()
	db = openDB(t, dir)
	defer db.Close()
	if store, err = Open(cfg, NewStore(db, 7)); err != nil {
		t.Fatal(err)
	}
	end := topics.NewTime(time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC))
	for _, run := range []string{"run-a", "run-b", "run-c"} {
		for {
			due, ok := mem.runs[run].NextDue()
			if !ok {
				break
			}
			mp.Add(run, mem.Advance(run, due))
		}
	}
	store.FireDue(end, &sp)
	memWakes, storeWakes = nil, nil
	collect(mem, &mp, &memWakes)
	collect(store, &sp, &storeWakes)
	if len(storeWakes) == 0 || len(memWakes) != len(storeWakes) {
		t.Fatalf("timer wakes: %d in memory, %d with the store", len(memWakes), len(storeWakes))
	}
	for _, run := range []string{"run-a", "run-b", "run-c"} {
		r, ok := store.Run(run)
		if !ok {
			t.Fatalf("%s not in the store", run)
		}
		if a, b := dumpRun(mem.runs[run]), dumpRun(r); a != b {
			t.Fatalf("%s differs after reload:\nmemory:\n%s\nstore:\n%s", run, a, b)
		}
		if err := checkInvariants(r); err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		// The history window is state like the rest: the same after reloads,
		// and exactly the window's entries are in the store.
		if a, b := historyDump(t, mem, run), historyDump(t, store, run); a != b {
			t.Fatalf("%s: history differs after reload:\nmemory:\n%s\nstore:\n%s", run, a, b)
		}
		n := 0
		_ = store.store.scan(store.store.abs(rel([]byte{'r'}, []byte(run), []byte{0, 'h'})), func(k, v []byte) error { n++; return nil })
		if want := min(int(r.Seq()), cfg.HistorySize); n != want {
			t.Fatalf("%s: %d history keys in the store, want %d", run, n, want)
		}
	}
}

// historyDump pages through a run's whole history window.
func historyDump(t *testing.T, p *Projection, run string) string {
	t.Helper()
	var b strings.Builder
	cursor := ""
	for {
		pg, err := p.History(run, cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := json.Marshal(pg)
		b.Write(enc)
		b.WriteString("\n")
		if pg.NextCursor == "" {
			return b.String()
		}
		cursor = pg.NextCursor
	}
}
