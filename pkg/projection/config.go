package projection

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Config is the projection's behaviour. The zero value of a field means its
// default.
type Config struct {
	// Limits bound the snapshots; defaults are seed 000's.
	Limits snapshot.Limits
	// MaxDepth is seed 001's maxDepth budget: a node created deeper raises a
	// guard:maxDepth diagnostic and wake. Default 4; negative disables.
	MaxDepth int
	// ProgressInterval: progress signals wake a run's conductor at most once
	// per interval of the run's clock. Default 5s.
	ProgressInterval time.Duration
	// ForwardGrace is how long after a completion receipt the watchdog waits
	// for the conductor's wake_received before it raises
	// done_but_not_forwarded. Default 30s.
	ForwardGrace time.Duration
	// MaxHotNodes bounds the nodes a store-backed projection keeps in
	// memory; colder runs are read back from the Storage when next used.
	// Default 1,000,000.
	MaxHotNodes int
	// MaxHotNodesPerRun bounds the nodes of one run a store-backed
	// projection keeps in memory: a larger run keeps those it used last
	// (each node's facts; every node keeps its entries in the run's
	// indexes, about a tenth of a node's footprint) and reads the others
	// back from the Storage when an event, a timer or a snapshot needs one, so
	// that a run's memory does not grow with its size. Runs at or under
	// it are wholly in memory. Default 4,096.
	MaxHotNodesPerRun int
	// Memory, when set, bounds the bytes of runs kept in memory, shared with
	// every projection given the same Budget (a process's partitions);
	// least recently used runs are evicted to the Storage beyond it. Default nil:
	// only MaxHotNodes bounds them.
	Memory *Budget
	// Retention is how long a finished run (its root terminal, no open
	// request, lease or timer) is kept after its clock, its last event's
	// time, measured on the wall clock FireDue is given: then its state is
	// deleted, and for as long again reads and events for it are answered
	// as expired (retention.go). Only with a store. Default 0: runs are
	// kept for ever (the projector's own default is 7 days).
	Retention time.Duration
	// HistorySize is how many of its last applied events each run keeps as
	// compact history entries (ids, enums, times) for history windows;
	// they are state, persisted and carried by the changelog. Default 256.
	HistorySize int
	// DedupeWindow is how many of its last applied event ids each run
	// keeps, each with its event's content hash, to recognise an event
	// sent again (a producer's retry): an event whose id is among them is
	// a duplicate, ignored, when its content is the same, and a conflict,
	// refused (DuplicateConflictError), when not. An event sent again
	// after DedupeWindow other events of its run is applied again.
	// Records delivered again (after a crash or a rebalance) are
	// recognised by the committed offsets instead, however old. The ids
	// are state, persisted with the history entries. Default 1024.
	DedupeWindow int
	// MaxWakeBytes bounds the encoded size of every wake. A run's triggers
	// that would make a larger wake are split, in their order, over
	// several wakes (docs/CONTRACT.md "Wake size"); the triggers are
	// budgeted against what is left of it beside a snapshot at
	// Limits.MaxBytes and the widest wake envelope, so it must hold those
	// and the widest trigger a valid event can raise. Default 524,288:
	// well below the largest record a Kafka producer (1,000,012 bytes)
	// and a broker (1,048,588 bytes) accept by default.
	MaxWakeBytes int
	// MaxWakeTriggers bounds the triggers of one wake: more are split over
	// several wakes, as for MaxWakeBytes. Default 256.
	MaxWakeTriggers int
}

// Defaults of Config.
const (
	DefaultMaxDepth          = 4
	DefaultProgressInterval  = 5 * time.Second
	DefaultForwardGrace      = 30 * time.Second
	DefaultMaxHotNodes       = 1_000_000
	DefaultMaxHotNodesPerRun = 4096
	DefaultHistorySize       = 256
	DefaultDedupeWindow      = 1024
	DefaultMaxWakeBytes      = 512 << 10
	DefaultMaxWakeTriggers   = 256
)

// MaxDedupeWindow bounds Config.DedupeWindow: the ids are kept in memory
// for every run loaded, and in its state.
const MaxDedupeWindow = 1_000_000

// MaxHistorySize bounds Config.HistorySize: every entry is state of its
// run, in memory, in its journal and in the changelog. It is also the largest history
// page any projection can serve (MaxPage).
const MaxHistorySize = 100_000

// wakeOverhead is what a wake may take beside its snapshot, at the least:
// the widest envelope and one trigger at its widest.
func wakeOverhead() int { return topics.MaxWakeEnvelopeJSONBytes() + topics.MaxTriggerJSONBytes() }

// triggerBudget is the bytes a wake's triggers (and the commas between
// them) may take: MaxWakeBytes less a snapshot at its budget and the
// widest envelope. Validate made it hold one trigger at its widest.
func (c *Config) triggerBudget() int {
	return c.MaxWakeBytes - c.Limits.MaxBytes - topics.MaxWakeEnvelopeJSONBytes()
}

// ErrInvalidConfig is wrapped by Config.Validate's error.
var ErrInvalidConfig = errors.New("projection: invalid config")

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Limits = c.Limits.WithDefaults()
	if c.MaxDepth == 0 {
		c.MaxDepth = DefaultMaxDepth
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.ForwardGrace == 0 {
		c.ForwardGrace = DefaultForwardGrace
	}
	if c.MaxHotNodes == 0 {
		c.MaxHotNodes = DefaultMaxHotNodes
	}
	if c.MaxHotNodesPerRun == 0 {
		c.MaxHotNodesPerRun = DefaultMaxHotNodesPerRun
	}
	if c.HistorySize == 0 {
		c.HistorySize = DefaultHistorySize
	}
	if c.DedupeWindow == 0 {
		c.DedupeWindow = DefaultDedupeWindow
	}
	if c.MaxWakeBytes == 0 {
		c.MaxWakeBytes = DefaultMaxWakeBytes
	}
	if c.MaxWakeTriggers == 0 {
		c.MaxWakeTriggers = DefaultMaxWakeTriggers
	}
	return c
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []string
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err.Error())
	} else if c.MaxWakeBytes >= 0 {
		d := c.WithDefaults()
		if need := d.Limits.MaxBytes + wakeOverhead(); d.MaxWakeBytes < need {
			errs = append(errs, fmt.Sprintf("max wake bytes %d: a wake must hold a snapshot at the max snapshot bytes (%d), "+
				"the widest wake envelope (%d) and the widest trigger (%d): raise the max wake bytes (-max-wake-bytes) to at least %d, "+
				"or lower the max snapshot bytes (-max-snapshot-bytes)",
				d.MaxWakeBytes, d.Limits.MaxBytes, topics.MaxWakeEnvelopeJSONBytes(), topics.MaxTriggerJSONBytes(), need))
		}
	}
	if c.MaxWakeBytes < 0 {
		errs = append(errs, fmt.Sprintf("max wake bytes %d: must not be negative (0: the default, %d)", c.MaxWakeBytes, DefaultMaxWakeBytes))
	}
	if c.MaxWakeTriggers < 0 {
		errs = append(errs, fmt.Sprintf("max wake triggers %d: must not be negative (0: the default, %d)", c.MaxWakeTriggers, DefaultMaxWakeTriggers))
	}
	if c.ProgressInterval < 0 {
		errs = append(errs, fmt.Sprintf("progress interval %v: must not be negative", c.ProgressInterval))
	}
	if c.ForwardGrace < 0 {
		errs = append(errs, fmt.Sprintf("forward grace %v: must not be negative", c.ForwardGrace))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Sprintf("retention %v: want 0 (keep runs for ever) or more", c.Retention))
	}
	if c.MaxHotNodes < 0 {
		errs = append(errs, fmt.Sprintf("max hot nodes %d: must not be negative", c.MaxHotNodes))
	}
	if c.MaxHotNodesPerRun < 0 {
		errs = append(errs, fmt.Sprintf("max hot nodes per run %d: must not be negative (0: the default, %d)", c.MaxHotNodesPerRun, DefaultMaxHotNodesPerRun))
	}
	if c.HistorySize < 0 || c.HistorySize > MaxHistorySize {
		errs = append(errs, fmt.Sprintf("history size %d: want 0 (default) to %d", c.HistorySize, MaxHistorySize))
	}
	if c.DedupeWindow < 0 || c.DedupeWindow > MaxDedupeWindow {
		errs = append(errs, fmt.Sprintf("dedupe window %d: want 0 (default) to %d", c.DedupeWindow, MaxDedupeWindow))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(errs, "; "))
	}
	return nil
}
