package harness

import (
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestFinishingTreeExpires feeds a finishing Tree's events (workload.TreeSpec.Finish)
// and its marker to a Pebble-backed projection with a retention, as soak's
// projector sees them: the run is finished once its timers have fired
// (workload.DefaultFinishTimers after its last event at most), expires Retention after its
// clock and not a millisecond before, and its state is gone from the store.
// The same tree without Finish never finishes, whatever the time.
func TestFinishingTreeExpires(t *testing.T) {
	const retention = time.Minute
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := projection.Open(projection.Config{Retention: retention}, store.New(db, 0))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := projection.New(projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	feed := func(p *projection.Projection, spec workload.TreeSpec) (last time.Time, events int) {
		tree, at := workload.NewTree(spec), at
		for ev, ok := tree.Next(at); ok; ev, ok = tree.Next(at) {
			if _, err := topics.EventRecord("t", &ev, ""); err != nil {
				t.Fatalf("%s: event %d (%s) is not valid: %v", spec.RunID, events, ev.Type, err)
			}
			if _, dup := p.Apply(&ev); dup {
				t.Fatalf("%s: event %d (%s): duplicate id %s", spec.RunID, events, ev.Type, ev.ID)
			}
			events++
			at = at.Add(10 * time.Millisecond)
		}
		marker := workload.Marker(spec.RunID, at)
		p.Apply(&marker)
		if err := p.Err(); err != nil {
			t.Fatal(err)
		}
		return at, events + 1
	}
	// Several seeds: each draws other outcomes (blocked, failed, running,
	// requests) for its nodes.
	const runs = 4
	var last time.Time
	for s := range runs {
		l, n := feed(p, workload.TreeSpec{RunID: runName(s), Nodes: 25, Seed: uint64(s), Finish: true})
		if n < 25*8 {
			t.Fatalf("%s: %d events for 25 nodes", runName(s), n)
		}
		last = latest(last, l)
	}
	if err := p.Commit(map[string]int64{"t": 1}); err != nil {
		t.Fatal(err)
	}
	var pending projection.Pending
	for s := range runs {
		r, ok := p.Run(runName(s))
		if !ok {
			t.Fatalf("%s: not projected", runName(s))
		}
		if root, _ := r.Root(); root.Status != topics.StatusCompleted {
			t.Fatalf("%s: root %s is %s after the run's traffic, want completed", runName(s), root.AgentID, root.Status)
		}
	}

	// Every timer is due by workload.DefaultFinishTimers after the last event.
	p.FireDue(topics.NewTime(last.Add(workload.DefaultFinishTimers)), &pending)
	var first, clock time.Time // the earliest and the latest run clock
	for s := range runs {
		r, ok := p.Run(runName(s))
		if !ok {
			t.Fatalf("%s: gone before its retention", runName(s))
		}
		if !r.Finished() {
			due, _ := r.NextDue()
			t.Fatalf("%s: not finished %v after its last event (next timer %v)", runName(s), workload.DefaultFinishTimers, due)
		}
		c := r.Clock().Std()
		if first.IsZero() || c.Before(first) {
			first = c
		}
		clock = latest(clock, c)
	}
	// A millisecond before the first run's expiry none has gone; at the
	// last run's expiry all have.
	before := topics.NewTime(first.Add(retention - time.Millisecond))
	p.FireDue(before, &pending)
	if n := p.ExpireDue(before, &pending); n != 0 {
		t.Fatalf("%d runs expired before their retention", n)
	}
	// As the worker does, the wakes of what fired are out before the next
	// firing: a run with triggers pending is not expired under them.
	pending.Reset()
	p.FireDue(topics.NewTime(clock.Add(retention)), &pending)
	if n := p.ExpireDue(topics.NewTime(clock.Add(retention)), &pending); n != runs {
		t.Fatalf("%d of %d runs expired %v after the last run's clock", n, runs, retention)
	}
	for s := range runs {
		if _, err := p.Lookup(runName(s)); !errors.Is(err, projection.ErrRunExpired) {
			t.Fatalf("%s: lookup after its retention: %v, want ErrRunExpired", runName(s), err)
		}
	}
	if err := p.Commit(map[string]int64{"t": 2}); err != nil {
		t.Fatal(err)
	}
	// Reopened from the store, the runs are still expired: their state is
	// gone, only the markers answer.
	p2, err := projection.Open(projection.Config{Retention: retention}, store.New(db, 0))
	if err != nil {
		t.Fatal(err)
	}
	for s := range runs {
		if _, err := p2.Lookup(runName(s)); !errors.Is(err, projection.ErrRunExpired) {
			t.Fatalf("%s: lookup after a reopen: %v, want ErrRunExpired", runName(s), err)
		}
	}

	// The same tree as the standard scenarios send it never finishes.
	l, _ := feed(mem, workload.TreeSpec{RunID: "ordinary", Nodes: 25, Seed: 0})
	mem.FireDue(topics.NewTime(l.Add(time.Hour)), &pending)
	if r, ok := mem.Run("ordinary"); !ok || r.Finished() {
		t.Fatalf("an ordinary tree: finished %v an hour after its last event, want a run that never finishes", ok && r.Finished())
	}
}

func runName(i int) string { return "soak-" + string(rune('a'+i)) }

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
