package projection

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Node paging bounds: a page holds DefaultNodesLimit nodes when the limit
// is 0, and at most MaxNodesLimit.
const (
	DefaultNodesLimit = 200
	MaxNodesLimit     = 1000
)

// NodeView is one node of a run as a page of NodesPage shows it: ids, enums
// and times only, like the snapshot's digests, but every node of the run
// rather than a bounded selection. A fact the projection does not have is
// null (or "unknown" for role and status), never a healthy-looking default.
type NodeView struct {
	AgentID string `json:"agent_id"`
	// ParentAgentID is null for the root and for a node whose parent is
	// not known.
	ParentAgentID *string `json:"parent_agent_id"`
	// Depth below the root; -1 when an ancestor is unknown.
	Depth           int           `json:"depth"`
	Role            topics.Role   `json:"role"`
	Status          topics.Status `json:"status"`
	StatusUpdatedAt *topics.Time  `json:"status_updated_at"`
	// LeaseOwner and LeaseExpiresAt are null when no lease is held.
	LeaseOwner     *string      `json:"lease_owner"`
	LeaseExpiresAt *topics.Time `json:"lease_expires_at"`
	// LeaseOverdue: the lease fell due on the run's clock and was not
	// renewed (the worker holding it may be gone).
	LeaseOverdue bool `json:"lease_overdue"`
	// OpenRequests are the ids of the node's open requests.
	OpenRequests   []string           `json:"open_requests"`
	LastSignalKind *topics.SignalKind `json:"last_signal_kind"`
	LastSignalAt   *topics.Time       `json:"last_signal_at"`
	// Watchdog is seed 004's delivery status of a dispatched node; null
	// when the node was never dispatched.
	Watchdog *topics.WatchdogStatus `json:"watchdog"`
	// Plan places the node in a plan of its parent (seed 001's bands of
	// steps); null when no plan step names it.
	Plan *PlanPlace `json:"plan"`
}

// PlanPlace is where a node stands in a plan: the step of a band that
// names it as its child.
type PlanPlace struct {
	PlanID string `json:"plan_id"`
	// Band is the band's index in the plan, from 0, of BandCount.
	Band           int  `json:"band"`
	BandCount      int  `json:"band_count"`
	Parallelizable bool `json:"parallelizable"`
	Step           int  `json:"step"`
}

// NodesPage is one page of a run's nodes, by agent id.
type NodesPage struct {
	RunID string `json:"run_id"`
	// AsOfEventSeq is the run's event count when the page was read.
	AsOfEventSeq int64 `json:"as_of_event_seq"`
	// AsOf is the run's clock (ReadModel.AsOf).
	AsOf topics.Time `json:"as_of"`
	// GeneratedAt is the wall clock when the page was built.
	GeneratedAt topics.Time `json:"generated_at"`
	// Stale is true when the projection had not caught up with its input
	// log: facts may not be current.
	Stale bool `json:"stale"`
	// RootAgentID is the run's root node; null until seen.
	RootAgentID *string `json:"root_agent_id"`
	// Total is how many nodes the run has now.
	Total int `json:"total"`
	// Nodes are at most the requested limit, by agent id.
	Nodes []NodeView `json:"nodes"`
	// NextCursor continues with the nodes after the last one here; empty
	// on the last page.
	NextCursor string `json:"next_cursor"`
}

// EncodeNodesCursor returns the opaque cursor that continues a node listing
// after agent id after: base64url (no padding) of the id.
func EncodeNodesCursor(after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(after))
}

// DecodeNodesCursor is EncodeNodesCursor's inverse; "" starts at the first
// node.
func DecodeNodesCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 || topics.IDProblem(string(b)) != "" {
		return "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return string(b), nil
}

// Nodes returns a page of run's nodes by agent id: up to limit
// (0: DefaultNodesLimit, at most MaxNodesLimit) after cursor ("" for the
// first). Nodes not in memory are read from the store without displacing
// the hot ones. ErrUnknownRun when no event of the run was applied.
func (p *Projection) Nodes(runID, cursor string, limit int, now time.Time, stale bool) (*NodesPage, error) {
	if limit < 0 || limit > MaxNodesLimit {
		return nil, fmt.Errorf("%w: %d, want 1 to %d", ErrBadLimit, limit, MaxNodesLimit)
	}
	after, err := DecodeNodesCursor(cursor)
	if err != nil {
		return nil, err
	}
	r, err := p.run(runID, false)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRun, runID)
	}
	pg := r.nodesPage(after, limit, now, stale)
	if r.nodeErr != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, r.nodeErr)
	}
	if err := p.settle(r); err != nil {
		return nil, err
	}
	return pg, nil
}

func (r *Run) nodesPage(after string, limit int, now time.Time, stale bool) *NodesPage {
	if limit == 0 {
		limit = DefaultNodesLimit
	}
	pg := &NodesPage{RunID: r.id, AsOfEventSeq: r.seq, AsOf: r.clock, GeneratedAt: topics.NewTime(now), Stale: stale,
		RootAgentID: strPtr(r.root), Total: len(r.nodes), Nodes: []NodeView{}}
	ids := slices.Sorted(maps.Keys(r.nodes))
	i, _ := slices.BinarySearch(ids, after)
	if i < len(ids) && ids[i] == after && after != "" {
		i++
	}
	places := r.planPlaces()
	for ; i < len(ids) && len(pg.Nodes) < limit; i++ {
		if n := r.peek(ids[i]); n != nil {
			v := n.view()
			if pl, ok := places[n.AgentID]; ok {
				v.Plan = &pl
			}
			pg.Nodes = append(pg.Nodes, v)
		}
	}
	if i < len(ids) && len(pg.Nodes) > 0 {
		pg.NextCursor = EncodeNodesCursor(pg.Nodes[len(pg.Nodes)-1].AgentID)
	}
	return pg
}

func (n *node) view() NodeView {
	v := NodeView{AgentID: n.AgentID, ParentAgentID: strPtr(n.ParentAgentID), Depth: n.depth, Role: n.Role, Status: n.Status,
		LeaseOverdue: n.overdue, OpenRequests: slices.Clone(n.requests)}
	if v.Role == "" {
		v.Role = topics.RoleUnknown
	}
	if v.Status == "" {
		v.Status = topics.StatusUnknown
	}
	if v.OpenRequests == nil {
		v.OpenRequests = []string{}
	}
	if !n.StatusUpdatedAt.IsZero() {
		at := n.StatusUpdatedAt
		v.StatusUpdatedAt = &at
	}
	if !n.LeaseExpiresAt.IsZero() {
		at := n.LeaseExpiresAt
		v.LeaseExpiresAt = &at
		v.LeaseOwner = strPtr(n.LeaseOwner)
	}
	if n.LastSignalKind != "" {
		k := n.LastSignalKind
		v.LastSignalKind = &k
	}
	if !n.LastSignalAt.IsZero() {
		at := n.LastSignalAt
		v.LastSignalAt = &at
	}
	if n.watchdog.Dispatched {
		s := n.watchdog.Status
		v.Watchdog = &s
	}
	return v
}

// planPlaces maps each node a plan step names as its child to its place.
func (r *Run) planPlaces() map[string]PlanPlace {
	out := make(map[string]PlanPlace)
	for _, pl := range r.plans {
		for _, b := range pl.Bands {
			for _, st := range b.Steps {
				if st.ChildAgentID != "" {
					out[st.ChildAgentID] = PlanPlace{PlanID: pl.PlanID, Band: b.Index, BandCount: pl.BandCount, Parallelizable: b.Parallelizable, Step: st.Index}
				}
			}
		}
	}
	return out
}
