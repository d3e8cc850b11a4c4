package wake

// Tests of the consumer's flow control against a real broker (kfake over
// TCP on loopback): how many wakes it holds, priority wakes overtaking
// queued normal ones, failed handlers, and rebalances during a slow handler.
// They are inside the package to see the queues.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// broker is an embedded Kafka with canopy's topics.
type broker struct {
	brokers []string
	names   topics.Names
	group   string // the conductors' group, of the test's own
	cl      *kgo.Client
	adm     *kadm.Client
}

// newBroker makes canopy's topics, of the test's own, on a kfake broker of
// the test's own.
func newBroker(t *testing.T, prefix string, partitions int32) *broker {
	t.Helper()
	return newBrokerOn(t, brokertest.NewKfake(t), prefix, partitions)
}

// newBrokerOn makes canopy's topics, of the test's own, on on: a broker of
// the matrix (brokertest.Run).
func newBrokerOn(t *testing.T, on *brokertest.Broker, prefix string, partitions int32) *broker {
	t.Helper()
	prefix = on.Prefix(t, prefix)
	b := &broker{brokers: on.Addrs, names: topics.Names{Prefix: prefix, Version: 1}, group: prefix}
	var err error
	b.cl, err = kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.cl.Close)
	b.adm = kadm.NewClient(b.cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, b.adm, b.names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	return b
}

// wakes returns n distinct wakes of lane, spread over runs runs, as records
// of the lane's topic. Each is the first wake replay computes for
// examples/small-run.jsonl with its own wake id and run.
func (b *broker) wakes(t *testing.T, lane topics.Lane, n, runs int, idPrefix string) []*kgo.Record {
	t.Helper()
	in, err := os.ReadFile("../../examples/small-run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The projection directly, not internal/replay: replay prints with
	// this package's Line, and a test inside the package cannot import it.
	proj, err := projection.New(projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var first []byte
	for line := range bytes.Lines(in) {
		ev, err := topics.DecodeEvent(line)
		if err != nil {
			t.Fatal(err)
		}
		var pending projection.Pending
		trigs, _ := proj.Apply(ev)
		if pending.Add(ev.RunID, trigs); pending.Len() == 0 {
			continue
		}
		built, err := proj.Wakes(&pending, time.Time{}, topics.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if first, err = topics.Marshal(built[0].Wake); err != nil {
			t.Fatal(err)
		}
		break
	}
	if first == nil {
		t.Fatal("examples/small-run.jsonl raised no wake")
	}
	var recs []*kgo.Record
	for i := range n {
		w, err := topics.DecodeWake(first)
		if err != nil {
			t.Fatal(err)
		}
		w.WakeID, w.RunID, w.Lane = fmt.Sprintf("%s-%04d", idPrefix, i), fmt.Sprintf("run-%d", i%runs), lane
		v, err := topics.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: b.names.WakeTopic(lane), Key: []byte(w.RunID), Value: v})
	}
	return recs
}

// produceTx produces recs in one Kafka transaction, as a projector does:
// each partition's records are followed by a commit marker.
func (b *broker) produceTx(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	b.transact(t, kgo.TryCommit, recs...)
}

// transact produces recs in one Kafka transaction and ends it with commit
// (kgo.TryCommit) or abort (kgo.TryAbort).
func (b *broker) transact(t *testing.T, commit kgo.TransactionEndTry, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.TransactionalID("test-producer"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, commit); err != nil {
		t.Fatal(err)
	}
}

// acks returns the wake ids acknowledged on the agent events topic.
func (b *broker) acks(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := b.adm.ListEndOffsets(ctx, b.names.AgentEvents())
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(b.names.AgentEvents()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ids []string
	for int64(len(ids)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d acknowledgements: %v", len(ids), want, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
			if err != nil {
				t.Fatalf("acknowledgement does not decode: %v", err)
			}
			ids = append(ids, ev.Data.(*topics.WakeReceived).WakeID)
		})
	}
	return ids
}

// committed is the group's committed offset of a partition, -1 for none.
func (b *broker) committed(t *testing.T, group, topic string, p int32) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := b.adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup(topic, p); ok && o.Err == nil {
		return o.At
	}
	return -1
}

func (b *broker) end(t *testing.T, topic string, p int32) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, p)
	return o.Offset
}

// running is a Consumer running in a goroutine.
type running struct {
	c    *Consumer
	stop context.CancelFunc
	done chan error
}

func start(t *testing.T, cfg Config, h Handler) *running {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &running{c: c, stop: stop, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	return r
}

// wait stops the consumer and returns Run's error.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its context ending")
		return nil
	}
}

// TestBacklogStaysBounded: with a backlog of 200 wakes and MaxQueued 8, the
// consumer never holds more than 8 normal records, and still delivers,
// acknowledges and commits every wake.
func TestBacklogStaysBounded(t *testing.T) {
	b := newBroker(t, "bounded", 1)
	const n, limit = 200, 8
	b.produceTx(t, b.wakes(t, topics.LaneNormal, n, 1, "w")...)
	var mu sync.Mutex
	var got []string
	r := start(t, Config{Brokers: b.brokers, Names: b.names, Group: b.group, MaxQueued: limit},
		func(_ context.Context, w *topics.Wake, _ Received) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, w.WakeID)
			return nil
		})
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return r.c.Stats.Acked.Load() == n }, func() string {
		return fmt.Sprintf("%d of %d wakes acknowledged", r.c.Stats.Acked.Load(), n)
	}))
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.c.peakNormal > limit {
		t.Errorf("held %d normal records at once, want at most MaxQueued %d", r.c.peakNormal, limit)
	}
	if r.c.peakNormal == 0 {
		t.Error("never queued anything")
	}
	for i, id := range got {
		if want := fmt.Sprintf("w-%04d", i); id != want {
			t.Fatalf("delivery %d was %s, want %s: a partition's wakes in order, each once", i, id, want)
		}
	}
	if c := b.committed(t, b.group, b.names.Wakes(), 0); c < n {
		t.Errorf("committed offset %d, want at least %d: every wake handled is committed", c, n)
	}
}

// TestPriorityOvertakesQueuedNormal: while the handler works on a normal
// wake, with more normal wakes queued and the normal topic paused, a
// priority wake is produced: it is the next wake delivered.
func TestPriorityOvertakesQueuedNormal(t *testing.T) {
	brokertest.Run(t, testPriorityOvertakesQueuedNormal)
}

func testPriorityOvertakesQueuedNormal(t *testing.T, on *brokertest.Broker) {
	b := newBrokerOn(t, on, "overtake", 1)
	b.produceTx(t, b.wakes(t, topics.LaneNormal, 20, 1, "n")...)
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var order []string
	r := start(t, Config{Brokers: b.brokers, Names: b.names, Group: b.group, MaxQueued: 4},
		func(_ context.Context, w *topics.Wake, _ Received) error {
			mu.Lock()
			order = append(order, w.WakeID)
			first := len(order) == 1
			mu.Unlock()
			if first {
				close(started)
				<-release
			}
			return nil
		})
	defer func() {
		if err := r.wait(t); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("no wake delivered within 60s")
	}
	prio := b.wakes(t, topics.LanePriority, 1, 1, "p")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.cl.ProduceSync(ctx, prio).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The consumer's client fetches it while the handler works: the normal
	// topic is paused, so whatever it has buffered is the priority wake.
	testenv.WaitFor(t, 30*time.Second, testenv.Holds(func() bool { return r.c.cl.BufferedFetchRecords() > 0 }, func() string {
		return "the priority wake fetched"
	}))
	close(release)
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return r.c.Stats.Acked.Load() == 21 }, func() string {
		return fmt.Sprintf("%d of 21 wakes acknowledged", r.c.Stats.Acked.Load())
	}))
	mu.Lock()
	defer mu.Unlock()
	if order[1] != "p-0000" {
		t.Errorf("delivered %v: want the priority wake p-0000 right after n-0000", order[:min(len(order), 4)])
	}
}

// TestHandlerErrorIsRedelivered: a handler error stops Run without
// acknowledging or committing the wake, although a transaction marker
// follows it in its partition; a restarted consumer delivers it again,
// once, its duplicate dropped by wake_id.
func TestHandlerErrorIsRedelivered(t *testing.T) { brokertest.Run(t, testHandlerErrorIsRedelivered) }

func testHandlerErrorIsRedelivered(t *testing.T, on *brokertest.Broker) {
	b := newBrokerOn(t, on, "failing", 1)
	recs := b.wakes(t, topics.LaneNormal, 3, 1, "w")
	dup := *recs[2]
	b.produceTx(t, append(recs, &dup)...) // w-0000 w-0001 w-0002 w-0002, marker
	boom := errors.New("model unavailable")
	r := start(t, Config{Brokers: b.brokers, Names: b.names, Group: b.group},
		func(_ context.Context, w *topics.Wake, _ Received) error {
			if w.WakeID == "w-0002" {
				return boom
			}
			return nil
		})
	select {
	case err := <-r.done:
		if !errors.Is(err, ErrHandler) || !errors.Is(err, boom) {
			t.Fatalf("Run: %v, want ErrHandler wrapping the handler's error", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not stop on the handler's error")
	}
	r.stop()
	if got := b.acks(t); !slices.Equal(got, []string{"w-0000", "w-0001"}) {
		t.Errorf("acknowledged %v, want w-0000 and w-0001 only", got)
	}
	if c := b.committed(t, b.group, b.names.Wakes(), 0); c != 2 {
		t.Errorf("committed offset %d, want 2: the failed wake at offset 2 must be read again", c)
	}

	var mu sync.Mutex
	var again []string
	r = start(t, Config{Brokers: b.brokers, Names: b.names, Group: b.group},
		func(_ context.Context, w *topics.Wake, _ Received) error {
			mu.Lock()
			defer mu.Unlock()
			again = append(again, w.WakeID)
			return nil
		})
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return r.c.Stats.Acked.Load() == 1 && r.c.Stats.Duplicates.Load() == 1 }, func() string {
		return fmt.Sprintf("acked %d duplicates %d, want 1 and 1", r.c.Stats.Acked.Load(), r.c.Stats.Duplicates.Load())
	}))
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(again, []string{"w-0002"}) {
		t.Errorf("after the restart delivered %v, want w-0002 once", again)
	}
	if got := b.acks(t); !slices.Equal(got, []string{"w-0000", "w-0001", "w-0002"}) {
		t.Errorf("acknowledged %v, want each wake once", got)
	}
	if end, c := b.end(t, b.names.Wakes(), 0), b.committed(t, b.group, b.names.Wakes(), 0); c != end {
		t.Errorf("committed offset %d, want the end %d", c, end)
	}
}

// TestRebalanceDuringSlowHandler: while the handler is busy with one wake
// (a model call, say), a second member joins the group: the rebalance
// completes, and both members own partitions, long before the rebalance
// timeout, without waiting for the handler. Then the first member goes on.
func TestRebalanceDuringSlowHandler(t *testing.T) { brokertest.Run(t, testRebalanceDuringSlowHandler) }

func testRebalanceDuringSlowHandler(t *testing.T, on *brokertest.Broker) {
	const partitions = 4
	b := newBrokerOn(t, on, "rebalance", partitions)
	b.produceTx(t, b.wakes(t, topics.LaneNormal, 40, 8, "w")...)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := start(t, Config{Brokers: b.brokers, Names: b.names, Group: b.group, MaxQueued: 4,
		// A rebalance that waited for the handler would take this long:
		// far beyond the test's deadline.
		ClientOpts: []kgo.Opt{kgo.RebalanceTimeout(5 * time.Minute), kgo.HeartbeatInterval(100 * time.Millisecond)}},
		func(context.Context, *topics.Wake, Received) error {
			once.Do(func() {
				close(started)
				<-release
			})
			return nil
		})
	released := false
	defer func() {
		if !released {
			close(release)
		}
		if err := r.wait(t); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("no wake delivered within 60s")
	}

	second, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumerGroup(b.group),
		kgo.ConsumeTopics(b.names.PriorityWakes(), b.names.Wakes()), kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var state string
	testenv.WaitFor(t, 45*time.Second, testenv.Holds(func() bool {
		groups, err := b.adm.DescribeGroups(ctx, b.group)
		if err != nil {
			state = err.Error()
			return false
		}
		g := groups[b.group]
		state = fmt.Sprintf("%s with %d members", g.State, len(g.Members))
		if g.State != "Stable" || len(g.Members) != 2 {
			return false
		}
		for _, m := range g.Members {
			a, _ := m.Assigned.AsConsumer()
			if a == nil || len(a.Topics) == 0 {
				return false
			}
		}
		return true
	}, func() string { return "both members own partitions; the group is " + state }))
	select {
	case <-started:
	default:
		t.Fatal("the handler was not running")
	}
	close(release)
	released = true
	// The first member finishes the wake it held.
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return r.c.Stats.Acked.Load() >= 1 }, func() string {
		return "the wake handled during the rebalance acknowledged"
	}))
}

// TestRebalanceWhileIdleAfterMarker: a poll that returns only a transaction
// marker (here of an aborted projector transaction, whose wakes
// read_committed hides) leaves nothing to deliver; the consumer then waits
// for wakes without holding back a rebalance, so a second member joining
// gets its partitions long before the rebalance timeout.
func TestRebalanceWhileIdleAfterMarker(t *testing.T) {
	b := newBroker(t, "idle", 2)
	r := start(t, Config{Brokers: b.brokers, Names: b.names, Group: b.group,
		ClientOpts: []kgo.Opt{kgo.RebalanceTimeout(5 * time.Minute), kgo.HeartbeatInterval(100 * time.Millisecond)}},
		func(context.Context, *topics.Wake, Received) error { return nil })
	defer func() {
		if err := r.wait(t); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return len(b.members(t, b.group)) == 1 }, func() string { return "the consumer in the group" }))
	b.transact(t, kgo.TryAbort, b.wakes(t, topics.LaneNormal, 3, 1, "aborted")...)
	// The marker is consumed (and committed past) once it is polled.
	end := b.end(t, b.names.Wakes(), topics.Partition([]byte("run-0"), 2))
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool {
		return r.c.cl.CommittedOffsets()[b.names.Wakes()][topics.Partition([]byte("run-0"), 2)].Offset == end
	}, func() string { return "the abort marker marked and committed" }))

	second, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumerGroup(b.group),
		kgo.ConsumeTopics(b.names.PriorityWakes(), b.names.Wakes()), kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	testenv.WaitFor(t, 45*time.Second, testenv.Holds(func() bool {
		ms := b.members(t, b.group)
		return len(ms) == 2 && ms[0] > 0 && ms[1] > 0
	}, func() string { return fmt.Sprintf("both members own partitions; assigned %v", b.members(t, b.group)) }))
	if got := r.c.Stats.Delivered.Load(); got != 0 {
		t.Errorf("delivered %d wakes of an aborted transaction", got)
	}
}

// members returns how many partitions each member of a stable group owns
// (nothing while it rebalances).
func (b *broker) members(t *testing.T, group string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups, err := b.adm.DescribeGroups(ctx, group)
	if err != nil || groups[group].State != "Stable" {
		return nil
	}
	var out []int
	for _, m := range groups[group].Members {
		n := 0
		if a, _ := m.Assigned.AsConsumer(); a != nil {
			for _, tp := range a.Topics {
				n += len(tp.Partitions)
			}
		}
		out = append(out, n)
	}
	return out
}
