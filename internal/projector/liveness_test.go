package projector

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// testClock is a wall clock (Config.Now) that moves only when told.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *testClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// runIn is a run id of partition part of n.
func runIn(prefix string, part, n int32) string {
	for i := 0; ; i++ {
		if run := fmt.Sprintf("%s-%d", prefix, i); topics.Partition([]byte(run), n) == part {
			return run
		}
	}
}

// TestStalledPartition: a partition whose records wait while its commit
// does not complete (the broker holds its EndTxn) counts as stalled once
// they have waited Config.StalledAfter by the projector's clock, and
// /readyz says which and for how long; not before, not a partition that
// is idle however long since its last commit, and not once the commit
// completes.
func TestStalledPartition(t *testing.T) {
	e := newEnv(t, 2)
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
	clock := newTestClock(t0)
	cfg := e.config(t.TempDir())
	cfg.Now = clock.Now
	p, stop := e.start(cfg)
	defer stop()

	run := runIn("stalled", 0, 2)
	// Workers: no timer of theirs falls due as the clock moves on (a
	// request's TTL would, and its wake's commit would wait behind the
	// held one instead of the records).
	worker := func(i int) topics.Event {
		return testEvent(fmt.Sprintf("ev-w%d", i), run, fmt.Sprintf("w%d", i), t0, &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker})
	}
	e.produce(e.names.AgentEvents(),
		testEvent("ev-root", run, "conductor", t0, &topics.NodeCreated{Role: topics.RoleConductor}),
		testEvent("ev-worker", run, "agent-1", t0, &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
	// Committed and reaped: a commit is progress once the worker has
	// reaped it, a moment after the broker ended it.
	waits := func() bool {
		p.progress.mu.Lock()
		defer p.progress.mu.Unlock()
		e := p.progress.parts[0]
		return e == nil || e.topics[0].waiting() || e.topics[1].waiting()
	}
	testenv.WaitFor(t, 30*time.Second, until(p, "the run's first events committed and the instance ready", func() bool {
		ok, _ := p.Ready()
		return p.stats.Applied.Load() == 2 && !waits() && ok
	}))
	// Caught up: no record waits, however long since the last commit.
	clock.Advance(10 * time.Minute)
	if s := p.Status().Stalled; len(s) != 0 {
		t.Fatalf("caught up and idle for 10 minutes: stalled %v, want none", s)
	}

	hold.Store(true)
	e.produce(e.names.AgentEvents(), worker(0))
	testenv.WaitFor(t, 30*time.Second, until(p, "the next commit is held", held.Load))
	e.produce(e.names.AgentEvents(), worker(1), worker(2))
	testenv.WaitFor(t, 30*time.Second, until(p, "the rest applied behind the held commit", func() bool { return p.stats.Applied.Load() == 5 }))

	clock.Advance(cfg.withDefaults().StalledAfter - time.Second)
	if s := p.Status().Stalled; len(s) != 0 {
		t.Fatalf("records waiting for a second less than StalledAfter: stalled %v, want none yet", s)
	}
	if ok, why := p.Ready(); !ok {
		t.Fatalf("not stalled yet, Ready says %q", why)
	}
	clock.Advance(time.Second)
	if s := p.Status().Stalled; !slices.Equal(s, []PartitionStall{{Partition: 0, For: time.Minute}}) {
		t.Fatalf("records waiting for StalledAfter: stalled %v, want partition 0 for 1m", s)
	}
	ok, why := p.Ready()
	if want := "stalled: partition 0 for 1m0s without progress while records wait (stalled after 1m0s)"; ok || why != want {
		t.Errorf("Ready = %v %q, want false %q", ok, why, want)
	}

	hold.Store(false)
	closeRelease()
	testenv.WaitFor(t, 30*time.Second, until(p, "the held commit and the next completed: nothing stalled, ready", func() bool {
		ok, _ := p.Ready()
		return len(p.Status().Stalled) == 0 && ok
	}))
}

// restartHooks counts restarts.
type restartHooks struct {
	NopHooks
	n atomic.Int64
}

func (h *restartHooks) Restarting(error, time.Duration) { h.n.Add(1) }

// TestRestartLoopIsSeen: a partition whose every commit fails (the broker
// answers its transactional id's EndTxn PRODUCER_FENCED, as to a zombie)
// makes each instance the Supervisor starts fail in turn. Each failure is
// reported to Hooks.Restarting; while no instance runs, Ready says when and
// why the last failed, how many failed in the last 10 minutes and when the
// next starts; Lag keeps the partition's series at the records the next
// instance reads again (the live lag, once it applied them, reads 0); and
// the stall clock goes on across the instances, so that the partition is
// stalled once its records have waited StalledAfter. Once commits go
// through again, the partition is neither stalled nor behind.
func TestRestartLoopIsSeen(t *testing.T) {
	e := newEnv(t, 2)
	fault := e.broker.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: e.group + "-0", Err: kerr.ProducerFenced, Count: -1,
		When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).Commit }})
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	cfg := e.config(t.TempDir())
	cfg.Now = clock.Now
	cfg.StalledAfter = 30 * time.Second
	hooks := &restartHooks{}
	cfg.Hooks = hooks
	run := runIn("loop", 0, 2)
	const events = 5
	evs := []topics.Event{testEvent("ev-root", run, "conductor", t0, &topics.NodeCreated{Role: topics.RoleConductor})}
	for i := 1; i < events; i++ {
		evs = append(evs, testEvent(fmt.Sprintf("ev-%d", i), run, fmt.Sprintf("w%d", i), t0,
			&topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
	}
	e.produce(e.names.AgentEvents(), evs...)

	s, err := NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Supervisor.Run: %v", err)
		}
	})

	// Three failures (0.5 s, 1 s and 2 s of backoff): a loop.
	testenv.WaitFor(t, 60*time.Second, until(nil, "three restarts", func() bool { return hooks.n.Load() >= 3 }))
	if st := s.Status().Stalled; len(st) != 0 {
		t.Errorf("records waiting for 0s of the projector's clock: stalled %v, want none", st)
	}
	clock.Advance(45 * time.Second)
	// Between the next failure and the instance after it (4 s of backoff
	// from the fourth), everything answers for the failed instance.
	downText := regexp.MustCompile(`^not running: restarting after a failure at 2026-02-14T10:00:45Z \(([0-9]+) in the last 10m, next start in [0-9.]+m?s; ` +
		`stalled: partition 0 for 45s\): projector: partition 0: .*PRODUCER_FENCED`)
	lagTopic := e.names.AgentEvents()
	testenv.WaitFor(t, 60*time.Second, func() error {
		before := hooks.n.Load()
		ok, why := s.Ready()
		lag, stalled := s.Status().Lag, s.Status().Stalled
		if hooks.n.Load() != before || before < 4 {
			return fmt.Errorf("%d restarts so far, want a fourth and a steady look at it", before)
		}
		m := downText.FindStringSubmatch(why)
		switch {
		case ok || m == nil:
			return fmt.Errorf("Ready = %v %q, want it down after the fourth failure", ok, why)
		case m[1] != strconv.FormatInt(before, 10):
			return fmt.Errorf("Ready counts %s failures in the last 10m, the hook %d: %q", m[1], before, why)
		case !slices.Equal(lag, []PartitionLag{{Topic: lagTopic, Partition: 0, Records: events}}):
			return fmt.Errorf("Lag while down = %v, want partition 0 of %s at %d records (none committed)", lag, lagTopic, events)
		case !slices.Equal(stalled, []PartitionStall{{Partition: 0, For: 45 * time.Second}}):
			return fmt.Errorf("Stalled while down = %v, want partition 0 for 45s", stalled)
		}
		return nil
	})

	// Commits go through again: the next instance commits the records.
	fault.Remove()
	testenv.WaitFor(t, 60*time.Second, until(nil, "an instance that commits: ready, nothing stalled, no lag", func() bool {
		ok, _ := s.Ready()
		lag := s.Status().Lag
		return ok && len(s.Status().Stalled) == 0 && len(lag) > 0 && !slices.ContainsFunc(lag, func(l PartitionLag) bool { return l.Records != 0 })
	}))
}

// TestServerSaysWhyItIsDown: Ready's answer between a failure and the
// next instance: the failure's time, the failures within the last 10
// minutes by the projector's clock, the time to the next start (or that it
// is starting), and the error.
func TestServerSaysWhyItIsDown(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := newTestClock(t0)
	s, err := NewSupervisor(Config{Kafka: kafkaconn.Conn{Brokers: []string{"127.0.0.1:1"}}, DataDir: t.TempDir(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := s.Ready(); ok || why != "starting: no projector instance has started yet" {
		t.Errorf("before any instance: Ready = %v %q", ok, why)
	}
	boom := errors.New("projector: partition 3: committing the transaction: boom")
	for i, backoff := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} {
		clock.Advance(time.Second)
		if n := s.failed(boom, backoff); n != i+1 {
			t.Errorf("failure %d: %d in the window", i+1, n)
		}
	}
	want := "not running: restarting after a failure at 2026-11-27T12:00:03Z (3 in the last 10m, next start in 2s): " + boom.Error()
	if ok, why := s.Ready(); ok || why != want {
		t.Errorf("Ready = %v %q\nwant false %q", ok, why, want)
	}
	clock.Advance(2 * time.Second)
	want = "not running: starting a new instance after a failure at 2026-11-27T12:00:03Z (3 in the last 10m): " + boom.Error()
	if _, why := s.Ready(); why != want {
		t.Errorf("once the backoff is over: %q\nwant %q", why, want)
	}
	// Ten minutes after the first two, only the third is recent.
	clock.Advance(10*time.Minute - 2*time.Second - time.Second)
	if n := s.failed(boom, 4*time.Second); n != 2 {
		t.Errorf("a failure 10 minutes after the first two: %d in the window, want 2 (the third and itself)", n)
	}
	if _, why := s.Ready(); !strings.Contains(why, "(2 in the last 10m, next start in 4s)") {
		t.Errorf("after the window moved: %q", why)
	}
}
