package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestChaosKill runs three projector processes in one group, each with its
// own data directory, under a steady load of many runs, and SIGKILLs them in
// turn while the load goes on, restarting each on its data directory once
// the survivors have taken its partitions over. Two of the rounds freeze the
// instance (SIGSTOP) instead, and thaw it (SIGCONT) once the survivors own
// its partitions: a zombie that resumes in the middle of a batch it no
// longer owns, as after a long GC pause or a stalled VM. Then every run's
// last event is awaited in the committed wakes, every instance must stop
// cleanly on SIGTERM, and what they committed must be exactly what
// projections that never stopped compute: each triggering event in exactly
// one committed wake, no wake twice, no dead letter, and the changelog
// restoring every run exactly, with the consumed offsets at the end of the
// input.
//
// The freezes are what tells exactly-once from at-least-once here. A
// projector's commit is one produce of its wakes and changelog records, so a
// SIGKILL almost never separates them; a zombie's batch, though, is
// published after its partition has moved on. Without transactions
// (-transactions=false) that gives triggering events in two committed wakes
// (seen with this test); with them the zombie is fenced.
//
// On Apache Kafka it runs once more with KIP-848's consumer group protocol.
func TestChaosKill(t *testing.T) { runBothProtocols(t, testChaosKill) }

func testChaosKill(t *testing.T, b *brokertest.Broker, args ...string) {
	h := newHarness(t, b, "chaos", 6)
	h.args = args
	h.generate(48, 30)
	// The rounds, rotating over the instances, fall at even shares of the
	// first 75% of the load. The producer goes on at its pace up to 80% of
	// it, then trickles until the last round is over, so that every round
	// happens while records keep coming.
	rounds := []string{"kill", "freeze", "kill", "kill", "freeze", "kill"}
	h.startProducer(24*time.Second, 0.80)
	h.startReader()

	insts := make([]*child, 3)
	for i := range insts {
		insts[i] = h.start(fmt.Sprintf("i%d", i), fmt.Sprintf("data-%d", i))
	}
	for _, c := range insts {
		h.waitFor("instance "+c.name+" to own partitions", 30*time.Second, func() bool { return len(owned(c)) > 0 })
	}
	h.logf("three instances own partitions")
	restarts := make([]int, len(insts))
	for k, what := range rounds {
		mark := h.regular * (k + 1) * 75 / (100 * len(rounds))
		h.waitFor(fmt.Sprintf("the load to reach %d records before round %d", mark, k+1), 60*time.Second,
			func() bool { return h.produced.Load() >= int64(mark) })
		i := k % len(insts)
		victim := insts[i]
		h.waitFor(fmt.Sprintf("a stable group of three in which %s owns partitions, before round %d", victim.name, k+1),
			30*time.Second, func() bool { return len(owned(victim)) > 0 && h.stable(len(insts)) })
		// What the victim owns now must all be owned by the others
		// before it comes back.
		theirs := owned(victim)
		takenOver := func() bool {
			for p := range theirs {
				found := false
				for _, c := range insts {
					if c != victim && owned(c)[p] {
						found = true
					}
				}
				if !found {
					return false
				}
			}
			return true
		}
		switch what {
		case "kill":
			h.kill(victim)
			h.logf("round %d: SIGKILLed %s at %d of %d records, %d committed wakes read", k+1, victim.name,
				h.produced.Load(), len(h.events), h.wakeCount())
		case "freeze":
			h.signal(victim, syscall.SIGSTOP)
			h.logf("round %d: froze %s at %d of %d records, %d committed wakes read", k+1, victim.name,
				h.produced.Load(), len(h.events), h.wakeCount())
		}
		// The survivors take its partitions over once its session times
		// out; then it comes back: restarted on its own data directory, or
		// thawed.
		h.waitFor(fmt.Sprintf("the others to take over partitions %v of %s", slices.Sorted(maps.Keys(theirs)), victim.name),
			30*time.Second, takenOver)
		switch what {
		case "kill":
			restarts[i]++
			insts[i] = h.start(fmt.Sprintf("i%d-restart%d", i, restarts[i]), fmt.Sprintf("data-%d", i))
			h.logf("the others took over; restarted %s as %s", victim.name, insts[i].name)
		case "freeze":
			h.signal(victim, syscall.SIGCONT)
			h.logf("the others took over; thawed %s", victim.name)
		}
	}
	h.releaseTail()
	h.finish(insts...)
	h.check(false)
}

// TestScaleUpDown starts one projector instance under a steady load, adds a
// second and a third, then stops two of them with SIGTERM (each must stop
// cleanly), ending with one that catches up with everything; what the
// instances committed is then checked as in TestChaosKill.
//
// On Apache Kafka it runs once more with KIP-848's consumer group protocol
// (-group-protocol consumer), where the broker assigns the partitions.
func TestScaleUpDown(t *testing.T) { runBothProtocols(t, testScaleUpDown) }

// runBothProtocols runs test on the broker matrix, kfake with three
// brokers, and on Apache Kafka a second time with KIP-848 groups (the
// instances' extra flags).
func runBothProtocols(t *testing.T, test func(t *testing.T, b *brokertest.Broker, args ...string)) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		test(t, b)
		if b.Kind == brokertest.Kafka {
			t.Run("kip848", func(t *testing.T) { test(t, b, "-group-protocol", "consumer") })
		}
	}, kfake.NumBrokers(3))
}

func testScaleUpDown(t *testing.T, b *brokertest.Broker, args ...string) {
	h := newHarness(t, b, "scale", 6)
	h.args = args
	h.generate(48, 30)
	h.startProducer(24*time.Second, 0.80)
	h.startReader()

	first := h.start("first", "data-first")
	// Each step waits for the load to reach its share and for the group to
	// be stable with the instances running (see TestChaosKill).
	at := func(share, members int) {
		mark := h.regular * share / 100
		h.waitFor(fmt.Sprintf("the load to reach %d%% and a stable group of %d", share, members), 60*time.Second,
			func() bool { return h.produced.Load() >= int64(mark) && h.stable(members) })
	}
	h.waitFor("the first instance to own partitions", 30*time.Second, func() bool { return len(owned(first)) > 0 })
	at(15, 1)
	second := h.start("second", "data-second")
	h.waitFor("the second instance to own partitions", 30*time.Second, func() bool { return len(owned(second)) > 0 })
	h.logf("scaled to two at %d of %d records", h.produced.Load(), len(h.events))
	at(30, 2)
	third := h.start("third", "data-third")
	h.waitFor("the third instance to own partitions", 30*time.Second, func() bool { return len(owned(third)) > 0 })
	h.logf("scaled to three at %d of %d records", h.produced.Load(), len(h.events))
	at(50, 3)
	h.terminate(second)
	h.logf("scaled down to two at %d of %d records", h.produced.Load(), len(h.events))
	at(70, 2)
	h.terminate(first)
	h.logf("scaled down to one at %d of %d records", h.produced.Load(), len(h.events))
	h.releaseTail()
	h.finish(third)
	h.check(true)
}

// harness runs projector processes against a broker of the matrix
// (brokertest), produces a workload to them, and reads their committed
// wakes.
type harness struct {
	t          *testing.T
	name       string
	began      time.Time
	ctx        context.Context
	cancel     context.CancelFunc
	bin, tmp   string
	broker     *brokertest.Broker
	brokers    []string
	names      topics.Names
	partitions int32
	group      string
	cl         *kgo.Client // producer and admin
	kafka      projectortest.Kafka
	args       []string // more flags of every instance

	// The workload: the runs' events interleaved by time, then each run's
	// marker, an event that wakes the run once everything before it is
	// projected.
	events  []topics.Event
	regular int               // records before the markers
	markers map[string]string // marker event id -> run
	ref     *projectortest.Reference

	produced atomic.Int64
	tail     chan struct{} // closed to let the producer past its hold
	prodDone chan struct{} // closed when the producer ends, with prodErr set
	prodErr  error

	mu          sync.Mutex
	children    []*child
	expectExit  map[*child]bool       // killed or terminated on purpose
	wakes       int                   // committed wake records read
	wakeTimes   map[int32][]time.Time // each partition's committed wakes' timestamps, as read
	markersSeen map[string]bool
	readErr     error
}

func newHarness(t *testing.T, b *brokertest.Broker, name string, partitions int32) *harness {
	t.Helper()
	return newHarnessWithin(t, b, name, partitions, 105*time.Second)
}

// newHarnessWithin is newHarness for a test that may take up to limit.
func newHarnessWithin(t *testing.T, b *brokertest.Broker, name string, partitions int32, limit time.Duration) *harness {
	t.Helper()
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	h := &harness{t: t, name: name, began: started, ctx: ctx, cancel: cancel, tmp: t.TempDir(), partitions: partitions,
		expectExit: map[*child]bool{}, markersSeen: map[string]bool{}, wakeTimes: map[int32][]time.Time{}, tail: make(chan struct{})}
	t.Cleanup(func() { t.Logf("%s: %v in all", t.Name(), time.Since(started).Round(100*time.Millisecond)) })

	// The binary, not race-built: the children are under test, not the harness.
	h.bin = filepath.Join(h.tmp, "projector")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", h.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var err error
	// kfake runs three brokers (the tests' Run): it picks each partition's
	// leader at random, so a partition's wakes and its changelog records
	// usually have different leaders, and a transaction spans brokers, as
	// it would in production. Apache Kafka is one node.
	h.broker, h.brokers = b, b.Addrs
	h.names = topics.Names{Prefix: b.Prefix(t, name), Version: 1}
	// A fresh group per test: a SIGKILLed member would stall later joins of
	// a reused one until its session timed out.
	h.group = "g-" + h.names.Prefix
	h.kafka = projectortest.Kafka{ClientOpts: []kgo.Opt{kgo.SeedBrokers(h.brokers...)}, Names: h.names}
	h.cl, err = kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cl.Close)
	if err := cluster.CreateTopics(ctx, kadm.NewClient(h.cl), h.names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	h.logf("binary built, broker and topics ready")
	// Registered after the broker's cleanup, so it runs before it: the
	// children go first.
	t.Cleanup(func() {
		h.mu.Lock()
		cs := slices.Clone(h.children)
		h.mu.Unlock()
		for _, c := range cs {
			c.kill()
		}
	})
	return h
}

// generate makes the workload: runs runs of nodes nodes each, interleaved by
// time, then each run's marker. Its clock starts an hour from now, so that
// no timer of it falls due on the projectors' wall clock during the test
// (see TestKill9), and the reference is built from it.
func (h *harness) generate(runs, nodes int) {
	h.t.Helper()
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	var events, markers []topics.Event
	h.markers = map[string]string{}
	for i := 0; i < runs; i++ {
		run := fmt.Sprintf("%s-run-%02d", h.name, i)
		// The runs start one after another, each while the ones before
		// it are still going: interleaved by time, the load then has runs
		// in every phase (growing, working, finishing) from early on, so
		// wakes are published all along rather than mostly at the end.
		evs := workload.Generate(workload.Spec{RunID: run, SessionID: "cluster", Nodes: nodes, Seed: uint64(7000 + i),
			Start: start.Add(time.Duration(i) * 3 * time.Duration(nodes) * time.Millisecond), Step: 10 * time.Millisecond})
		// The run's last event, a failure of an agent of its own, wakes the
		// run: once that wake is committed, the run is caught up.
		id := "marker-" + run
		markers = append(markers, topics.Event{ID: id, Source: "/agents/marker", Type: (&topics.Failed{}).EventType(),
			Time: evs[len(evs)-1].Time.Add(time.Minute), RunID: run, AgentID: "marker", SchemaVersion: topics.CurrentSchemaVersion,
			SessionID: "cluster", Data: &topics.Failed{ErrorCode: "end_of_test"}})
		h.markers[id] = run
		events = append(events, evs...)
	}
	slices.SortStableFunc(events, func(a, b topics.Event) int { return cmp.Compare(a.Time.UnixMilli(), b.Time.UnixMilli()) })
	h.regular = len(events)
	events = append(events, markers...)
	// The records are encoded by the producer as it goes: encoding is the
	// costly part under the race detector, and the load takes its time
	// anyway.
	h.events = events
	h.ref = projectortest.NewReference(h.partitions)
	per := make([]int, h.partitions)
	for i := range events {
		h.ref.Apply(h.t, &events[i])
		per[topics.Partition([]byte(events[i].RunID), h.partitions)]++
	}
	h.logf("%d runs, %d events (%d triggering), per partition %v", runs, len(h.events), len(h.ref.Triggering()), per)
}

// startProducer produces the workload in the background, paced to take
// about d up to the share hold of the records, then a trickle until
// releaseTail, then the rest at the same pace, the markers last.
func (h *harness) startProducer(d time.Duration, hold float64) {
	const tick = 50 * time.Millisecond
	chunk := max(1, int(int64(h.regular)*int64(tick)/int64(d)))
	holdAt := int(float64(h.regular) * hold)
	h.prodDone = make(chan struct{})
	produce := func() error {
		pace := time.NewTicker(tick) // pacing, not synchronisation
		defer pace.Stop()
		for i := 0; i < len(h.events); {
			select {
			case <-pace.C:
			case <-h.ctx.Done():
				return h.ctx.Err()
			}
			n := min(chunk, h.regular-i)
			switch {
			case i >= h.regular: // the markers, once released
				select {
				case <-h.tail:
				case <-h.ctx.Done():
					return h.ctx.Err()
				}
				n = len(h.events) - i
			case i >= holdAt && !isClosed(h.tail):
				n = min(n, 3)
			}
			recs := make([]*kgo.Record, n)
			for j := range recs {
				r, err := topics.EventRecord(h.names.AgentEvents(), &h.events[i+j], "")
				if err != nil {
					return err
				}
				r.Partition = topics.Partition(r.Key, h.partitions)
				recs[j] = r
			}
			if err := h.cl.ProduceSync(h.ctx, recs...).FirstErr(); err != nil {
				return err
			}
			i += n
			h.produced.Store(int64(i))
		}
		return nil
	}
	go func() { defer close(h.prodDone); h.prodErr = produce() }()
	h.t.Cleanup(func() { h.cancel(); <-h.prodDone })
}

// releaseTail lets the producer go past its hold: the rest of the load, and
// then the markers.
func (h *harness) releaseTail() { close(h.tail) }

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// startReader reads the committed wakes in the background, counting them and
// noting each run's marker wake.
func (h *harness) startReader() {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics(h.names.Wakes(), h.names.PriorityWakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			h.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				h.wakes++
				h.wakeTimes[r.Partition] = append(h.wakeTimes[r.Partition], r.Timestamp)
				// Only a wake that may name a marker is decoded: decoding
				// every wake's snapshot here would take the CPU the
				// instances under test need (CheckWakes decodes them all).
				if !bytes.Contains(r.Value, []byte(`"marker-`)) {
					return
				}
				w, err := topics.DecodeWake(r.Value)
				if err != nil {
					h.readErr = fmt.Errorf("wake at %s/%d@%d does not decode: %w", r.Topic, r.Partition, r.Offset, err)
					return
				}
				for _, tr := range w.Triggers {
					if tr.EventID != nil && h.markers[*tr.EventID] == w.RunID {
						h.markersSeen[w.RunID] = true
					}
				}
			})
			h.mu.Unlock()
		}
	}()
	h.t.Cleanup(func() { stop(); <-done; cl.Close() })
}

// logf logs with the time since the harness started.
func (h *harness) logf(format string, args ...any) {
	h.t.Helper()
	h.t.Logf("%6.1fs "+format, append([]any{time.Since(h.began).Seconds()}, args...)...)
}

func (h *harness) wakeCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.wakes
}

// start starts a projector process on the data directory dir (under the
// test's temporary directory) in the test's group, with no static instance
// id: a member that dies leaves the group after its session timeout, and its
// partitions move to the others.
func (h *harness) start(name, dir string) *child {
	h.t.Helper()
	c := &child{name: name, exited: make(chan struct{})}
	c.cmd = exec.Command(h.bin, "run", "-brokers", strings.Join(h.brokers, ","), "-topic-prefix", h.names.Prefix,
		"-data-dir", filepath.Join(h.tmp, dir), "-group", h.group, "-session-timeout", "2s", "-transactions=true",
		"-log-level", "info", "-http-addr", "127.0.0.1:0")
	c.cmd.Args = append(c.cmd.Args, h.args...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	h.mu.Lock()
	h.children = append(h.children, c)
	h.mu.Unlock()
	return c
}

// signal sends c a signal.
func (h *harness) signal(c *child, sig syscall.Signal) {
	h.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		h.dump()
		h.t.Fatalf("%v to %s: %v", sig, c.name, err)
	}
}

// kill SIGKILLs c and waits for it.
func (h *harness) kill(c *child) {
	h.mu.Lock()
	h.expectExit[c] = true
	h.mu.Unlock()
	c.kill()
}

// terminate sends c SIGTERM and waits for it to stop cleanly.
func (h *harness) terminate(c *child) {
	h.t.Helper()
	h.sigterm(c)
	h.stopped(c)
}

// sigterm sends c SIGTERM.
func (h *harness) sigterm(c *child) {
	h.t.Helper()
	h.mu.Lock()
	h.expectExit[c] = true
	h.mu.Unlock()
	h.signal(c, syscall.SIGTERM)
}

// stopped waits for c, sent SIGTERM, to stop: it must exit with status 0
// after logging its clean stop.
func (h *harness) stopped(c *child) {
	h.t.Helper()
	h.waitFor("instance "+c.name+" to stop on SIGTERM", 30*time.Second, func() bool { return isClosed(c.exited) })
	if c.err != nil {
		h.dump()
		h.t.Fatalf("instance %s exited with %v on SIGTERM, want a clean exit", c.name, c.err)
	}
	if !strings.Contains(c.out.String(), "projector stopped") {
		h.dump()
		h.t.Fatalf("instance %s did not log its clean stop", c.name)
	}
}

// finish waits for the whole load to be produced and every run's marker to
// be in the committed wakes, then stops the running instances, all at once,
// with SIGTERM: each must stop cleanly.
func (h *harness) finish(running ...*child) {
	h.t.Helper()
	h.waitFor("every run's marker wake", 60*time.Second, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.markersSeen) == len(h.markers)
	})
	<-h.prodDone
	if h.prodErr != nil {
		h.t.Fatal(h.prodErr)
	}
	h.logf("every run caught up: %d committed wakes read", h.wakeCount())
	for _, c := range running {
		h.sigterm(c)
	}
	for _, c := range running {
		h.stopped(c)
	}
}

// check checks what the instances committed against the reference; with
// compact, it compacts the changelog and checks the restored state again.
func (h *harness) check(compact bool) {
	h.t.Helper()
	ok := !h.t.Failed()
	timed := func(what string, check func()) {
		began := time.Now()
		check()
		h.logf("%s took %v", what, time.Since(began).Round(time.Millisecond))
	}
	timed("CheckWakes", func() { projectortest.CheckWakes(h.ctx, h.t, h.kafka, h.ref) })
	timed("CheckDeadLetter", func() { projectortest.CheckDeadLetter(h.ctx, h.t, h.kafka) })
	timed("CheckState", func() { projectortest.CheckState(h.ctx, h.t, h.kafka, h.ref) })
	if compact {
		// Compaction keeps the latest value of every key: the same state.
		h.broker.Compact(h.t, h.names.Changelog(), 60*time.Second)
		timed("CheckState after compaction", func() { projectortest.CheckState(h.ctx, h.t, h.kafka, h.ref) })
	}
	if ok && h.t.Failed() {
		h.dump()
	}
}

// waitFor polls cond until it holds; it fails the test (with every child's
// output) if d or the test's deadline passes first, the wake reader or the
// producer fails, or an instance exits that was not stopped on purpose.
func (h *harness) waitFor(what string, d time.Duration, cond func() bool) {
	h.t.Helper()
	err := testenv.Poll(d, 20*time.Millisecond, func() error {
		if cond() {
			return nil
		}
		h.mu.Lock()
		rerr := h.readErr
		var died *child
		for _, c := range h.children {
			if !h.expectExit[c] && isClosed(c.exited) {
				died = c
			}
		}
		caught := len(h.markersSeen)
		h.mu.Unlock()
		switch {
		case rerr != nil:
			h.dump()
			h.t.Fatalf("waiting for %s: %v", what, rerr)
		case died != nil:
			h.dump()
			h.t.Fatalf("waiting for %s: instance %s exited: %v", what, died.name, died.err)
		case isClosed(h.prodDone) && h.prodErr != nil:
			h.dump()
			h.t.Fatalf("waiting for %s: producing: %v", what, h.prodErr)
		case h.ctx.Err() != nil:
			h.dump()
			h.t.Fatalf("waiting for %s: %v", what, h.ctx.Err())
		}
		return fmt.Errorf("%d of %d records produced, %d committed wakes read, %d of %d runs caught up",
			h.produced.Load(), len(h.events), h.wakeCount(), caught, len(h.markers))
	})
	if err != nil {
		h.stacks()
		h.dump()
		h.t.Fatalf("waiting for %s: not within %v (%v)", what, d, err)
	}
}

// stable reports whether the broker has the group stable, with members
// members: no rebalance is under way.
//
// The tests start a round of chaos, or a scaling step, only then. Killing a
// member in the middle of a cooperative rebalance can leave kfake's group
// coordinator holding the survivors' JoinGroup and SyncGroup requests
// unanswered while it describes the group as Empty (seen with this test:
// the two surviving instances' goroutine dumps showed them waiting in
// JoinGroup and SyncGroup for over 30 s), which would test kfake, not the
// projector.
func (h *harness) stable(members int) bool {
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
	defer cancel()
	g, err := cluster.DescribeGroup(ctx, kadm.NewClient(h.cl), h.group, h.names)
	return err == nil && g.State == "Stable" && len(g.Members) == members
}

// stacks makes every running child print its goroutines and exit
// (SIGQUIT), so that the dump shows where a stalled instance is stuck. A
// frozen child is thawed first.
func (h *harness) stacks() {
	h.mu.Lock()
	cs := slices.Clone(h.children)
	for _, c := range cs {
		h.expectExit[c] = true
	}
	h.mu.Unlock()
	for _, c := range cs {
		if !isClosed(c.exited) {
			_ = c.cmd.Process.Signal(syscall.SIGQUIT)
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	for _, c := range cs {
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
		}
	}
}

// dump logs every child's output and what the broker says of the group.
func (h *harness) dump() {
	h.mu.Lock()
	cs := slices.Clone(h.children)
	h.mu.Unlock()
	for _, c := range cs {
		h.t.Logf("output of %s:\n%s", c.name, c.out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := cluster.DescribeGroup(ctx, kadm.NewClient(h.cl), h.group, h.names)
	if err != nil {
		h.t.Logf("describing group %s: %v", h.group, err)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "group %s at %s: state %s, protocol %s, %d members", h.group, time.Now().Format("15:04:05.000"),
		g.State, g.Protocol, len(g.Members))
	for _, m := range g.Members {
		fmt.Fprintf(&b, "\n  %s (%s): %v", m.MemberID, m.ClientID, m.Partitions)
	}
	h.t.Log(b.String())
}

// ownershipLine matches the log lines that change what an instance owns.
var ownershipLine = regexp.MustCompile(`msg="partitions (assigned|revoked)" partitions="?\[([0-9 ]*)\]`)

// owned returns the partitions c owns, as its log says so far: what was
// assigned and not revoked since. (An instance that fails and replaces
// itself with a fresh one logs the revocation of what it owned.)
func owned(c *child) map[int32]bool {
	own := map[int32]bool{}
	for _, m := range ownershipLine.FindAllStringSubmatch(c.out.String(), -1) {
		for _, f := range strings.Fields(m[2]) {
			p, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if m[1] == "assigned" {
				own[int32(p)] = true
			} else {
				delete(own, int32(p))
			}
		}
	}
	return own
}
