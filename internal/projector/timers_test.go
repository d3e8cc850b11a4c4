package projector

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestTimersWakeWithoutEvents: a lease that is not renewed and a dispatch
// whose expected_by passes without a completion receipt wake the conductor
// on the wall clock, with no further event to carry them (the design card,
// "Wakes out": lease expiry, watchdog findings). The triggers are the
// timers' own: no event id, at the instant they fell due.
func TestTimersWakeWithoutEvents(t *testing.T) { brokertest.Run(t, testTimersWakeWithoutEvents) }

func testTimersWakeWithoutEvents(t *testing.T, b *brokertest.Broker) {
	const partitions = 2
	e := newEnvOn(t, b, partitions)
	const run = "run-timers"

	// The injected wall clock stands at the events' time until every event
	// is applied, then runs at real speed.
	base := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	var running atomic.Pointer[time.Time]
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time {
		if since := running.Load(); since != nil {
			return base.Add(time.Since(*since))
		}
		return base
	}

	leaseDue := topics.NewTime(base.Add(1500 * time.Millisecond))
	expectedBy := topics.NewTime(base.Add(2500 * time.Millisecond))
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	events := []topics.Event{
		testEvent("ev-0", run, "conductor", at(0), &topics.NodeCreated{Role: topics.RoleConductor}),
		testEvent("ev-1", run, "agent-1", at(1), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}),
		testEvent("ev-2", run, "agent-1", at(2), topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: "worker-pool-0", ExpiresAt: leaseDue})),
		testEvent("ev-3", run, "agent-2", at(3), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleAppAgent}),
		testEvent("ev-4", run, "agent-2", at(4), &topics.NodeDelegated{ExpectedBy: &expectedBy, TaskID: "task-2"}),
	}
	p, _ := e.start(cfg)
	e.produce(e.names.AgentEvents(), events...)
	testenv.WaitFor(t, 30*time.Second, until(p, "the events applied", func() bool { return p.stats.Applied.Load() >= int64(len(events)) }))
	if n := p.stats.Wakes.Load(); n != 0 {
		t.Fatalf("%d wakes before any timer fell due, want none", n)
	}
	// Nothing else is produced from here on; only the clock moves.
	now := time.Now()
	running.Store(&now)

	var leaseWake, watchdogWake *topics.Wake
	var leaseTrig, watchdogTrig topics.Trigger
	e.reader(e.names.Wakes(), e.names.PriorityWakes()).until(30*time.Second, "the timer wakes", func(r *kgo.Record) bool {
		w := decodeWake(t, r)
		if w.RunID != run || w.Lane != topics.LaneNormal || r.Topic != e.names.Wakes() {
			t.Fatalf("wake of run %q lane %q on %s, want %q on the normal lane", w.RunID, w.Lane, r.Topic, run)
		}
		if want := topics.Partition([]byte(run), partitions); r.Partition != want {
			t.Errorf("wake in partition %d, want the run's %d", r.Partition, want)
		}
		for _, tr := range w.Triggers {
			// Not before the clock reached the due time.
			if due := now.Add(tr.At.Sub(topics.NewTime(base))); r.Timestamp.Before(due.Add(-10 * time.Millisecond)) {
				t.Errorf("%s trigger published at %v, before it fell due at %v", tr.Kind, r.Timestamp, due)
			}
			switch tr.Kind {
			case topics.TriggerLeaseExpired:
				leaseWake, leaseTrig = w, tr
			case topics.TriggerWatchdog:
				watchdogWake, watchdogTrig = w, tr
			default:
				t.Fatalf("unexpected trigger %+v", tr)
			}
		}
		return leaseWake != nil && watchdogWake != nil
	})
	if got := p.stats.Records.Load(); got != int64(len(events)) {
		t.Fatalf("%d records consumed, want only the %d events", got, len(events))
	}

	if leaseTrig.EventID != nil || leaseTrig.AgentID != "agent-1" || leaseTrig.At.UnixMilli() != leaseDue.UnixMilli() ||
		leaseTrig.Detail == nil || *leaseTrig.Detail != "worker-pool-0" {
		t.Errorf("lease trigger = %+v, want lease_expired of agent-1 at %v by worker-pool-0, no event", leaseTrig, leaseDue)
	}
	if got := leaseWake.AgentTreeSnapshot.Summary.OverdueLeaseCount; got != 1 {
		t.Errorf("lease wake: overdue_lease_count %d, want 1", got)
	}
	if watchdogTrig.EventID != nil || watchdogTrig.AgentID != "agent-2" || watchdogTrig.At.UnixMilli() != expectedBy.UnixMilli() ||
		watchdogTrig.Detail == nil || *watchdogTrig.Detail != string(topics.WatchdogSuspectDeliveryFailure) {
		t.Errorf("watchdog trigger = %+v, want suspect_delivery_failure of agent-2 at %v, no event", watchdogTrig, expectedBy)
	}
	// Each snapshot reflects every event (no later one existed).
	for _, w := range []*topics.Wake{leaseWake, watchdogWake} {
		if s := w.AgentTreeSnapshot; s.AsOfEventSeq != int64(len(events)) || s.Stale {
			t.Errorf("wake %s: as_of_event_seq %d stale %v, want %d and fresh", w.WakeID, s.AsOfEventSeq, s.Stale, len(events))
		}
	}
	if p.stats.Applied.Load() != int64(len(events)) {
		t.Errorf("%s; want %d applied", statsString(&p.stats), len(events))
	}
}
