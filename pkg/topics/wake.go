package topics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// WakeSchemaVersion is the version of the wake message this build writes.
const WakeSchemaVersion = 1

// Wake is the message a projector publishes when a run's conductor must react.
// Everything but the snapshot's generated_at, snapshot_age_ms, stale and each
// node's lease_remaining_ms is a pure function of the input log, so a
// conductor can drop a duplicate by WakeID (docs/CONTRACT.md "Wake ids").
type Wake struct {
	WakeID        string `json:"wake_id"`
	SchemaVersion int    `json:"schema_version"`
	RunID         string `json:"run_id"`
	Lane          Lane   `json:"lane"`
	// Part is set only on a wake that is one of several a run's triggers
	// were split over, because one wake would have held more of them than
	// the projector's bounds allow (docs/CONTRACT.md "Wake size"). Each
	// part is a wake of its own: its own id, its triggers and a snapshot
	// built for them.
	Part *WakePart `json:"part,omitempty"`
	// Triggers say why the conductor is woken, in the order they happened.
	Triggers []Trigger `json:"triggers"`
	// AgentTreeSnapshot is the bounded state of the run's tree (seed 000).
	AgentTreeSnapshot AgentTreeSnapshot `json:"agent_tree_snapshot"`
}

// WakePart numbers one wake of a split: the parts of one run's triggers
// are numbered 1 to Count, in trigger order, and published consecutively on
// one lane and partition.
type WakePart struct {
	// Number is the part's, from 1.
	Number int `json:"number"`
	// Count is how many parts the triggers were split over, at least 2.
	Count int `json:"count"`
}

// Trigger is one reason for a wake.
type Trigger struct {
	Kind TriggerKind `json:"kind"`
	// EventID is the event that raised it; null for timer triggers.
	EventID *string `json:"event_id"`
	AgentID string  `json:"agent_id"`
	// CorrelationID of the triggering event, if it had one.
	CorrelationID *string `json:"correlation_id"`
	// At is the event's time, or the time a timer fell due.
	At Time `json:"at"`
	// Detail is a short code: the failed error code, the request kind, the
	// watchdog status, the lease owner, the status reason; null if none.
	Detail *string `json:"detail"`
	// Input is the human input that raised a human_input trigger.
	Input *TriggerInput `json:"input,omitempty"`
}

// TriggerInput carries human input to the conductor. It is the only free text
// a wake carries, and it is outside the snapshot.
type TriggerInput struct {
	InputKind  string `json:"input_kind"`
	Text       string `json:"text,omitempty"`
	ContentRef string `json:"content_ref,omitempty"`
}

// DecodeWake decodes a wake strictly: unknown fields are refused so that a
// conductor notices a contract it does not speak.
func DecodeWake(b []byte) (*Wake, error) {
	var w Wake
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: wake: %s", ErrInvalidEvent, jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: wake: trailing data", ErrInvalidEvent)
	}
	var ps problems
	checkID(&ps, "wake_id", w.WakeID, true)
	checkID(&ps, "run_id", w.RunID, true)
	if w.SchemaVersion > WakeSchemaVersion {
		return nil, fmt.Errorf("%w: wake schema_version %d is newer than this build speaks (%d)", ErrUnsupportedVersion, w.SchemaVersion, WakeSchemaVersion)
	}
	if w.SchemaVersion < 1 {
		ps.add("schema_version", "required; this build writes 1")
	}
	if w.Lane != LaneNormal && w.Lane != LanePriority {
		ps.add("lane", "want normal|priority, got "+quote(string(w.Lane)))
	}
	if p := w.Part; p != nil && (p.Count < 2 || p.Number < 1 || p.Number > p.Count) {
		ps.add("part", fmt.Sprintf("want 1 <= number <= count and count >= 2, got number %d of count %d", p.Number, p.Count))
	}
	for i, t := range w.Triggers {
		if !oneOf(t.Kind, TriggerKinds) {
			ps.add(fmt.Sprintf("triggers[%d].kind", i), "want one of "+join(TriggerKinds)+", got "+quote(string(t.Kind)))
		}
	}
	s := &w.AgentTreeSnapshot
	for i, n := range s.Nodes {
		if !oneOf(n.Status, Statuses) {
			ps.add(fmt.Sprintf("agent_tree_snapshot.nodes[%d].status", i), "want one of "+join(Statuses)+", got "+quote(string(n.Status)))
		}
		if n.Role != RoleUnknown && !oneOf(n.Role, Roles) {
			ps.add(fmt.Sprintf("agent_tree_snapshot.nodes[%d].role", i), "want one of "+join(Roles)+"|unknown, got "+quote(string(n.Role)))
		}
	}
	if len(ps) > 0 {
		return nil, &DecodeError{kind: ErrInvalidEvent, EventID: w.WakeID, Type: "wake", Problems: ps}
	}
	return &w, nil
}

// AgentTreeSnapshot is seed 000's envelope: a bounded, deterministic digest of
// a run's agent tree. Every field is always present; a fact the projection
// does not have is null (or "unknown"), never a default that looks healthy.
type AgentTreeSnapshot struct {
	SnapshotID string `json:"snapshot_id"`
	// GeneratedAt is wall-clock time of generation: one of the three fields
	// that may differ between two builds of the same input.
	GeneratedAt Time `json:"generated_at"`
	// AsOfEventSeq counts the run's events applied when this was built.
	AsOfEventSeq int64   `json:"as_of_event_seq"`
	RootAgentID  *string `json:"root_agent_id"`
	Scope        Scope   `json:"scope"`
	// Nodes are in inclusion order: the root first.
	Nodes          []NodeDigest   `json:"nodes"`
	Summary        Summary        `json:"summary"`
	Truncated      bool           `json:"truncated"`
	TruncationMeta TruncationMeta `json:"truncation_meta"`
	// Stale says the projection was behind its input by more than the
	// threshold when it built this snapshot; SnapshotAgeMs says by how much.
	Stale         bool  `json:"stale"`
	SnapshotAgeMs int64 `json:"snapshot_age_ms"`
}

// Scope is what the snapshot is about.
type Scope struct {
	RunID     string  `json:"run_id"`
	SessionID *string `json:"session_id"`
	ThreadID  *string `json:"thread_id"`
}

// NodeDigest is seed 000's AgentTreeNodeDigest, field for field.
type NodeDigest struct {
	AgentID       string  `json:"agent_id"`
	Role          Role    `json:"role"`
	ParentAgentID *string `json:"parent_agent_id"`

	Status          Status `json:"status"`
	StatusUpdatedAt *Time  `json:"status_updated_at"`

	LeaseOwner       *string `json:"lease_owner"`
	LeaseExpiresAt   *Time   `json:"lease_expires_at"`
	LeaseRemainingMs *int64  `json:"lease_remaining_ms"`

	ActiveRunID  *string `json:"active_run_id"`
	ActiveTaskID *string `json:"active_task_id"`
	Capability   *string `json:"capability"`

	LastSignalKind    *SignalKind `json:"last_signal_kind"`
	LastSignalAt      *Time       `json:"last_signal_at"`
	LastCorrelationID *string     `json:"last_correlation_id"`

	OpenRequestCount        int      `json:"open_request_count"`
	LastRequestKind         *string  `json:"last_request_kind"`
	RecentRequestDedupeKeys []string `json:"recent_request_dedupe_keys"`
}

// Summary counts the whole tree, not only the included nodes.
type Summary struct {
	NodeCountTotal    int          `json:"node_count_total"`
	NodeCountIncluded int          `json:"node_count_included"`
	CountsByStatus    StatusCounts `json:"counts_by_status"`
	BlockedCount      int          `json:"blocked_count"`
	FailedCount       int          `json:"failed_count"`
	OverdueLeaseCount int          `json:"overdue_lease_count"`
	// ActiveCorrelationHandles are the newest active handles, bounded.
	ActiveCorrelationHandles []string `json:"active_correlation_handles"`
	OpenRequestCount         int      `json:"open_request_count"`
}

// StatusCounts has one count per status, always all of them, in contract order.
type StatusCounts struct {
	Idle      int `json:"idle"`
	Running   int `json:"running"`
	Blocked   int `json:"blocked"`
	Failed    int `json:"failed"`
	Completed int `json:"completed"`
	Unknown   int `json:"unknown"`
}

// Add adds d to the count of s.
func (c *StatusCounts) Add(s Status, d int) {
	switch s {
	case StatusIdle:
		c.Idle += d
	case StatusRunning:
		c.Running += d
	case StatusBlocked:
		c.Blocked += d
	case StatusFailed:
		c.Failed += d
	case StatusCompleted:
		c.Completed += d
	default:
		c.Unknown += d
	}
}

// Get returns the count of s.
func (c StatusCounts) Get(s Status) int {
	switch s {
	case StatusIdle:
		return c.Idle
	case StatusRunning:
		return c.Running
	case StatusBlocked:
		return c.Blocked
	case StatusFailed:
		return c.Failed
	case StatusCompleted:
		return c.Completed
	default:
		return c.Unknown
	}
}

// Total is the sum of all counts.
func (c StatusCounts) Total() int {
	return c.Idle + c.Running + c.Blocked + c.Failed + c.Completed + c.Unknown
}

// TruncationMeta says what a snapshot left out and under which policy. It is
// always present; when Truncated is false its counts are zero.
type TruncationMeta struct {
	OmittedCountTotal int          `json:"omitted_count_total"`
	OmittedByStatus   StatusCounts `json:"omitted_by_status"`
	// ByteBudget is max_total_snapshot_bytes the snapshot was built under.
	ByteBudget    int    `json:"byte_budget"`
	PolicyVersion string `json:"policy_version"`
	// Beyond seed 000's four fields, so that every kind of truncation is
	// visible: correlation handles left out of the summary, and free-text
	// strings cut to max_string_length.
	OmittedCorrelationHandles int `json:"omitted_correlation_handles"`
	CutStrings                int `json:"cut_strings"`
}
