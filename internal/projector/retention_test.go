package projector

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestRetention: run lifecycle and retention through the projector, on the
// injected clock. A finished run expires Retention after its last
// event: reads of it say it expired, an event for it is dead-lettered with
// a run_expired reason, and a projector restoring the partition from the
// changelog alone (its data directory wiped) brings back the live run and
// only the expired one's marker, not its state.
func TestRetention(t *testing.T) {
	const done, live = "run-done", "run-live"
	e := newEnv(t, 1)
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return time.Unix(0, now.Load()).UTC() }
	cfg.Projection.Retention = time.Hour

	e.produce(e.names.AgentEvents(),
		testEvent("d-0", done, "conductor", t0, &topics.NodeCreated{Role: topics.RoleConductor}),
		testEvent("d-1", done, "w1", t0.Add(time.Second), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}),
		testEvent("d-2", done, "w1", t0.Add(2*time.Second), &topics.NodeCompleted{}),
		testEvent("d-3", done, "conductor", t0.Add(3*time.Second), &topics.NodeCompleted{}),
		testEvent("l-0", live, "conductor", t0, &topics.NodeCreated{Role: topics.RoleConductor}))
	p, stop := e.start(cfg)
	defer stop()
	testenv.WaitFor(t, 30*time.Second, until(p, "the runs are applied", func() bool { return p.stats.Applied.Load() == 5 }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Snapshot(ctx, done); err != nil {
		t.Fatalf("the finished run before its retention: %v", err)
	}

	// An hour after its last event, on the wall clock; an event of the
	// live run wakes the worker, which arms its timer from the new time.
	now.Store(t0.Add(3*time.Second + time.Hour).UnixNano())
	e.produce(e.names.AgentEvents(), testEvent("l-1", live, "conductor", t0.Add(time.Hour), &topics.NodeCreated{Role: topics.RoleConductor}))
	var expired *projection.ExpiredError
	testenv.WaitFor(t, 30*time.Second, until(p, "the finished run expires", func() bool {
		_, err := p.Snapshot(ctx, done)
		return errors.As(err, &expired)
	}))
	if expired.RunID != done || !expired.At.Equal(t0.Add(3*time.Second+time.Hour)) || expired.Retention != time.Hour {
		t.Errorf("expired: %+v, want run %s at %v after 1h", expired, done, t0.Add(3*time.Second+time.Hour))
	}
	if n := p.stats.Expired.Load(); n != 1 {
		t.Errorf("%d runs expired, want 1", n)
	}
	if _, err := p.ReadModel(ctx, done); !errors.Is(err, projection.ErrRunExpired) {
		t.Errorf("read model of the expired run: %v, want ErrRunExpired", err)
	}
	if _, err := p.Snapshot(ctx, live); err != nil {
		t.Errorf("the live run: %v", err)
	}

	// A late event for the expired run is refused, with why.
	e.produce(e.names.AgentEvents(), testEvent("d-late", done, "w1", t0.Add(2*time.Hour), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
	testenv.WaitFor(t, 30*time.Second, until(p, "the late event is dead-lettered", func() bool { return p.stats.DeadLettered.Load() == 1 }))
	e.reader(e.names.DeadLetter()).until(30*time.Second, "the dead letter", func(rec *kgo.Record) bool {
		for _, h := range rec.Headers {
			if h.Key == topics.HeaderDeadLetterReason && !strings.HasPrefix(string(h.Value), DeadLetterRunExpired+": ") {
				t.Errorf("dead-letter reason %q, want it to start %q", h.Value, DeadLetterRunExpired)
			}
		}
		return true
	})
	stop()

	// A new owner with an empty data directory restores from the changelog
	// alone: the live run, and of the expired one only its marker.
	cfg.DataDir = t.TempDir()
	p2, stop2 := e.start(cfg)
	defer stop2()
	testenv.WaitFor(t, 60*time.Second, until(p2, "the partition is restored", func() bool { return len(p2.Owned()) == 1 }))
	if _, err := p2.Snapshot(ctx, live); err != nil {
		t.Errorf("the live run after a restore: %v", err)
	}
	if _, err := p2.Snapshot(ctx, done); !errors.As(err, &expired) {
		t.Errorf("the expired run after a restore: %v, want it expired", err)
	}
}
