package wake_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// TestAcksMarkResultsForwarded: against a real projector, a run whose
// worker finished is done_but_not_forwarded in the read model's watchdog
// until the conductor (pkg/wake) receives its wakes; pkg/wake's
// acknowledgements then make the projector count the result forwarded.
func TestAcksMarkResultsForwarded(t *testing.T) {
	kc := brokertest.NewKfake(t).Cluster
	brokers := kc.ListenAddrs()
	names := topics.Names{Prefix: "forwarded", Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 3, 1); err != nil {
		t.Fatal(err)
	}
	// No timer falls due during the test: deadlines, the lease and the
	// forward grace are an hour away, so only the acknowledgement can turn
	// done_but_not_forwarded into completed.
	p, err := projector.New(ctx, projector.Config{Kafka: kafkaconn.Conn{Brokers: brokers}, Names: names, DataDir: t.TempDir(), Group: "forwarded-projector",
		Projection: projection.Config{ForwardGrace: time.Hour}, SessionTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, stopProjector := context.WithCancel(ctx)
	projected := make(chan error, 1)
	go func() { projected <- p.Run(pctx) }()
	defer func() {
		stopProjector()
		if err := <-projected; err != nil {
			t.Errorf("projector: %v", err)
		}
	}()

	const run = "run-forwarded"
	evs := runEvents(run, time.Now().UTC())
	var recs []*kgo.Record
	for _, ev := range evs {
		r, err := topics.EventRecord(names.AgentEvents(), ev, "")
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	events := int64(len(evs))
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return p.Status().Counts.Applied == events }, func() string {
		return fmt.Sprintf("projector applied %d of %d events", p.Status().Counts.Applied, events)
	}))
	m, err := p.ReadModel(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Watchdog; w.Dispatched != 2 || w.DoneButNotForwarded != 1 || w.Completed != 0 {
		t.Fatalf("before any acknowledgement: watchdog %+v, want worker-1 done_but_not_forwarded", w)
	}

	c, err := wake.New(wake.Config{Brokers: brokers, Names: names, Group: "forwarded-conductor", Logger: discard()},
		func(context.Context, *topics.Wake, wake.Received) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopConductor := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	// Every wake acknowledged, and every acknowledgement applied.
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool {
		acked := c.Stats.Acked.Load()
		return acked > 0 && acked == p.Status().Counts.Wakes && p.Status().Counts.Applied == events+acked
	}, func() string {
		return fmt.Sprintf("wakes %d, acknowledged %d, applied %d", p.Status().Counts.Wakes, c.Stats.Acked.Load(), p.Status().Counts.Applied)
	}))
	stopConductor()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	m, err = p.ReadModel(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Watchdog; w.Dispatched != 2 || w.Completed != 1 || w.DoneButNotForwarded != 0 {
		t.Errorf("after pkg/wake's acknowledgements: watchdog %+v, want worker-1 completed (forwarded)", w)
	}
}

// runEvents is a conductor delegating to two workers; worker-1 returns a
// result and completes, worker-2 asks a question. Deadlines and the lease
// fall an hour after base.
func runEvents(run string, base time.Time) []*topics.Event {
	later := topics.NewTime(base.Add(time.Hour))
	var out []*topics.Event
	ev := func(agent, corr string, data topics.Payload) {
		at := base.Add(time.Duration(len(out)) * time.Millisecond)
		out = append(out, &topics.Event{ID: fmt.Sprintf("%s-%02d", run, len(out)), Source: "/agents/" + agent, Type: data.EventType(),
			Time: topics.NewTime(at), RunID: run, AgentID: agent, SchemaVersion: topics.CurrentSchemaVersion, CorrelationID: corr, Data: data})
	}
	yes := true
	ev("conductor", "", &topics.NodeCreated{Role: topics.RoleConductor, Capability: "orchestrate"})
	ev("conductor", "", &topics.NodeStatus{Status: topics.StatusRunning, Reason: "planning"})
	ev("worker-1", "task-1", &topics.NodeCreated{Role: topics.RoleWorker, ParentAgentID: "conductor", Capability: "research"})
	ev("worker-1", "task-1", &topics.NodeDelegated{TaskID: "task-1", ExpectedBy: &later})
	ev("worker-2", "task-2", &topics.NodeCreated{Role: topics.RoleWorker, ParentAgentID: "conductor", Capability: "write"})
	ev("worker-2", "task-2", &topics.NodeDelegated{TaskID: "task-2", ExpectedBy: &later})
	ev("worker-1", "task-1", topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: "pool-1", ExpiresAt: later}))
	ev("worker-2", "task-2", &topics.Request{RequestID: "req-1", RequestKind: "clarification", DedupeKey: "which-format"})
	ev("worker-1", "task-1", topics.NewResult(topics.TypeResult, topics.Result{ResultKind: "json", Success: &yes}))
	ev("worker-1", "task-1", &topics.NodeCompleted{ResultSource: "completion_event"})
	return out
}
