package projection

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// memStorage is a Storage in memory, for the projection's own tests
// (internal/store runs them on Pebble through the exported API). Like
// Pebble's iterator, Scan's keys and values are valid only during the
// call: it overwrites them afterwards, so that a projection that keeps one
// fails here too.
type memStorage struct {
	m  map[string][]byte
	cp *Checkpoint
}

func newMemStorage() *memStorage { return &memStorage{m: map[string][]byte{}} }

func (s *memStorage) Get(key []byte) ([]byte, bool, error) {
	v, ok := s.m[string(key)]
	if !ok {
		return nil, false, nil
	}
	return slices.Clone(v), true, nil
}

func (s *memStorage) Scan(prefix []byte, f func(k, v []byte) error) error {
	var keys []string
	for k := range s.m {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		kb, vb := []byte(k[len(prefix):]), slices.Clone(s.m[k])
		err := f(kb, vb)
		for _, b := range [][]byte{kb, vb} {
			for i := range b {
				b[i] = 0xee
			}
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStore, err)
		}
	}
	return nil
}

func (s *memStorage) SeekGE(key []byte) ([]byte, bool, error) {
	var first string
	found := false
	for k := range s.m {
		if k >= string(key) && (!found || k < first) {
			first, found = k, true
		}
	}
	return []byte(first), found, nil
}

// Write refuses a batch with a change over MaxRecordBytes, as producing it
// to the changelog would fail: every test on a memStorage checks the bound.
func (s *memStorage) Write(changes Changes, cp *Checkpoint, _ bool) error {
	for _, c := range changes {
		if n := len(c.Key) + len(c.Value); n > MaxRecordBytes {
			return fmt.Errorf("%w: a change of %d bytes (key %.40q...), over MaxRecordBytes", ErrStore, n, c.Key)
		}
	}
	for _, c := range changes {
		if c.Delete {
			delete(s.m, string(c.Key))
		} else {
			s.m[string(c.Key)] = slices.Clone(c.Value)
		}
	}
	if cp != nil {
		s.cp = cp
	}
	return nil
}

// TestStoreResumesAsIfNeverStopped feeds the same events to a memory-only
// projection and to a store-backed one that commits at random points, is
// closed and reopened, and evicts runs from memory; both must end with the
// same state, the same wakes and the same snapshots. Duplicates across a
// restart are recognised from the store.
//
// Runs leave memory by either bound: MaxHotNodes, or a memory Budget
// smaller than the runs' working set (eviction and reload give
// byte-identical wakes to a projection that never evicts); and the nodes of
// a run larger than MaxHotNodesPerRun leave memory while the run stays.
func TestStoreResumesAsIfNeverStopped(t *testing.T) {
	// A dedupe window smaller than the runs: events sent again both within
	// it (duplicates) and beyond it (applied again, in memory and with the
	// store alike). Few hot nodes, or few bytes, force eviction and
	// reloads; a small history window makes entries leave it (and the
	// store) across commits and reloads.
	byNodes := Config{MaxHotNodes: 100, HistorySize: 16, DedupeWindow: 40}
	byBytes := Config{Memory: NewBudget(150 << 10), HistorySize: 16, DedupeWindow: 40}
	t.Run("max-hot-nodes", func(t *testing.T) { testStoreResumes(t, byNodes) })
	t.Run("hot-nodes-per-run", func(t *testing.T) {
		// Runs of 40, 200 and 15 nodes with at most 12 of each in memory:
		// nodes go and are read back by events, timers and snapshots.
		cfg := Config{MaxHotNodesPerRun: 12, Memory: NewBudget(1 << 30), HistorySize: 16, DedupeWindow: 40}
		testStoreResumes(t, cfg)
		st := cfg.Memory.Stats()
		t.Logf("at most %d nodes of a run in memory: %d nodes dropped, %d read back", cfg.MaxHotNodesPerRun, st.NodeEvictions, st.NodeReads)
		if st.NodeEvictions == 0 || st.NodeReads == 0 {
			t.Errorf("%d nodes dropped from memory, %d read back: the test no longer trims runs", st.NodeEvictions, st.NodeReads)
		}
	})
	t.Run("memory-budget", func(t *testing.T) {
		testStoreResumes(t, byBytes)
		st := byBytes.Memory.Stats()
		t.Logf("budget %d bytes: %d hits, %d misses, %d evictions", st.Limit, st.Hits, st.Misses, st.Evictions)
		if st.Evictions == 0 || st.Misses == 0 {
			t.Errorf("budget of %d bytes: %d evictions, %d runs read back: the test no longer evicts by bytes", st.Limit, st.Evictions, st.Misses)
		}
	})
}

func testStoreResumes(t *testing.T, cfg Config) {
	var events []topics.Event
	for i, n := range []int{40, 200, 15} {
		// run-b reports its activity too, which persists as the rest.
		events = append(events, workload.Generate(workload.Spec{RunID: []string{"run-a", "run-b", "run-c"}[i], Nodes: n, Seed: uint64(i + 1),
			Step: 900 * time.Millisecond, Activity: i == 1})...)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rng.Shuffle(len(events), func(i, j int) {
		// Keep each run's own order: shuffle only across runs.
		if events[i].RunID != events[j].RunID {
			events[i], events[j] = events[j], events[i]
		}
	})
	memCfg := cfg
	memCfg.Memory = nil // the reference keeps everything in memory
	mem, _ := New(memCfg)
	db := newMemStorage()
	store, err := Open(cfg, db)
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
	// Commits are pipelined as the projector's worker does: what one
	// prepares is written (Write, then Committed, which evicts) only at the
	// next, after more events were applied, so eviction meets runs changed
	// since the commit in flight was prepared.
	var inflight Changes
	finish := func() {
		if inflight != nil {
			if err := store.Committed(store.Write(inflight, nil)); err != nil {
				t.Fatal(err)
			}
			inflight = nil
		}
	}
	commit := func() {
		finish()
		var err error
		if inflight, err = store.Prepare(map[string]int64{"agent-events": next}); err != nil {
			t.Fatal(err)
		}
	}
	applied := map[string][]int{} // each run's events, in the order applied
	var caught, reapplied int     // events sent again: duplicates, and applied again
	for i := range events {
		ev := &events[i]
		applied[ev.RunID] = append(applied[ev.RunID], i)
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
			commit()
		}
		if rng.IntN(200) == 0 {
			// A clean restart: commit, close, reopen from the same directory.
			commit()
			finish()
			if store, err = Open(cfg, db); err != nil {
				t.Fatal(err)
			}
			offs, err := ReadOffsets(db)
			if err != nil || offs["agent-events"] != next {
				t.Fatalf("offsets after reopen: %v %v, want %d", offs, err, next)
			}
			// An event sent again is a duplicate when it is among the last
			// DedupeWindow of its run, across the restart too; an older one
			// is applied again, the same in memory and with the store.
			again := &events[rng.IntN(i+1)]
			seq := applied[again.RunID]
			mt, mdup := mem.Apply(again)
			st, sdup := store.Apply(again)
			within := false
			for _, j := range seq[max(0, len(seq)-cfg.DedupeWindow):] {
				within = within || events[j].ID == again.ID
			}
			if sdup != within || mdup != sdup {
				t.Fatalf("event %s sent again after the restart: duplicate %v with the store, %v in memory; want %v (within the last %d of its run: %v)",
					again.ID, sdup, mdup, within, cfg.DedupeWindow, within)
			}
			if sdup {
				caught++
			} else {
				reapplied++
			}
			if !sdup {
				applied[again.RunID] = append(applied[again.RunID], slices.IndexFunc(events, func(e topics.Event) bool { return e.ID == again.ID }))
				mp.Add(again.RunID, mt)
				collect(mem, &mp, &memWakes)
				sp.Add(again.RunID, st)
				collect(store, &sp, &storeWakes)
			}
		}
	}
	finish()
	if err := store.Commit(nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("events sent again after a restart: %d duplicates, %d applied again (older than the dedupe window)", caught, reapplied)
	if caught == 0 || reapplied == 0 {
		t.Errorf("the restarts sent %d duplicates and %d older events again: want some of each (change the seed)", caught, reapplied)
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
	if store, err = Open(cfg, db); err != nil {
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
		loadAll(t, r)
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
		// The journal chunks in the store cover the windows' entries, and
		// no chunk is wholly older than them.
		keep := int64(max(cfg.HistorySize, cfg.DedupeWindow))
		covered := map[int64]bool{}
		_ = store.store.scan((rel([]byte{'r'}, []byte(run), []byte{0, 'j'})), func(k, v []byte) error {
			es, err := decodeJournal(v, int64(binary.BigEndian.Uint64(k)))
			if err != nil {
				t.Fatalf("%s: journal chunk %x: %v", run, k, err)
			}
			if last := es[len(es)-1].Seq; last <= r.Seq()-keep {
				t.Fatalf("%s: a journal chunk ending at seq %d is kept, older than the windows (seq %d, keep %d)", run, last, r.Seq(), keep)
			}
			for _, e := range es {
				covered[e.Seq] = true
			}
			return nil
		})
		for seq := max(1, r.Seq()-keep+1); seq <= r.Seq(); seq++ {
			if !covered[seq] {
				t.Fatalf("%s: no journal entry of seq %d in the store (seq %d, keep %d)", run, seq, r.Seq(), keep)
			}
		}
		for _, kind := range []byte{'e', 'h'} {
			_ = store.store.scan((rel([]byte{'r'}, []byte(run), []byte{0, kind})), func(k, v []byte) error {
				t.Fatalf("%s: a key of the legacy encoding (%c) was written", run, kind)
				return nil
			})
		}
	}
}

// loadAll reads every node of r that is not in memory back into it, so
// that tests can compare the whole run.
func loadAll(t *testing.T, r *Run) {
	t.Helper()
	r.signals.Ascend(func(k timed) bool { return r.get(k.id) != nil })
	if r.nodeErr != nil || r.resident != len(r.nodes) {
		t.Fatalf("run %s: %d of %d nodes in memory after reading them all back (%v)", r.id, r.resident, len(r.nodes), r.nodeErr)
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

// TestEarlierEncodingMigrates: a store written by the legacy encoding (an
// 'e' key per applied id, an 'h' JSON key per history entry) still loads:
// its history is served and its recent ids are duplicates; the run's next
// commit deletes those keys and writes them as a journal chunk, which loads
// the same.
func TestEarlierEncodingMigrates(t *testing.T) {
	st := newMemStorage()
	run := "run-old"
	// The legacy encoding of a run of three events.
	meta, _ := json.Marshal(metaRecord{Seq: 3, Clock: 3000, SessionID: "s", Root: "root"})
	node, _ := json.Marshal((&node{Node: snapshot.Node{AgentID: "root", Role: topics.RoleConductor, Status: topics.StatusRunning}, created: true}).record(nil))
	old := Changes{{Key: runKey(run, 'm', ""), Value: meta}, {Key: runKey(run, 'n', "root"), Value: node}}
	for i := int64(1); i <= 3; i++ {
		id := fmt.Sprintf("ev-%d", i)
		old = append(old, Change{Key: runKey(run, 'e', id), Value: []byte{}})
		v, _ := json.Marshal(historyRecord{EventID: id, Type: string(topics.TypeNodeStatus), AgentID: "root", At: 1000 * i, Status: "running"})
		var seq [8]byte
		binary.BigEndian.PutUint64(seq[:], uint64(i))
		old = append(old, Change{Key: runKey(run, 'h', string(seq[:])), Value: v})
	}
	if err := st.Write(old, nil, true); err != nil {
		t.Fatal(err)
	}
	keys := func(kind byte) int {
		n := 0
		_ = st.Scan((rel([]byte{'r'}, []byte(run), []byte{0, kind})), func(k, v []byte) error { n++; return nil })
		return n
	}
	open := func() *Projection {
		p, err := Open(Config{}, st)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(when string, p *Projection) {
		t.Helper()
		pg, err := p.History(run, "", 0)
		if err != nil || len(pg.Entries) != 3 || pg.Entries[0].EventID != "ev-3" || pg.Entries[2].Seq != 1 || *pg.Entries[0].Status != topics.StatusRunning {
			t.Fatalf("%s: history %+v, %v: want ev-3 to ev-1", when, pg, err)
		}
		dup := &topics.Event{ID: "ev-2", Source: "/t", Type: topics.TypeHeartbeat, Time: topics.NewTime(time.UnixMilli(4000)),
			RunID: run, AgentID: "root", SchemaVersion: 1, Data: &topics.Heartbeat{}}
		if _, isDup := p.Apply(dup); !isDup {
			t.Fatalf("%s: ev-2, applied before, is not a duplicate", when)
		}
	}
	p := open()
	check("loaded from the legacy encoding", p)
	if err := p.Commit(map[string]int64{"t": 1}); err != nil {
		t.Fatal(err)
	}
	if e, h, j := keys('e'), keys('h'), keys('j'); e != 0 || h != 0 || j != 1 {
		t.Fatalf("after the run's next commit: %d 'e' keys, %d 'h' keys, %d journal chunks; want 0, 0 and 1", e, h, j)
	}
	check("reloaded from the journal", open())
}

// TestJournalOfANewerVersion: a journal chunk of an encoding this build does
// not read stops the run's load with an error that names the version.
func TestJournalOfANewerVersion(t *testing.T) {
	st := newMemStorage()
	meta, _ := json.Marshal(metaRecord{Seq: 1, Clock: 1000})
	chunk := encodeJournal(nil, []journalEntry{{HistoryEntry: HistoryEntry{Seq: 1, EventID: "e1", Type: "x", AgentID: "a"}}})
	chunk[0] = 9
	if err := st.Write(Changes{{Key: runKey("r", 'm', ""), Value: meta}, {Key: journalKey("r", 1), Value: chunk}}, nil, true); err != nil {
		t.Fatal(err)
	}
	p, err := Open(Config{}, st)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.History("r", "", 0)
	if !errors.Is(err, errJournalVersion) || !strings.Contains(err.Error(), "version 9, this build reads 1 and 2") {
		t.Fatalf("loading a run with a version 9 journal chunk: %v; want an error naming the version", err)
	}
}

// TestJournalV1IDsAreDuplicates: a journal chunk of the first version
// (no content hashes) still loads; its ids' contents are unknown, so an
// event sent again under one is a plain duplicate whatever its content,
// before and after the run's next commits, while ids applied since are
// told apart by content.
func TestJournalV1IDsAreDuplicates(t *testing.T) {
	st := newMemStorage()
	run := "run-v1"
	meta := encodeMeta(nil, &metaRecord{Seq: 2, Clock: 2000})
	// Version 1: the count, then per entry id, type, agent, time, corr, status.
	chunk := []byte{journalVersionV1, 2}
	for i, id := range []string{"e1", "e2"} {
		for _, s := range []string{id, string(topics.TypeHeartbeat), "w1"} {
			chunk = append(chunk, byte(len(s)))
			chunk = append(chunk, s...)
		}
		chunk = binary.AppendVarint(chunk, int64(1000*(i+1)))
		chunk = append(chunk, 0, 0)
	}
	if err := st.Write(Changes{{Key: runKey(run, 'm', ""), Value: meta}, {Key: journalKey(run, 1), Value: chunk}}, nil, true); err != nil {
		t.Fatal(err)
	}
	ev := func(id string, code string) *topics.Event {
		return &topics.Event{ID: id, Source: "/t", Type: topics.TypeFailed, Time: topics.NewTime(time.UnixMilli(5000)), RunID: run,
			AgentID: "w1", SchemaVersion: 1, Data: &topics.Failed{ErrorCode: code}}
	}
	for round := range 2 {
		p, err := Open(Config{}, st)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup, err := p.ApplyEvent(ev("e2", "anything")); !dup || err != nil {
			t.Fatalf("round %d: e2 of the version 1 chunk under other content: dup %v, %v; want a plain duplicate", round, dup, err)
		}
		if round == 0 {
			if _, dup, err := p.ApplyEvent(ev("e3", "boom")); dup || err != nil {
				t.Fatalf("e3: dup %v, %v", dup, err)
			}
		} else if _, _, err := p.ApplyEvent(ev("e3", "other")); !errors.Is(err, ErrDuplicateConflict) {
			t.Fatalf("e3, applied since, under other content after a reload: %v; want a conflict", err)
		}
		if err := p.Commit(map[string]int64{"t": int64(round)}); err != nil {
			t.Fatal(err)
		}
	}
}
