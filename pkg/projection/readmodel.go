package projection

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/btree"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// ReadModelVersion is the version of the ReadModel encoding; it grows when
// a field changes meaning (adding one does not).
const ReadModelVersion = 2

// MaxReadModelList bounds every list of a read model (nodes, requests): a
// read model answers "what is happening now", and a tree of a hundred
// thousand nodes must not make it unbounded. Totals are always exact.
const MaxReadModelList = 20

// readModelScan bounds how many index entries one list reads; a list that
// did not find all its nodes within it says so (Truncated), rather than
// scanning a huge tree while the partition's owner waits.
const readModelScan = 4096

// Availability says whether a fact of the read model is known, and if not
// why (seed 003 "Snapshot Honesty"): a fact the runtime does not have is
// never filled with a value that looks healthy.
type Availability string

// The availabilities of seed 003, plus known.
const (
	// Known: the value is a fact the projection derived from events.
	Known Availability = "known"
	// Unknown: the runtime lacks enough facts (e.g. no root node seen yet).
	Unknown Availability = "unknown"
	// Unavailable: canopy's events do not carry this fact at all.
	Unavailable Availability = "unavailable"
	// NotApplicable: the fact does not apply to this run.
	NotApplicable Availability = "not_applicable"
	// Stale: a value is given but may not be current (the projection was
	// behind its input log).
	Stale Availability = "stale"
	// Blocked: permission, credential, quota, network, context or human
	// action is required.
	Blocked Availability = "blocked"
)

// Fact is one fact of the read model with its availability. Value is null
// unless Status is known, stale or blocked (and may be null then too: a
// fact known to be none, such as no active turn); Reason says, for a
// person, why a fact is not known, or what blocks.
type Fact[T any] struct {
	Status Availability `json:"status"`
	Value  *T           `json:"value"`
	Reason string       `json:"reason,omitempty"`
}

func knownFact[T any](v T, stale bool) Fact[T] {
	if stale {
		return Fact[T]{Status: Stale, Value: &v, Reason: "the projection is behind its input log"}
	}
	return Fact[T]{Status: Known, Value: &v}
}

// ReadModelNode is a node in a read-model list: ids and enums only, like
// the snapshot's nodes.
type ReadModelNode struct {
	AgentID         string        `json:"agent_id"`
	Role            topics.Role   `json:"role"`
	Status          topics.Status `json:"status"`
	StatusUpdatedAt *topics.Time  `json:"status_updated_at"`
}

// NodeList is a bounded list of nodes with the exact total.
type NodeList struct {
	// Total is how many nodes are in this state.
	Total int `json:"total"`
	// Nodes are at most MaxReadModelList of them, in the order the list's
	// doc comment names.
	Nodes []ReadModelNode `json:"nodes"`
	// Truncated is true when Nodes holds fewer than Total.
	Truncated bool `json:"truncated"`
}

// PendingRequest is an open signal.request.
type PendingRequest struct {
	RequestID string `json:"request_id"`
	AgentID   string `json:"agent_id"`
	// ExpiresAt is when its TTL ends; null when it has none.
	ExpiresAt *topics.Time `json:"expires_at"`
}

// PendingRequests is the bounded list of open requests.
type PendingRequests struct {
	Total int `json:"total"`
	// Requests are at most MaxReadModelList, by request id.
	Requests  []PendingRequest `json:"requests"`
	Truncated bool             `json:"truncated"`
}

// WatchdogSummary counts dispatched nodes by seed 004's watchdog status.
type WatchdogSummary struct {
	Dispatched             int `json:"dispatched"`
	Active                 int `json:"active"`
	SuspectDeliveryFailure int `json:"suspect_delivery_failure"`
	DoneButNotForwarded    int `json:"done_but_not_forwarded"`
	Completed              int `json:"completed"`
	Recovered              int `json:"recovered"`
	Blocked                int `json:"blocked"`
}

// DiagnosticRef is a diagnostic without its free-text detail.
type DiagnosticRef struct {
	Kind    string      `json:"kind"`
	AgentID string      `json:"agent_id"`
	At      topics.Time `json:"at"`
}

// DiagnosticsSummary summarises the run's diagnostics (guard hits, expired
// leases, watchdog findings). The run keeps only its newest 100, fewer
// when long ids make them take more than 128 KiB.
type DiagnosticsSummary struct {
	// Retained is how many diagnostics the run keeps now.
	Retained int `json:"retained"`
	// ByKind counts the retained ones per kind.
	ByKind map[string]int `json:"by_kind"`
	// Recent are the newest, newest first, at most MaxReadModelList.
	Recent []DiagnosticRef `json:"recent"`
	// Checks are seed 003's diagnostics, each derived or marked.
	Checks DiagnosticChecks `json:"checks"`
}

// ReadModelCounts are the run's exact totals.
type ReadModelCounts struct {
	Events                   int64               `json:"events"`
	Nodes                    int                 `json:"nodes"`
	ByStatus                 topics.StatusCounts `json:"by_status"`
	OpenRequests             int                 `json:"open_requests"`
	OverdueLeases            int                 `json:"overdue_leases"`
	ActiveCorrelationHandles int                 `json:"active_correlation_handles"`
	Plans                    int                 `json:"plans"`
}

// ReadModel is seed 003's thread read model of a run, as far as canopy's
// projection knows it: the current answer to "what is happening now?".
// Facts the projection derives are given with exact totals and bounded
// lists; a fact whose events the runtime never sent is unknown, and one
// that does not apply not_applicable, with the reason, never a default
// that looks healthy.
type ReadModel struct {
	ReadModelVersion int     `json:"read_model_version"`
	RunID            string  `json:"run_id"`
	SessionID        *string `json:"session_id"`
	ThreadID         *string `json:"thread_id"`
	// AsOfEventSeq is the number of the run's events applied.
	AsOfEventSeq int64 `json:"as_of_event_seq"`
	// AsOf is the run's clock: the newest event time applied, or the due
	// time of the last timer fired.
	AsOf topics.Time `json:"as_of"`
	// GeneratedAt is the wall clock when the read model was built.
	GeneratedAt topics.Time `json:"generated_at"`
	// Stale is true when the projection had not caught up with its input
	// log: facts may not be current.
	Stale bool `json:"stale"`
	// RootAgentID is the run's root conductor node; null until seen.
	RootAgentID *string `json:"root_agent_id"`
	// Status is the run's status: its root node's. Unknown until the root
	// is seen and has a status.
	Status Fact[topics.Status] `json:"status"`

	// Active are running nodes, most recently signalled first.
	Active NodeList `json:"active"`
	// Waiting are nodes with an open request (waiting for an answer), by
	// agent id.
	Waiting NodeList `json:"waiting"`
	// Blocked are blocked nodes, newest status change first.
	Blocked NodeList `json:"blocked"`
	// Failed are failed nodes, newest status change first.
	Failed NodeList `json:"failed"`
	// Lost are nodes whose lease expired without renewal (the worker
	// holding it may be gone), soonest expiry first.
	Lost NodeList `json:"lost"`
	// RecentTerminal are nodes that completed or failed, newest first, as
	// far as the history window reaches (Total counts all of them).
	RecentTerminal NodeList `json:"recent_terminal"`

	PendingRequests PendingRequests    `json:"pending_requests"`
	Watchdog        WatchdogSummary    `json:"watchdog"`
	Diagnostics     DiagnosticsSummary `json:"diagnostics"`
	Counts          ReadModelCounts    `json:"counts"`

	// The run's activity (activity.go), each fact unknown until the
	// runtime sent an event of its family.
	ActiveTurnID             Fact[string]          `json:"active_turn_id"`
	ActiveTurns              Fact[TurnList]        `json:"active_turns"`
	LastOutcome              Fact[TurnOutcome]     `json:"last_outcome"`
	ActiveIncidents          Fact[IncidentList]    `json:"active_incidents"`
	QueuedTurns              Fact[TurnList]        `json:"queued_turns"`
	LatestCompactionBoundary Fact[CompactionRef]   `json:"latest_compaction_boundary"`
	ToolSummary              Fact[ToolSummary]     `json:"tool_summary"`
	ArtifactSummary          Fact[ArtifactSummary] `json:"artifact_summary"`
	EvidenceSummary          Fact[EvidenceSummary] `json:"evidence_summary"`
	ModelRouting             Fact[ModelRouting]    `json:"model_routing"`
	LimitState               Fact[[]LimitRef]      `json:"limit_state"`
	PermissionState          Fact[PermissionState] `json:"permission_state"`
	SandboxProfile           Fact[string]          `json:"sandbox_profile"`
	PendingApprovals         Fact[PendingRequests] `json:"pending_approvals"`
	ActiveProcesses          Fact[ProcessSummary]  `json:"active_processes"`
	ExecutionEnvironment     Fact[Environment]     `json:"execution_environment"`
	JobProgress              Fact[JobProgress]     `json:"job_progress"`
	RemoteChannelState       Fact[[]ChannelRef]    `json:"remote_channel_state"`
	TelemetryCorrelation     Fact[TraceSummary]    `json:"telemetry_correlation"`
	// Session is what the run's session.updated events said of its
	// session; null when none came.
	Session *SessionFacts `json:"session"`
}

// ReadModel builds the read model of a run at wall clock now; stale says
// the projection is behind its input log. ErrUnknownRun when no event of
// the run was applied, an
// ExpiredError when it expired.
func (p *Projection) ReadModel(runID string, now time.Time, stale bool) (*ReadModel, error) {
	r, err := p.run(runID, false)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRun, runID)
	}
	m := r.readModel(now, stale)
	if err := p.settle(r); err != nil {
		return nil, err
	}
	return m, nil
}

func (r *Run) readModel(now time.Time, stale bool) *ReadModel {
	st := r.Stats()
	m := &ReadModel{
		ReadModelVersion: ReadModelVersion,
		RunID:            r.id,
		SessionID:        strPtr(r.sessionID),
		ThreadID:         strPtr(r.threadID),
		AsOfEventSeq:     r.seq,
		AsOf:             r.clock,
		GeneratedAt:      topics.NewTime(now),
		Stale:            stale,
		RootAgentID:      strPtr(r.root),
		Counts: ReadModelCounts{Events: r.seq, Nodes: st.NodeCount, ByStatus: st.ByStatus, OpenRequests: st.OpenRequests,
			OverdueLeases: st.OverdueLeases, ActiveCorrelationHandles: st.ActiveCorrelations, Plans: len(r.plans)},
	}
	switch root := r.peek(r.root); {
	case root == nil:
		m.Status = Fact[topics.Status]{Status: Unknown, Reason: "no root conductor node has been seen"}
	case root.Status == topics.StatusUnknown:
		m.Status = Fact[topics.Status]{Status: Unknown, Reason: "the root node has reported no status"}
	default:
		m.Status = knownFact(root.Status, stale)
	}

	c := st.ByStatus
	m.Active = r.list(r.signals, c.Running, func(n *node) bool { return n.Status == topics.StatusRunning })
	m.Blocked = r.list(r.urgent, c.Blocked, func(n *node) bool { return n.Status == topics.StatusBlocked })
	m.Failed = r.list(r.urgent, c.Failed, func(n *node) bool { return n.Status == topics.StatusFailed })
	m.Lost = r.list(r.leases, st.OverdueLeases, func(n *node) bool { return n.overdue })
	m.Waiting = r.waiting()
	m.RecentTerminal = r.recentTerminal(c.Completed + c.Failed)
	m.PendingRequests = r.pendingRequests()

	w := &m.Watchdog
	w.Active, w.SuspectDeliveryFailure = r.wdCount[topics.WatchdogActive], r.wdCount[topics.WatchdogSuspectDeliveryFailure]
	w.DoneButNotForwarded, w.Completed = r.wdCount[topics.WatchdogDoneButNotForwarded], r.wdCount[topics.WatchdogCompleted]
	w.Recovered, w.Blocked = r.wdCount[topics.WatchdogRecovered], r.wdCount[topics.WatchdogBlocked]
	for _, n := range r.wdCount {
		w.Dispatched += n
	}

	d := &m.Diagnostics
	d.Retained, d.ByKind, d.Recent = len(r.diagnostics), map[string]int{}, []DiagnosticRef{}
	for i := len(r.diagnostics) - 1; i >= 0; i-- {
		g := r.diagnostics[i]
		d.ByKind[g.Kind]++
		if len(d.Recent) < MaxReadModelList {
			d.Recent = append(d.Recent, DiagnosticRef{Kind: g.Kind, AgentID: g.AgentID, At: g.At})
		}
	}

	r.activityFacts(m, stale)
	return m
}

func (n *node) ref() ReadModelNode {
	role := n.Role
	if role == "" {
		role = topics.RoleUnknown
	}
	rn := ReadModelNode{AgentID: n.AgentID, Role: role, Status: n.Status}
	if !n.StatusUpdatedAt.IsZero() {
		at := n.StatusUpdatedAt
		rn.StatusUpdatedAt = &at
	}
	return rn
}

// list walks an index in its order and collects the nodes keep accepts, up
// to MaxReadModelList, reading at most readModelScan entries.
func (r *Run) list(idx *btree.BTreeG[timed], total int, keep func(*node) bool) NodeList {
	l := NodeList{Total: total, Nodes: []ReadModelNode{}}
	scanned := 0
	idx.Ascend(func(k timed) bool {
		scanned++
		if n := r.peek(k.id); n != nil && keep(n) {
			l.Nodes = append(l.Nodes, n.ref())
		}
		return len(l.Nodes) < MaxReadModelList && len(l.Nodes) < total && scanned < readModelScan
	})
	l.Truncated = len(l.Nodes) < total
	return l
}

// waiting lists the nodes with open requests.
func (r *Run) waiting() NodeList {
	agents := make(map[string]struct{})
	for _, q := range r.requests {
		agents[q.agentID] = struct{}{}
	}
	ids := slices.Sorted(maps.Keys(agents))
	l := NodeList{Total: len(ids), Nodes: []ReadModelNode{}}
	for _, id := range ids[:min(len(ids), MaxReadModelList)] {
		if n := r.peek(id); n != nil {
			l.Nodes = append(l.Nodes, n.ref())
		}
	}
	l.Truncated = len(l.Nodes) < l.Total
	return l
}

// recentTerminal lists the nodes the history window saw complete or fail,
// newest first, that are still completed or failed.
func (r *Run) recentTerminal(total int) NodeList {
	l := NodeList{Total: total, Nodes: []ReadModelNode{}}
	seen := make(map[string]struct{})
	for i := 0; i < r.hist.len() && len(l.Nodes) < MaxReadModelList; i++ {
		e := r.hist.at(i)
		if e.Status == nil || (*e.Status != topics.StatusCompleted && *e.Status != topics.StatusFailed) {
			continue
		}
		if _, dup := seen[e.AgentID]; dup {
			continue
		}
		seen[e.AgentID] = struct{}{}
		if n := r.peek(e.AgentID); n != nil && (n.Status == topics.StatusCompleted || n.Status == topics.StatusFailed) {
			l.Nodes = append(l.Nodes, n.ref())
		}
	}
	l.Truncated = len(l.Nodes) < total
	return l
}

func (r *Run) pendingRequests() PendingRequests {
	ids := slices.Sorted(maps.Keys(r.requests))
	out := PendingRequests{Total: len(ids), Requests: []PendingRequest{}}
	for _, id := range ids[:min(len(ids), MaxReadModelList)] {
		q := r.requests[id]
		pr := PendingRequest{RequestID: id, AgentID: q.agentID}
		if !q.expires.IsZero() {
			at := q.expires
			pr.ExpiresAt = &at
		}
		out.Requests = append(out.Requests, pr)
	}
	out.Truncated = len(out.Requests) < out.Total
	return out
}
