package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestMain checks, after the tests, that no goroutine leaked and that every
// status a test saw is documented in schema/openapi.yaml for its operation.
func TestMain(m *testing.M) {
	code := brokertest.M(m).Run()
	if code == 0 {
		if err := checkObserved(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
		// A run of every test must have checked a success of each operation.
		full := flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == ""
		if err := checkConformance(full); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code == 0 {
		// Pebble's disk-health tickers (in the projectors) end a moment after Close.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/vfs.(*diskHealthCheckingFile).startTicker.func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// clock is the injected clock: tests move it by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Tokens every test gateway knows.
const (
	tokAll     = "dev-token-all-runs-0001"
	tokRun1    = "dev-token-run-1-only-01"
	tokSession = "dev-token-session-s1-01"
)

var jwtKey = []byte("0123456789abcdef0123456789abcdef")

// env is a broker on loopback with canopy's topics.
type env struct {
	t       testing.TB
	cluster *kfake.Cluster // nil on Apache Kafka
	brokers []string
	names   topics.Names
	client  *kgo.Client
	clock   *clock
	tokens  string
	group   string
	parts   int32
}

// newEnv is a kfake broker of the test's own with canopy's topics.
func newEnv(t testing.TB, partitions int32) *env {
	t.Helper()
	return newEnvOn(t, brokertest.NewKfake(t), partitions)
}

// newEnvOn makes canopy's topics, of the test's own, on b: a broker of the
// matrix (brokertest.Run).
func newEnvOn(t testing.TB, broker *brokertest.Broker, partitions int32) *env {
	t.Helper()
	prefix := broker.Prefix(t, "gw")
	e := &env{t: t, cluster: broker.Cluster, brokers: broker.Addrs, names: topics.Names{Prefix: prefix, Version: 1},
		clock: &clock{t: time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)}, parts: partitions,
		group: "g-" + prefix}
	var err error
	e.client, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(e.client), e.names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	e.tokens = filepath.Join(t.TempDir(), "tokens.json")
	b, _ := json.Marshal(map[string]Principal{
		tokAll:     {Subject: "alice", Runs: []string{"*"}},
		tokRun1:    {Subject: "bob", Runs: []string{"run-1"}},
		tokSession: {Subject: "carol", Sessions: []string{"s1"}},
	})
	if err := os.WriteFile(e.tokens, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) config() Config {
	return Config{Kafka: kafkaconn.Conn{Brokers: e.brokers}, Names: e.names, ProjectorGroup: e.group, JWTKey: jwtKey, TokenFile: e.tokens,
		Now: e.clock.Now, Entropy: rand.NewChaCha8([32]byte{1}), ProduceTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
}

// gateway starts a gateway behind an httptest server until the test ends.
func (e *env) gateway(cfg Config) (*Gateway, *httptest.Server) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := New(ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(g)
	srv.Config.RegisterOnShutdown(g.Drain)
	srv.Start()
	e.t.Cleanup(func() { g.Drain(); srv.Close(); g.Close() })
	return g, srv
}

// projector runs a projector instance advertising addr until the test ends.
func (e *env) projector(addr string) (*projector.Projector, func()) {
	e.t.Helper()
	cfg := projector.Config{Kafka: kafkaconn.Conn{Brokers: e.brokers}, Names: e.names, DataDir: e.t.TempDir(), Group: e.group,
		SessionTimeout: 2 * time.Second, AdvertiseAddr: addr,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := projector.New(ctx, cfg)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("projector: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return p, stop
}

// call sends a request and returns the response with its body read.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) problem(t *testing.T) problem.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("status %d with content type %q, want a problem: %s", r.status, ct, r.body)
	}
	var p problem.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	return p
}

func call(t *testing.T, method, url, token string, body []byte, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	observeResponse(method, req.URL.Path, resp.StatusCode, resp.Header, b)
	return reply{resp.StatusCode, resp.Header, b}
}

func post(t *testing.T, srv *httptest.Server, run, token, body string, header ...string) reply {
	t.Helper()
	return call(t, http.MethodPost, srv.URL+"/v1/runs/"+run+"/input", token, []byte(body), header...)
}

func decodeAccepted(t *testing.T, r reply) accepted {
	t.Helper()
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d, want 202: %s", r.status, r.body)
	}
	var a accepted
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// records reads every record of topic up to its current end.
func (e *env) records(topic string) []*kgo.Record { e.t.Helper(); return e.readTopic(topic, false) }

// readTopic reads topic from its start up to its end offsets, or, when
// committed, read_committed up to its last stable offsets, without the
// transactions' control records.
func (e *env) readTopic(topic string, committed bool) []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(e.client)
	list, opts := adm.ListEndOffsets, []kgo.Opt{kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords()}
	if committed {
		list, opts = adm.ListCommittedOffsets, append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	ends, err := list(ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return out
}
