// Package brokertest gives tests the Kafka brokers canopy is proven
// against: franz-go's embedded kfake, started in the test process, and a
// real Apache Kafka node (internal/apachekafka), started once per test
// binary and shared by its tests, each of which uses topics and groups of
// its own. Run makes a broker matrix: the same test code once per broker.
//
// Which brokers Run uses comes from CANOPY_TEST_BROKERS, a comma-separated
// list of kfake and kafka; default both. A test that needs Apache Kafka
// when its jars are not installed fails under CI=true and is skipped
// otherwise (testenv.Missing), naming the command that installs them.
package brokertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/apachekafka"
	"github.com/canopy-dev/canopy/internal/testenv"
)

// The kinds of broker.
const (
	Kfake = "kfake" // franz-go's in-process broker
	Kafka = "kafka" // Apache Kafka 4.x, a KRaft node in a child JVM
)

// Broker is a running broker a test may use.
type Broker struct {
	// Kind is Kfake or Kafka.
	Kind string
	// Addrs are its listeners on loopback.
	Addrs []string
	// Cluster is the kfake cluster (nil for Apache Kafka): for the tests
	// that use kfake's in-process controls (faults, restarts).
	Cluster *kfake.Cluster
	// Apache is the Apache Kafka node (nil for kfake).
	Apache *apachekafka.Broker
}

// Opts connect a franz-go client to the broker.
func (b *Broker) Opts() []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(b.Addrs...)} }

// Prefix returns a topic prefix (and group name stem) of the test's own:
// the Apache Kafka node is shared by a test binary's tests, so no two may
// use the same topics or group.
func (b *Broker) Prefix(t testing.TB, stem string) string {
	return fmt.Sprintf("%s-%s-%d", stem, sanitize(t.Name()), seq.Add(1))
}

var seq atomic.Int64

var unsafe = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

func sanitize(s string) string {
	s = unsafe.ReplaceAllString(s, "-")
	if len(s) > 80 {
		s = s[len(s)-80:]
	}
	return s
}

// Compact makes the broker compact topic's partitions as far as it can and
// returns when it has. kfake compacts on request. Apache Kafka's cleaner
// works on its own schedule and never touches a partition's active
// segment: the topic's min.compaction.lag.ms is set to 0, and Compact waits
// (up to d) until the cleaner's checkpoint of every partition with closed
// segments reaches its active segment. It fails t when that does not happen
// in time.
func (b *Broker) Compact(t testing.TB, topic string, d time.Duration) {
	t.Helper()
	if b.Cluster != nil {
		b.Cluster.Compact()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cl, err := kgo.NewClient(b.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	zero := "0"
	rs, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.compaction.lag.ms", Value: &zero}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		t.Fatalf("brokertest: setting min.compaction.lag.ms of %s: %v", topic, err)
	}
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		cs, err := b.Apache.Cleaned(topic)
		if err != nil {
			t.Fatal(err)
		}
		done, closed := true, 0
		for _, c := range cs {
			if c.Segments > 1 {
				closed++
				if c.Through < c.ActiveBase {
					done = false
				}
			}
		}
		if done {
			t.Logf("brokertest: Apache Kafka compacted %s: %d of %d partitions had closed segments: %+v", topic, closed, len(cs), cs)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("brokertest: Apache Kafka did not compact %s within %v: %+v", topic, d, cs)
		case <-poll.C:
		}
	}
}

// Kinds returns the brokers Run uses: CANOPY_TEST_BROKERS, default both.
func Kinds() []string {
	env := os.Getenv("CANOPY_TEST_BROKERS")
	if env == "" {
		return []string{Kfake, Kafka}
	}
	var kinds []string
	for _, k := range strings.Split(env, ",") {
		if k = strings.TrimSpace(k); k != "" {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// Run runs test once per broker kind, as subtests named after the kind:
// for kfake on a fresh cluster of its own, started with opts; for Apache
// Kafka on the test binary's shared node.
func Run(t *testing.T, test func(t *testing.T, b *Broker), opts ...kfake.Opt) {
	t.Helper()
	for _, kind := range Kinds() {
		t.Run(kind, func(t *testing.T) { test(t, New(t, kind, opts...)) })
	}
}

// New returns a broker of the kind for the test (or benchmark): for kfake
// a fresh cluster of its own, started with opts; for Apache Kafka the test
// binary's shared node.
func New(tb testing.TB, kind string, opts ...kfake.Opt) *Broker {
	tb.Helper()
	switch kind {
	case Kfake:
		return NewKfake(tb, opts...)
	case Kafka:
		return SharedKafka(tb)
	}
	tb.Fatalf("brokertest: CANOPY_TEST_BROKERS names %q: want kfake or kafka", kind)
	return nil
}

// NewKfake starts a kfake cluster of one broker on loopback for the test,
// with the session-timeout floor of Apache Kafka's test node (1 s) unless
// opts say otherwise, and closes it when the test ends.
func NewKfake(t testing.TB, opts ...kfake.Opt) *Broker {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &Broker{Kind: Kfake, Addrs: c.ListenAddrs(), Cluster: c}
}

var shared struct {
	mu     sync.Mutex
	broker *apachekafka.Broker
	dir    string
	err    error
}

// SharedKafka returns the test binary's Apache Kafka node, starting it on
// first use (about 5 s); Main stops it. A start that failed fails every
// test that asks again, with the same error.
func SharedKafka(t testing.TB) *Broker {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.broker == nil && shared.err == nil {
		if lib, ok := apachekafka.Installed(); !ok {
			testenv.Missing(t, "Apache Kafka's jars (in "+lib+")")
		}
		shared.dir, shared.err = os.MkdirTemp("", "canopy-kafka-")
		if shared.err == nil {
			began := time.Now()
			shared.broker, shared.err = apachekafka.Start(context.Background(), apachekafka.Config{Dir: shared.dir})
			if shared.err == nil {
				fmt.Fprintf(os.Stderr, "brokertest: Apache Kafka on %s started in %v (dir %s)\n",
					shared.broker.Addr(), time.Since(began).Round(time.Millisecond), shared.dir)
			}
		}
	}
	if shared.err != nil {
		t.Fatalf("brokertest: %v", shared.err)
	}
	return &Broker{Kind: Kafka, Addrs: []string{shared.broker.Addr()}, Apache: shared.broker}
}

// NewKafka starts an Apache Kafka node of the test's own (for tests that
// stop or restart the broker), in a directory that is kept, with the log
// shown, if the test fails; it is stopped when the test ends.
func NewKafka(t testing.TB, props map[string]string) *Broker {
	t.Helper()
	if lib, ok := apachekafka.Installed(); !ok {
		testenv.Missing(t, "Apache Kafka's jars (in "+lib+")")
	}
	dir := filepath.Join(t.TempDir(), "kafka")
	b, err := apachekafka.Start(context.Background(), apachekafka.Config{Dir: dir, Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Stop()
		if t.Failed() {
			t.Logf("brokertest: last lines of Apache Kafka's log:\n%s", b.Log(60))
		}
	})
	return &Broker{Kind: Kafka, Addrs: []string{b.Addr()}, Apache: b}
}

// Runner is what TestMain runs: *testing.M, or a wrapper of it.
type Runner interface{ Run() int }

// M wraps m so that running it stops the shared Apache Kafka node, if one
// was started, once the tests are done, showing the end of its log if they
// failed. In TestMain: goleak.VerifyTestMain(brokertest.M(m)), or
// os.Exit(brokertest.M(m).Run()).
func M(m Runner) Runner { return runner{m} }

type runner struct{ m Runner }

func (r runner) Run() int {
	code := r.m.Run()
	Stop(code != 0)
	return code
}

// Stop stops the shared Apache Kafka node, showing the end of its log when
// failed; its directory is removed unless failed.
func Stop(failed bool) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.broker == nil {
		return
	}
	_ = shared.broker.Stop()
	if failed {
		fmt.Fprintf(os.Stderr, "brokertest: Apache Kafka's log is kept in %s; its last lines:\n%s\n", shared.dir, shared.broker.Log(60))
	} else {
		os.RemoveAll(shared.dir)
	}
	shared.broker = nil
}
