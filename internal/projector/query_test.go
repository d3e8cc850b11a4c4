package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestQueries: queries about a run are answered by the instance that owns
// its partition, from its worker: the snapshot, the read model and the
// history window, paged with cursors and bounded at the window size, the
// same as a projection fed the same events computes; the other instance
// answers ErrNotOwner, a run without events is unknown. The history
// survives a move to another instance (through the changelog) and a
// restart (from Pebble); a stopped instance answers ErrStopped.
// (internal/projectorhttp answers these over HTTP.)
func TestQueries(t *testing.T) {
	const partitions, window = 4, 24
	e := newEnv(t, partitions)
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond) // no timer falls due
	var events []topics.Event
	var runs []string
	for i := range 6 {
		run := fmt.Sprintf("query-%02d", i)
		runs = append(runs, run)
		events = append(events, workload.Generate(workload.Spec{RunID: run, Nodes: 8 + 3*i, Seed: uint64(i + 1),
			Start: start.Add(time.Duration(i) * time.Millisecond), Step: 10 * time.Millisecond})...)
	}
	pcfg := projection.Config{HistorySize: window}
	ref, err := projection.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		ref.Apply(&events[i])
	}
	applied := func(ps ...*Projector) int64 {
		var n int64
		for _, p := range ps {
			n += p.stats.Applied.Load()
		}
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// checkRun compares what p answers about run with the reference.
	checkRun := func(who string, p *Projector, run string) {
		t.Helper()
		r, _ := ref.Run(run)
		snap, err := p.Snapshot(ctx, run)
		if err != nil {
			t.Fatalf("%s: snapshot of %s: %v", who, run, err)
		}
		want, _, _ := ref.Snapshot(run, time.Now())
		if snap.AsOfEventSeq != r.Seq() || snap.Summary.NodeCountTotal != want.Summary.NodeCountTotal ||
			snap.SnapshotID != want.SnapshotID {
			t.Errorf("%s: snapshot of %s: seq %d nodes %d id %s, want %d %d %s", who, run, snap.AsOfEventSeq,
				snap.Summary.NodeCountTotal, snap.SnapshotID, r.Seq(), want.Summary.NodeCountTotal, want.SnapshotID)
		}
		m, err := p.ReadModel(ctx, run)
		if err != nil {
			t.Fatalf("%s: read model of %s: %v", who, run, err)
		}
		wm, _ := ref.ReadModel(run, time.Time{}, false)
		m.GeneratedAt, wm.GeneratedAt = topics.Time{}, topics.Time{}
		if a, b := mustJSON(t, m), mustJSON(t, wm); a != b {
			t.Errorf("%s: read model of %s:\n got %s\nwant %s", who, run, a, b)
		}
		// Page through the window, 7 at a time.
		var got []projection.HistoryEntry
		pages := 0
		for cursor := ""; ; {
			pages++
			pg, err := p.History(ctx, run, cursor, 7)
			if err != nil {
				t.Fatalf("%s: history of %s: %v", who, run, err)
			}
			if len(pg.Entries) > 7 || pg.WindowSize != window || pg.AsOfEventSeq != r.Seq() {
				t.Fatalf("%s: history page of %s: %d entries, window %d, as of %d", who, run, len(pg.Entries), pg.WindowSize, pg.AsOfEventSeq)
			}
			got = append(got, pg.Entries...)
			if cursor = pg.NextCursor; cursor == "" {
				if want := r.Seq() > window; pg.Truncated != want {
					t.Errorf("%s: history of %s: truncated %v, want %v", who, run, pg.Truncated, want)
				}
				break
			}
		}
		if n := min(int(r.Seq()), window); len(got) != n || pages != (n+6)/7 {
			t.Errorf("%s: history of %s: %d entries in %d pages, want %d", who, run, len(got), pages, n)
		}
		for i, h := range got {
			if h.Seq != r.Seq()-int64(i) {
				t.Fatalf("%s: history of %s: entry %d has seq %d, want %d (newest first, consecutive)", who, run, i, h.Seq, r.Seq()-int64(i))
			}
		}
		var wantHist []projection.HistoryEntry
		for cursor := ""; ; {
			pg, _ := ref.History(run, cursor, projection.MaxHistoryLimit)
			wantHist = append(wantHist, pg.Entries...)
			if cursor = pg.NextCursor; cursor == "" {
				break
			}
		}
		if a, b := mustJSON(t, got), mustJSON(t, wantHist); a != b {
			t.Errorf("%s: history of %s:\n got %s\nwant %s", who, run, a, b)
		}
	}

	cfgA := e.config(t.TempDir())
	cfgA.Projection = pcfg
	a, stopA := e.start(cfgA)
	e.produce(e.names.AgentEvents(), events...)
	testenv.WaitFor(t, 60*time.Second, until(a, "A applies every event", func() bool { return applied(a) >= int64(len(events)) }))
	testenv.WaitFor(t, 30*time.Second, until(a, "A owns every partition", func() bool { return len(a.Owned()) == partitions }))
	for _, run := range runs {
		checkRun("A", a, run)
	}
	if _, err := a.Snapshot(ctx, "query-never-seen"); !errors.Is(err, projection.ErrUnknownRun) {
		t.Errorf("snapshot of a run without events: %v, want ErrUnknownRun", err)
	}
	if _, err := a.ReadModel(ctx, "query-never-seen"); !errors.Is(err, projection.ErrUnknownRun) {
		t.Errorf("read model of a run without events: %v, want ErrUnknownRun", err)
	}
	if _, err := a.History(ctx, "query-never-seen", "", 0); !errors.Is(err, projection.ErrUnknownRun) {
		t.Errorf("history of a run without events: %v, want ErrUnknownRun", err)
	}
	if _, err := a.History(ctx, runs[0], "not a cursor", 0); !errors.Is(err, projection.ErrBadCursor) {
		t.Errorf("history with a bad cursor: %v, want ErrBadCursor", err)
	}
	most := projection.MaxPage(window) // the window, or 100 if it is smaller
	if _, err := a.History(ctx, runs[0], "", most+1); !errors.Is(err, projection.ErrBadLimit) {
		t.Errorf("history with limit %d: %v, want ErrBadLimit", most+1, err)
	}
	if _, err := a.History(ctx, runs[0], "", most); err != nil {
		t.Errorf("history with limit %d (the largest page): %v", most, err)
	}
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	if _, err := a.Snapshot(done, runs[0]); !errors.Is(err, context.Canceled) {
		t.Errorf("snapshot with a canceled context: %v", err)
	}

	// B joins and takes some partitions.
	cfgB := e.config(t.TempDir())
	cfgB.Projection = pcfg
	b, stopB := e.start(cfgB)
	testenv.WaitFor(t, 60*time.Second, until(b, "A and B share the partitions", func() bool {
		oa, ob := a.Owned(), b.Owned()
		return len(oa) > 0 && len(ob) > 0 && len(oa)+len(ob) == partitions
	}))
	ownedByA := a.Owned()
	var runOfA, runOfB string
	for _, run := range runs {
		if slices.Contains(ownedByA, topics.Partition([]byte(run), partitions)) {
			runOfA = run
		} else {
			runOfB = run
		}
	}
	if runOfA == "" || runOfB == "" {
		t.Fatalf("the test's runs all landed on one instance (A owns %v)", ownedByA)
	}
	if _, err := b.Snapshot(ctx, runOfA); !errors.Is(err, ErrNotOwner) {
		t.Errorf("B about A's run: %v, want ErrNotOwner", err)
	}
	if _, err := a.History(ctx, runOfB, "", 0); !errors.Is(err, ErrNotOwner) {
		t.Errorf("A about B's run: %v, want ErrNotOwner", err)
	}
	checkRun("A", a, runOfA)
	checkRun("B", b, runOfB) // restored from the changelog

	// A leaves: B takes its runs over with their history, from the changelog.
	stopA()
	if _, err := a.Snapshot(ctx, runOfA); !errors.Is(err, ErrStopped) {
		t.Errorf("A, stopped, about its run: %v, want ErrStopped", err)
	}
	testenv.WaitFor(t, 60*time.Second, until(b, "B owns every partition", func() bool { return len(b.Owned()) == partitions }))
	for _, run := range runs {
		checkRun("B after the move", b, run)
	}
	// B restarts on its data directory: the history comes back from Pebble.
	stopB()
	b2, _ := e.start(cfgB)
	testenv.WaitFor(t, 60*time.Second, until(b2, "B again owns every partition", func() bool { return len(b2.Owned()) == partitions }))
	for _, run := range runs {
		checkRun("B after a restart", b2, run)
	}
}

// TestQueryWhileRestoring: a partition assigned but not restored answers
// ErrRestoring; a stopping instance ErrStopped; a partition not assigned
// ErrNotOwner.
func TestQueryWhileRestoring(t *testing.T) {
	ready := make(chan struct{})
	close(ready)
	run := "restoring-run"
	part := topics.Partition([]byte(run), 4)
	p := &Projector{partitions: 4, ready: ready, workers: map[int32]*worker{
		part: {ready: make(chan struct{}), done: make(chan struct{}), quit: make(chan struct{})},
	}}
	ctx := context.Background()
	if _, err := p.Snapshot(ctx, run); !errors.Is(err, ErrRestoring) {
		t.Errorf("snapshot while restoring: %v, want ErrRestoring", err)
	}
	if _, err := p.ReadModel(ctx, run); !errors.Is(err, ErrRestoring) {
		t.Errorf("read model while restoring: %v, want ErrRestoring", err)
	}
	other := "x"
	for i := 0; topics.Partition([]byte(other), 4) == part; i++ {
		other = fmt.Sprint("x", i)
	}
	if _, err := p.ReadModel(ctx, other); !errors.Is(err, ErrNotOwner) {
		t.Errorf("read model of an unassigned partition: %v, want ErrNotOwner", err)
	}
	p.closing = true
	if _, err := p.History(ctx, run, "", 0); !errors.Is(err, ErrStopped) {
		t.Errorf("history of a stopping instance: %v, want ErrStopped", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadyMeansCaughtUp: an instance working through a backlog is not
// ready, and says how far behind it is; once it caught up, it is.
func TestReadyMeansCaughtUp(t *testing.T) {
	e := newEnv(t, 1)
	e.produce(e.names.AgentEvents(), workload.Generate(workload.Spec{RunID: "run-backlog", Nodes: 400, Seed: 3})...)
	cfg := e.config(t.TempDir())
	cfg.Chunk, cfg.ReadyLag = 20, 100
	p, _ := e.start(cfg)
	var sawBehind string
	testenv.WaitFor(t, 60*time.Second, until(p, "not ready while catching up", func() bool {
		ok, why := p.Ready()
		if !ok && strings.HasPrefix(why, "catching up") {
			sawBehind = why
		}
		return sawBehind != ""
	}))
	testenv.WaitFor(t, 120*time.Second, until(p, "ready once caught up", func() bool { ok, _ := p.Ready(); return ok }))
	if lag := p.Status().Lag; len(lag) == 0 || lag[0].Records > cfg.ReadyLag {
		t.Errorf("ready with lag %+v", lag)
	}
	t.Logf("while behind: %s", sawBehind)
}
