package projection

import (
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Plan is seed 001's plan of a node, for the read model: bands of steps.
type Plan struct {
	PlanID    string
	AgentID   string
	BandCount int
	Replan    bool
	CreatedAt topics.Time
	Bands     map[int]*Band
}

// Band is one band of a plan.
type Band struct {
	Index          int
	Parallelizable bool
	StepCount      int
	Steps          []Step
}

// Step is one step of a band.
type Step struct {
	StepID       string
	Index        int
	ChildAgentID string
}

// Diagnostic is something the read model reports about the run (seed 003):
// guard hits, expired leases, watchdog findings.
type Diagnostic struct {
	Kind    string // e.g. "guard:maxDepth", "lease_expired", "suspect_delivery_failure"
	AgentID string
	At      topics.Time
	Detail  string
}

// DiagnosticLeaseReleaseIgnored is the kind of the diagnostic a lease.released
// raises when it names an owner other than the lease's: the lease stays.
const DiagnosticLeaseReleaseIgnored = "lease_release_ignored"

// Bounds on the read-model parts of a run, so that a hostile or buggy
// producer cannot grow them without limit. A run keeps its last
// maxDiagnostics diagnostics, fewer when they would take more than
// maxDiagnosticBytes (long ids in them), since they are stored in the
// run's meta record (MaxRecordBytes).
const (
	maxDiagnostics     = 100
	maxDiagnosticBytes = 128 << 10
	maxPlansPerRun     = 10000
	maxBandsPerPlan    = 64
	maxStepsPerBand    = 256
	maxPlanSummaries   = 10000
)

// handleEffect is what an event does to its correlation handle.
type handleEffect int

const (
	handleRefresh handleEffect = iota // keeps an active handle fresh
	handleOpen                        // opens or refreshes
	handleClose                       // the work it tracks is over
)

// apply applies ev, whose content hashes to hash (contentHash), to the run
// and returns the triggers it raises, timers that fell due before it
// included. dup is true when ev.ID was already applied with the same
// content (or one of unknown hash); a *DuplicateConflictError when with
// another, and the run is left as it was. Its steps: dedupe, fire what
// fell due, apply the payload to its node, keep the correlation handle,
// record the event.
func (r *Run) apply(ev *topics.Event, hash uint64, cfg *Config) (trigs []topics.Trigger, dup bool, err error) {
	if seen, ok := r.ids.lookup(ev.ID); ok {
		if seen == 0 || seen == hash {
			return nil, true, nil
		}
		return nil, false, &DuplicateConflictError{Run: r.id, EventID: ev.ID, Type: ev.Type, AgentID: ev.AgentID,
			Seq: r.seq - int64(r.ids.age(ev.ID))}
	}
	r.ids.push(ev.ID, hash, cfg.DedupeWindow)
	if r.dirty != nil {
		r.dirty.meta = true
	}
	trigs = r.fireDue(ev, cfg, trigs)
	if r.seq == 0 || !r.first.IsZero() && ev.Time.Before(r.first) {
		r.first = ev.Time
	}
	r.seq++
	if r.sessionID == "" {
		r.sessionID = ev.SessionID
	}
	if r.threadID == "" {
		r.threadID = ev.ThreadID
	}
	n := r.node(ev.AgentID)
	before := n.Status
	r.mark('n', n.AgentID)
	r.setCorrelation(n, ev.CorrelationID)
	effect, trigs := r.applyPayload(ev, n, cfg, trigs)
	r.keepHandle(ev.CorrelationID, effect, ev.Time)
	r.applyActivity(ev)
	r.record(ev, hash, n, before, cfg)
	return trigs, false, nil
}

// fireDue fires what fell due before ev, appending the triggers to trigs.
// Also when the event is late (older than the clock): a late event may have
// left a timer due in the past, which fires now rather than never.
func (r *Run) fireDue(ev *topics.Event, cfg *Config, trigs []topics.Trigger) []topics.Trigger {
	to := r.clock
	if ev.Time.After(to) {
		to = ev.Time
	}
	return r.advance(to, cfg, trigs)
}

// applyPayload applies ev's payload to n, its node, and returns what it does
// to its correlation handle, with the triggers it raises appended to trigs.
func (r *Run) applyPayload(ev *topics.Event, n *node, cfg *Config, trigs []topics.Trigger) (handleEffect, []topics.Trigger) {
	at := ev.Time
	effect := handleRefresh
	trig := func(k topics.TriggerKind, detail string) {
		trigs = append(trigs, eventTrigger(k, ev, detail))
	}

	switch p := ev.Data.(type) {
	case *topics.NodeCreated:
		effect = handleOpen
		r.create(n, p, at, cfg, trig)
		trigs = r.settleDepths(n, ev, cfg, trigs)
	case *topics.NodeDelegated:
		effect = handleOpen
		r.dispatch(n, p, at)
	case *topics.NodeStatus:
		effect = r.applyStatus(n, p, at, cfg, trig)
	case *topics.NodeCompleted:
		effect = handleClose
		r.setStatus(n, topics.StatusCompleted, at, "")
		r.complete(n, p.ResultSource, at, cfg)
		trig(topics.TriggerCompleted, p.ResultSource)
	case *topics.Result:
		effect = handleClose
		r.signal(n, topics.SignalResult, at)
		n.watchdog.hasResult = true
		trig(topics.TriggerResult, p.ResultKind)
	case *topics.Failed:
		effect = handleClose
		r.signal(n, topics.SignalFailed, at)
		r.setStatus(n, topics.StatusFailed, at, p.ErrorCode)
		r.reclassify(n, at)
		trig(topics.TriggerFailed, p.ErrorCode)
	case *topics.Request:
		effect = handleOpen
		r.signal(n, topics.SignalRequest, at)
		r.openRequest(n, p, at)
		trig(topics.TriggerRequest, p.RequestKind)
	case *topics.RequestResolved:
		// The request is over, not the work it belongs to: the handle stays.
		if q, ok := r.requests[p.RequestID]; ok {
			r.closeRequest(q)
		}
	case *topics.Progress:
		effect = handleOpen
		r.applyProgress(n, p, at, cfg, trig)
	case *topics.Heartbeat:
		r.signal(n, topics.SignalHeartbeat, at)
	case *topics.Input:
		effect = handleOpen
		trigs = append(trigs, r.applyInput(n, p, ev))
	case *topics.Lease:
		effect = handleOpen
		r.setLease(n, p.Owner, p.ExpiresAt)
	case *topics.LeaseReleased:
		r.releaseLease(n, p, at)
	case *topics.WakeReceived:
		// An acknowledgement never wakes: that would loop.
		for _, id := range p.AgentIDs {
			if m := r.get(id); m != nil {
				r.forwarded(m, at)
			}
		}
	case *topics.PlanCreated:
		r.plan(n, p, at)
	case *topics.PlanBandCreated, *topics.StepCreated, *topics.ReplanRequested:
		r.applyPlanPart(p)
	case *topics.ArtifactCreated, *topics.ParentHint, *topics.ScratchpadUpdated:
		// References only: counted in the read model, never in a snapshot.
	}
	return effect, trigs
}

// applyStatus applies node.status to n and returns what it does to the
// node's correlation handle.
func (r *Run) applyStatus(n *node, p *topics.NodeStatus, at topics.Time, cfg *Config, trig func(topics.TriggerKind, string)) handleEffect {
	if !r.setStatus(n, p.Status, at, p.Reason) {
		// Older than the node's status: history, not the present.
		// It changes nothing and wakes nobody.
		return handleRefresh
	}
	effect := handleRefresh
	if p.Status == topics.StatusRunning || p.Status == topics.StatusBlocked {
		effect = handleOpen
	}
	if strings.HasPrefix(p.Reason, "guard:") {
		r.diagnose(p.Reason, n.AgentID, at, "")
		trig(topics.TriggerGuard, p.Reason)
	}
	switch p.Status {
	case topics.StatusBlocked:
		trig(topics.TriggerStatusBlocked, p.Reason)
	case topics.StatusFailed:
		effect = handleClose
		trig(topics.TriggerStatusFailed, p.Reason)
	case topics.StatusCompleted:
		effect = handleClose
		r.complete(n, "", at, cfg)
		trig(topics.TriggerCompleted, p.Reason)
	}
	r.reclassify(n, at)
	return effect
}

// applyProgress applies signal.progress to n: it wakes at most once per
// cfg.ProgressInterval.
func (r *Run) applyProgress(n *node, p *topics.Progress, at topics.Time, cfg *Config, trig func(topics.TriggerKind, string)) {
	r.signal(n, topics.SignalProgress, at)
	if n.Status == topics.StatusIdle || n.Status == topics.StatusUnknown {
		r.setStatus(n, topics.StatusRunning, at, "progress")
	}
	if r.lastProgressWake.IsZero() || at.Sub(r.lastProgressWake) >= cfg.ProgressInterval {
		r.lastProgressWake = at
		trig(topics.TriggerProgress, p.StepID)
	}
}

// applyInput applies signal.input, ev's payload p, to n and returns the
// human-input trigger it raises.
func (r *Run) applyInput(n *node, p *topics.Input, ev *topics.Event) topics.Trigger {
	if !n.created && n.Role == "" {
		// Only the human interface produces signal.input: that is
		// evidence of the role, not a guess.
		n.Role = topics.RoleHumanInterface
	}
	r.signal(n, topics.SignalInput, ev.Time)
	t := eventTrigger(topics.TriggerHumanInput, ev, p.InputKind)
	t.Input = &topics.TriggerInput{InputKind: p.InputKind, Text: p.Text, ContentRef: p.ContentRef}
	return t
}

// releaseLease applies lease.released to n. Only the lease's owner ends it
// (seed 004: status from evidence): a release naming another owner (a
// previous holder, late, or a confused agent) is no evidence that the
// current lease ended. It is ignored and reported. A release that names no
// owner ends whatever lease the node holds.
func (r *Run) releaseLease(n *node, p *topics.LeaseReleased, at topics.Time) {
	if p.Owner != "" && n.LeaseOwner != "" && p.Owner != n.LeaseOwner {
		r.diagnose(DiagnosticLeaseReleaseIgnored, n.AgentID, at, "released by "+p.Owner+", held by "+n.LeaseOwner)
	} else {
		r.dropLease(n)
	}
}

// applyPlanPart applies a band, a step or a replan to the plan it names;
// one of a plan the run does not know, or past its bounds, is dropped.
func (r *Run) applyPlanPart(p topics.Payload) {
	switch p := p.(type) {
	case *topics.PlanBandCreated:
		if pl := r.plans[p.PlanID]; pl != nil && p.BandIndex < maxBandsPerPlan {
			r.mark('p', p.PlanID)
			b := pl.band(p.BandIndex)
			b.Parallelizable, b.StepCount = p.Parallelizable, p.StepCount
		}
	case *topics.StepCreated:
		if pl := r.plans[p.PlanID]; pl != nil && p.BandIndex < maxBandsPerPlan {
			if _, ok := pl.Bands[p.BandIndex]; !ok {
				r.mark('p', p.PlanID) // a new band, which the plan's header lists
			}
			if b := pl.band(p.BandIndex); len(b.Steps) < maxStepsPerBand {
				r.markStep(p.PlanID, p.BandIndex, len(b.Steps))
				b.Steps = append(b.Steps, Step{StepID: p.StepID, Index: p.StepIndex, ChildAgentID: p.ChildAgentID})
			}
		}
	case *topics.ReplanRequested:
		if pl := r.plans[p.PlanID]; pl != nil {
			r.mark('p', p.PlanID)
			pl.Replan = true
		}
	}
}

// keepHandle does effect to the correlation handle id (none when id is
// empty): an event that only refreshes keeps an active handle fresh and
// opens none.
func (r *Run) keepHandle(id string, effect handleEffect, at topics.Time) {
	if id == "" {
		return
	}
	switch effect {
	case handleOpen:
		r.touchHandle(id, at)
	case handleClose:
		r.closeHandle(id)
	default:
		if _, active := r.corrAt[id]; active {
			r.touchHandle(id, at)
		}
	}
}

// create applies tree.node_created.
func (r *Run) create(n *node, p *topics.NodeCreated, at topics.Time, cfg *Config, trig func(topics.TriggerKind, string)) {
	if n.created {
		// A second creation of the same node (a replan reusing its id)
		// updates what it says but keeps its history.
		n.Capability = firstNonEmpty(p.Capability, n.Capability)
		n.ActiveTaskID = firstNonEmpty(p.TaskID, n.ActiveTaskID)
		return
	}
	n.created = true
	n.Role, n.ParentAgentID = p.Role, p.ParentAgentID
	n.Capability, n.ActiveTaskID = p.Capability, p.TaskID
	if n.Status == topics.StatusUnknown {
		r.setStatus(n, topics.StatusIdle, at, "created")
	}
	switch parent := r.peek(p.ParentAgentID); {
	case p.ParentAgentID == "":
		n.depth = 0
		if p.Role == topics.RoleConductor && r.root == "" {
			r.root = n.AgentID
		}
	case parent != nil && parent.depth >= 0:
		n.depth = parent.depth + 1
	default:
		// Its parent is not known yet: its depth is settled when the
		// parent's is (settleDepths).
		r.awaitParent(p.ParentAgentID, n.AgentID)
	}
	if cfg.MaxDepth >= 0 && n.depth > cfg.MaxDepth {
		reason := "guard:maxDepth"
		r.diagnose(reason, n.AgentID, at, "depth "+strconv.Itoa(n.depth)+" > "+strconv.Itoa(cfg.MaxDepth))
		n.statusReason = reason
		trig(topics.TriggerGuard, reason)
	}
}

// awaitParent notes that child's depth waits for parent's.
func (r *Run) awaitParent(parent, child string) {
	if r.orphans == nil {
		r.orphans = make(map[string][]string)
	}
	r.orphans[parent] = append(r.orphans[parent], child)
}

// settleDepths gives the nodes that waited for n's depth theirs, and theirs
// to the nodes that waited for them, once n's is known: a tree whose events
// come children first (producers retry, partitions of a child run's events
// arrive late) is judged by seed 001's maxDepth guard as it would be in
// order. A node that turns out too deep raises the guard now, at ev's
// time, with ev as its cause. It appends the triggers to trigs.
func (r *Run) settleDepths(n *node, ev *topics.Event, cfg *Config, trigs []topics.Trigger) []topics.Trigger {
	if n.depth < 0 || len(r.orphans) == 0 {
		return trigs
	}
	queue := []*node{n}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		children := r.orphans[parent.AgentID]
		delete(r.orphans, parent.AgentID)
		// In agent id order: the same whether the run was loaded (its
		// nodes come in key order) or not (in arrival order).
		slices.Sort(children)
		for _, id := range children {
			c := r.get(id)
			if c == nil || c.depth >= 0 || c.ParentAgentID != parent.AgentID {
				continue // a later creation gave it another parent
			}
			c.depth = parent.depth + 1
			r.mark('n', c.AgentID)
			if cfg.MaxDepth >= 0 && c.depth > cfg.MaxDepth {
				reason := "guard:maxDepth"
				r.diagnose(reason, c.AgentID, ev.Time, "depth "+strconv.Itoa(c.depth)+" > "+strconv.Itoa(cfg.MaxDepth))
				c.statusReason = reason
				t := eventTrigger(topics.TriggerGuard, ev, reason)
				t.AgentID = c.AgentID
				trigs = append(trigs, t)
			}
			queue = append(queue, c)
		}
	}
	return trigs
}

// dispatch applies the dispatch receipt (tree.node_delegated).
func (r *Run) dispatch(n *node, p *topics.NodeDelegated, at topics.Time) {
	w := &n.watchdog
	if !w.ExpectedBy.IsZero() {
		r.dispatchDue.Delete(timed{w.ExpectedBy.UnixMilli(), n.AgentID})
	}
	w.Dispatched, w.DispatchAt = true, at
	w.ChildRunID, w.ChildSessionKey = p.ChildRunID, p.ChildSessionKey
	w.ExpectedBy = topics.Time{}
	// A new dispatch starts a new delivery: earlier receipts were for
	// earlier work.
	w.CompletionReceivedAt, w.ForwardedToMain, w.ResultSource = topics.Time{}, false, ""
	w.wasSuspect, w.hasResult = false, false
	r.dropGrace(n)
	if p.ExpectedBy != nil {
		w.ExpectedBy = *p.ExpectedBy
		if w.ExpectedBy.After(r.clock) {
			r.dispatchDue.ReplaceOrInsert(timed{w.ExpectedBy.UnixMilli(), n.AgentID})
		} else {
			w.wasSuspect = true
		}
	}
	n.ActiveRunID = firstNonEmpty(p.ChildRunID, n.ActiveRunID)
	n.ActiveTaskID = firstNonEmpty(p.TaskID, n.ActiveTaskID)
	n.Capability = firstNonEmpty(p.Capability, n.Capability)
	r.reclassify(n, at)
}

// complete records a completion receipt.
func (r *Run) complete(n *node, source string, at topics.Time, cfg *Config) {
	w := &n.watchdog
	if w.CompletionReceivedAt.IsZero() {
		w.CompletionReceivedAt = at
		w.ResultSource = firstNonEmpty(source, "completion_event")
		if !w.ExpectedBy.IsZero() {
			r.dispatchDue.Delete(timed{w.ExpectedBy.UnixMilli(), n.AgentID})
		}
		if w.Dispatched && !w.ForwardedToMain {
			w.graceDue = at.Add(cfg.ForwardGrace)
			r.graceDue.ReplaceOrInsert(timed{w.graceDue.UnixMilli(), n.AgentID})
		}
	}
	// Work is over: the node no longer has an active task, its lease is
	// moot (its expiry must not wake anybody) and nobody will answer its
	// requests.
	n.ActiveRunID, n.ActiveTaskID = "", ""
	r.dropLease(n)
	for _, id := range slices.Clone(n.requests) {
		r.closeRequest(r.requests[id])
	}
	r.reclassify(n, at)
}

// forwarded records that a conductor acknowledged a wake delivering n's
// result or completion (seed 004 forwardedToMain).
func (r *Run) forwarded(n *node, at topics.Time) {
	w := &n.watchdog
	if w.CompletionReceivedAt.IsZero() && !w.hasResult {
		return // nothing of n's was there to forward
	}
	w.ForwardedToMain = true
	r.mark('n', n.AgentID)
	r.dropGrace(n)
	r.reclassify(n, at)
}

func (r *Run) dropGrace(n *node) {
	if w := &n.watchdog; !w.graceDue.IsZero() {
		r.graceDue.Delete(timed{w.graceDue.UnixMilli(), n.AgentID})
		w.graceDue = topics.Time{}
	}
}

// reclassify derives the watchdog status of a dispatched node from its
// receipts. It reports whether the status changed.
func (r *Run) reclassify(n *node, at topics.Time) bool {
	w := &n.watchdog
	if !w.Dispatched {
		return false
	}
	var s topics.WatchdogStatus
	var why string
	switch done := !w.CompletionReceivedAt.IsZero(); {
	case n.Status == topics.StatusBlocked:
		s, why = topics.WatchdogBlocked, "the node reports blocked: it needs an action to go on"
	case done && w.ForwardedToMain && (w.wasSuspect || w.ResultSource != "completion_event"):
		s, why = topics.WatchdogRecovered, "completion received after the SLA or by recovery ("+w.ResultSource+"), and forwarded"
	case done && w.ForwardedToMain:
		s, why = topics.WatchdogCompleted, "completion receipt exists and the conductor acknowledged it"
	case done:
		s, why = topics.WatchdogDoneButNotForwarded, "completion receipt exists; no wake_received covers it yet"
	case w.wasSuspect:
		s, why = topics.WatchdogSuspectDeliveryFailure, "expected_by passed without a completion receipt"
	default:
		s, why = topics.WatchdogActive, "dispatch receipt exists and the SLA has not been crossed"
	}
	if s == w.Status {
		return false
	}
	if w.Status != "" {
		r.wdCount[w.Status]--
	}
	r.wdCount[s]++
	w.Status, w.StatusUpdatedAt, w.StatusReason = s, at, why
	return true
}

// plan applies tree.plan_created: a new plan, or a plan created again,
// which starts over without its bands and steps.
func (r *Run) plan(n *node, p *topics.PlanCreated, at topics.Time) {
	defer r.mark('p', p.PlanID)
	old, ok := r.plans[p.PlanID]
	if !ok && len(r.plans) >= maxPlansPerRun {
		return
	}
	if old != nil {
		// Its steps' records go (storage.go writes a step that is no
		// more as a delete).
		for i, b := range old.Bands {
			for j := range b.Steps {
				r.markStep(p.PlanID, i, j)
			}
		}
	}
	r.plans[p.PlanID] = &Plan{PlanID: p.PlanID, AgentID: n.AgentID, BandCount: p.BandCount, Replan: p.Replan,
		CreatedAt: at, Bands: make(map[int]*Band)}
}

func (p *Plan) band(i int) *Band {
	b := p.Bands[i]
	if b == nil {
		b = &Band{Index: i}
		p.Bands[i] = b
	}
	return b
}

func (r *Run) diagnose(kind, agentID string, at topics.Time, detail string) {
	d := Diagnostic{Kind: kind, AgentID: agentID, At: at, Detail: detail}
	r.diagnostics = append(r.diagnostics, d)
	r.diagBytes += diagnosticBytes(&d)
	r.trimDiagnostics()
}

// trimDiagnostics forgets the oldest diagnostics beyond maxDiagnostics or
// maxDiagnosticBytes; the newest always stays.
func (r *Run) trimDiagnostics() {
	drop := 0
	for len(r.diagnostics)-drop > 1 && (len(r.diagnostics)-drop > maxDiagnostics || r.diagBytes > maxDiagnosticBytes) {
		r.diagBytes -= diagnosticBytes(&r.diagnostics[drop])
		drop++
	}
	if drop > 0 {
		r.diagnostics = append(r.diagnostics[:0], r.diagnostics[drop:]...)
	}
}

// diagnosticBytes is at most the bytes d takes in its run's meta record.
func diagnosticBytes(d *Diagnostic) int {
	return 4*binary.MaxVarintLen64 + len(d.Kind) + len(d.AgentID) + len(d.Detail)
}

func eventTrigger(k topics.TriggerKind, ev *topics.Event, detail string) topics.Trigger {
	id := ev.ID
	return topics.Trigger{Kind: k, EventID: &id, AgentID: ev.AgentID, CorrelationID: strPtr(ev.CorrelationID), At: ev.Time, Detail: strPtr(detail)}
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func msDuration(ms int64) time.Duration {
	const maxMs = int64(1<<63-1) / int64(time.Millisecond)
	if ms > maxMs {
		ms = maxMs
	}
	return time.Duration(ms) * time.Millisecond
}
