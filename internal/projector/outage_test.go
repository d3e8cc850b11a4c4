package projector

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Broker outages in the middle of a steady load. Two projector instances
// (in-process, each run by a Supervisor, transactions on) share the load
// while the broker goes away: in TestBrokerRestart the whole cluster stops
// and starts again on the same ports and data directory; in
// TestInjectedFaults a share of the requests fails for a while. The
// projectors and the test's producer retry, or fail and are replaced by
// its Supervisor, and once every run's last event has woken its conductor the
// instances stop and the checks of internal/projectortest must hold: every
// run's state is what a projection that never stopped computes, every
// triggering event is in exactly one committed wake, no wake id is committed
// twice, and nothing went to the dead-letter topic.

// TestBrokerRestart: the cluster is closed mid-load, stays down for a few
// seconds while the projectors and the producer keep retrying, and a new one
// starts on the same ports with the same data directory. kfake persists
// records, producer ids and sequence windows, groups and (on a clean Close)
// open transactions and group members there; segment writes go straight to
// the files, so SyncWrites (fsync) is not needed for a restart in the same
// process, only against a machine crash.
func TestBrokerRestart(t *testing.T) {
	for _, kind := range brokertest.Kinds() {
		t.Run(kind, func(t *testing.T) {
			switch kind {
			case brokertest.Kfake:
				testKfakeRestart(t)
			case brokertest.Kafka:
				testKafkaRestart(t)
			}
		})
	}
}

func testKfakeRestart(t *testing.T) {
	dir := t.TempDir()
	ports := freePorts(t, 3)
	opts := []kfake.Opt{kfake.Ports(ports...), kfake.DataDir(dir), kfake.GroupMinSessionTimeout(time.Second)}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() }) // the cluster running at the end
	o := newOutageTest(t, cluster.ListenAddrs())
	o.run(func(ctx context.Context, began func()) {
		cluster.Close()
		began()
		o.logf("the cluster is closed")
		o.down(ctx)
		next, err := kfake.NewCluster(opts...)
		if err != nil {
			t.Fatalf("restarting the cluster on ports %v with data dir %s: %v", ports, dir, err)
		}
		cluster = next
		if got := next.ListenAddrs(); !slices.Equal(got, o.brokers) {
			t.Fatalf("the restarted cluster listens on %v, want %v", got, o.brokers)
		}
		o.logf("the cluster is back after %v", outageDown)
	})
}

// testKafkaRestart is TestBrokerRestart's Apache Kafka case, harsher than
// kfake's: the node is SIGKILLed, as in a machine crash, recovers its logs
// and its transaction and group state when it starts again on the same
// ports and log directory.
func testKafkaRestart(t *testing.T) {
	b := brokertest.NewKafka(t, nil)
	o := newOutageTest(t, b.Addrs)
	o.run(func(ctx context.Context, began func()) {
		b.Apache.Kill()
		began()
		o.logf("the broker is killed")
		o.down(ctx)
		if err := b.Apache.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		o.logf("the broker is back after %v", outageDown)
	})
}

// outageDown is how long a broker stays down.
const outageDown = 3 * time.Second

// down waits outageDown: a deliberate wall-clock wait, during which every
// client's requests fail to connect.
func (o *outageTest) down(ctx context.Context) {
	select {
	case <-time.After(outageDown):
	case <-ctx.Done():
		o.t.Fatalf("during the outage: %v", ctx.Err())
	}
}

// TestInjectedFaults: for a few seconds mid-load a share of the Produce,
// Fetch, EndTxn, FindCoordinator, AddPartitionsToTxn and OffsetCommit
// requests fail with retriable errors, most produces that fail after the
// broker appended them (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND),
// so that the idempotent retries must be recognised as duplicates. Half way
// through, two transactional produces fail with TRANSACTION_ABORTABLE and
// one EndTxn with PRODUCER_FENCED: transactions that cannot commit, whose
// instances a Supervisor must replace.
func TestInjectedFaults(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	o := newOutageTest(t, cluster.ListenAddrs())
	o.run(func(ctx context.Context, began func()) {
		// every(k) selects every k-th entity the fault's selectors match
		// (a request, or a partition of one that carries partitions).
		every := func(k int64) func(kmsg.Request) bool {
			var n atomic.Int64
			return func(kmsg.Request) bool { return n.Add(1)%k == 0 }
		}
		transactional := func(req kmsg.Request) bool {
			r, ok := req.(*kmsg.ProduceRequest)
			return ok && r.TransactionID != nil
		}
		type installed struct {
			name string
			h    *kfake.FaultHandle
			// mustFire: the clients send such requests during the period,
			// so a fault that never fired means the test tested nothing.
			mustFire bool
		}
		var faults []installed
		install := func(name string, mustFire bool, f kfake.Fault) {
			faults = append(faults, installed{name, cluster.Fault(f), mustFire})
		}
		// Faults are checked in the order installed; the first that
		// matches answers.
		install("produce REQUEST_TIMED_OUT after the append", true, kfake.Fault{Keys: []kmsg.Key{kmsg.Produce},
			Err: kerr.RequestTimedOut, Count: -1, When: every(8)})
		install("produce NOT_ENOUGH_REPLICAS_AFTER_APPEND", true, kfake.Fault{Keys: []kmsg.Key{kmsg.Produce},
			Err: kerr.NotEnoughReplicasAfterAppend, Count: -1, When: every(13)})
		// Rejected before the append: the client refreshes its metadata
		// first, at most every 5 s (MetadataMinAge), and the partition
		// stalls until then. Only two: a leader that moved.
		install("produce NOT_LEADER_FOR_PARTITION", true, kfake.Fault{Keys: []kmsg.Key{kmsg.Produce},
			Err: kerr.NotLeaderForPartition, Count: 2, When: every(50)})
		// A fetch with a failed partition is answered at once and fetched
		// again after an immediate metadata refresh: a larger share makes
		// the clients spin rather than fetch.
		install("fetch NOT_LEADER_FOR_PARTITION", true, kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch},
			Err: kerr.NotLeaderForPartition, Count: -1, When: every(100)})
		install("EndTxn NOT_COORDINATOR", true, kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn},
			Err: kerr.NotCoordinator, Count: -1, When: every(6)})
		install("EndTxn COORDINATOR_LOAD_IN_PROGRESS", true, kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn},
			Err: kerr.CoordinatorLoadInProgress, Count: -1, When: every(9)})
		install("FindCoordinator COORDINATOR_NOT_AVAILABLE", true, kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator},
			Err: kerr.CoordinatorNotAvailable, Count: -1, When: every(3)})
		// Not sent by these clients: the partitions of a transaction are
		// added by its produces (KIP-890 part 2), and the projector keeps
		// its offsets in the changelog, not in the group. Installed all the
		// same: if a change makes the clients send them, they fail too.
		install("AddPartitionsToTxn CONCURRENT_TRANSACTIONS", false, kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn},
			Err: kerr.ConcurrentTransactions, Count: -1, When: every(5)})
		install("OffsetCommit COORDINATOR_NOT_AVAILABLE", false, kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit},
			Err: kerr.CoordinatorNotAvailable, Count: -1, When: every(5)})
		began()
		o.logf("retriable faults installed")

		// The fault period: a deliberate wall-clock wait, prolonged (up to
		// a bound) until every fault that must fire has: how many requests
		// of a kind the clients send in a few seconds depends on the
		// machine, and a fixed period sometimes ended before a fault's turn.
		const half = 3 * time.Second
		wait := func() {
			end, limit := time.After(half), time.After(half+20*time.Second)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for elapsed := false; ; {
				select {
				case <-end:
					elapsed = true
				case <-tick.C:
				case <-limit:
					return // the check below names what never fired
				case <-ctx.Done():
					t.Fatalf("during the fault period: %v", ctx.Err())
				}
				if !elapsed {
					continue
				}
				all := true
				for _, f := range faults {
					if f.mustFire && f.h.Hits() == 0 {
						all = false
					}
				}
				if all {
					return
				}
			}
		}
		wait()
		// Fatal for the transaction: the instance must give up and be
		// replaced by one resuming from what was committed.
		install("transactional produce TRANSACTION_ABORTABLE", true, kfake.Fault{Keys: []kmsg.Key{kmsg.Produce},
			Err: kerr.TransactionAbortable, Count: 2, When: transactional})
		install("EndTxn PRODUCER_FENCED", true, kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.ProducerFenced, Count: 1})
		o.logf("fatal faults installed")
		wait()

		var hits []string
		for _, f := range faults {
			f.h.Remove()
			n := f.h.Hits()
			hits = append(hits, fmt.Sprintf("%s: %d", f.name, n))
			if f.mustFire && n == 0 {
				t.Errorf("fault %q never fired: the test did not test it", f.name)
			}
		}
		o.logf("faults removed; requests failed: %s", strings.Join(hits, ", "))
		t.Logf("requests failed by injected faults: %s", strings.Join(hits, ", "))
	})
}

// outageTest is the load, the projectors and the checks an outage test
// shares.
type outageTest struct {
	t       *testing.T
	brokers []string
	names   topics.Names
	logs    *testenv.Buffer
	log     *slog.Logger

	records []*kgo.Record     // in the order produced; markers last
	markers map[string]string // marker event id -> run
	ref     *projectortest.Reference
}

const (
	outagePartitions = 4
	outageRuns       = 30
	outageNodes      = 30
	// The producer sends a chunk every outagePace: about 2,000 events a
	// second, a steady load spanning the outage.
	outageChunk = 40
	outagePace  = 20 * time.Millisecond
)

func newOutageTest(t *testing.T, brokers []string) *outageTest {
	t.Helper()
	o := &outageTest{t: t, brokers: brokers, logs: &testenv.Buffer{},
		names:   topics.Names{Prefix: fmt.Sprintf("outage%d", time.Now().UnixNano()), Version: 1},
		markers: map[string]string{}, ref: projectortest.NewReference(outagePartitions)}
	o.log = slog.New(slog.NewTextHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CANOPY_OUTAGE_LOG") != "" {
			t.Logf("the projectors' and the test's log (tail):\n%s", lastLines(o.logs.String(), 300))
		}
	})

	// The workload. Its clock starts an hour from now so that no timer of
	// it falls due on the projectors' wall clock during the test (see
	// cmd/projector/kill_test.go): the state is then a function of the
	// events alone, as in the reference.
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	var events []topics.Event
	for i := range outageRuns {
		run := fmt.Sprintf("outage-run-%02d", i)
		evs := workload.Generate(workload.Spec{RunID: run, SessionID: "outage", Nodes: outageNodes, Seed: uint64(4000 + i),
			Start: start.Add(time.Duration(i) * time.Millisecond), Step: 10 * time.Millisecond})
		// The run's last event, a failure of an agent of its own, wakes
		// the run: once that wake is committed, the run is caught up.
		id := "marker-" + run
		evs = append(evs, topics.Event{ID: id, Source: "/agents/marker", Type: (&topics.Failed{}).EventType(),
			Time: evs[len(evs)-1].Time.Add(time.Second), RunID: run, AgentID: "marker", SchemaVersion: topics.CurrentSchemaVersion,
			SessionID: "outage", Data: &topics.Failed{ErrorCode: "end_of_test"}})
		o.markers[id] = run
		events = append(events, evs...)
	}
	// The runs interleaved by time, each in its own order; the markers last.
	slices.SortStableFunc(events, func(a, b topics.Event) int {
		_, am := o.markers[a.ID]
		_, bm := o.markers[b.ID]
		if am != bm {
			if am {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Time.UnixMilli(), b.Time.UnixMilli())
	})
	for i := range events {
		r, err := topics.EventRecord(o.names.AgentEvents(), &events[i], "")
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = topics.Partition(r.Key, outagePartitions)
		o.records = append(o.records, r)
		o.ref.Apply(t, &events[i])
	}
	return o
}

func (o *outageTest) logf(format string, args ...any) {
	o.log.Info("test: " + fmt.Sprintf(format, args...))
}

func (o *outageTest) clientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(o.brokers...)}
}

// run produces the load to two projector instances, calls disrupt once
// the instances have committed wakes of their own and the load is under way
// (disrupt calls began when the trouble has started, and returns when it is
// over; the load goes on meanwhile), waits until every run's marker wake is
// committed, stops everything and runs the checks.
func (o *outageTest) run(disrupt func(ctx context.Context, began func())) {
	t := o.t
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
	defer cancel()

	admin, err := kgo.NewClient(o.clientOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	err = cluster.CreateTopics(ctx, kadm.NewClient(admin), o.names, outagePartitions, 1)
	admin.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs, %d events, %d partitions", outageRuns, len(o.records), outagePartitions)

	// The wake watcher: reads committed wakes, as a conductor does, and
	// notes each run's marker.
	var (
		mu      sync.Mutex
		wakes   int
		caught  = map[string]bool{}
		badWake error
	)
	watcher, err := kgo.NewClient(append(o.clientOpts(), kgo.ConsumeTopics(o.names.Wakes(), o.names.PriorityWakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			fs := watcher.PollFetches(watchCtx)
			if watchCtx.Err() != nil {
				return
			}
			fs.EachError(func(topic string, part int32, err error) {
				o.log.Warn("test: wake watcher: fetch error", "topic", topic, "partition", part, "err", err)
			})
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				w, err := topics.DecodeWake(r.Value)
				if err != nil {
					badWake = fmt.Errorf("wake at %s/%d@%d does not decode: %w", r.Topic, r.Partition, r.Offset, err)
					return
				}
				wakes++
				for _, tr := range w.Triggers {
					if tr.EventID != nil && o.markers[*tr.EventID] == w.RunID {
						caught[w.RunID] = true
					}
				}
			})
			mu.Unlock()
		}
	}()
	stopWatcher := sync.OnceFunc(func() { stopWatching(); <-watchDone; watcher.Close() })
	t.Cleanup(stopWatcher)

	// The projector instances, each replaced by its Supervisor when it fails.
	var (
		instMu    sync.Mutex
		instances []*Projector
	)
	serveCtx, stopServing := context.WithCancel(ctx)
	var serving sync.WaitGroup
	serveErrs := make([]error, 2)
	serveExit := make(chan int, len(serveErrs)) // an instance's index once its Supervisor.Run returned
	for i := range serveErrs {
		cfg := Config{Kafka: kafkaconn.Conn{Brokers: o.brokers}, Names: o.names, DataDir: t.TempDir(), Group: "outage-" + o.names.Prefix,
			ClientID: fmt.Sprintf("outage-%d", i), SessionTimeout: 2 * time.Second, TransactionTimeout: 20 * time.Second,
			Logger: o.log.With("instance", i)}
		serving.Add(1)
		go func() {
			defer serving.Done()
			defer func() { serveExit <- i }()
			srv, err := NewSupervisor(cfg)
			if err != nil {
				serveErrs[i] = err
				return
			}
			srv.started = func(p *Projector) {
				instMu.Lock()
				instances = append(instances, p)
				n := len(instances)
				instMu.Unlock()
				o.logf("instance %d started (%d instances so far)", i, n)
			}
			serveErrs[i] = srv.Run(serveCtx)
		}()
	}
	stopProjectors := sync.OnceFunc(func() { stopServing(); serving.Wait() })
	t.Cleanup(stopProjectors)

	// The producer: a steady paced load; it survives the outage on the
	// client's own retries. Past 60% of the load it waits for the trouble
	// to have begun, so that the trouble always falls mid-load.
	troubled := make(chan struct{})
	producer, err := kgo.NewClient(append(o.clientOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	var produced atomic.Int64
	var prodErr error
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		pace := time.NewTicker(outagePace) // pacing, not synchronisation
		defer pace.Stop()
		for i := 0; i < len(o.records); {
			if i >= len(o.records)*60/100 {
				select {
				case <-troubled:
				case <-ctx.Done():
					prodErr = fmt.Errorf("waiting for the trouble to begin: %w", ctx.Err())
					return
				}
			}
			select {
			case <-pace.C:
			case <-ctx.Done():
				prodErr = ctx.Err()
				return
			}
			n := min(outageChunk, len(o.records)-i)
			if err := producer.ProduceSync(ctx, o.records[i:i+n]...).FirstErr(); err != nil {
				prodErr = fmt.Errorf("producing records %d to %d: %w", i, i+n, err)
				return
			}
			i += n
			produced.Store(int64(i))
		}
	}()
	stopProducer := sync.OnceFunc(func() { cancel(); <-prodDone; producer.Close() })
	t.Cleanup(stopProducer)

	stats := func() string {
		mu.Lock()
		w, c := wakes, len(caught)
		mu.Unlock()
		instMu.Lock()
		var commits, aborts, applied, dups, dead int64
		for _, p := range instances {
			commits += p.stats.Commits.Load()
			aborts += p.stats.Aborts.Load()
			applied += p.stats.Applied.Load()
			dups += p.stats.Duplicates.Load()
			dead += p.stats.DeadLettered.Load()
		}
		n := len(instances)
		instMu.Unlock()
		return fmt.Sprintf("%d of %d events produced, %d committed wakes read, %d of %d runs caught up; %d instances started, "+
			"%d commits, %d aborts, %d applied, %d duplicates, %d dead-lettered",
			produced.Load(), len(o.records), w, c, outageRuns, n, commits, aborts, applied, dups, dead)
	}
	// waitUntil polls cond until it holds; the producer failing, a Supervisor.Run
	// returning, a wake not decoding or the test's deadline passing fail
	// the test.
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		prod := prodDone
		for {
			mu.Lock()
			bad := badWake
			mu.Unlock()
			if bad != nil {
				t.Fatal(bad)
			}
			if cond() {
				return
			}
			select {
			case <-tick.C:
			case <-prod:
				if prodErr != nil {
					t.Fatalf("waiting for %s: the producer failed: %v (%s)", what, prodErr, stats())
				}
				prod = nil
			case i := <-serveExit:
				t.Fatalf("waiting for %s: Supervisor.Run of instance %d returned: %v (%s)", what, i, serveErrs[i], stats())
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v (%s)", what, ctx.Err(), stats())
			}
		}
	}

	// The trouble, once the instances have committed wakes and the load is
	// a quarter through.
	waitUntil("wakes committed and a quarter of the load produced", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return wakes >= 30 && produced.Load() >= int64(len(o.records)/4)
	})
	at := stats()
	o.logf("trouble begins: %s", at)
	t.Logf("trouble begins after %v: %s", time.Since(began).Round(time.Millisecond), at)
	troubleBegan := time.Now()
	disrupt(ctx, func() { close(troubled) })
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("trouble over after %v: %s", time.Since(troubleBegan).Round(time.Millisecond), stats())
	o.logf("trouble over: %s", stats())

	waitUntil("every run's marker wake committed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(caught) == outageRuns
	})
	<-prodDone
	if prodErr != nil {
		t.Fatalf("the producer: %v", prodErr)
	}
	caughtUp := time.Since(began)
	t.Logf("every run caught up after %v: %s", caughtUp.Round(time.Millisecond), stats())
	stopProjectors()
	for i, err := range serveErrs {
		if err != nil {
			t.Errorf("Supervisor.Run of instance %d: %v", i, err)
		}
	}
	stopWatcher()
	stopProducer()
	final := stats()
	t.Logf("stopped: %s", final)

	// The checks, on what the instances committed. The checks get a
	// context of their own: the load's may be nearly spent.
	checkCtx, cancelChecks := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancelChecks()
	k := projectortest.Kafka{ClientOpts: o.clientOpts(), Names: o.names}
	projectortest.CheckWakes(checkCtx, t, k, o.ref)
	projectortest.CheckDeadLetter(checkCtx, t, k)
	projectortest.CheckState(checkCtx, t, k, o.ref)
	t.Logf("checked after %v in all", time.Since(began).Round(time.Millisecond))
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… %d lines before\n", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "")
}
