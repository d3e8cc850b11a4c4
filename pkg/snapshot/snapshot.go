// Package snapshot builds seed 000's agent_tree_snapshot: a pure function from
// a run's projected tree, the wake it is for, the limits and the time to a
// bounded, deterministic snapshot.
//
// The builder never scans the tree. The Tree interface hands it candidates
// already ranked by each criterion of the inclusion order (the projection
// serves them from its indexes) and precomputed totals, and the builder stops
// reading as soon as it has max_nodes. Its cost depends on the limits, not on
// the size of the run. A tree that keeps a Cache (CachingTree, as the
// projection's runs do) spares it most of that cost: a node's digest is
// encoded when the node changed since the last wake that included it, not
// at every wake.
//
// Determinism: for the same tree, wake and limits the snapshot is the same
// bytes, except generated_at, snapshot_age_ms and stale, which depend on the
// wall clock, and each node's lease_remaining_ms, which depends on the wake's
// logical time (Wake.At: replay -now builds one wake id at many). The byte
// budget is measured with those four at their widest, so neither clock can
// ever change which nodes are included.
package snapshot

import (
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// PolicyVersion names the inclusion and truncation policy implemented here;
// it travels in truncation_meta.policy_version. Change it whenever the order
// or the budget rules change.
const PolicyVersion = "canopy.truncation.v1"

// Node is what the projection knows of one node: the raw facts from which the
// builder makes a digest. An empty string or a zero time means "no fact" and
// becomes null in the digest.
type Node struct {
	AgentID         string
	Role            topics.Role // empty means unknown
	ParentAgentID   string
	Status          topics.Status // empty means unknown
	StatusUpdatedAt topics.Time

	// A lease is held when LeaseExpiresAt is set.
	LeaseOwner     string
	LeaseExpiresAt topics.Time

	ActiveRunID  string
	ActiveTaskID string
	Capability   string

	LastSignalKind    topics.SignalKind
	LastSignalAt      topics.Time
	LastCorrelationID string

	OpenRequestCount int
	LastRequestKind  string
	// RecentDedupeKeys are newest first; the builder keeps the first
	// Limits.MaxDedupeKeys.
	RecentDedupeKeys []string
}

// Stats are totals over the whole run, kept up to date by the projection so
// that the summary never needs a scan.
type Stats struct {
	NodeCount          int
	ByStatus           topics.StatusCounts
	OverdueLeases      int
	OpenRequests       int
	ActiveCorrelations int
}

// Tree is a run's projected tree as the builder reads it. Each sequence yields
// nodes in the order the inclusion policy ranks them and may be infinite in
// principle; the builder stops early.
type Tree interface {
	RunID() string
	SessionID() string // empty if none
	ThreadID() string  // empty if none
	// Root is the run's root conductor node, if the projection has seen it.
	Root() (Node, bool)
	// Node looks up one node.
	Node(agentID string) (Node, bool)
	// WithCorrelation yields the nodes whose last correlation id is id, by agent id.
	WithCorrelation(id string) iter.Seq[Node]
	// Urgent yields blocked and failed nodes, most recent status change first,
	// ties by agent id.
	Urgent() iter.Seq[Node]
	// ByLeaseExpiry yields nodes holding a lease, soonest expiry first, ties
	// by agent id.
	ByLeaseExpiry() iter.Seq[Node]
	// ByLastSignal yields every node, newest last_signal_at first, ties by
	// agent id; nodes that never signalled come last, by agent id.
	ByLastSignal() iter.Seq[Node]
	// ActiveCorrelations yields active correlation handles, most recently
	// active first, ties by handle.
	ActiveCorrelations() iter.Seq[string]
	Stats() Stats
}

// Wake is what the snapshot is built for.
type Wake struct {
	// SnapshotID becomes snapshot_id.
	SnapshotID string
	// Seq is the run's applied event count: as_of_event_seq.
	Seq int64
	// At is the run's logical time (the newest event time, or the time a timer
	// fell due). Lease remaining time is measured against it, not against the
	// wall clock, so it is the same on every replay.
	At topics.Time
	// Source is the time up to which the projection is known to reflect its
	// input log: snapshot_age_ms is now minus Source. Zero means At.
	Source topics.Time
	// AgentIDs and CorrelationIDs are the nodes and handles the wake's
	// triggers refer to, in trigger order: second in the inclusion order.
	AgentIDs       []string
	CorrelationIDs []string
	// Room is how many bytes Build leaves free before the snapshot's
	// encoding in its buffer (Info.Framed), and it leaves one more after
	// it: room for the wake's envelope to be written around the encoding
	// in place (topics.WakeJSONAround) rather than the encoding copied
	// into the wake's. 0 (the default) leaves none.
	Room int
	// Buffer, when not nil, returns an empty buffer of capacity at least n
	// for Build to encode the snapshot in (Info.Framed), so that a caller
	// can recycle the buffers of wakes it has published rather than
	// allocate one of some 24 KB per wake. The room before the encoding is
	// not cleared. nil, or a buffer too small, and Build makes one.
	Buffer func(n int) []byte
	// Nodes, when not nil, returns a slice of length n for the snapshot's
	// nodes, whatever it holds (Build sets every element), so that a caller
	// that lets go of a snapshot's nodes once encoded can recycle them.
	// nil, or a slice of another length, and Build makes one.
	Nodes func(n int) []topics.NodeDigest
}

// Limits are seed 000's bounds. The zero value of a field means its default.
type Limits struct {
	// MaxNodes bounds nodes included; default 64.
	MaxNodes int
	// MaxDedupeKeys bounds recent_request_dedupe_keys per node; default 3.
	MaxDedupeKeys int
	// MaxCorrelationHandles bounds summary.active_correlation_handles; default 20.
	MaxCorrelationHandles int
	// MaxBytes bounds the encoded snapshot; default 24000.
	MaxBytes int
	// MaxStringLength bounds every string, in characters; default 160.
	MaxStringLength int
	// StaleAfter is the snapshot age over which stale is true; default 10s.
	StaleAfter time.Duration
}

// Defaults of Limits (seed 000 "Bounds and Budget").
const (
	DefaultMaxNodes              = 64
	DefaultMaxDedupeKeys         = 3
	DefaultMaxCorrelationHandles = 20
	DefaultMaxBytes              = 24000
	DefaultMaxStringLength       = 160
	DefaultStaleAfter            = 10 * time.Second
	// MinBytes is the smallest byte budget accepted: room for the envelope of
	// an empty tree with every string at its longest.
	MinBytes = 2048
)

// Errors of Build, which wraps them.
var (
	// ErrInvalidLimits is wrapped by Limits.Validate's error.
	ErrInvalidLimits = errors.New("snapshot: invalid limits")
	// ErrEncoding: a node or the envelope holds a value the wire format
	// cannot say (a time outside years 0000-9999). The same tree fails the
	// same way at every build.
	ErrEncoding = errors.New("snapshot: cannot encode")
	// ErrAccounting: the builder's check of its own byte accounting failed,
	// a defect of the builder rather than of the tree. No snapshot is
	// better than one that may exceed its budget or depend on the clock.
	ErrAccounting = errors.New("snapshot: the byte accounting is wrong")
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MaxNodes, DefaultMaxNodes)
	def(&l.MaxDedupeKeys, DefaultMaxDedupeKeys)
	def(&l.MaxCorrelationHandles, DefaultMaxCorrelationHandles)
	def(&l.MaxBytes, DefaultMaxBytes)
	def(&l.MaxStringLength, DefaultMaxStringLength)
	if l.StaleAfter == 0 {
		l.StaleAfter = DefaultStaleAfter
	}
	return l
}

// Validate reports every limit that is out of range, after defaults.
func (l Limits) Validate() error {
	l = l.WithDefaults()
	var errs []string
	if l.MaxNodes < 1 || l.MaxNodes > 10000 {
		errs = append(errs, fmt.Sprintf("max nodes %d: want 1 to 10000", l.MaxNodes))
	}
	if l.MaxDedupeKeys < 1 || l.MaxDedupeKeys > 64 {
		errs = append(errs, fmt.Sprintf("max dedupe keys %d: want 1 to 64 (0 takes the default, %d)", l.MaxDedupeKeys, DefaultMaxDedupeKeys))
	}
	if l.MaxCorrelationHandles < 1 || l.MaxCorrelationHandles > 1000 {
		errs = append(errs, fmt.Sprintf("max correlation handles %d: want 1 to 1000 (0 takes the default, %d)", l.MaxCorrelationHandles, DefaultMaxCorrelationHandles))
	}
	if l.MaxBytes < MinBytes || l.MaxBytes > 16<<20 {
		errs = append(errs, fmt.Sprintf("max bytes %d: want %d to %d", l.MaxBytes, MinBytes, 16<<20))
	}
	if l.MaxStringLength < 8 || l.MaxStringLength > 4096 {
		errs = append(errs, fmt.Sprintf("max string length %d: want 8 to 4096", l.MaxStringLength))
	}
	if l.StaleAfter < 0 {
		errs = append(errs, fmt.Sprintf("stale after %v: must not be negative", l.StaleAfter))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidLimits, strings.Join(errs, "; "))
	}
	return nil
}

// Info describes a built snapshot for telemetry: metadata only.
type Info struct {
	// Bytes is the size of the encoded snapshot.
	Bytes int
	// Encoded is the snapshot's JSON encoding, exactly topics.Marshal's:
	// Build encodes it to check its byte accounting, and a wake's encoder
	// can splice it in (topics.AppendWakeJSON) rather than encode it again.
	// It belongs to the caller; nil when the snapshot was not built.
	Encoded []byte
	// Framed is Encoded with Wake.Room free bytes before it, in one
	// buffer with capacity for one byte more after it: Encoded is
	// Framed[Wake.Room:]. It belongs to the caller, as Encoded does.
	Framed        []byte
	NodesIncluded int
	NodesOmitted  int
	Truncated     bool
	Stale         bool
	AgeMs         int64
	// Cut is the bound the snapshot's strings were cut at: the limits'
	// MaxStringLength, or less when even the root did not fit at it (see
	// Build). A wake's triggers cut their ids at it too, so that they
	// match the snapshot's.
	Cut int
}
