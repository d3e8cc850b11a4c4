package store_test

import (
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openDB(t *testing.T, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestResumesFromPebble: a projection on a partition's Pebble store, which
// commits every 100 events and is closed and reopened (the database too)
// half way, ends with the runs and offsets of one that never stopped and
// keeps everything in memory; the partition's keys leave the other
// partitions of the database alone.
func TestResumesFromPebble(t *testing.T) {
	var events []topics.Event
	for i, n := range []int{40, 200, 15} {
		events = append(events, workload.Generate(workload.Spec{RunID: []string{"run-a", "run-b", "run-c"}[i], Nodes: n, Seed: uint64(i + 1), Step: 900 * time.Millisecond})...)
	}
	cfg := projection.Config{MaxHotNodes: 100, MaxHotNodesPerRun: 12, HistorySize: 16, DedupeWindow: 40}
	mem, err := projection.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := openDB(t, dir)
	defer func() { db.Close() }()
	p, err := projection.Open(cfg, store.New(db, 7))
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		mem.Apply(&events[i])
		p.Apply(&events[i])
		if i%100 == 99 || i == len(events)-1 {
			if err := p.Commit(map[string]int64{"agent-events": int64(i + 1)}); err != nil {
				t.Fatal(err)
			}
		}
		if i == len(events)/2 {
			if err := p.Commit(map[string]int64{"agent-events": int64(i + 1)}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			db = openDB(t, dir)
			if p, err = projection.Open(cfg, store.New(db, 7)); err != nil {
				t.Fatal(err)
			}
		}
	}
	offs, err := store.New(db, 7).Offsets()
	if err != nil || offs["agent-events"] != int64(len(events)) {
		t.Fatalf("offsets %v, %v; want agent-events at %d", offs, err, len(events))
	}
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		want, _ := mem.Run(id)
		got, ok := p.Run(id)
		if !ok {
			t.Fatalf("%s: not in the store (%v)", id, p.Err())
		}
		if got.Seq() != want.Seq() || got.Len() != want.Len() || got.Stats() != want.Stats() {
			t.Errorf("%s: seq %d, %d nodes, %+v; want %d, %d, %+v", id, got.Seq(), got.Len(), got.Stats(), want.Seq(), want.Len(), want.Stats())
		}
		for n := range want.ByLastSignal() {
			if g, ok := got.Node(n.AgentID); !ok || !reflect.DeepEqual(g, n) {
				t.Errorf("%s: node %s is %+v; want %+v", id, n.AgentID, g, n)
			}
		}
		wh, err1 := want.History("", 0, 16)
		gh, err2 := got.History("", 0, 16)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(gh, wh) {
			t.Errorf("%s: history %+v, %v; want %+v, %v", id, gh, err2, wh, err1)
		}
	}
	if empty, err := store.New(db, 8).Empty(); err != nil || !empty {
		t.Errorf("partition 8: empty %v, %v; want true", empty, err)
	}
}

// TestCheckpointAndWipe: a checkpoint written with changes reads back, and
// Wipe leaves the partition empty, checkpoint included, and the other
// partitions as they were.
func TestCheckpointAndWipe(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	a, b := store.New(db, 1), store.New(db, 2)
	if _, ok, err := a.Checkpoint(); ok || err != nil {
		t.Fatalf("a fresh store's checkpoint: ok %v, %v", ok, err)
	}
	set := projection.Changes{{Key: []byte("x"), Value: []byte("1")}, {Key: projection.OffsetsKey, Value: []byte(`{"t":3}`)}}
	cp := projection.Checkpoint{Next: 42, At: 1_700_000_000_000}
	for _, s := range []*store.Store{a, b} {
		if err := s.Write(set, &cp, true); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok, err := a.Checkpoint(); !ok || err != nil || got != cp {
		t.Fatalf("checkpoint %+v, %v, %v; want %+v", got, ok, err, cp)
	}
	if v, ok, err := a.Get([]byte("x")); !ok || err != nil || string(v) != "1" {
		t.Fatalf("x = %q, %v, %v; want 1", v, ok, err)
	}
	if offs, err := a.Offsets(); err != nil || offs["t"] != 3 {
		t.Fatalf("offsets %v, %v; want t at 3", offs, err)
	}
	if err := a.Write(projection.Changes{{Key: []byte("x"), Delete: true}}, nil, true); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := a.Get([]byte("x")); ok {
		t.Fatal("x is still set after its delete")
	}
	if err := a.Wipe(); err != nil {
		t.Fatal(err)
	}
	if empty, err := a.Empty(); !empty || err != nil {
		t.Fatalf("after Wipe: empty %v, %v", empty, err)
	}
	if _, ok, _ := a.Checkpoint(); ok {
		t.Fatal("the checkpoint outlived Wipe")
	}
	if got, ok, err := b.Checkpoint(); !ok || err != nil || got != cp {
		t.Fatalf("partition 2 after partition 1's Wipe: checkpoint %+v, %v, %v", got, ok, err)
	}
	// A callback's error ends the scan and stays matchable.
	stop := errors.New("stop")
	if err := b.Scan(nil, func(_, _ []byte) error { return stop }); !errors.Is(err, stop) || !errors.Is(err, projection.ErrStore) {
		t.Fatalf("Scan with a failing callback: %v; want stop and projection.ErrStore", err)
	}
}

// TestFootprintEstimateTrimmed: Run.Footprint, which the memory budget
// evicts by, stays within a factor of 1.5 of the heap a run larger than
// MaxHotNodesPerRun really holds, most of its nodes in Pebble only
// (pkg/projection TestFootprintEstimate does it for runs in memory).
func TestFootprintEstimateTrimmed(t *testing.T) {
	events := workload.Generate(workload.Spec{RunID: "run-large", Nodes: 20_000, Seed: 1})
	// Small memtables and block cache: under the race detector Pebble
	// allocates them on the Go heap, which would count here.
	cache := pebble.NewCache(1 << 20)
	defer cache.Unref()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{MemTableSize: 256 << 10, Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := projection.Open(projection.Config{MaxHotNodesPerRun: 500}, store.New(db, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(map[string]int64{"t": 0}); err != nil {
		t.Fatal(err)
	}
	for i := range events {
		p.Apply(&events[i])
		if i%1000 == 999 {
			if err := p.Commit(map[string]int64{"t": int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Commit(map[string]int64{"t": int64(len(events))}); err != nil {
		t.Fatal(err)
	}
	r, _ := p.Run("run-large")
	estimate, nodes, resident := r.Footprint(), r.Len(), r.Resident()
	// What the projection holds is the heap it gives back when dropped:
	// measured so, Pebble's own memory (its memtables and block cache
	// live on the Go heap under the race detector), which stays with the
	// database, is not counted as the run's.
	with := heapInUse()
	runtime.KeepAlive(p) // alive up to here, then no more
	runtime.KeepAlive(r)
	measured := with - heapInUse()
	ratio := float64(estimate) / float64(measured)
	t.Logf("%d nodes, %d in memory: measured %d bytes, estimated %d (%.2fx)", nodes, resident, measured, estimate, ratio)
	if resident > 500 {
		t.Errorf("%d nodes in memory after a commit, want at most 500", resident)
	}
	if ratio < 1/1.5 || ratio > 1.5 {
		t.Errorf("estimated %d bytes for %d measured (%.2fx): recalibrate footprintIndexed (pkg/projection/budget.go)", estimate, measured, ratio)
	}
	runtime.KeepAlive(events)
	runtime.KeepAlive(db)
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestContentHashSurvivesReopen: the dedupe window's content hashes are
// state. After a commit, a close and a reopen of the Pebble database (the
// run read back from its journal), the same id with the same content is a
// duplicate and with other content a conflict, the run unchanged; a
// window that evicted the run from memory reads it back the same.
func TestContentHashSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	defer func() { db.Close() }()
	cfg := projection.Config{DedupeWindow: 8}
	p, err := projection.Open(cfg, store.New(db, 3))
	if err != nil {
		t.Fatal(err)
	}
	at := topics.NewTime(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC))
	ev := func(id string, data topics.Payload) *topics.Event {
		return &topics.Event{ID: id, Source: "/t", Type: data.EventType(), Time: at, RunID: "run-h", AgentID: "w1", SchemaVersion: 1, Data: data}
	}
	first := ev("e1", &topics.NodeStatus{Status: topics.StatusRunning})
	if _, dup, err := p.ApplyEvent(first); dup || err != nil {
		t.Fatalf("e1: dup %v, %v", dup, err)
	}
	if err := p.Commit(map[string]int64{"t": 1}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = openDB(t, dir)
	if p, err = projection.Open(cfg, store.New(db, 3)); err != nil {
		t.Fatal(err)
	}
	if _, dup, err := p.ApplyEvent(ev("e1", &topics.NodeStatus{Status: topics.StatusRunning})); !dup || err != nil {
		t.Errorf("e1 sent again after the reopen: dup %v, %v; want a duplicate", dup, err)
	}
	_, dup, err := p.ApplyEvent(ev("e1", &topics.NodeStatus{Status: topics.StatusFailed}))
	if dup || !errors.Is(err, projection.ErrDuplicateConflict) {
		t.Errorf("e1 with other content after the reopen: dup %v, %v; want a conflict", dup, err)
	}
	r, _ := p.Run("run-h")
	if n, _ := r.Node("w1"); r.Seq() != 1 || n.Status != topics.StatusRunning {
		t.Errorf("after the conflict: seq %d, w1 %s; want 1 and running (the first content)", r.Seq(), n.Status)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("the conflict stuck: %v", err)
	}
}
