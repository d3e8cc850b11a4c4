package projector

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Config is a projector instance's configuration. Zero fields take the
// default their comment names.
type Config struct {
	// Kafka is the connection to the brokers (seed brokers, TLS, SASL)
	// every client of the instance makes. Its Brokers are required.
	Kafka kafkaconn.Conn
	// Group is the consumer group of the projector instances; default
	// "canopy-projector".
	Group string
	// InstanceID, when set, is the static group instance id (KIP-345), so
	// that a restart does not rebalance.
	InstanceID string
	// ClientID names the Kafka clients; default "canopy-projector".
	ClientID string
	// Names are the topic names; default prefix "canopy", version 1.
	Names topics.Names
	// DataDir is where Pebble keeps the state. Required.
	DataDir string
	// MemTableSize is the size in bytes of each of Pebble's memtables; at
	// most two are in memory. Default 32 MiB.
	MemTableSize int
	// MemoryLimit is the memory the process may use, in bytes: what an
	// operator sizes the container by. The runs kept in memory are bounded
	// by HotRunBytes of it, shared by every partition the instance owns
	// (least recently used runs are evicted to Pebble beyond it), and
	// cmd/projector sets the Go runtime's soft limit (GOMEMLIMIT) from it
	// (GoMemLimit). Default 512 MiB.
	MemoryLimit int64
	// Projection configures the projection and the snapshot limits. Its
	// Memory budget, when nil, is made from MemoryLimit.
	Projection projection.Config
	// Redaction is the operator's redaction rules, added to the built-in
	// ones: every record's event is redacted (pkg/redact) as soon as it is
	// decoded, before it is applied, logged or traced. Default none: the
	// built-in rules alone. Give every instance the same: the state and
	// the wakes hold the redacted text.
	Redaction redact.Config
	// Chunk is how many agent records the worker applies in one step;
	// between steps it resumes the partition's paused fetching, commits
	// when the commit is full (MaxBatch) and stops when asked. Human input
	// does not wait for a step's end: it preempts agent records between any
	// two. Default 500.
	Chunk int
	// MaxBatch is how many records one commit (one transaction) holds at
	// most. While fetched agent records wait, the partition's owner goes on
	// applying them, chunk by chunk, until this many before it publishes the
	// wakes and commits: under a backlog each run's triggers coalesce into
	// one wake per commit, and the commit's fixed costs are shared. Without
	// a backlog each fetched batch is committed as soon as it is applied.
	// Default 5000.
	MaxBatch int
	// MaxPending is how many fetched agent records may wait for one
	// partition's owner before that partition's fetching pauses; it resumes
	// at half. Default 20000.
	MaxPending int
	// MaxQueuedBytes bounds the bytes of the fetched agent records waiting
	// for the instance's partitions (keys, values, headers and each
	// record's own size), shared evenly by the partitions it owns: past
	// its share, a partition's fetching pauses, and resumes at half
	// (intake.go). It also bounds a fetch's bytes (an eighth of it). Default
	// MemoryLimit/16 (32 MiB of 512 MiB).
	MaxQueuedBytes int64
	// SessionTimeout is the group session timeout; default 6s. With
	// GroupProtocol "consumer" the projector sets it as the group's
	// consumer.session.timeout.ms (and a sixth of it as its heartbeat
	// interval), within the broker's group.consumer.min/max bounds; where
	// the broker refuses, its group.consumer.session.timeout.ms applies and
	// a warning says so.
	SessionTimeout time.Duration
	// GroupProtocol is the consumer group protocol: "classic" (default),
	// the client-driven JoinGroup/SyncGroup protocol with the
	// cooperative-sticky balancer; or "consumer", KIP-848's, where the
	// broker's group coordinator assigns the partitions incrementally (the
	// same sticky, cooperative result) and owns the session timeout and
	// heartbeat interval (group.consumer.* broker or group configs; see
	// SessionTimeout). Needs Apache Kafka 4.0 or later. bench/RESULTS.md
	// compares the two.
	GroupProtocol string
	// AtLeastOnce switches Kafka transactions off. By default (false) each
	// partition's batch (its wakes, dead letters, changelog records and
	// consumed offsets) is committed in one transaction of that partition's
	// own transactional producer, so read_committed consumers see every wake
	// exactly once. At least once, a crash can publish a batch's wakes twice
	// (same ids, same content).
	AtLeastOnce bool
	// TransactionalIDPrefix prefixes the transactional id of each
	// partition's producer (prefix + "-" + partition): every instance of one
	// deployment must use the same, and no other deployment may. Default
	// the Group.
	TransactionalIDPrefix string
	// TransactionTimeout is how long the broker lets a transaction stay open
	// before aborting it; it bounds how long one batch's commit may take,
	// broker trouble included. Default 60s.
	TransactionTimeout time.Duration
	// Standby keeps a warm copy of every partition this instance does not
	// own, tailing the changelog into Pebble, so that taking one over needs
	// only the last few commits restored. Default false.
	Standby bool
	// AdvertiseAddr, when set, is published with the instance's group
	// membership (host:port where it answers for the runs it owns), so that
	// Assignment can route a run to its owner.
	AdvertiseAddr string
	// RebalanceTimeout is how long the group's coordinator waits for the
	// members to rejoin in a rebalance (classic protocol); default 60s,
	// franz-go's and Kafka's.
	RebalanceTimeout time.Duration
	// StallTimeout is how long the consumer group may give this instance no
	// generation (it is joining: never joined, or rejoining after its
	// session was lost) while the brokers answer, before the instance
	// counts the group as stalled, stops, and lets the Supervisor start a fresh
	// member; default twice RebalanceTimeout, the longest a healthy
	// rebalance takes.
	StallTimeout time.Duration
	// LockWait is how long a Supervisor waits for a data directory that another
	// process holds (ErrDataDirLocked) before it gives up with that error;
	// default 10s.
	LockWait time.Duration
	// ReadyLag is how many records a partition may be behind its input for
	// the instance to be ready (Ready, /readyz): restored and caught up.
	// Default 10000.
	ReadyLag int64
	// PoisonAttempts is how many times a record's processing may fail the
	// same way, the record alone, before it is dead-lettered as poison
	// (poison.go); default 3.
	PoisonAttempts int
	// StalledAfter is how long records of an owned partition may wait,
	// fetched by this process, without a commit moving the partition's
	// offsets past them, before the partition counts as stalled
	// (PartitionStall: /readyz, canopy_projector_partitions_stalled). A
	// Supervisor's instances share the clock: the instance that replaces a
	// failed one fetches the same records again, and they go on waiting.
	// Default 60s.
	StalledAfter time.Duration
	// Hooks receive what the projector does, for metrics and telemetry;
	// default NopHooks.
	Hooks Hooks
	// KafkaHooks, when set, gives each Kafka client its franz-go hooks.
	KafkaHooks KafkaHooks
	// TracerProvider makes the spans of batches and wakes; default a no-op
	// provider (never the global one).
	TracerProvider trace.TracerProvider
	// Logger receives the projector's logs; default slog.Default().
	Logger *slog.Logger
	// Now is the wall clock; default time.Now. Tests inject one.
	Now func() time.Time

	// progress is where an instance tracks the records its partitions
	// wait on (set by prepare): its own for an instance New makes, shared
	// by the instances a Supervisor runs one after another.
	progress *progress
	// redaction is Redaction compiled (set by prepare).
	redaction *redact.Policy
}

// prepare validates c and completes it, once for what it configures: one
// instance (New), or a Supervisor and every instance it runs, which then share
// the budget of runs in memory and the progress of the partitions, so that
// the budget's counters and a stall go on across restarts.
func (c Config) prepare() (Config, error) {
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	c = c.withDefaults()
	if c.Projection.Memory == nil {
		c.Projection.Memory = projection.NewBudget(c.HotRunBytes())
	}
	c.progress = newProgress()
	var err error
	if c.redaction, err = redact.New(c.Redaction); err != nil {
		return Config{}, err // Validate has reported it
	}
	return c, nil
}

// ErrConfig is wrapped by Validate's error.
var ErrConfig = errors.New("projector: invalid config")

func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.ClientID == "" {
		c.ClientID = "canopy-projector"
	}
	if c.Names == (topics.Names{}) {
		c.Names = topics.DefaultNames()
	}
	if c.Chunk == 0 {
		c.Chunk = DefaultChunk
	}
	if c.MemTableSize == 0 {
		c.MemTableSize = defaultMemTableSize
	}
	if c.MemoryLimit == 0 {
		c.MemoryLimit = DefaultMemoryLimit
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.MaxQueuedBytes == 0 {
		c.MaxQueuedBytes = c.MemoryLimit / 16
	}
	if c.GroupProtocol == "" {
		c.GroupProtocol = GroupProtocolClassic
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.TransactionalIDPrefix == "" {
		c.TransactionalIDPrefix = c.Group
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = DefaultRebalanceTimeout
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 2 * c.RebalanceTimeout
	}
	if c.LockWait == 0 {
		c.LockWait = 10 * time.Second
	}
	if c.ReadyLag == 0 {
		c.ReadyLag = DefaultReadyLag
	}
	if c.PoisonAttempts == 0 {
		c.PoisonAttempts = DefaultPoisonAttempts
	}
	if c.StalledAfter == 0 {
		c.StalledAfter = DefaultStalledAfter
	}
	if c.Hooks == nil {
		c.Hooks = NopHooks{}
	}
	if c.KafkaHooks == nil {
		c.KafkaHooks = func(string) []kgo.Hook { return nil }
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Projection = c.Projection.WithDefaults()
	return c
}

// Defaults of Config's fields (withDefaults), which projector run's flags
// use as theirs: each is written once.
const (
	// DefaultGroup is Config.Group's default.
	DefaultGroup = "canopy-projector"
	// DefaultChunk is Config.Chunk's default.
	DefaultChunk = 500
	// DefaultMaxBatch is Config.MaxBatch's default.
	DefaultMaxBatch = 5000
	// DefaultMaxPending is Config.MaxPending's default.
	DefaultMaxPending = 20000
	// DefaultMemTableSize is Config.MemTableSize's default.
	DefaultMemTableSize = defaultMemTableSize
	// DefaultMemoryLimit is Config.MemoryLimit's default.
	DefaultMemoryLimit = 512 << 20
	// DefaultSessionTimeout is Config.SessionTimeout's default.
	DefaultSessionTimeout = 6 * time.Second
	// DefaultRebalanceTimeout is Config.RebalanceTimeout's default.
	DefaultRebalanceTimeout = 60 * time.Second
	// DefaultTransactionTimeout is Config.TransactionTimeout's default.
	DefaultTransactionTimeout = 60 * time.Second
	// DefaultReadyLag is Config.ReadyLag's default.
	DefaultReadyLag = 10000
	// DefaultStalledAfter is Config.StalledAfter's default.
	DefaultStalledAfter = 60 * time.Second
	// DefaultRetention is projector run's default Projection.Retention,
	// where the projection's own default keeps runs for ever.
	DefaultRetention = 7 * 24 * time.Hour
)

// processOverhead is what HotRunBytes sets aside of the memory limit for
// everything but runs and memtables: the Kafka clients and their fetch
// buffers, Pebble's block cache (8 MiB), the records queued for the
// partitions (MaxQueuedBytes, a sixteenth of the limit by default),
// goroutine stacks, the HTTP endpoint, and the room commits keep for the
// next while the heap is well under its limit (at most about 3 MB per
// partition: its emptied journals and changelog records).
const processOverhead = 64 << 20

// minHotRunBytes is the least HotRunBytes Validate accepts.
const minHotRunBytes = 16 << 20

// HotRunBytes is the budget of runs in memory: half of what the memory
// limit leaves after Pebble's two memtables and the process's overhead.
// Half, because the Go heap needs room beyond its live data for the
// garbage collector to work without running all the time (GOMEMLIMIT makes
// it collect harder near the limit rather than fail). With the defaults:
// (512 - 2 × 32 - 64) / 2 = 192 MiB.
func (c Config) HotRunBytes() int64 {
	c = c.withDefaults()
	return (c.MemoryLimit - 2*int64(c.MemTableSize) - processOverhead) / 2
}

// pebbleBlockCache is Pebble's default block cache, which canopy uses.
const pebbleBlockCache = 8 << 20

// GoMemLimit is the Go runtime's soft memory limit (GOMEMLIMIT) that fits
// MemoryLimit: 90% of it (the rest for what no allocator counts: page
// cache charged to a container, thread stacks, kernel buffers) less
// Pebble's two memtables and its block cache, which Pebble allocates
// outside the Go heap when built with cgo, as canopy's binaries are (the
// soak scenario found RSS 10% over a limit that counted them in).
func (c Config) GoMemLimit() int64 {
	c = c.withDefaults()
	return c.MemoryLimit/10*9 - 2*int64(c.MemTableSize) - pebbleBlockCache
}

// Validate reports every problem with c, each with what to do about it.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []string
	if len(c.Kafka.Brokers) == 0 {
		errs = append(errs, "no brokers: set -brokers (or CANOPY_BROKERS) to host:port[,host:port...]")
	}
	for _, b := range c.Kafka.Brokers {
		if !strings.Contains(b, ":") {
			errs = append(errs, fmt.Sprintf("broker %q: want host:port", b))
		}
	}
	if c.DataDir == "" {
		errs = append(errs, "no data directory: set -data-dir (or CANOPY_DATA_DIR) to where Pebble keeps state")
	}
	if err := c.Names.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if err := c.Projection.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if err := c.Redaction.Validate(); err != nil {
		errs = append(errs, "redaction rules (-redact-field, -redact-pattern): "+err.Error())
	}
	if c.Chunk < 1 {
		errs = append(errs, fmt.Sprintf("chunk %d: want 1 or more", c.Chunk))
	}
	if c.MemTableSize < 64<<10 || c.MemTableSize >= 4<<30 {
		errs = append(errs, fmt.Sprintf("memtable size %d bytes: want 64 KiB to 4 GiB (default 32 MiB)", c.MemTableSize))
	}
	if c.MemoryLimit < 0 {
		errs = append(errs, fmt.Sprintf("memory limit %d bytes: must not be negative (default 512 MiB)", c.MemoryLimit))
	} else if c.MemTableSize >= 64<<10 && c.HotRunBytes() < minHotRunBytes {
		errs = append(errs, fmt.Sprintf("memory limit %d MiB leaves %d MiB for runs in memory, after Pebble's two memtables (%d MiB each) and %d MiB for the process; want at least %d MiB: raise -memory-limit or lower -memtable-mb",
			c.MemoryLimit>>20, c.HotRunBytes()>>20, c.MemTableSize>>20, processOverhead>>20, minHotRunBytes>>20))
	}
	if c.MaxBatch < c.Chunk {
		errs = append(errs, fmt.Sprintf("max batch %d: want at least the chunk size %d", c.MaxBatch, c.Chunk))
	}
	if c.MaxQueuedBytes < 1<<20 {
		errs = append(errs, fmt.Sprintf("max queued bytes %d: want 1 MiB or more (default a sixteenth of the memory limit)", c.MaxQueuedBytes))
	}
	if c.MaxPending < c.Chunk {
		errs = append(errs, fmt.Sprintf("max pending %d: want at least the chunk size %d", c.MaxPending, c.Chunk))
	}
	if c.SessionTimeout < time.Second {
		errs = append(errs, fmt.Sprintf("session timeout %v: want 1s or more", c.SessionTimeout))
	}
	if c.RebalanceTimeout < 0 {
		errs = append(errs, fmt.Sprintf("rebalance timeout %v: want 0 (default 60s) or more", c.RebalanceTimeout))
	}
	if c.StallTimeout < 0 {
		errs = append(errs, fmt.Sprintf("stall timeout %v: want 0 (default twice the rebalance timeout) or more", c.StallTimeout))
	}
	switch c.GroupProtocol {
	case "", GroupProtocolClassic, GroupProtocolConsumer:
	default:
		errs = append(errs, fmt.Sprintf("group protocol %q: want %s or %s (KIP-848)", c.GroupProtocol, GroupProtocolClassic, GroupProtocolConsumer))
	}
	if c.TransactionTimeout < time.Second {
		errs = append(errs, fmt.Sprintf("transaction timeout %v: want 1s or more", c.TransactionTimeout))
	}
	if c.PoisonAttempts < 0 {
		errs = append(errs, fmt.Sprintf("poison attempts %d: want 0 (default %d) or more", c.PoisonAttempts, DefaultPoisonAttempts))
	}
	if c.ReadyLag < 0 {
		errs = append(errs, fmt.Sprintf("ready lag %d: want 0 (default 10000) or more", c.ReadyLag))
	}
	if c.StalledAfter < 0 {
		errs = append(errs, fmt.Sprintf("stalled after %v: want 0 (default 60s) or more", c.StalledAfter))
	}
	if c.AdvertiseAddr != "" && !strings.Contains(c.AdvertiseAddr, ":") {
		errs = append(errs, fmt.Sprintf("advertise address %q: want host:port", c.AdvertiseAddr))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return nil
}

// The consumer group protocols (Config.GroupProtocol).
const (
	GroupProtocolClassic  = cluster.GroupProtocolClassic  // JoinGroup/SyncGroup, client-side cooperative-sticky
	GroupProtocolConsumer = cluster.GroupProtocolConsumer // KIP-848, broker-side assignment
)
