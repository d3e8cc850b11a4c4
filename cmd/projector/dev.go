package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/apachekafka"
	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// runDev is "projector dev": everything on one machine, for a first look. An
// embedded Kafka (franz-go's kfake) listens on loopback only; the projector,
// a demo workload of agent trees and a human typing into one of them run
// against it, and every wake is printed as it is published.
func runDev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		runs       = fs.Int("runs", 3, "concurrent demo runs")
		nodes      = fs.Int("nodes", 25, "nodes per demo run")
		rate       = fs.Float64("rate", 40, "demo events per second, all runs together")
		partitions = fs.Int("partitions", 4, "partitions of the topics")
		duration   = fs.Duration("duration", 0, "stop after this long (default: until Ctrl-C)")
		dataDir    = fs.String("data-dir", "", "keep the projector's state here (default: a temporary directory)")
		httpAddr   = fs.String("http-addr", "127.0.0.1:8081", "the projector's query endpoint (loopback)")
		gwAddr     = fs.String("gateway-addr", "127.0.0.1:8080", "the conductor gateway (loopback)")
		memtableMB = fs.Float64("memtable-mb", 32, "size of each of the projector's Pebble memtables, in MiB")
		maxHot     = fs.Int("max-hot-nodes", 0, "nodes the projector keeps in memory per partition (default: run's default); a small value shows eviction")
		maxHotRun  = fs.Int("max-hot-nodes-per-run", 0, "nodes of one run the projector keeps in memory (default: run's default); a small value shows nodes read back")
		kafka      = fs.String("kafka", "kfake", "the broker to start: kfake (embedded, instant) or real (Apache Kafka from tools/kafka/lib,\n"+
			"a KRaft node in a child JVM; ./tools/install.sh installs it)")
		brokers = fs.String("brokers", "", "use this Kafka (host:port,...) instead of starting one; the demo's topics get a prefix of their own")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *runs < 1 || *nodes < 2 || *rate <= 0 || *partitions < 1 || (*kafka != "kfake" && *kafka != "real") {
		fmt.Fprintln(stderr, "projector dev: want -runs >= 1, -nodes >= 2, -rate > 0, -partitions >= 1, -kafka kfake or real")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := dev(ctx, devOptions{runs: *runs, nodes: *nodes, rate: *rate, partitions: int32(*partitions), dataDir: *dataDir,
		httpAddr: *httpAddr, gatewayAddr: *gwAddr, memTableSize: int(*memtableMB * (1 << 20)), maxHotNodes: *maxHot, maxHotPerRun: *maxHotRun, kafka: *kafka,
		brokers: splitList(*brokers)}, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "projector dev: %v\n", err)
		return 1
	}
	return 0
}

type devOptions struct {
	runs, nodes           int
	rate                  float64
	partitions            int32
	dataDir               string
	httpAddr, gatewayAddr string
	memTableSize          int
	maxHotNodes           int
	maxHotPerRun          int
	kafka                 string   // kfake or real: the broker to start
	brokers               []string // a Kafka to use instead
}

// devToken is the bearer token of `make run`'s gateway: every run, on
// loopback only.
const devToken = "canopy-dev-token"

func dev(ctx context.Context, o devOptions, stdout, stderr io.Writer) error {
	// Warn, not the info of `projector run`: dev prints each wake itself, so
	// the per-wake event lines (conductor.snapshot.generated, .truncated,
	// .stale at info) and partition start-up lines would only bury the
	// wake lines `make run` is for.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	brokers, names, what := o.brokers, topics.DefaultNames(), "Kafka"
	switch {
	case len(brokers) > 0:
		// Topics of this session's own: an earlier session's state and
		// changelog would otherwise be restored into the demo.
		names.Prefix = fmt.Sprintf("canopy-dev-%d", time.Now().Unix())
	case o.kafka == "real":
		dir, err := os.MkdirTemp("", "canopy-dev-kafka-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintf(stdout, "canopy dev: starting Apache Kafka %s (a few seconds)\n", apachekafka.Version())
		b, err := apachekafka.Start(ctx, apachekafka.Config{Dir: dir})
		if err != nil {
			return fmt.Errorf("starting Apache Kafka: %w", err)
		}
		defer b.Stop()
		brokers, what = []string{b.Addr()}, "Apache Kafka "+apachekafka.Version()
	default:
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("starting the embedded broker: %w", err)
		}
		defer cluster.Close()
		brokers, what = cluster.ListenAddrs(), "embedded Kafka"
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := projector.CreateTopics(ctx, kadm.NewClient(cl), names, o.partitions, 1); err != nil {
		return err
	}
	dir := o.dataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "canopy-dev-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	fmt.Fprintf(stdout, "canopy dev: %s on %s, topics %s.*.v1 with %d partitions, state in %s\n",
		what, brokers[0], names.Prefix, o.partitions, dir)
	fmt.Fprintf(stdout, "canopy dev: waves of %d demo runs of %d nodes at %.0f events/s; a human types into the newest wave every 10s (WAKE! = priority lane). Ctrl-C stops.\n\n",
		o.runs, o.nodes, o.rate)

	// The projector's query endpoint, which the gateway routes reads to,
	// and the gateway with a static development token.
	qLis, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("the projector's query endpoint: %w (choose another with -http-addr)", err)
	}
	gLis, err := net.Listen("tcp", o.gatewayAddr)
	if err != nil {
		qLis.Close()
		return fmt.Errorf("the gateway: %w (choose another with -gateway-addr)", err)
	}
	defer qLis.Close() // closed by its server too; this covers the early returns
	defer gLis.Close()
	tokens := filepath.Join(dir, "dev-tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"`+devToken+`": {"sub": "dev", "runs": ["*"], "sessions": ["*"]}}`), 0o600); err != nil {
		return err
	}
	group := names.Prefix + "-dev"
	pcfg := projector.Config{Brokers: brokers, Names: names, DataDir: dir, Group: group, Logger: log,
		AdvertiseAddr: qLis.Addr().String(), MemTableSize: o.memTableSize}
	pcfg.Projection.MaxHotNodes = o.maxHotNodes
	pcfg.Projection.MaxHotNodesPerRun = o.maxHotPerRun
	in, err := instrument(ctx, &pcfg)
	if err != nil {
		return err
	}
	defer in.shutdown()
	p, err := projector.New(ctx, pcfg)
	if err != nil {
		return err
	}
	in.metrics.Set(p)
	// The query endpoint is closed as in production: a secret of this
	// session's own, which the gateway presents.
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	queries := projector.NewQueryServer()
	queries.Secret = []byte(hex.EncodeToString(secret))
	queries.Set(p)
	gm, err := telemetry.NewGatewayMetrics(in.reg)
	if err != nil {
		return err
	}
	// The development token is public: only requests that name this
	// machine (or -gateway-addr's host) reach the gateway, so that a web
	// page cannot reach it through DNS rebinding.
	hosts := slices.Clone(gateway.LoopbackHosts)
	if h, _, err := net.SplitHostPort(o.gatewayAddr); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	gw, err := gateway.New(ctx, gateway.Config{Brokers: brokers, Names: names, ProjectorGroup: group, TokenFile: tokens, Logger: log,
		Hooks: gm, TracerProvider: in.otel.Tracer, KafkaHooks: telemetry.KafkaHooks(in.reg)("gateway"), ProjectorSecret: queries.Secret,
		AllowedHosts: hosts})
	if err != nil {
		return err
	}
	defer gw.Close()
	servers := []*http.Server{{Handler: in.handler(queries), ReadHeaderTimeout: 10 * time.Second}, {Handler: gw, ReadHeaderTimeout: 10 * time.Second}}
	fmt.Fprintf(stdout, "canopy dev: gateway on http://%s (token %q); try, in another shell:\n", gLis.Addr(), devToken)
	fmt.Fprintf(stdout, "  curl -s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"input_kind\":\"steer\",\"text\":\"focus on the failing node\"}' http://%s/v1/runs/run-1/input\n", devToken, gLis.Addr())
	fmt.Fprintf(stdout, "  curl -s -H 'Authorization: Bearer %s' http://%s/v1/runs/run-1/snapshot\n", devToken, gLis.Addr())
	fmt.Fprintf(stdout, "canopy dev: live view: open http://%s/ui/#token=%s&run=run-1 (the token stays in the fragment, out of server logs)\n", gLis.Addr(), devToken) // issue 24
	fmt.Fprintf(stdout, "canopy dev: Prometheus metrics on http://%s/metrics\n\n", qLis.Addr())

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const actors = 5
	errc := make(chan error, actors)
	wg.Add(actors)
	go func() { defer wg.Done(); errc <- p.Run(ctx) }()
	go func() { defer wg.Done(); errc <- printWakes(ctx, brokers, names, stdout, in) }()
	go func() { defer wg.Done(); errc <- demoTraffic(ctx, cl, names, o) }()
	for i, lis := range []net.Listener{qLis, gLis} {
		srv := servers[i]
		go func() {
			defer wg.Done()
			err := srv.Serve(lis)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
	}
	var first error
	for i := 0; i < actors; i++ {
		err := <-errc
		if err != nil && first == nil && ctx.Err() == nil {
			first = err
		}
		if i == 0 {
			// Whichever ends first (the duration, Ctrl-C, a failure) ends
			// all: the HTTP servers first, so that no request is left
			// waiting on a projector that stops.
			gw.Drain()
			for _, srv := range servers {
				sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = srv.Shutdown(sctx)
				scancel()
			}
			cancel()
		}
	}
	fmt.Fprintf(stdout, "\ncanopy dev: %d events projected, %d wakes (%d on the priority lane), %d dead-lettered\n",
		p.Stats.Applied.Load(), p.Stats.Wakes.Load(), p.Stats.PriorityWakes.Load(), p.Stats.DeadLettered.Load())
	return first
}

// printWakes prints every wake of both lanes as a conductor receives it
// with pkg/wake (read_committed, so each wake once; priority lane first), and
// acknowledges it, so the watchdog sees the demo's results forwarded.
func printWakes(ctx context.Context, brokers []string, names topics.Names, out io.Writer, in *instrumentation) error {
	obs, err := telemetry.NewWakeObserver(in.reg, telemetry.NewEvents(in.otel.Logs, slog.New(slog.DiscardHandler), nil))
	if err != nil {
		return err
	}
	c, err := wake.New(wake.Config{Brokers: brokers, Names: names, Group: "canopy-dev-conductor", Logger: slog.New(slog.DiscardHandler),
		Observer: obs, TracerProvider: in.otel.Tracer},
		func(_ context.Context, w *topics.Wake, r wake.Received) error {
			fmt.Fprintln(out, wake.Line(w, r))
			return nil
		})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// demoTraffic produces the demo runs' events at their own times (now
// onwards), so leases and delivery deadlines fall due live, wave after wave of
// runs, and a human's input into the newest run-1... every ten seconds.
func demoTraffic(ctx context.Context, cl *kgo.Client, names topics.Names, o devOptions) error {
	step := time.Duration(float64(time.Second) * float64(o.runs) / o.rate)
	send := func(topic string, ev *topics.Event) error {
		r, err := topics.EventRecord(topic, ev, "")
		if err != nil {
			return err
		}
		r.Partition = topics.Partition(r.Key, o.partitions)
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
	nextHuman := time.Now().Add(5 * time.Second)
	humanN := 0
	for wave := 0; ; wave++ {
		start := time.Now()
		var events []topics.Event
		for i := 1; i <= o.runs; i++ {
			n := wave*o.runs + i
			events = append(events, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%d", n), SessionID: "demo",
				Nodes: o.nodes, Seed: uint64(n), Start: start.Add(time.Duration(i) * step / time.Duration(o.runs+1)), Step: step})...)
		}
		slices.SortStableFunc(events, func(a, b topics.Event) int { return cmp.Compare(a.Time.UnixMilli(), b.Time.UnixMilli()) })
		for i := 0; i < len(events); {
			at := events[i].Time.Std()
			if nextHuman.Before(at) {
				at = nextHuman
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Until(at)):
			}
			if !events[i].Time.Std().After(at) {
				if err := send(names.AgentEvents(), &events[i]); err != nil {
					return err
				}
				i++
				continue
			}
			humanN++
			now := time.Now()
			ev := topics.Event{ID: ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String(), Source: "/gateway/dev",
				Type: topics.TypeInput, Time: topics.NewTime(now), RunID: fmt.Sprintf("run-%d", wave*o.runs+1), AgentID: "human:dev",
				SchemaVersion: 1, Data: &topics.Input{InputKind: "steer", Text: fmt.Sprintf("human message %d: please summarise what is blocked", humanN)}}
			if err := send(names.HumanInput(), &ev); err != nil {
				return err
			}
			nextHuman = nextHuman.Add(10 * time.Second)
		}
	}
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
