package projection

import (
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// The persisted forms of a run's parts. Times are Unix milliseconds, 0 for
// "no fact", so that the zero time needs no special encoding.

type nodeRecord struct {
	AgentID          string    `json:"id"`
	Role             string    `json:"role,omitempty"`
	Parent           string    `json:"parent,omitempty"`
	Status           string    `json:"status"`
	StatusAt         int64     `json:"status_at,omitempty"`
	StatusReason     string    `json:"reason,omitempty"`
	LeaseOwner       string    `json:"lease_owner,omitempty"`
	LeaseExpires     int64     `json:"lease_expires,omitempty"`
	Overdue          bool      `json:"overdue,omitempty"`
	ActiveRunID      string    `json:"run,omitempty"`
	ActiveTaskID     string    `json:"task,omitempty"`
	Capability       string    `json:"cap,omitempty"`
	SignalKind       string    `json:"signal,omitempty"`
	SignalAt         int64     `json:"signal_at,omitempty"`
	Correlation      string    `json:"corr,omitempty"`
	LastRequestKind  string    `json:"req_kind,omitempty"`
	RecentDedupeKeys []string  `json:"keys,omitempty"`
	Requests         []string  `json:"requests,omitempty"`
	Created          bool      `json:"created,omitempty"`
	Depth            int       `json:"depth"`
	Watchdog         *wdRecord `json:"wd,omitempty"`
}

type wdRecord struct {
	DispatchAt      int64  `json:"dispatch_at"`
	ExpectedBy      int64  `json:"expected_by,omitempty"`
	ChildRunID      string `json:"child_run,omitempty"`
	ChildSessionKey string `json:"child_session,omitempty"`
	CompletionAt    int64  `json:"completion_at,omitempty"`
	Forwarded       bool   `json:"forwarded,omitempty"`
	ResultSource    string `json:"source,omitempty"`
	Status          string `json:"status"`
	StatusAt        int64  `json:"status_at"`
	StatusReason    string `json:"reason,omitempty"`
	WasSuspect      bool   `json:"suspect,omitempty"`
	HasResult       bool   `json:"result,omitempty"`
	GraceDue        int64  `json:"grace_due,omitempty"`
}

type requestRecord struct {
	AgentID string `json:"agent"`
	Expires int64  `json:"expires,omitempty"`
	// DedupeKey is absent from the records of earlier builds: such a
	// request is superseded by its request id only.
	DedupeKey string `json:"key,omitempty"`
	// Kind is the request_kind; absent from the records of earlier
	// builds, whose requests are then not told apart as approvals.
	Kind string `json:"kind,omitempty"`
}

type metaRecord struct {
	Seq              int64  `json:"seq"`
	Clock            int64  `json:"clock"`
	SessionID        string `json:"session,omitempty"`
	ThreadID         string `json:"thread,omitempty"`
	Root             string `json:"root,omitempty"`
	LastProgressWake int64  `json:"progress_wake,omitempty"`
	// First is the oldest event time the run applied (Unix ms); 0 when
	// unknown: the run was last written by a build that did not keep it.
	First       int64        `json:"first,omitempty"`
	PlanOrder   []string     `json:"plans,omitempty"`
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
}

type planRecord struct {
	AgentID   string `json:"agent"`
	BandCount int    `json:"bands"`
	Replan    bool   `json:"replan,omitempty"`
	CreatedAt int64  `json:"created_at"`
	Bands     []Band `json:"band_list,omitempty"`
}

func ms(t topics.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) topics.Time {
	if v == 0 {
		return topics.Time{}
	}
	return topics.UnixMilliTime(v)
}

// record returns n's record. A dispatched node's watchdog record goes in
// *wd, or a new one when wd is nil: a caller that encodes each record
// before it makes the next passes the same wd every time (store.write),
// rather than allocate one per dispatched node of every commit.
func (n *node) record(wd *wdRecord) nodeRecord {
	r := nodeRecord{
		AgentID: n.AgentID, Role: string(n.Role), Parent: n.ParentAgentID, Status: string(n.Status),
		StatusAt: ms(n.StatusUpdatedAt), StatusReason: n.statusReason, LeaseOwner: n.LeaseOwner,
		LeaseExpires: ms(n.LeaseExpiresAt), Overdue: n.overdue, ActiveRunID: n.ActiveRunID,
		ActiveTaskID: n.ActiveTaskID, Capability: n.Capability, SignalKind: string(n.LastSignalKind),
		SignalAt: ms(n.LastSignalAt), Correlation: n.LastCorrelationID, LastRequestKind: n.LastRequestKind,
		RecentDedupeKeys: n.RecentDedupeKeys, Requests: n.requests, Created: n.created, Depth: n.depth,
	}
	if w := n.watchdog; w.Dispatched {
		if wd == nil {
			wd = new(wdRecord)
		}
		r.Watchdog = wd
		*wd = wdRecord{
			DispatchAt: ms(w.DispatchAt), ExpectedBy: ms(w.ExpectedBy), ChildRunID: w.ChildRunID,
			ChildSessionKey: w.ChildSessionKey, CompletionAt: ms(w.CompletionReceivedAt), Forwarded: w.ForwardedToMain,
			ResultSource: w.ResultSource, Status: string(w.Status), StatusAt: ms(w.StatusUpdatedAt),
			StatusReason: w.StatusReason, WasSuspect: w.wasSuspect, HasResult: w.hasResult, GraceDue: ms(w.graceDue),
		}
	}
	return r
}

func (r nodeRecord) node() *node {
	n := &node{
		Node: snapshot.Node{
			AgentID: r.AgentID, Role: topics.Role(r.Role), ParentAgentID: r.Parent, Status: topics.Status(r.Status),
			StatusUpdatedAt: fromMs(r.StatusAt), LeaseOwner: r.LeaseOwner, LeaseExpiresAt: fromMs(r.LeaseExpires),
			ActiveRunID: r.ActiveRunID, ActiveTaskID: r.ActiveTaskID, Capability: r.Capability,
			LastSignalKind: topics.SignalKind(r.SignalKind), LastSignalAt: fromMs(r.SignalAt),
			LastCorrelationID: r.Correlation, OpenRequestCount: len(r.Requests), LastRequestKind: r.LastRequestKind,
			RecentDedupeKeys: r.RecentDedupeKeys,
		},
		created: r.Created, depth: r.Depth, statusReason: r.StatusReason, overdue: r.Overdue, requests: r.Requests,
	}
	if w := r.Watchdog; w != nil {
		n.watchdog = Watchdog{
			Dispatched: true, DispatchAt: fromMs(w.DispatchAt), ExpectedBy: fromMs(w.ExpectedBy), ChildRunID: w.ChildRunID,
			ChildSessionKey: w.ChildSessionKey, CompletionReceivedAt: fromMs(w.CompletionAt), ForwardedToMain: w.Forwarded,
			ResultSource: w.ResultSource, Status: topics.WatchdogStatus(w.Status), StatusUpdatedAt: fromMs(w.StatusAt),
			StatusReason: w.StatusReason, wasSuspect: w.WasSuspect, hasResult: w.HasResult, graceDue: fromMs(w.GraceDue),
		}
	}
	return n
}
