package snapshot_test

import (
	"iter"
	"sort"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// refTree is the reference snapshot.Tree of these tests and their oracle: a
// plain slice of nodes whose rankings are computed by brute force (filter and
// sort.SliceStable) straight from seed 000's ordering definitions and the
// snapshot.Tree doc comments, and whose Stats are counted. It keeps no index,
// so nothing it answers can drift from what its slice says.
type refTree struct {
	Run, Session, Thread string
	// RootID names the root conductor among Nodes; empty (or absent from
	// Nodes) means the projection has not seen the root yet.
	RootID string
	// Nodes have distinct agent ids.
	Nodes []snapshot.Node
	// Handles are the active correlation handles.
	Handles []refHandle
	// At is the time against which leases are overdue: a held lease whose
	// expiry is <= At is overdue.
	At topics.Time

	// reads counts what the builder read, by method: for the sequences, the
	// nodes or handles yielded; for Node, the lookups.
	reads map[string]int
}

type refHandle struct {
	ID string
	At topics.Time // when it was last active
}

var _ snapshot.Tree = (*refTree)(nil)

func (t *refTree) count(what string) {
	if t.reads == nil {
		t.reads = map[string]int{}
	}
	t.reads[what]++
}

func (t *refTree) RunID() string     { return t.Run }
func (t *refTree) SessionID() string { return t.Session }
func (t *refTree) ThreadID() string  { return t.Thread }

func (t *refTree) Root() (snapshot.Node, bool) {
	if t.RootID == "" {
		return snapshot.Node{}, false
	}
	return t.lookup(t.RootID)
}

func (t *refTree) Node(id string) (snapshot.Node, bool) {
	t.count("Node")
	return t.lookup(id)
}

func (t *refTree) lookup(id string) (snapshot.Node, bool) {
	for _, n := range t.Nodes {
		if n.AgentID == id {
			return n, true
		}
	}
	return snapshot.Node{}, false
}

// seq yields the nodes rank computes, lazily, counting each one yielded.
func (t *refTree) seq(name string, rank func() []snapshot.Node) iter.Seq[snapshot.Node] {
	return func(yield func(snapshot.Node) bool) {
		for _, n := range rank() {
			t.count(name)
			if !yield(n) {
				return
			}
		}
	}
}

func (t *refTree) WithCorrelation(id string) iter.Seq[snapshot.Node] {
	return t.seq("WithCorrelation", func() []snapshot.Node { return t.withCorrelation(id) })
}
func (t *refTree) Urgent() iter.Seq[snapshot.Node] { return t.seq("Urgent", t.urgent) }
func (t *refTree) ByLeaseExpiry() iter.Seq[snapshot.Node] {
	return t.seq("ByLeaseExpiry", t.byLeaseExpiry)
}
func (t *refTree) ByLastSignal() iter.Seq[snapshot.Node] {
	return t.seq("ByLastSignal", t.byLastSignal)
}

func (t *refTree) ActiveCorrelations() iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, h := range t.handles() {
			t.count("ActiveCorrelations")
			if !yield(h) {
				return
			}
		}
	}
}

func (t *refTree) Stats() snapshot.Stats {
	var s snapshot.Stats
	s.NodeCount = len(t.Nodes)
	for _, n := range t.Nodes {
		s.ByStatus.Add(refStatus(n), 1)
		if !n.LeaseExpiresAt.IsZero() && !n.LeaseExpiresAt.After(t.At) {
			s.OverdueLeases++
		}
		s.OpenRequests += max(n.OpenRequestCount, 0)
	}
	s.ActiveCorrelations = len(t.Handles)
	return s
}

// filter returns the nodes keep accepts, ordered by agent id so that every
// ranking below breaks ties by agent id whatever its own key.
func (t *refTree) filter(keep func(snapshot.Node) bool) []snapshot.Node {
	var out []snapshot.Node
	for _, n := range t.Nodes {
		if keep(n) {
			out = append(out, n)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].AgentID < out[j].AgentID })
	return out
}

// withCorrelation: the nodes whose last correlation id is id, by agent id.
func (t *refTree) withCorrelation(id string) []snapshot.Node {
	return t.filter(func(n snapshot.Node) bool { return id != "" && n.LastCorrelationID == id })
}

// urgent: blocked and failed nodes, newest status change first, ties by agent id.
func (t *refTree) urgent() []snapshot.Node {
	out := t.filter(func(n snapshot.Node) bool {
		return n.Status == topics.StatusBlocked || n.Status == topics.StatusFailed
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].StatusUpdatedAt.After(out[j].StatusUpdatedAt) })
	return out
}

// byLeaseExpiry: nodes holding a lease, soonest expiry first, ties by agent id.
func (t *refTree) byLeaseExpiry() []snapshot.Node {
	out := t.filter(func(n snapshot.Node) bool { return !n.LeaseExpiresAt.IsZero() })
	sort.SliceStable(out, func(i, j int) bool { return out[i].LeaseExpiresAt.Before(out[j].LeaseExpiresAt) })
	return out
}

// byLastSignal: every node, newest last signal first, ties by agent id; the
// nodes that never signalled last, by agent id.
func (t *refTree) byLastSignal() []snapshot.Node {
	signalled := t.filter(func(n snapshot.Node) bool { return !n.LastSignalAt.IsZero() })
	sort.SliceStable(signalled, func(i, j int) bool { return signalled[i].LastSignalAt.After(signalled[j].LastSignalAt) })
	never := t.filter(func(n snapshot.Node) bool { return n.LastSignalAt.IsZero() })
	return append(signalled, never...)
}

// handles: the active handles, most recently active first, ties by handle.
func (t *refTree) handles() []string {
	hs := append([]refHandle(nil), t.Handles...)
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].ID < hs[j].ID })
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].At.After(hs[j].At) })
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.ID
	}
	return out
}

// ranking is seed 000's whole inclusion order for wake w, without any bound:
// the root, the nodes the wake names in its order, the nodes of the wake's
// correlation ids (each by agent id), blocked and failed, leases nearest
// expiry, then newest signal; each node once, at its first place. A snapshot's
// nodes must be a prefix of it.
func (t *refTree) ranking(w snapshot.Wake) []snapshot.Node {
	var out []snapshot.Node
	seen := map[string]bool{}
	add := func(ns ...snapshot.Node) {
		for _, n := range ns {
			if !seen[n.AgentID] {
				seen[n.AgentID] = true
				out = append(out, n)
			}
		}
	}
	if root, ok := t.Root(); ok {
		add(root)
	}
	for _, id := range w.AgentIDs {
		if n, ok := t.lookup(id); ok {
			add(n)
		}
	}
	for _, id := range w.CorrelationIDs {
		add(t.withCorrelation(id)...)
	}
	add(t.urgent()...)
	add(t.byLeaseExpiry()...)
	add(t.byLastSignal()...)
	return out
}

// refStatus is the status a digest must show: "unknown" when there is no fact.
func refStatus(n snapshot.Node) topics.Status {
	if n.Status == "" {
		return topics.StatusUnknown
	}
	return n.Status
}
