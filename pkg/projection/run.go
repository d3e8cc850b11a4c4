package projection

import (
	"fmt"
	"iter"
	"slices"
	"strconv"

	"github.com/google/btree"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// node is one node of a run's tree: the facts a snapshot digests plus what
// the read model and the watchdog need.
type node struct {
	snapshot.Node
	// created: a tree.node_created was applied (else the node is known only
	// from its other events and its role is unknown).
	created bool
	// depth below the root; -1 when an ancestor is unknown.
	depth        int
	statusReason string
	watchdog     Watchdog
	// overdue: the lease fell due on the run's clock and was not renewed.
	overdue bool
	// requests are the ids of the node's open requests.
	requests []string
	// used is the run's seq when the node was last needed: the least
	// recently used nodes of a run over Config.MaxHotNodesPerRun leave
	// memory first (Run.trim).
	used int64
}

// Watchdog is seed 004's delivery state of a dispatched node. Every status is
// derived from receipts, never assumed.
type Watchdog struct {
	Dispatched           bool
	DispatchAt           topics.Time
	ExpectedBy           topics.Time // zero: no SLA
	ChildRunID           string
	ChildSessionKey      string
	CompletionReceivedAt topics.Time
	ForwardedToMain      bool
	ResultSource         string
	Status               topics.WatchdogStatus
	StatusUpdatedAt      topics.Time
	StatusReason         string
	// wasSuspect: the SLA passed before the completion receipt came, so a late
	// completion is a recovery.
	wasSuspect bool
	// hasResult: a result signal of this dispatch was seen.
	hasResult bool
	// graceDue: when done_but_not_forwarded falls due (completion + grace).
	graceDue topics.Time
}

// request is an open signal.request.
type request struct {
	id      string
	agentID string
	expires topics.Time // zero: no TTL
	// dedupeKey is the request's dedupe_key, "" when it has none.
	dedupeKey string
	// kind is its request_kind; "" in the records of earlier builds.
	kind string
}

// timed orders index entries by a time and an id.
type timed struct {
	at int64 // Unix ms
	id string
}

// newestFirst orders by time descending, then id ascending. The zero Time
// (no fact) is before every valid time, so nodes without one come last.
func newestFirst(a, b timed) bool {
	if a.at != b.at {
		return a.at > b.at
	}
	return a.id < b.id
}

// corrNode is an entry of the correlation index: a node and its last
// correlation id.
type corrNode struct{ corr, id string }

// byCorrThenID orders the correlation index by correlation id, then agent id.
func byCorrThenID(a, b corrNode) bool {
	if a.corr != b.corr {
		return a.corr < b.corr
	}
	return a.id < b.id
}

// soonestFirst orders by time ascending, then id ascending.
func soonestFirst(a, b timed) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.id < b.id
}

const btreeDegree = 16

// Run is the projected state of one run. It implements snapshot.Tree. A Run
// is not safe for concurrent use: its partition's goroutine owns it.
type Run struct {
	id, sessionID, threadID string
	// preparedGen is the Projection.prepareGen of the last Prepare that
	// gathered the run's changes.
	preparedGen uint64
	root        string
	// nodes are the run's nodes by agent id: all of them in memory (in
	// resident of them), unless the run belongs to a store and has more
	// than Config.MaxHotNodesPerRun, when the others are nil here and read
	// back from store as they are needed (get, peek). An id that is not a
	// key is no node of the run, known without reading the store.
	nodes    map[string]*node
	resident int
	store    *store
	// nodeErr is the first failure to read a node back from the store: the
	// run no longer matches its store, and the projection stops (sticky).
	nodeErr error
	reads   int64 // nodes read back since the projection last accounted the run
	seq     int64
	clock   topics.Time
	// first is the oldest event time applied (the session snapshot's
	// timestamps); zero when unknown (a run stored by a build that did
	// not keep it).
	first topics.Time
	// ids are the last Config.DedupeWindow applied event ids, with their
	// contents' hashes.
	ids   idWindow
	stats snapshot.Stats

	// Indexes for the snapshot's inclusion order.
	urgent  *btree.BTreeG[timed] // blocked/failed nodes, newest status change first
	leases  *btree.BTreeG[timed] // held leases by expiry
	signals *btree.BTreeG[timed] // every node by last signal, newest first
	// byCorr holds every node with a correlation id, by that id: one tree
	// for the run rather than one per correlation id, which cost a tree
	// per node when each node works under a correlation of its own.
	byCorr *btree.BTreeG[corrNode]
	// Active correlation handles, newest activity first.
	corrActive *btree.BTreeG[timed]
	corrAt     map[string]int64

	// Timers on the run's clock.
	leaseDue    *btree.BTreeG[timed] // leases not yet overdue
	dispatchDue *btree.BTreeG[timed] // dispatches awaiting completion before expected_by
	graceDue    *btree.BTreeG[timed] // completions awaiting forwarding
	requestDue  *btree.BTreeG[timed] // open requests with a TTL, id = request id
	requests    map[string]*request

	lastProgressWake topics.Time
	// orphans are, by parent id, the nodes created before their parent
	// was known, whose depth waits for the parent's (settleDepths). Not
	// persisted: rebuilt from the nodes when the run is loaded.
	orphans     map[string][]string
	plans       map[string]*Plan
	diagnostics []Diagnostic
	// diagBytes is what diagnostics take (diagnosticBytes), which
	// maxDiagnosticBytes bounds.
	diagBytes int
	// hist is the window of the last Config.HistorySize applied events.
	hist history
	// act is the run's activity (activity.go), nil until an event feeds it.
	act *activity
	// wdCount counts dispatched nodes per watchdog status, so that the read
	// model need not scan the tree.
	wdCount map[topics.WatchdogStatus]int

	// digests are the snapshot builder's digests of the nodes its recent
	// snapshots included, with their encodings, so that a wake re-encodes
	// only the nodes that changed. In memory only, bounded by the limits'
	// max_nodes (snapshot.Cache), never persisted.
	digests snapshot.Cache
	// uncached is set while the projection is over its memory budget
	// (Projection.shedDigests): builds keep no digests. woken is the
	// projection's commit count at the run's last wake (dropIdleDigests).
	uncached bool
	woken    uint64

	// Persistence, when the run belongs to a Storage: what changed since the
	// last commit (nil when nothing persists the run), the journal chunks
	// stored, oldest first, and when it was last used (for eviction).
	dirty    *dirt
	chunks   []chunkRef
	lastUsed uint64
	// footprint is what the run last accounted in its projection's bytes
	// (Footprint, at the time), hot its nodes in memory at the time.
	footprint int64
	hot       int
}

// mark records that part kind ('n' node, 'q' request, 'c' handle, 'p' plan)
// id changed, when the run is persisted.
func (r *Run) mark(kind byte, id string) {
	if r.dirty == nil {
		return
	}
	d := r.dirty
	switch kind {
	case 'n':
		addTo(&d.nodes, id)
	case 'q':
		addTo(&d.requests, id)
	case 'c':
		addTo(&d.handles, id)
	case 'p':
		addTo(&d.plans, id)
	}
}

// markStep records that the step-th step of band of plan changed (or is
// no more), when the run is persisted: its step record is written again.
func (r *Run) markStep(plan string, band, step int) {
	if r.dirty != nil {
		addTo(&r.dirty.steps, stepRef{plan, band, step / stepsPerRecord})
	}
}

func newRun(id string) *Run {
	return &Run{
		id:          id,
		nodes:       make(map[string]*node),
		urgent:      newTimedTree(newestFirst),
		leases:      newTimedTree(soonestFirst),
		signals:     newTimedTree(newestFirst),
		byCorr:      newCorrTree(),
		corrActive:  newTimedTree(newestFirst),
		corrAt:      make(map[string]int64),
		leaseDue:    newTimedTree(soonestFirst),
		dispatchDue: newTimedTree(soonestFirst),
		graceDue:    newTimedTree(soonestFirst),
		requestDue:  newTimedTree(soonestFirst),
		requests:    make(map[string]*request),
		plans:       make(map[string]*Plan),
		wdCount:     make(map[topics.WatchdogStatus]int),
	}
}

// ID is the run id.
func (r *Run) ID() string { return r.id }

// Seq is the number of events applied to the run: as_of_event_seq.
func (r *Run) Seq() int64 { return r.seq }

// Clock is the run's logical time.
func (r *Run) Clock() topics.Time { return r.clock }

// Len is the number of nodes.
func (r *Run) Len() int { return len(r.nodes) }

// Resident is the number of nodes in memory: Len, unless the run is larger
// than Config.MaxHotNodesPerRun.
func (r *Run) Resident() int { return r.resident }

// get returns the node with id, reading it back from the store into memory
// if it is not there; nil when the run has no such node (or the read
// failed: nodeErr says so). Whatever changes a node gets it with get.
func (r *Run) get(id string) *node {
	n, ok := r.nodes[id]
	if !ok {
		return nil
	}
	if n == nil {
		if n = r.load(id); n == nil {
			return nil
		}
		r.nodes[id] = n
		r.resident++
	}
	n.used = r.seq
	return n
}

// peek is get for a reader that only looks: a node read back from the store
// is not kept in memory, so a read model listing thousands of nodes does not
// displace the ones the run's events are using.
func (r *Run) peek(id string) *node {
	n, ok := r.nodes[id]
	if ok && n == nil {
		n = r.load(id)
	}
	return n
}

// load reads a node of the run that is not in memory from the store.
func (r *Run) load(id string) *node {
	if r.store == nil || r.nodeErr != nil {
		return nil
	}
	n, ok, err := r.store.loadNode(r.id, id)
	if err == nil && !ok {
		err = fmt.Errorf("%w: not in the store", ErrStore)
	}
	if err != nil {
		r.nodeErr = fmt.Errorf("run %q: reading node %q back: %w", r.id, id, err)
		return nil
	}
	r.reads++
	return n
}

// RunID implements snapshot.Tree.
func (r *Run) RunID() string { return r.id }

// SessionID implements snapshot.Tree.
func (r *Run) SessionID() string { return r.sessionID }

// ThreadID implements snapshot.Tree.
func (r *Run) ThreadID() string { return r.threadID }

// Root implements snapshot.Tree.
func (r *Run) Root() (snapshot.Node, bool) {
	if r.root == "" {
		return snapshot.Node{}, false
	}
	return r.Node(r.root)
}

// Node implements snapshot.Tree. The nodes a snapshot includes are kept in
// memory (get): the next wake most likely includes them again.
func (r *Run) Node(id string) (snapshot.Node, bool) {
	n := r.get(id)
	if n == nil {
		return snapshot.Node{}, false
	}
	return n.Node, true
}

// WithCorrelation implements snapshot.Tree.
func (r *Run) WithCorrelation(id string) iter.Seq[snapshot.Node] {
	return func(yield func(snapshot.Node) bool) {
		r.byCorr.AscendGreaterOrEqual(corrNode{corr: id}, func(k corrNode) bool {
			if k.corr != id {
				return false
			}
			n := r.get(k.id)
			return n != nil && yield(n.Node)
		})
	}
}

// Urgent implements snapshot.Tree.
func (r *Run) Urgent() iter.Seq[snapshot.Node] { return r.walk(r.urgent) }

// ByLeaseExpiry implements snapshot.Tree.
func (r *Run) ByLeaseExpiry() iter.Seq[snapshot.Node] { return r.walk(r.leases) }

// ByLastSignal implements snapshot.Tree.
func (r *Run) ByLastSignal() iter.Seq[snapshot.Node] { return r.walk(r.signals) }

func (r *Run) walk(t *btree.BTreeG[timed]) iter.Seq[snapshot.Node] {
	return func(yield func(snapshot.Node) bool) {
		t.Ascend(func(k timed) bool {
			n := r.get(k.id)
			return n != nil && yield(n.Node) // nil: a failed read (nodeErr), the walk ends
		})
	}
}

// DigestCache implements snapshot.CachingTree: Build may reuse the digests
// of the nodes that did not change since the last wake. The cache checks
// each node's facts itself, so no change to a node needs to reach it.
func (r *Run) DigestCache() *snapshot.Cache {
	if r.uncached {
		return nil
	}
	return &r.digests
}

// ActiveCorrelations implements snapshot.Tree.
func (r *Run) ActiveCorrelations() iter.Seq[string] {
	return func(yield func(string) bool) {
		r.corrActive.Ascend(func(k timed) bool { return yield(k.id) })
	}
}

// Stats implements snapshot.Tree.
func (r *Run) Stats() snapshot.Stats {
	s := r.stats
	s.NodeCount = len(r.nodes)
	s.OpenRequests = len(r.requests)
	s.ActiveCorrelations = len(r.corrAt)
	return s
}

// node returns the node with id, creating it (role and status unknown) on
// first sight: events can arrive for a node whose creation is not yet seen.
func (r *Run) node(id string) *node {
	if n := r.get(id); n != nil || r.nodeErr != nil {
		return n
	}
	n := &node{depth: -1, used: r.seq}
	n.AgentID = id
	n.Status = topics.StatusUnknown
	r.nodes[id] = n
	r.resident++
	r.stats.ByStatus.Add(topics.StatusUnknown, 1)
	r.signals.ReplaceOrInsert(timed{topics.Time{}.UnixMilli(), id})
	return n
}

// setStatus moves a node to status s at time at, keeping counts and the
// urgent index right, unless at is before the node's status time: a node's
// status is that of its newest status event by event time (of two at the
// same time, the later to arrive), so an older one arriving late (a
// producer's retry, a slow clock) does not undo a newer one
// (docs/CONTRACT.md "Order"). It reports whether the status was set.
func (r *Run) setStatus(n *node, s topics.Status, at topics.Time, reason string) bool {
	if !n.StatusUpdatedAt.IsZero() && at.Before(n.StatusUpdatedAt) {
		return false
	}
	if isUrgent(n.Status) {
		r.urgent.Delete(timed{n.StatusUpdatedAt.UnixMilli(), n.AgentID})
	}
	r.stats.ByStatus.Add(n.Status, -1)
	r.stats.ByStatus.Add(s, 1)
	n.Status, n.StatusUpdatedAt, n.statusReason = s, at, reason
	if isUrgent(s) {
		r.urgent.ReplaceOrInsert(timed{at.UnixMilli(), n.AgentID})
	}
	return true
}

func isUrgent(s topics.Status) bool { return s == topics.StatusBlocked || s == topics.StatusFailed }

// signal records a node's latest signal.
func (r *Run) signal(n *node, k topics.SignalKind, at topics.Time) {
	if !n.LastSignalAt.IsZero() && at.Before(n.LastSignalAt) {
		return // an older signal arriving late does not replace a newer one
	}
	r.signals.Delete(timed{n.LastSignalAt.UnixMilli(), n.AgentID})
	n.LastSignalKind, n.LastSignalAt = k, at
	r.signals.ReplaceOrInsert(timed{at.UnixMilli(), n.AgentID})
}

// setCorrelation records the node's last correlation id.
func (r *Run) setCorrelation(n *node, id string) {
	if id == "" || id == n.LastCorrelationID {
		return
	}
	if old := n.LastCorrelationID; old != "" {
		r.byCorr.Delete(corrNode{old, n.AgentID})
	}
	n.LastCorrelationID = id
	r.byCorr.ReplaceOrInsert(corrNode{id, n.AgentID})
}

// touchHandle marks a correlation handle active at at.
func (r *Run) touchHandle(id string, at topics.Time) {
	if old, ok := r.corrAt[id]; ok {
		if at.UnixMilli() <= old {
			return
		}
		r.corrActive.Delete(timed{old, id})
	}
	r.corrAt[id] = at.UnixMilli()
	r.corrActive.ReplaceOrInsert(timed{at.UnixMilli(), id})
	r.mark('c', id)
}

// closeHandle marks a correlation handle no longer active.
func (r *Run) closeHandle(id string) {
	if old, ok := r.corrAt[id]; ok {
		r.corrActive.Delete(timed{old, id})
		delete(r.corrAt, id)
		r.mark('c', id)
	}
}

// setLease records a held lease.
func (r *Run) setLease(n *node, owner string, expires topics.Time) {
	r.dropLease(n)
	n.LeaseOwner, n.LeaseExpiresAt = owner, expires
	k := timed{expires.UnixMilli(), n.AgentID}
	r.leases.ReplaceOrInsert(k)
	if expires.After(r.clock) {
		r.leaseDue.ReplaceOrInsert(k)
	} else {
		n.overdue = true
		r.stats.OverdueLeases++
	}
}

// dropLease forgets a node's lease.
func (r *Run) dropLease(n *node) {
	if n.LeaseExpiresAt.IsZero() {
		return
	}
	k := timed{n.LeaseExpiresAt.UnixMilli(), n.AgentID}
	r.leases.Delete(k)
	r.leaseDue.Delete(k)
	if n.overdue {
		n.overdue = false
		r.stats.OverdueLeases--
	}
	n.LeaseOwner, n.LeaseExpiresAt = "", topics.Time{}
}

// openRequest adds an open request. A request with the dedupe key of an
// open request of the same node is the same request asked again (seed 002's
// dedupe_key): it takes that one's place, so the node counts it once. A
// node holds at most maxOpenRequestsPerNode: one more closes its oldest,
// reported as a diagnostic.
func (r *Run) openRequest(n *node, p *topics.Request, at topics.Time) {
	if old, ok := r.requests[p.RequestID]; ok {
		r.closeRequest(old)
	}
	if p.DedupeKey != "" {
		for _, id := range slices.Clone(n.requests) {
			if old := r.requests[id]; old != nil && old.dedupeKey == p.DedupeKey {
				r.closeRequest(old)
			}
		}
	}
	for len(n.requests) >= maxOpenRequestsPerNode {
		oldest := n.requests[0]
		if q := r.requests[oldest]; q != nil && q.agentID == n.AgentID {
			r.closeRequest(q)
		} else { // not the run's: nothing else to close
			n.requests = slices.Delete(n.requests, 0, 1)
			n.OpenRequestCount = len(n.requests)
			r.mark('n', n.AgentID)
		}
		r.diagnose(DiagnosticOpenRequestsOverLimit, n.AgentID, at,
			"request "+oldest+" closed: the node holds "+strconv.Itoa(maxOpenRequestsPerNode)+" open requests")
	}
	q := &request{id: p.RequestID, agentID: n.AgentID, dedupeKey: p.DedupeKey, kind: p.RequestKind}
	if p.TTLMs > 0 {
		q.expires = at.Add(msDuration(p.TTLMs))
		r.requestDue.ReplaceOrInsert(timed{q.expires.UnixMilli(), q.id})
	}
	r.requests[q.id] = q
	r.mark('q', q.id)
	n.requests = append(n.requests, q.id)
	n.OpenRequestCount++
	n.LastRequestKind = p.RequestKind
	if p.DedupeKey != "" {
		keys := make([]string, 0, maxDedupeKeysKept)
		keys = append(keys, p.DedupeKey)
		for _, k := range n.RecentDedupeKeys {
			if k != p.DedupeKey && len(keys) < maxDedupeKeysKept {
				keys = append(keys, k)
			}
		}
		n.RecentDedupeKeys = keys
	}
}

// maxDedupeKeysKept bounds the dedupe keys kept per node, whatever the
// snapshot limit (which takes the newest of these).
const maxDedupeKeysKept = 16

// maxOpenRequestsPerNode bounds a node's open requests, whose ids its
// record holds (MaxRecordBytes): far more than a node waits on at once.
const maxOpenRequestsPerNode = 128

// DiagnosticOpenRequestsOverLimit is the kind of the diagnostic a request
// raises when its node already holds maxOpenRequestsPerNode (128) open
// requests: the node's oldest open request is closed.
const DiagnosticOpenRequestsOverLimit = "open_requests_over_limit"

func (r *Run) closeRequest(q *request) {
	delete(r.requests, q.id)
	r.mark('q', q.id)
	r.mark('n', q.agentID)
	if !q.expires.IsZero() {
		r.requestDue.Delete(timed{q.expires.UnixMilli(), q.id})
	}
	if n := r.get(q.agentID); n != nil {
		if i := slices.Index(n.requests, q.id); i >= 0 {
			n.requests = slices.Delete(n.requests, i, i+1)
		}
		n.OpenRequestCount = len(n.requests)
	}
}
