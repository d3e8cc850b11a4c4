package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectormetrics"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// env is kafkaconn.Env: every flag of the command has a CANOPY_* variable.
var env = kafkaconn.Env

// runProjector is "projector run": one projector instance until SIGTERM or
// SIGINT, then a graceful stop (finish the batch, commit, leave the group).
func runProjector(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var k kafkaconn.Flags
	k.Register(fs, "")
	var cfg projector.Config
	fs.StringVar(&cfg.Group, "group", env("CANOPY_GROUP", "canopy-projector"), "consumer group of the projector instances (CANOPY_GROUP)")
	fs.Int64Var(&cfg.ReadyLag, "ready-lag", 10000, "records a partition may be behind its input for /readyz to say ready (CANOPY_READY_LAG)")
	fs.StringVar(&cfg.InstanceID, "instance-id", env("CANOPY_INSTANCE_ID", ""), "static group instance id, e.g. the pod name (CANOPY_INSTANCE_ID)")
	fs.StringVar(&cfg.DataDir, "data-dir", env("CANOPY_DATA_DIR", ""), "directory of the projector's Pebble state (CANOPY_DATA_DIR)")
	fs.IntVar(&cfg.Chunk, "chunk", 500, "agent records applied between looks at the human input lane")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 5000, "records one commit holds at most; under a backlog a run's triggers coalesce into one wake per commit")
	memtableMB := fs.Float64("memtable-mb", 32, "size of each of Pebble's two memtables, in MiB")
	cfg.MemoryLimit = projector.DefaultMemoryLimit
	fs.Var(byteSize{&cfg.MemoryLimit}, "memory-limit",
		"memory the process may use, e.g. 512MiB or 2Gi: the container's limit. Bounds the runs kept in memory and sets GOMEMLIMIT\n"+
			"to 90% of it less Pebble's memtables and block cache, unless GOMEMLIMIT is set (CANOPY_MEMORY_LIMIT)")
	fs.IntVar(&cfg.MaxPending, "max-pending", 20000, "fetched agent records waiting per partition before its fetching pauses")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", 6*time.Second, "consumer group session timeout")
	fs.DurationVar(&cfg.RebalanceTimeout, "rebalance-timeout", 60*time.Second, "how long the group's coordinator waits for members to rejoin in a rebalance")
	fs.DurationVar(&cfg.StallTimeout, "stall-timeout", 0,
		"how long the group may give this instance no assignment while the brokers answer before it rejoins as a fresh member\n"+
			"(default twice -rebalance-timeout)")
	fs.StringVar(&cfg.GroupProtocol, "group-protocol", env("CANOPY_GROUP_PROTOCOL", projector.GroupProtocolClassic),
		"consumer group protocol: classic, or consumer (KIP-848, Apache Kafka 4.0+; -session-timeout is then set as the group's\n"+
			"consumer.session.timeout.ms, within the broker's bounds) (CANOPY_GROUP_PROTOCOL)")
	transactions := fs.Bool("transactions", env("CANOPY_TRANSACTIONS", "true") != "false",
		"commit each batch's wakes, changelog and offsets in one Kafka transaction; false: at least once (CANOPY_TRANSACTIONS)")
	fs.DurationVar(&cfg.TransactionTimeout, "transaction-timeout", 60*time.Second, "how long a transaction may stay open before the broker aborts it")
	fs.BoolVar(&cfg.Standby, "standby", env("CANOPY_STANDBY", "") == "true",
		"keep warm copies of the partitions this instance does not own, for fast failover (CANOPY_STANDBY=true)")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", env("CANOPY_ADVERTISE_ADDR", ""),
		"host:port where this instance answers for its runs, published with its group membership so the gateway can route\n"+
			"queries to it: where -http-addr is reachable from the gateway, e.g. pod-ip:8081 (CANOPY_ADVERTISE_ADDR)")
	var httpAddr optionalString
	fs.Var(&httpAddr, "http-addr",
		"listen `host:port` of the internal HTTP endpoint (/internal/v1/runs/..., /healthz, /readyz, /metrics); empty disables it. Default\n"+
			projector.DefaultQueryAddr+" with -query-secret-file, else "+projector.DefaultLoopbackQueryAddr+": without a secret it must be loopback (CANOPY_HTTP_ADDR)")
	querySecretFile := fs.String("query-secret-file", env("CANOPY_QUERY_SECRET_FILE", ""),
		"file holding the shared secret the query endpoint requires of its callers (the gateway's -projector-secret-file) as\n"+
			"\"Authorization: Bearer <secret>\"; at least 32 bytes. /healthz, /readyz and /metrics stay open (CANOPY_QUERY_SECRET_FILE)")
	fs.IntVar(&cfg.Projection.MaxHotNodes, "max-hot-nodes", projection.DefaultMaxHotNodes, "nodes kept in memory per partition; colder runs are read back from Pebble")
	fs.IntVar(&cfg.Projection.MaxHotNodesPerRun, "max-hot-nodes-per-run", projection.DefaultMaxHotNodesPerRun,
		"nodes of one run kept in memory: a larger run keeps those it used last and reads the others back from Pebble when needed")
	fs.DurationVar(&cfg.Projection.Retention, "retention", 7*24*time.Hour,
		"how long a finished run (root terminal, no open request, lease or timer) is kept after its last event; then its\n"+
			"state is deleted and reads and events for it are answered as expired for as long again. 0 keeps runs for ever (CANOPY_RETENTION)")
	fs.IntVar(&cfg.Projection.HistorySize, "history-size", projection.DefaultHistorySize,
		"applied events each run keeps for history windows (state: give every instance the same)")
	addProjectionFlags(fs, &cfg.Projection)
	logLevel := fs.String("log-level", env("CANOPY_LOG_LEVEL", "info"), "debug, info, warn or error (CANOPY_LOG_LEVEL)")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of the whole run to this file, for performance work (bench's -profile-dir)")
	check := checkConfigFlag(fs)
	for _, fe := range [][2]string{{"ready-lag", "CANOPY_READY_LAG"}, {"memory-limit", "CANOPY_MEMORY_LIMIT"}, {"retention", "CANOPY_RETENTION"},
		{"http-addr", "CANOPY_HTTP_ADDR"}} {
		if err := kafkaconn.EnvFlag(fs, fe[0], fe[1]); err != nil {
			fmt.Fprintf(stderr, "projector run: %v\n", err)
			return 2
		}
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "projector run: -log-level %q: want debug, info, warn or error\n", *logLevel)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Brokers, cfg.Names = k.BrokerList(), k.Names()
	cfg.AtLeastOnce = !*transactions
	cfg.MemTableSize = int(*memtableMB * (1 << 20))
	var err error
	if cfg.TLS, err = k.TLSConfig(); err == nil {
		cfg.SASL, err = k.SASL()
	}
	if err == nil {
		err = cfg.Validate()
	}
	var endpoint projector.QueryEndpoint
	if err == nil {
		endpoint, err = queryEndpoint(httpAddr, *querySecretFile)
	}
	if err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 2
	}
	if *check {
		return checkedConfig(stderr, "projector run", "canopy-projector")
	}
	// The Go runtime's soft limit: the collector works harder as the heap
	// nears it instead of letting it double past the live data
	// (Config.GoMemLimit says what it leaves out). An operator's own
	// GOMEMLIMIT, which the runtime has read already, stands.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cfg.GoMemLimit())
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "projector run: -cpu-profile: %v\n", err)
			return 2
		}
		// Written when the run ends (SIGTERM, SIGINT), after every actor
		// has stopped.
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	in, err := instrument(ctx, &cfg)
	if err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 2
	}
	defer in.shutdown()
	// The Server replaces a failed instance; the query endpoint and the
	// gauges read through it.
	server, err := projector.NewServer(cfg)
	if err == nil {
		err = projectormetrics.RegisterGauges(in.reg, server)
	}
	if err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 2
	}
	qs := projector.NewQueryServer(server)
	qs.Secret = endpoint.Secret
	actors := []actor{{name: "projector", start: server.Run}}
	if endpoint.Addr != "" {
		// Listen before anything starts: a taken port is a configuration
		// error to report at once, not after the partitions are restored.
		ln, err := net.Listen("tcp", endpoint.Addr)
		if err != nil {
			fmt.Fprintf(stderr, "projector run: -http-addr: %v\n", err)
			return 1
		}
		srv := &http.Server{Handler: in.handler(qs), ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
		cfg.Logger.Info("query endpoint listening", "addr", ln.Addr().String(), "secret", len(endpoint.Secret) > 0)
		actors = append(actors, actor{
			name: "query endpoint",
			start: func(context.Context) error {
				if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			},
			stop: func() {
				// In-flight queries finish; the projector has stopped by
				// now, so they are answered 503 at once.
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			},
		})
	}
	if err := runActors(ctx, actors); err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 1
	}
	cfg.Logger.Info("projector stopped")
	return 0
}

// queryEndpoint is the query endpoint -http-addr and -query-secret-file
// configure: closed to the network unless its callers present the secret.
// Without one it listens on loopback by default, and an address beyond
// loopback is refused (projector.QueryEndpoint.Validate).
func queryEndpoint(addr optionalString, secretFile string) (projector.QueryEndpoint, error) {
	var e projector.QueryEndpoint
	if secretFile != "" {
		s, err := cluster.ReadQuerySecret(secretFile)
		if err != nil {
			return e, fmt.Errorf("-query-secret-file: %w", err)
		}
		e.Secret = s
	}
	e.Addr = addr.or(projector.DefaultQueryAddrFor(e.Secret))
	return e, e.Validate()
}

// optionalString is a string flag that knows whether it was set (on the
// command line or by its CANOPY_* variable), for a default that depends on
// other flags.
type optionalString struct {
	value string
	set   bool
}

func (o *optionalString) String() string     { return o.value }
func (o *optionalString) Set(v string) error { o.value, o.set = v, true; return nil }

// or is the value, or def when it was not set.
func (o *optionalString) or(def string) string {
	if o.set {
		return o.value
	}
	return def
}

// actor is one part of a process that runs until stopped: start runs it
// until ctx ends (or it fails); stop, when set, makes a start that does not
// watch ctx return.
type actor struct {
	name  string
	start func(ctx context.Context) error
	stop  func()
}

// runActors starts every actor and, once ctx ends or any of them returns,
// stops them all in order, each after the one before it has returned: the
// projector first (it finishes and commits its batches), the query
// endpoint after it, so that readers are answered until the end. It
// returns the first error.
func runActors(ctx context.Context, actors []actor) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(actors))
	for i, a := range actors {
		go func() { done <- result{i, a.start(ctx)} }()
	}
	var first error
	returned := make([]bool, len(actors))
	note := func(r result) {
		returned[r.i] = true
		if r.err != nil && first == nil {
			first = fmt.Errorf("%s: %w", actors[r.i].name, r.err)
		}
	}
	select {
	case <-ctx.Done():
	case r := <-done:
		note(r)
	}
	cancel()
	for i, a := range actors {
		if !returned[i] && a.stop != nil {
			a.stop()
		}
		for !returned[i] {
			note(<-done)
		}
	}
	return first
}

// createTopics is "projector create-topics": every canopy topic, co-partitioned.
func createTopics(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("create-topics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var k kafkaconn.Flags
	k.Register(fs, "")
	partitions := fs.Int("partitions", 12, "partitions of every co-partitioned topic")
	replication := fs.Int("replication-factor", -1, "replication factor (-1: the broker's default)")
	tombstones := fs.Duration("changelog-tombstone-retention", topics.DefaultTombstoneRetention,
		"the changelog's delete.retention.ms: how long it keeps the tombstones of deleted state (expired runs). A projector\n"+
			"restores a partition from scratch when its Pebble checkpoint is older than half of it. A topic that exists is left\n"+
			"alone (CANOPY_CHANGELOG_TOMBSTONE_RETENTION)")
	check := checkConfigFlag(fs)
	if err := kafkaconn.EnvFlag(fs, "changelog-tombstone-retention", "CANOPY_CHANGELOG_TOMBSTONE_RETENTION"); err != nil {
		fmt.Fprintf(stderr, "projector create-topics: %v\n", err)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := k.Names().Validate(); err != nil || len(k.BrokerList()) == 0 || *partitions < 1 {
		fmt.Fprintf(stderr, "projector create-topics: want -brokers, a valid -topic-prefix and -partitions >= 1 (%v)\n", err)
		return 2
	}
	if *tombstones < time.Millisecond {
		fmt.Fprintf(stderr, "projector create-topics: -changelog-tombstone-retention %v: want at least 1ms\n", *tombstones)
		return 2
	}
	opts, err := k.ClientOpts()
	if err != nil {
		fmt.Fprintf(stderr, "projector create-topics: %v\n", err)
		return 2
	}
	if *check {
		return checkedConfig(stderr, "projector create-topics", "")
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Fprintf(stderr, "projector create-topics: %v\n", err)
		return 1
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	if err := cluster.CreateTopics(ctx, adm, k.Names(), int32(*partitions), int16(*replication), topics.TombstoneRetention(*tombstones)); err != nil {
		fmt.Fprintf(stderr, "projector create-topics: %v\n", err)
		return 1
	}
	n, err := cluster.CheckTopics(ctx, adm, k.Names())
	if err != nil {
		fmt.Fprintf(stderr, "projector create-topics: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "topics of %s v%d ready, %d partitions each\n", k.Prefix, k.Version, n)
	return 0
}

// checkConfigFlag registers -check-config: parse and validate the
// configuration, flags and CANOPY_* variables, then exit without connecting
// to anything. The Helm chart's tests run each rendered container's
// arguments and environment through it.
func checkConfigFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("check-config", false, "validate the flags and CANOPY_* variables (files they name included) and exit: 0 if valid, 2 if not; connects to nothing")
}

// checkedConfig finishes -check-config once the command's own validation
// passed: no CANOPY_* variable may go unread, and the OTEL_* variables of
// a service (none when service is empty) must configure OpenTelemetry.
func checkedConfig(stderr io.Writer, cmd, service string) int {
	if unknown := kafkaconn.UnknownEnv(); len(unknown) > 0 {
		fmt.Fprintf(stderr, "%s: %s: no flag of this command reads it\n", cmd, strings.Join(unknown, ", "))
		return 2
	}
	if service != "" {
		// The exporters are made but connect lazily: nothing is dialled.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: service})
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return 2
		}
		_ = ot.Shutdown(ctx)
	}
	fmt.Fprintf(stderr, "%s: configuration ok\n", cmd)
	return 0
}
