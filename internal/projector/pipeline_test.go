package projector

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestApplyWhileCommitting: the worker applies records while the commit
// before them is in flight, and the
// pipeline keeps exactly-once. The broker holds a transaction's EndTxn; while
// it is held the worker applies the next requests, and it commits nothing
// more (one commit in flight at a time, the next prepared only after it).
// Once released, every request wakes the conductor exactly once, in
// committed wakes.
func TestApplyWhileCommitting(t *testing.T) {
	const run, requests = "run-pipelined", 200
	e := newEnv(t, 1)
	release := make(chan struct{})
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	var hold, held atomic.Bool
	e.broker.Cluster.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.broker.Cluster.KeepControl()
		if hold.Load() {
			held.Store(true)
			e.broker.Cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	request := func(i int) topics.Event {
		return testEvent(fmt.Sprintf("ev-req-%04d", i), run, "agent-1", t0.Add(time.Duration(i)*time.Millisecond),
			&topics.Request{RequestID: fmt.Sprintf("req-%04d", i), RequestKind: "clarification"})
	}
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return t0 } // no request's TTL falls due
	p, stop := e.start(cfg)
	defer stop()
	e.produce(e.names.AgentEvents(),
		testEvent("ev-root", run, "conductor", t0, &topics.NodeCreated{Role: topics.RoleConductor}),
		testEvent("ev-worker", run, "agent-1", t0, &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
	testenv.WaitFor(t, 30*time.Second, until(p, "the run's first events are committed", func() bool { return p.stats.Commits.Load() >= 1 }))

	// The first request's commit is held at its EndTxn.
	hold.Store(true)
	commits, wakes := p.stats.Commits.Load(), p.stats.Wakes.Load()
	e.produce(e.names.AgentEvents(), request(0))
	testenv.WaitFor(t, 30*time.Second, until(p, "the first request's commit is in flight", held.Load))

	// The rest is applied meanwhile.
	rest := make([]topics.Event, 0, requests-1)
	for i := 1; i < requests; i++ {
		rest = append(rest, request(i))
	}
	e.produce(e.names.AgentEvents(), rest...)
	testenv.WaitFor(t, 30*time.Second, until(p, "the requests are applied while the commit is held", func() bool {
		return p.stats.Applied.Load() == 2+requests
	}))
	if got := p.stats.Commits.Load(); got != commits {
		t.Fatalf("%d commits completed while the broker held the first one's EndTxn: a second commit did not wait for the one in flight", got-commits)
	}
	if got := p.stats.Wakes.Load(); got != wakes {
		t.Fatalf("%d wakes counted before their commit completed", got-wakes)
	}

	// Released: the held commit completes, then the one of the rest, which
	// was applied whole before the first could be reaped.
	hold.Store(false)
	closeRelease()
	testenv.WaitFor(t, 30*time.Second, until(p, "both commits complete", func() bool { return p.stats.Commits.Load() >= commits+2 }))
	stop()
	wakes = p.stats.Wakes.Load()

	seen := map[string]int{}
	var got int64
	e.reader(e.names.Wakes()).until(30*time.Second, "the wakes", func(rec *kgo.Record) bool {
		got++
		for _, tr := range decodeWake(t, rec).Triggers {
			if tr.Kind == topics.TriggerRequest && tr.EventID != nil {
				seen[*tr.EventID]++
			}
		}
		return got == wakes
	})
	for i := range requests {
		if id := fmt.Sprintf("ev-req-%04d", i); seen[id] != 1 {
			t.Fatalf("request %s is in %d committed wakes, want 1", id, seen[id])
		}
	}
}
