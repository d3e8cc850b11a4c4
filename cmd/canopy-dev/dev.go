package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/apachekafka"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/lifecycle"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectorhttp"
	"github.com/canopy-dev/canopy/internal/projectormetrics"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

type devOptions struct {
	runs, nodes           int
	rate                  float64
	partitions            int32
	dataDir               string
	httpAddr, gatewayAddr string
	memTableSize          int
	maxHotNodes           int
	maxHotPerRun          int
	duration              time.Duration // stop after this long; 0: on a signal
	kafka                 string        // kfake or real: the broker to start
	brokers               []string      // a Kafka to use instead
	brokersFrom           string        // where brokers came from, when not the command line (a variable)
	redaction             redact.Config // the operator's rules, the projector's and the gateway's
}

// devToken is the bearer token of `make run`'s gateway: every run, on
// loopback only.
const devToken = "canopy-dev-token"

// dev is `make run`: Kafka and canopy's topics, a projector and a gateway,
// the demo workload and a printer of wakes, until a signal or o.duration.
func dev(ctx context.Context, o devOptions, stdout, stderr io.Writer) error {
	// Caught from here on: a Ctrl-C while the broker starts still stops
	// everything gracefully.
	signals := lifecycle.Signals()
	// Warn, not the info of `projector run`: dev prints each wake itself, so
	// the per-wake event lines (conductor.snapshot.generated, .truncated,
	// .stale at info) and partition start-up lines would only bury the
	// wake lines `make run` is for.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	k, stopKafka, err := startKafka(ctx, o, stdout)
	if err != nil {
		return err
	}
	defer stopKafka()
	cl, err := kgo.NewClient(k.conn().Opts(kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), k.names, o.partitions, 1); err != nil {
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
		k.what, k.brokers[0], k.names.Prefix, o.partitions, dir)
	fmt.Fprintf(stdout, "canopy dev: waves of %d demo runs of %d nodes at %.0f events/s; a human types into the newest wave every 10s (WAKE! = priority lane). Ctrl-C stops.\n\n",
		o.runs, o.nodes, o.rate)

	// The projector's query endpoint, which the gateway routes reads to,
	// and the gateway with a static development token.
	qLis, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("the projector's query endpoint: %w (choose another with -http-addr)", err)
	}
	defer qLis.Close() // closed by its server too; this covers the early returns
	gLis, err := net.Listen("tcp", o.gatewayAddr)
	if err != nil {
		return fmt.Errorf("the gateway: %w (choose another with -gateway-addr)", err)
	}
	defer gLis.Close()
	parts, stopParts, err := startParts(ctx, o, k, dir, log, qLis.Addr().String())
	if err != nil {
		return err
	}
	defer stopParts()
	printTryIt(stdout, gLis.Addr(), qLis.Addr())
	s := &devSession{o: o, k: k, cl: cl, devParts: parts, qLis: qLis, gLis: gLis, log: log, stdout: stdout, stderr: stderr}
	err = s.run(ctx, signals)
	p := parts.p
	fmt.Fprintf(stdout, "\ncanopy dev: %d events projected, %d wakes (%d on the priority lane), %d dead-lettered\n",
		p.Status().Counts.Applied, p.Status().Counts.Wakes, p.Status().Counts.PriorityWakes, p.Status().Counts.DeadLettered)
	return err
}

// devKafka is the Kafka `make run` uses and its topics' names.
type devKafka struct {
	brokers []string
	names   topics.Names
	what    string // "embedded Kafka", "Apache Kafka 4.1.1", "Kafka from CANOPY_BROKERS", ...
}

// conn is how every part of `make run` connects to k: the projector, the
// gateway and the demo workload.
func (k devKafka) conn() kafkaconn.Conn { return kafkaconn.Conn{Brokers: k.brokers} }

// startKafka starts the broker -kafka names, unless -brokers gives a Kafka
// to use; stop stops it.
func startKafka(ctx context.Context, o devOptions, stdout io.Writer) (k devKafka, stop func(), err error) {
	k = devKafka{brokers: o.brokers, names: topics.DefaultNames(), what: "Kafka"}
	switch {
	case len(k.brokers) > 0:
		if o.brokersFrom != "" {
			// Said first: a variable exported for another canopy command
			// should not send the demo to that Kafka unnoticed.
			k.what = "Kafka from " + o.brokersFrom
		}
		// Topics of this session's own: an earlier session's state and
		// changelog would otherwise be restored into the demo.
		k.names.Prefix = fmt.Sprintf("canopy-dev-%d", time.Now().Unix())
		return k, func() {}, nil
	case o.kafka == "real":
		dir, err := os.MkdirTemp("", "canopy-dev-kafka-")
		if err != nil {
			return k, nil, err
		}
		fmt.Fprintf(stdout, "canopy dev: starting Apache Kafka %s (a few seconds)\n", apachekafka.Version())
		b, err := apachekafka.Start(ctx, apachekafka.Config{Dir: dir})
		if err != nil {
			os.RemoveAll(dir)
			return k, nil, fmt.Errorf("starting Apache Kafka: %w", err)
		}
		k.brokers, k.what = []string{b.Addr()}, "Apache Kafka "+apachekafka.Version()
		return k, func() { b.Stop(); os.RemoveAll(dir) }, nil
	default:
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return k, nil, fmt.Errorf("starting the embedded broker: %w", err)
		}
		k.brokers, k.what = c.ListenAddrs(), "embedded Kafka"
		return k, c.Close, nil
	}
}

// devParts are the parts of canopy `make run` runs: the projector, the
// secret its query endpoint requires, the gateway, and their
// instrumentation.
type devParts struct {
	p      *projector.Projector
	secret []byte
	gw     *gateway.Gateway
	in     *projectormetrics.Instrumentation
}

// startParts makes the projector (its state in dir, its query endpoint
// advertised at queryAddr) and the gateway, with a development token file
// in dir; stop closes them.
func startParts(ctx context.Context, o devOptions, k devKafka, dir string, log *slog.Logger, queryAddr string) (parts devParts, stop func(), err error) {
	tokens := filepath.Join(dir, "dev-tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"`+devToken+`": {"sub": "dev", "runs": ["*"], "sessions": ["*"]}}`), 0o600); err != nil {
		return parts, nil, err
	}
	group := k.names.Prefix + "-dev"
	pcfg := projector.Config{Kafka: k.conn(), Names: k.names, DataDir: dir, Group: group, Logger: log,
		AdvertiseAddr: queryAddr, MemTableSize: o.memTableSize, Redaction: o.redaction}
	pcfg.Projection.MaxHotNodes = o.maxHotNodes
	pcfg.Projection.MaxHotNodesPerRun = o.maxHotPerRun
	in, err := projectormetrics.Instrument(ctx, &pcfg)
	if err != nil {
		return parts, nil, err
	}
	defer func() {
		if err != nil {
			in.Shutdown()
		}
	}()
	// The query endpoint is closed as in production: a secret of this
	// session's own, which the gateway presents.
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return parts, nil, err
	}
	secret := []byte(hex.EncodeToString(raw))
	p, err := newProjector(ctx, pcfg, in)
	if err != nil {
		return parts, nil, err
	}
	gm, err := telemetry.NewGatewayMetrics(in.Registry, pcfg.Redaction.Rules())
	if err != nil {
		return parts, nil, err
	}
	// The development token is public: only requests that name this
	// machine (or -gateway-addr's host) reach the gateway, so that a web
	// page cannot reach it through DNS rebinding.
	hosts := slices.Clone(gateway.LoopbackHosts)
	if h, _, err := net.SplitHostPort(o.gatewayAddr); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	gw, err := gateway.New(ctx, gateway.Config{Kafka: k.conn(), Names: k.names, ProjectorGroup: group, TokenFile: tokens, Logger: log,
		Hooks: gm, TracerProvider: in.OTel.Tracer, KafkaHooks: telemetry.KafkaHooks(in.Registry)("gateway"), ProjectorSecret: secret,
		AllowedHosts: hosts, Redaction: o.redaction})
	if err != nil {
		return parts, nil, err
	}
	return devParts{p: p, secret: secret, gw: gw, in: in}, func() { gw.Close(); in.Shutdown() }, nil
}

// printTryIt prints the gateway's address and token, commands to try
// against it, the live view's URL and the metrics' URL.
func printTryIt(stdout io.Writer, gateway, query net.Addr) {
	fmt.Fprintf(stdout, "canopy dev: gateway on http://%s (token %q); try, in another shell:\n", gateway, devToken)
	fmt.Fprintf(stdout, "  curl -s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"input_kind\":\"steer\",\"text\":\"focus on the failing node\"}' http://%s/v1/runs/run-1/input\n", devToken, gateway)
	fmt.Fprintf(stdout, "  curl -s -H 'Authorization: Bearer %s' http://%s/v1/runs/run-1/snapshot\n", devToken, gateway)
	fmt.Fprintf(stdout, "  curl -s -H 'Authorization: Bearer %s' http://%s/v1/sessions/demo\n", devToken, gateway)
	fmt.Fprintf(stdout, "canopy dev: live view: open http://%s/ui/#token=%s&run=run-1 (the token stays in the fragment, out of server logs)\n", gateway, devToken)
	fmt.Fprintf(stdout, "canopy dev: the demo session: open http://%s/ui/?session=demo#token=%s\n", gateway, devToken)
	fmt.Fprintf(stdout, "canopy dev: Prometheus metrics on http://%s/metrics\n\n", query)
}

// devSession is what `make run`'s actors use.
type devSession struct {
	o  devOptions
	k  devKafka
	cl *kgo.Client // the demo workload's producer
	devParts
	qLis, gLis     net.Listener // the projector's query endpoint's, the gateway's
	log            *slog.Logger
	stdout, stderr io.Writer
}

// run runs `make run`'s actors until a signal, -duration or the first to
// fail. Their stop order (lifecycle's package doc): the gateway first, so
// that no request is left waiting on a projector that stops; then the demo
// workload, the projector and the printer of wakes; the projector's query
// endpoint and /metrics last.
func (s *devSession) run(ctx context.Context, signals lifecycle.Actor) error {
	g := lifecycle.Group{Logger: slog.New(slog.NewTextHandler(s.stderr, nil))}
	g.Add(signals)
	if s.o.duration > 0 {
		g.Add(lifecycle.After(s.o.duration))
	}
	var ready lifecycle.Readiness
	g.Add(ready.Actor())
	gsrv := &http.Server{Handler: s.gw, ReadHeaderTimeout: 10 * time.Second}
	gsrv.RegisterOnShutdown(s.gw.Drain) // wake streams hold their connection
	g.Add(lifecycle.HTTPServer("gateway", gsrv, s.gLis, 5*time.Second))
	g.Add(lifecycle.Actor{Name: "demo workload", Run: func(ctx context.Context) error { return demoTraffic(ctx, s.cl, s.k.names, s.o) }})
	g.Add(lifecycle.Actor{Name: "projector", Run: s.p.Run})
	g.Add(lifecycle.Actor{Name: "wake printer", Run: func(ctx context.Context) error { return printWakes(ctx, s.k.brokers, s.k.names, s.stdout, s.in) }})
	queries := projectorhttp.New(projectorhttp.Config{Source: s.p, Secret: s.secret, Metrics: telemetry.Handler(s.in.Registry), Serving: ready.Ready})
	g.Add(queries.Actor(s.qLis, s.log))
	return g.Run(ctx)
}

// newProjector makes the projector and registers its gauges: dev runs one
// instance, with no restarts to hide behind a projector.Supervisor.
func newProjector(ctx context.Context, cfg projector.Config, in *projectormetrics.Instrumentation) (*projector.Projector, error) {
	p, err := projector.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := projectormetrics.RegisterGauges(in.Registry, p); err != nil {
		return nil, err // a duplicate metric: the process ends
	}
	return p, nil
}

// printWakes prints every wake of both lanes as a conductor receives it
// with pkg/wake (read_committed, so each wake once; priority lane first), and
// acknowledges it, so the watchdog sees the demo's results forwarded.
func printWakes(ctx context.Context, brokers []string, names topics.Names, out io.Writer, in *projectormetrics.Instrumentation) error {
	obs, err := telemetry.NewWakeObserver(in.Registry, telemetry.NewEvents(in.OTel.Logs, slog.New(slog.DiscardHandler), nil))
	if err != nil {
		return err
	}
	c, err := wake.New(wake.Config{Brokers: brokers, Names: names, Group: "canopy-dev-conductor", Logger: slog.New(slog.DiscardHandler),
		Observer: obs, TracerProvider: in.OTel.Tracer},
		func(_ context.Context, w *topics.Wake, r wake.Received) error {
			fmt.Fprintln(out, wake.Line(w, r))
			return nil
		})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// demoTraceParent is the traceparent the demo's agents send: one trace per
// run (its id a hash of the run id), one span per event, so that the read
// model's telemetry correlation has trace ids to show.
func demoTraceParent(ev *topics.Event) string {
	trace := sha256.Sum256([]byte("trace/" + ev.RunID))
	span := sha256.Sum256([]byte("span/" + ev.ID))
	return "00-" + hex.EncodeToString(trace[:16]) + "-" + hex.EncodeToString(span[:8]) + "-01"
}

// demoTraffic produces the demo runs' events at their own times (now
// onwards), so leases and delivery deadlines fall due live, wave after wave of
// runs, and a human's input into the newest run-1... every ten seconds.
func demoTraffic(ctx context.Context, cl *kgo.Client, names topics.Names, o devOptions) error {
	step := time.Duration(float64(time.Second) * float64(o.runs) / o.rate)
	send := func(topic string, ev *topics.Event) error {
		r, err := topics.EventRecord(topic, ev, demoTraceParent(ev))
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
			events = append(events, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%d", n), SessionID: "demo", ThreadID: "thread-main", Activity: true,
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
