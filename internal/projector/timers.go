package projector

import (
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Timers by the wall clock. A run's timers (lease expiry, the dispatch SLA,
// the forward grace, request TTLs) fire in the projection on its logical
// clock as events arrive (pkg/projection timers.go: Run.fire is where a
// lease expiry fires); a quiet run's fall due by the projector's clock
// here, and so does retention's expiry of finished runs.

// fireTimers raises the wakes of timers due by now, expires the finished
// runs whose retention is up, and publishes. Only a caught-up partition
// fires: with a backlog, the events that renew a lease may still be
// unread.
func (w *worker) fireTimers() bool {
	now := w.p.cfg.Now()
	at := topics.NewTime(now)
	w.proj.FireDue(at, &w.agent.pending)
	if n := w.proj.ExpireDue(at, &w.agent.pending); n > 0 {
		w.p.hooks.RunsExpired(w.part, n)
	}
	return w.publish(now, at)
}

// armTimer sets t to the partition's next due time, when it is caught up.
func (w *worker) armTimer(t *time.Timer) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	due, ok := w.proj.NextDue()
	if !ok || !w.caughtUp() {
		return
	}
	t.Reset(max(due.Std().Sub(w.p.cfg.Now()), 0))
}
