package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/flagenv"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/lifecycle"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectorhttp"
	"github.com/canopy-dev/canopy/internal/projectormetrics"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// runProjector is "projector run": one projector instance until SIGTERM or
// SIGINT, then a graceful stop (finish the batch, commit, leave the group).
// Every flag -foo-bar has its variable CANOPY_FOO_BAR (flagenv).
func runProjector(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	f.register(fs)
	deprecated, err := flagenv.Parse(fs, args, kafkaconn.EnvAliases...)
	if err != nil {
		return 2
	}
	if flagsParsed != nil {
		flagsParsed(fs)
		return 0
	}
	endpoint, err := f.configure(stderr, deprecated)
	if err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 2
	}
	if *f.check {
		return checkedConfig(stderr, "projector run", "canopy-projector", fs, kafkaconn.EnvAliases...)
	}
	// The Go runtime's soft limit: the collector works harder as the heap
	// nears it instead of letting it double past the live data
	// (Config.GoMemLimit says what it leaves out). An operator's own
	// GOMEMLIMIT, which the runtime has read already, stands.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(f.cfg.GoMemLimit())
	}
	// At least minProcs Ps, even on one CPU. A human input wakes a chain
	// of goroutines (its client's connection and fetch, the poller, the
	// worker, the commit, its producer's connection), and under a backlog
	// each one woken waits for a P behind the agent lane's goroutines, 10
	// ms at a time, while the collector's dedicated worker holds a quarter
	// of the Ps. With Ps to spare a woken goroutine takes an idle one at
	// once, and the kernel, which favours a thread that slept, runs it
	// promptly. Measured in the bench's priority scenario, pinned to one
	// CPU: a human input's median 120-130 ms with two Ps, 50-65 with four,
	// 37-38 with eight; max's CPU per event costs about a tenth more with
	// eight than with two (bench/RESULTS.md).
	if n := runtime.GOMAXPROCS(0); n < f.minProcs {
		runtime.GOMAXPROCS(f.minProcs)
	}
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "projector run: -cpu-profile: %v\n", err)
			return 2
		}
		// Written when the run ends (SIGTERM, SIGINT), after every actor
		// has stopped.
		defer stop()
	}
	return serveProjector(&f.cfg, endpoint, stderr)
}

// configure completes f.cfg from the flags other than its own fields (the
// logger, Kafka's connection, transactions, the memtable's size) and
// validates it, and returns the query endpoint the flags ask for.
func (f *runFlags) configure(stderr io.Writer, deprecated []string) (projectorhttp.Endpoint, error) {
	cfg := &f.cfg
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return projectorhttp.Endpoint{}, fmt.Errorf("-log-level %q: want debug, info, warn or error", f.logLevel)
	}
	if f.minProcs < 1 {
		return projectorhttp.Endpoint{}, fmt.Errorf("-min-procs %d: want 1 or more (1 leaves GOMAXPROCS alone)", f.minProcs)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	warnDeprecated(cfg.Logger, deprecated)
	cfg.Names = f.k.Names()
	cfg.AtLeastOnce = !f.transactions
	cfg.MemTableSize = int(f.memtableMB * (1 << 20))
	var err error
	if cfg.Kafka, err = f.k.Conn(); err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return projectorhttp.Endpoint{}, err
	}
	e, err := queryEndpoint(f.httpAddr, f.querySecretFile)
	e.Profiling = f.pprof
	return e, err
}

// startCPUProfile starts a CPU profile written to path; stop ends it.
func startCPUProfile(path string) (stop func(), err error) {
	prof, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(prof)
	}
	if err != nil {
		if prof != nil {
			prof.Close()
		}
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); prof.Close() }, nil
}

// serveProjector runs the projector of cfg, and its query endpoint when
// endpoint has an address, until SIGTERM or SIGINT; it returns the exit
// code.
func serveProjector(cfg *projector.Config, endpoint projectorhttp.Endpoint, stderr io.Writer) int {
	// The group's actors, in their stop order (lifecycle's package doc):
	// readiness off first, then the projector (it finishes and commits its
	// batches), the query endpoint last, so that readers are answered until
	// the end.
	g := lifecycle.Group{Logger: cfg.Logger}
	g.Add(lifecycle.Signals())
	var ready lifecycle.Readiness
	g.Add(ready.Actor())
	ctx := context.Background()
	in, err := projectormetrics.Instrument(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 2
	}
	defer in.Shutdown()
	// The Supervisor replaces a failed instance; the query endpoint and
	// the gauges read through it.
	sup, err := projector.NewSupervisor(*cfg)
	if err == nil {
		err = projectormetrics.RegisterGauges(in.Registry, sup)
	}
	if err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 2
	}
	g.Add(lifecycle.Actor{Name: "projector", Run: sup.Run})
	if endpoint.Addr != "" {
		// Listen before anything starts: a taken port is a configuration
		// error to report at once, not after the partitions are restored.
		ln, err := net.Listen("tcp", endpoint.Addr)
		if err != nil {
			fmt.Fprintf(stderr, "projector run: -http-addr: %v\n", err)
			return 1
		}
		h := projectorhttp.New(projectorhttp.Config{Source: sup, Secret: endpoint.Secret, Metrics: telemetry.Handler(in.Registry),
			Serving: ready.Ready, Profiling: endpoint.Profiling})
		cfg.Logger.Info("query endpoint listening", "addr", ln.Addr().String(), "secret", len(endpoint.Secret) > 0)
		// In-flight queries finish; the projector has stopped by now, so
		// they are answered 503 at once.
		g.Add(h.Actor(ln, cfg.Logger))
	}
	if err := g.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "projector run: %v\n", err)
		return 1
	}
	cfg.Logger.Info("projector stopped")
	return 0
}

// runFlags are projector run's flags; register binds them, with their
// defaults from projector's and projection's Default* constants.
type runFlags struct {
	k                                     kafkaconn.Flags
	cfg                                   projector.Config
	memtableMB                            float64
	transactions                          bool
	httpAddr                              optionalString
	pprof                                 bool
	minProcs                              int
	querySecretFile, logLevel, cpuProfile string
	check                                 *bool
}

func (f *runFlags) register(fs *flag.FlagSet) {
	f.k.Register(fs)
	kafkaconn.RegisterTLSAliases(fs)
	cfg := &f.cfg
	fs.StringVar(&cfg.Group, "group", projector.DefaultGroup, "consumer group of the projector instances")
	fs.Int64Var(&cfg.ReadyLag, "ready-lag", projector.DefaultReadyLag, "records a partition may be behind its input for /readyz to say ready")
	fs.DurationVar(&cfg.StalledAfter, "stalled-after", projector.DefaultStalledAfter,
		"how long fetched records of an owned partition may wait with no commit moving past them before it counts as stalled\n"+
			"(/readyz says so, canopy_projector_partitions_stalled counts it); restarts of the instance do not reset the clock")
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "static group instance id, e.g. the pod name")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "directory of the projector's Pebble state")
	fs.IntVar(&cfg.Chunk, "chunk", projector.DefaultChunk, "agent records applied in one step, between checks for a full commit (-max-batch) and for stopping; human input preempts agent records between any two")
	fs.IntVar(&cfg.MaxBatch, "max-batch", projector.DefaultMaxBatch, "records one commit holds at most; under a backlog a run's triggers coalesce into one wake per commit")
	fs.Float64Var(&f.memtableMB, "memtable-mb", float64(projector.DefaultMemTableSize)/(1<<20), "size of each of Pebble's two memtables, in MiB")
	cfg.MemoryLimit = projector.DefaultMemoryLimit
	fs.Var(byteSize{&cfg.MemoryLimit}, "memory-limit",
		"memory the process may use, e.g. 512MiB or 2Gi: the container's limit. Bounds the runs kept in memory and sets GOMEMLIMIT\n"+
			"to 90% of it less Pebble's memtables and block cache, unless GOMEMLIMIT is set")
	fs.IntVar(&cfg.MaxPending, "max-pending", projector.DefaultMaxPending, "fetched agent records waiting per partition before its fetching pauses")
	fs.Var(byteSize{&cfg.MaxQueuedBytes}, "max-queued-bytes",
		"bytes of fetched agent records waiting for the instance's partitions, shared by them, before a partition's fetching pauses,\n"+
			"e.g. 32MiB (default a sixteenth of -memory-limit)")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", projector.DefaultSessionTimeout, "consumer group session timeout")
	fs.DurationVar(&cfg.RebalanceTimeout, "rebalance-timeout", projector.DefaultRebalanceTimeout, "how long the group's coordinator waits for members to rejoin in a rebalance")
	fs.DurationVar(&cfg.StallTimeout, "stall-timeout", 0,
		"how long the group may give this instance no assignment while the brokers answer before it rejoins as a fresh member\n"+
			"(default twice -rebalance-timeout)")
	fs.StringVar(&cfg.GroupProtocol, "group-protocol", projector.GroupProtocolClassic,
		"consumer group protocol: classic, or consumer (KIP-848, Apache Kafka 4.0+; -session-timeout is then set as the group's\n"+
			"consumer.session.timeout.ms, within the broker's bounds)")
	fs.BoolVar(&f.transactions, "transactions", true,
		"commit each batch's wakes, changelog and offsets in one Kafka transaction; false: at least once")
	fs.DurationVar(&cfg.TransactionTimeout, "transaction-timeout", projector.DefaultTransactionTimeout, "how long a transaction may stay open before the broker aborts it")
	fs.IntVar(&cfg.PoisonAttempts, "poison-attempts", projector.DefaultPoisonAttempts,
		"how often a record's processing may fail the same way, the record alone, before it is dead-lettered as poison")
	fs.BoolVar(&cfg.Standby, "standby", false, "keep warm copies of the partitions this instance does not own, for fast failover")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "",
		"host:port where this instance answers for its runs, published with its group membership so the gateway can route\n"+
			"queries to it: where -http-addr is reachable from the gateway, e.g. pod-ip:8081")
	fs.Var(&f.httpAddr, "http-addr",
		"listen `host:port` of the internal HTTP endpoint (/internal/v1/runs/..., /healthz, /readyz, /metrics); empty disables it. Default\n"+
			projectorhttp.DefaultAddr+" with -query-secret-file, else "+projectorhttp.DefaultLoopbackAddr+": without a secret it must be loopback")
	fs.StringVar(&f.querySecretFile, "query-secret-file", "",
		"file holding the shared secret the query endpoint requires of its callers (the gateway's -projector-secret-file) as\n"+
			"\"Authorization: Bearer <secret>\"; at least 32 bytes. /healthz, /readyz and /metrics stay open")
	fs.IntVar(&cfg.Projection.MaxHotNodes, "max-hot-nodes", projection.DefaultMaxHotNodes, "nodes kept in memory per partition; colder runs are read back from Pebble")
	fs.IntVar(&cfg.Projection.MaxHotNodesPerRun, "max-hot-nodes-per-run", projection.DefaultMaxHotNodesPerRun,
		"nodes of one run kept in memory: a larger run keeps those it used last and reads the others back from Pebble when needed")
	fs.DurationVar(&cfg.Projection.Retention, "retention", projector.DefaultRetention,
		"how long a finished run (root terminal, no open request, lease or timer) is kept after its last event; then its\n"+
			"state is deleted and reads and events for it are answered as expired for as long again. 0 keeps runs for ever")
	fs.IntVar(&cfg.Projection.HistorySize, "history-size", projection.DefaultHistorySize,
		"applied events each run keeps for history windows (state: give every instance the same)")
	addProjectionFlags(fs, &cfg.Projection)
	cfg.Redaction.RegisterFlags(fs)
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write a CPU profile of the whole run to this file, for performance work (bench's -profile-dir)")
	fs.IntVar(&f.minProcs, "min-procs", 8, "raise GOMAXPROCS to at least this, even on fewer CPUs, so that human input's goroutines\n"+
		"run while a worker applies agent records (1: leave GOMAXPROCS as the runtime or GOMAXPROCS sets it)")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiles (heap, goroutines, CPU, execution trace) under /debug/pprof/ on -http-addr,\n"+
		"behind -query-secret-file like the reads, for performance work")
	f.check = checkConfigFlag(fs)
}

// warnDeprecated logs each deprecated variable that was read.
func warnDeprecated(log *slog.Logger, vars []string) {
	for _, v := range vars {
		log.Warn("deprecated environment variable: the Kafka TLS variables are CANOPY_KAFKA_TLS*", "var", v)
	}
}

// queryEndpoint is the query endpoint -http-addr and -query-secret-file
// configure: closed to the network unless its callers present the secret.
// Without one it listens on loopback by default, and an address beyond
// loopback is refused (projectorhttp.Endpoint.Validate).
func queryEndpoint(addr optionalString, secretFile string) (projectorhttp.Endpoint, error) {
	var e projectorhttp.Endpoint
	if secretFile != "" {
		s, err := cluster.ReadQuerySecret(secretFile)
		if err != nil {
			return e, fmt.Errorf("-query-secret-file: %w", err)
		}
		e.Secret = s
	}
	e.Addr = addr.or(projectorhttp.DefaultAddrFor(e.Secret))
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

// createTopics is "projector create-topics": every canopy topic, co-partitioned.
func createTopics(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("create-topics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var k kafkaconn.Flags
	k.Register(fs)
	kafkaconn.RegisterTLSAliases(fs)
	partitions := fs.Int("partitions", 12, "partitions of every co-partitioned topic")
	replication := fs.Int("replication-factor", -1, "replication factor (-1: the broker's default)")
	tombstones := fs.Duration("changelog-tombstone-retention", topics.DefaultTombstoneRetention,
		"the changelog's delete.retention.ms: how long it keeps the tombstones of deleted state (expired runs). A projector\n"+
			"restores a partition from scratch when its Pebble checkpoint is older than half of it. A topic that exists is left\n"+
			"alone")
	check := checkConfigFlag(fs)
	if _, err := flagenv.Parse(fs, args, kafkaconn.EnvAliases...); err != nil {
		return 2
	}
	if flagsParsed != nil {
		flagsParsed(fs)
		return 0
	}
	if err := k.Names().Validate(); err != nil || len(k.BrokerList()) == 0 || *partitions < 1 {
		fmt.Fprintf(stderr, "projector create-topics: want -brokers, a valid -topic-prefix and -partitions >= 1 (%v)\n", err)
		return 2
	}
	if *tombstones < time.Millisecond {
		fmt.Fprintf(stderr, "projector create-topics: -changelog-tombstone-retention %v: want at least 1ms\n", *tombstones)
		return 2
	}
	conn, err := k.Conn()
	if err != nil {
		fmt.Fprintf(stderr, "projector create-topics: %v\n", err)
		return 2
	}
	if *check {
		return checkedConfig(stderr, "projector create-topics", "", fs, kafkaconn.EnvAliases...)
	}
	cl, err := kgo.NewClient(conn.Opts()...)
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
func checkedConfig(stderr io.Writer, cmd, service string, fs *flag.FlagSet, aliases ...flagenv.EnvAlias) int {
	if unknown := flagenv.Unknown(fs, aliases...); len(unknown) > 0 {
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
