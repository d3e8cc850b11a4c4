package projector

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(brokertest.M(m),
		// kfake and franz-go keep no goroutines after Close; Pebble's
		// disk-health tickers end a moment after Close.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/vfs.(*diskHealthCheckingFile).startTicker.func1"),
	)
}

// env is a real broker on loopback with canopy's topics.
type env struct {
	t       *testing.T
	broker  *brokertest.Broker
	brokers []string
	names   topics.Names
	group   string
	client  *kgo.Client // producer and wake reader
}

// newEnv is a kfake broker of the test's own with canopy's topics.
func newEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	return newEnvOn(t, brokertest.NewKfake(t), partitions)
}

// newEnvOn makes canopy's topics, of the test's own, on b: a broker of the
// matrix (brokertest.Run).
func newEnvOn(t *testing.T, b *brokertest.Broker, partitions int32) *env {
	t.Helper()
	prefix := b.Prefix(t, "test")
	e := &env{t: t, broker: b, brokers: b.Addrs, names: topics.Names{Prefix: prefix, Version: 1}, group: "g-" + prefix}
	var err error
	e.client, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(e.client), e.names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.client.Close)
	return e
}

func (e *env) config(dir string) Config {
	return Config{Kafka: kafkaconn.Conn{Brokers: e.brokers}, Names: e.names, DataDir: dir, Group: e.group,
		SessionTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
}

// start runs a projector until the test ends.
func (e *env) start(cfg Config) (*Projector, func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := New(ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() { defer wg.Done(); runErr = p.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		wg.Wait()
		if runErr != nil {
			e.t.Errorf("projector: %v", runErr)
		}
	}
	e.t.Cleanup(stop)
	return p, stop
}

// produce sends events to a topic, keyed and partitioned by run id.
func (e *env) produce(topic string, evs ...topics.Event) {
	e.t.Helper()
	n, err := e.partitions()
	if err != nil {
		e.t.Fatal(err)
	}
	recs := make([]*kgo.Record, 0, len(evs))
	for i := range evs {
		r, err := topics.EventRecord(topic, &evs[i], "")
		if err != nil {
			e.t.Fatal(err)
		}
		r.Partition = topics.Partition(r.Key, n)
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) partitions() (int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cluster.CheckTopics(ctx, kadm.NewClient(e.client), e.names)
}

// wakeReader reads wakes of both lanes in the order the broker returns them.
type wakeReader struct {
	t  *testing.T
	cl *kgo.Client
}

func (e *env) wakes() *wakeReader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.names.Wakes(), e.names.PriorityWakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return &wakeReader{t: e.t, cl: cl}
}

// until reads wakes until done says so or the deadline passes.
func (r *wakeReader) until(d time.Duration, done func(w *topics.Wake) bool) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			r.t.Fatalf("no such wake within %v", d)
		}
		stop := false
		fs.EachRecord(func(rec *kgo.Record) {
			if stop {
				return
			}
			w, err := topics.DecodeWake(rec.Value)
			if err != nil {
				r.t.Fatalf("wake does not decode: %v", err)
			}
			stop = done(w)
		})
		if stop {
			return
		}
	}
}

// checkCommitted runs projectortest's checks of what the instances
// committed against ref (once they have stopped): every triggering event
// in exactly one wake, no wake id twice, the state restored from the
// changelog ref's; and with clean, nothing in the dead-letter topic. It
// returns where the checks read, for more of them.
func (e *env) checkCommitted(ref *projectortest.Reference, clean bool) projectortest.Kafka {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := projectortest.Kafka{ClientOpts: []kgo.Opt{kgo.SeedBrokers(e.brokers...)}, Names: e.names}
	projectortest.CheckWakes(ctx, e.t, k, ref)
	if clean {
		projectortest.CheckDeadLetter(ctx, e.t, k)
	}
	projectortest.CheckState(ctx, e.t, k, ref)
	return k
}
