package projection

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TurnStallAfter is how long an active turn may show no life (its start,
// a call or a process of its node) on the run's clock before the read
// model calls it stalled.
const TurnStallAfter = 10 * time.Minute

// TurnList is a bounded list of turns, oldest first, with the exact total.
type TurnList struct {
	Total     int64     `json:"total"`
	Turns     []TurnRef `json:"turns"`
	Truncated bool      `json:"truncated"`
}

// IncidentList is the run's open incidents, most severe first, then
// oldest, with the exact totals.
type IncidentList struct {
	Total     int64         `json:"total"`
	Incidents []IncidentRef `json:"incidents"`
	Truncated bool          `json:"truncated"`
	Opened    int64         `json:"opened"`
	Resolved  int64         `json:"resolved"`
}

// ToolSummary summarises the run's tool and command calls.
type ToolSummary struct {
	Started int64 `json:"started"`
	Running int64 `json:"running"`
	// Outcomes counts finished calls by outcome.
	Outcomes       map[string]int64 `json:"outcomes"`
	FailedTools    int64            `json:"failed_tools"`
	FailedCommands int64            `json:"failed_commands"`
	// ByTool are the most called tools, most calls first.
	ByTool []ToolCount `json:"by_tool"`
	// RunningCalls are the running calls, oldest first.
	RunningCalls []CallRef `json:"running_calls"`
	// RecentFailed are the newest failed calls, newest first.
	RecentFailed []CallRef `json:"recent_failed"`
	Truncated    bool      `json:"truncated"`
}

// ArtifactSummary summarises the run's artifacts, by reference.
type ArtifactSummary struct {
	Total  int64            `json:"total"`
	ByType map[string]int64 `json:"by_type"`
	// Recent are the newest, newest first.
	Recent []ArtifactRef `json:"recent"`
	// DanglingRefs counts references (parent hints, results, evidence)
	// to artifacts the run has not seen; UncheckedRefs those it could not
	// check (it remembers at most 4,096 artifact ids).
	DanglingRefs  int64 `json:"dangling_refs"`
	UncheckedRefs int64 `json:"unchecked_refs"`
}

// EvidenceSummary summarises the run's evidence, by reference.
type EvidenceSummary struct {
	Total     int64            `json:"total"`
	ByKind    map[string]int64 `json:"by_kind"`
	ByVerdict map[string]int64 `json:"by_verdict"`
	// Recent are the newest, newest first.
	Recent []EvidenceRef `json:"recent"`
}

// ModelRouting is which model serves the run and what it used.
type ModelRouting struct {
	Latest ModelRoute       `json:"latest"`
	Totals ModelUsageTotals `json:"totals"`
	// ByModel are the most called models, most calls first.
	ByModel []ModelCount `json:"by_model"`
}

// PermissionState is what the runtime may do without asking, and how many
// approvals wait for a person.
type PermissionState struct {
	// PermissionMode is null when no runtime.configured named one.
	PermissionMode   *string      `json:"permission_mode"`
	NetworkAccess    *bool        `json:"network_access"`
	PendingApprovals int          `json:"pending_approvals"`
	At               *topics.Time `json:"at"`
}

// ProcessSummary is the run's processes: the running ones, oldest first,
// and the newest exited, newest first.
type ProcessSummary struct {
	Total        int64        `json:"total"`
	Running      []ProcessRef `json:"running"`
	Truncated    bool         `json:"truncated"`
	RecentExited []ProcessRef `json:"recent_exited"`
	Started      int64        `json:"started"`
	Exited       int64        `json:"exited"`
	Failed       int64        `json:"failed"`
}

// Environment is where the run's work executes, and which event said so
// (runtime.configured, or the newest process.started).
type Environment struct {
	Environment    string `json:"environment"`
	EnvironmentRef string `json:"environment_ref,omitempty"`
	Source         string `json:"source"`
}

// JobProgress is how far the run's plans are: their steps by the status
// of the child node bound to each.
type JobProgress struct {
	Plans int `json:"plans"`
	// Steps is the steps the plans' bands declare; Completed, Failed and
	// Running those whose child node is in that state; the rest are
	// pending (no child yet, or idle).
	Steps     int `json:"steps"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Running   int `json:"running"`
	// Fraction is Completed over Steps.
	Fraction float64 `json:"fraction"`
	// Truncated: the plans were too many to read whole; the counts are of
	// the first ones.
	Truncated bool `json:"truncated"`
}

// TraceSummary correlates the run with its traces: the W3C trace ids its
// events' traceparent headers carried.
type TraceSummary struct {
	LatestTraceID string `json:"latest_trace_id"`
	// RecentTraceIDs are the newest distinct trace ids, newest first.
	RecentTraceIDs []string `json:"recent_trace_ids"`
	TracedEvents   int64    `json:"traced_events"`
	Events         int64    `json:"events"`
}

// DiagnosticChecks are seed 003's diagnostics: each a count (or a state)
// the read model derives, or marked unknown when the runtime sent none of
// the events it is derived from. A missing diagnostic is never a healthy
// zero.
type DiagnosticChecks struct {
	// Warnings: the retained diagnostics and the open incidents.
	Warnings        Fact[int64] `json:"warnings"`
	FailedTools     Fact[int64] `json:"failed_tools"`
	FailedCommands  Fact[int64] `json:"failed_commands"`
	PendingRequests Fact[int]   `json:"pending_requests"`
	// StalledTurns are active turns without life for TurnStallAfter.
	StalledTurns Fact[int] `json:"stalled_turns"`
	// StalledTasks are dispatched nodes past their SLA without a
	// completion (seed 004's suspect_delivery_failure).
	StalledTasks Fact[int] `json:"stalled_tasks"`
	// LostWorkers are nodes whose lease expired without renewal.
	LostWorkers Fact[int] `json:"lost_workers"`
	// InterruptState is none, pending (a person interrupted or cancelled
	// and no turn has ended so since) or honoured.
	InterruptState Fact[string] `json:"interrupt_state"`
	// QuotaBlocks are the limits exhausted.
	QuotaBlocks Fact[int] `json:"quota_blocks"`
	// ContextGaps are the context compactions: what came before each is
	// a summary.
	ContextGaps Fact[int64] `json:"context_gaps"`
}

// noFamily is the reason of a fact whose events the run never had.
func noFamily(types string) string {
	return "the runtime has sent no " + types + " event for this run"
}

func unknownFact[T any](why string) Fact[T] { return Fact[T]{Status: Unknown, Reason: why} }

// famFact is v known (or stale) when the run had an event of one of fams,
// else unknown with why.
func famFact[T any](a *activity, v T, stale bool, why string, fams ...string) Fact[T] {
	if !a.seen(fams...) {
		return unknownFact[T](why)
	}
	return knownFact(v, stale)
}

func (a *activity) seen(fams ...string) bool {
	if a == nil {
		return false
	}
	for _, f := range fams {
		if a.Seen[f] {
			return true
		}
	}
	return false
}

// activityFacts fills m's facts of the run's activity.
func (r *Run) activityFacts(m *ReadModel, stale bool) {
	a := r.act
	if a == nil {
		a = newActivity()
	}
	turns := noFamily("turn.*")
	m.ActiveTurnID = famFact(a, "", stale, turns, famTurn)
	active := turnList(a.Turns.Active, a.Untracked["active_turns"])
	if m.ActiveTurnID.Status != Unknown {
		m.ActiveTurnID.Value = nil
		if n := len(active.Turns); n > 0 {
			id := active.Turns[n-1].TurnID // the newest
			m.ActiveTurnID.Value = &id
		}
	}
	m.ActiveTurns = famFact(a, active, stale, turns, famTurn)
	m.QueuedTurns = famFact(a, turnList(a.Turns.Queued, a.Untracked["queued_turns"]), stale, turns, famTurn)
	m.LastOutcome = famFact(a, TurnOutcome{}, stale, turns, famTurn)
	if m.LastOutcome.Status != Unknown {
		m.LastOutcome.Value = copyOf(a.Turns.Last)
	}
	m.ActiveIncidents = famFact(a, a.incidentList(), stale, noFamily("incident.*"), famIncident)
	m.LatestCompactionBoundary = famFact(a, CompactionRef{}, stale, noFamily("context.compacted"), famCompaction)
	if m.LatestCompactionBoundary.Status != Unknown {
		m.LatestCompactionBoundary.Value = copyOf(a.Compaction)
	}
	m.ToolSummary = famFact(a, a.toolSummary(), stale, noFamily("tool.*"), famTool)
	m.ArtifactSummary = famFact(a, a.artifactSummary(), stale, noFamily("tree.artifact_created"), famArtifact)
	m.EvidenceSummary = famFact(a, a.evidenceSummary(), stale, noFamily("tree.evidence_recorded"), famEvidence)
	m.ModelRouting = famFact(a, ModelRouting{}, stale, noFamily("model.usage"), famModel)
	if a.Models.Latest != nil {
		m.ModelRouting.Value = &ModelRouting{Latest: *a.Models.Latest, Totals: a.Models.Totals, ByModel: a.byModel()}
	}
	m.LimitState = a.limitState(stale)
	m.PendingApprovals = knownFact(r.pendingApprovals(), stale)
	m.PermissionState = a.permissionState(m.PendingApprovals.Value.Total, stale)
	m.SandboxProfile = unknownFact[string](noFamily("runtime.configured event with a sandbox_profile"))
	if a.Runtime != nil && a.Runtime.SandboxProfile != "" {
		m.SandboxProfile = knownFact(a.Runtime.SandboxProfile, stale)
	}
	m.ActiveProcesses = famFact(a, a.processSummary(), stale, noFamily("process.*"), famProcess)
	m.ExecutionEnvironment = a.environment(stale)
	m.JobProgress = r.jobProgress(stale)
	m.RemoteChannelState = famFact(a, a.channels(), stale, noFamily("channel.state"), famChannel)
	m.TelemetryCorrelation = famFact(a, a.traceSummary(r.seq), stale, "no event of this run carried a traceparent header", famTrace)
	m.Session = copyOf(a.Session)
	if m.Session != nil {
		m.Session.PinnedThreadIDs = slices.Clone(m.Session.PinnedThreadIDs)
	}
	m.Diagnostics.Checks = r.checks(a, m, stale)
}

// turnList lists a map of turns, oldest first.
func turnList(m map[string]*TurnRef, untracked int64) TurnList {
	l := TurnList{Total: int64(len(m)) + untracked, Turns: sortedRefs(m, func(t *TurnRef) topics.Time { return t.At })}
	if len(l.Turns) > MaxReadModelList {
		// The newest are the ones a person acts on.
		l.Turns = l.Turns[len(l.Turns)-MaxReadModelList:]
	}
	l.Truncated = int64(len(l.Turns)) < l.Total
	return l
}

// sortedRefs are m's values, oldest first (by at, then id).
func sortedRefs[T any](m map[string]*T, at func(*T) topics.Time) []T {
	ids := slices.SortedFunc(maps.Keys(m), func(x, y string) int {
		return cmp.Or(cmp.Compare(at(m[x]).UnixMilli(), at(m[y]).UnixMilli()), cmp.Compare(x, y))
	})
	out := make([]T, 0, len(ids))
	for _, id := range ids {
		out = append(out, *m[id])
	}
	return out
}

// newestFirstCopy is l reversed (l is oldest first), at most
// MaxReadModelList.
func newestFirstCopy[T any](l []T) []T {
	out := slices.Clone(l)
	slices.Reverse(out)
	if out == nil {
		out = []T{}
	}
	return out[:min(len(out), MaxReadModelList)]
}

var severityRank = map[string]int{"critical": 0, "error": 1, "warning": 2, "info": 3}

func (a *activity) incidentList() IncidentList {
	s := a.Incidents
	l := IncidentList{Total: int64(len(s.Open)) + a.Untracked["open_incidents"], Opened: s.Opened, Resolved: s.Resolved,
		Incidents: sortedRefs(s.Open, func(i *IncidentRef) topics.Time { return i.OpenedAt })}
	slices.SortStableFunc(l.Incidents, func(x, y IncidentRef) int { return cmp.Compare(severityRank[x.Severity], severityRank[y.Severity]) })
	l.Incidents = l.Incidents[:min(len(l.Incidents), MaxReadModelList)]
	l.Truncated = int64(len(l.Incidents)) < l.Total
	return l
}

func (a *activity) toolSummary() ToolSummary {
	s := a.Tools
	t := ToolSummary{Started: s.Started, Running: int64(len(s.Running)) + a.Untracked["running_calls"],
		Outcomes: maps.Clone(s.Outcomes), FailedTools: s.FailedTools, FailedCommands: s.FailedCommands,
		RunningCalls: sortedRefs(s.Running, func(c *CallRef) topics.Time { return *c.StartedAt }),
		RecentFailed: newestFirstCopy(s.RecentFailed), ByTool: []ToolCount{}}
	if t.Outcomes == nil {
		t.Outcomes = map[string]int64{}
	}
	for _, name := range slices.Sorted(maps.Keys(s.ByTool)) {
		t.ByTool = append(t.ByTool, *s.ByTool[name])
	}
	slices.SortStableFunc(t.ByTool, func(x, y ToolCount) int { return cmp.Compare(y.Calls, x.Calls) })
	t.ByTool = t.ByTool[:min(len(t.ByTool), MaxReadModelList)]
	t.RunningCalls = t.RunningCalls[:min(len(t.RunningCalls), MaxReadModelList)]
	t.Truncated = int64(len(t.RunningCalls)) < t.Running || len(s.ByTool) > len(t.ByTool)
	return t
}

func (a *activity) artifactSummary() ArtifactSummary {
	s := a.Artifacts
	out := ArtifactSummary{Total: s.Total, ByType: maps.Clone(s.ByType), Recent: newestFirstCopy(s.Recent),
		DanglingRefs: s.Dangling, UncheckedRefs: s.Unchecked}
	if out.ByType == nil {
		out.ByType = map[string]int64{}
	}
	return out
}

func (a *activity) evidenceSummary() EvidenceSummary {
	s := a.Evidence
	out := EvidenceSummary{Total: s.Total, ByKind: maps.Clone(s.ByKind), ByVerdict: maps.Clone(s.ByVerdict), Recent: newestFirstCopy(s.Recent)}
	if out.ByKind == nil {
		out.ByKind, out.ByVerdict = map[string]int64{}, map[string]int64{}
	}
	return out
}

func (a *activity) byModel() []ModelCount {
	out := []ModelCount{}
	for _, name := range slices.Sorted(maps.Keys(a.Models.ByModel)) {
		out = append(out, *a.Models.ByModel[name])
	}
	slices.SortStableFunc(out, func(x, y ModelCount) int { return cmp.Compare(y.Calls, x.Calls) })
	return out[:min(len(out), MaxReadModelList)]
}

// limitState lists the limits by kind; blocked when one is exhausted.
func (a *activity) limitState(stale bool) Fact[[]LimitRef] {
	if !a.seen(famLimit) {
		return unknownFact[[]LimitRef](noFamily("limit.updated"))
	}
	l := sortedRefs(a.Limits, func(*LimitRef) topics.Time { return topics.Time{} })
	f := knownFact(l, stale)
	for _, x := range l {
		if x.State == "exhausted" {
			f.Status, f.Reason = Blocked, "the "+x.LimitKind+" limit is exhausted"
			if x.ResetAt != nil {
				f.Reason += " until " + x.ResetAt.String()
			}
			break
		}
	}
	return f
}

// permissionState is the runtime's permission mode; blocked while
// approvals wait for a person.
func (a *activity) permissionState(pending int, stale bool) Fact[PermissionState] {
	ps := PermissionState{PendingApprovals: pending}
	if a.Runtime != nil {
		ps.PermissionMode, ps.NetworkAccess = strPtr(a.Runtime.PermissionMode), a.Runtime.NetworkAccess
		at := a.Runtime.At
		ps.At = &at
	}
	var f Fact[PermissionState]
	switch {
	case pending > 0:
		f = Fact[PermissionState]{Status: Blocked, Value: &ps, Reason: strconv.Itoa(pending) + " approval request(s) wait for a person"}
	case ps.PermissionMode == nil:
		return unknownFact[PermissionState](noFamily("runtime.configured event with a permission_mode"))
	default:
		f = knownFact(ps, stale)
	}
	return f
}

// pendingApprovals lists the open requests whose kind asks for an
// approval, by request id.
func (r *Run) pendingApprovals() PendingRequests {
	ids := slices.Sorted(maps.Keys(r.requests))
	out := PendingRequests{Requests: []PendingRequest{}}
	for _, id := range ids {
		q := r.requests[id]
		if !topics.IsApproval(q.kind) {
			continue
		}
		out.Total++
		if len(out.Requests) < MaxReadModelList {
			pr := PendingRequest{RequestID: id, AgentID: q.agentID}
			if !q.expires.IsZero() {
				at := q.expires
				pr.ExpiresAt = &at
			}
			out.Requests = append(out.Requests, pr)
		}
	}
	out.Truncated = len(out.Requests) < out.Total
	return out
}

func (a *activity) processSummary() ProcessSummary {
	s := a.Processes
	p := ProcessSummary{Total: int64(len(s.Running)) + a.Untracked["running_processes"], Started: s.Started, Exited: s.Exited, Failed: s.Failed,
		Running: sortedRefs(s.Running, func(p *ProcessRef) topics.Time { return *p.StartedAt }), RecentExited: newestFirstCopy(s.RecentExited)}
	p.Running = p.Running[:min(len(p.Running), MaxReadModelList)]
	p.Truncated = int64(len(p.Running)) < p.Total
	return p
}

// environment is where the work executes: the runtime's word, else the
// newest process's.
func (a *activity) environment(stale bool) Fact[Environment] {
	if rt := a.Runtime; rt != nil && rt.ExecutionEnvironment != "" {
		return knownFact(Environment{Environment: rt.ExecutionEnvironment, EnvironmentRef: rt.EnvironmentRef, Source: string(topics.TypeRuntimeConfigured)}, stale)
	}
	var newest *ProcessRef
	for _, p := range sortedRefs(a.Processes.Running, func(p *ProcessRef) topics.Time { return *p.StartedAt }) {
		if p.Environment != "" {
			newest = &p
		}
	}
	if newest == nil {
		for i := len(a.Processes.RecentExited) - 1; i >= 0 && newest == nil; i-- {
			if p := a.Processes.RecentExited[i]; p.Environment != "" {
				newest = &p
			}
		}
	}
	if newest == nil {
		return unknownFact[Environment](noFamily("runtime.configured or process.started event naming an environment"))
	}
	return knownFact(Environment{Environment: newest.Environment, EnvironmentRef: newest.EnvironmentRef, Source: string(topics.TypeProcessStarted)}, stale)
}

// jobProgress counts the plans' steps by their child's status, reading at
// most readModelScan steps; not applicable to a run without a plan.
func (r *Run) jobProgress(stale bool) Fact[JobProgress] {
	if len(r.plans) == 0 {
		return Fact[JobProgress]{Status: NotApplicable, Reason: "the run has no plan: its work is not divided into steps"}
	}
	j := JobProgress{Plans: len(r.plans)}
	scanned := 0
	for _, id := range slices.Sorted(maps.Keys(r.plans)) {
		pl := r.plans[id]
		for _, bi := range slices.Sorted(maps.Keys(pl.Bands)) {
			b := pl.Bands[bi]
			j.Steps += b.StepCount
			for _, st := range b.Steps {
				if scanned++; scanned > readModelScan {
					j.Truncated = true
					break
				}
				n := r.peek(st.ChildAgentID)
				if st.ChildAgentID == "" || n == nil {
					continue
				}
				switch n.Status {
				case topics.StatusCompleted:
					j.Completed++
				case topics.StatusFailed:
					j.Failed++
				case topics.StatusRunning, topics.StatusBlocked:
					j.Running++
				}
			}
		}
	}
	if j.Steps > 0 {
		j.Fraction = float64(j.Completed) / float64(j.Steps)
	}
	return knownFact(j, stale)
}

func (a *activity) channels() []ChannelRef {
	out := []ChannelRef{}
	for _, id := range slices.Sorted(maps.Keys(a.Channels)) {
		out = append(out, *a.Channels[id])
	}
	return out
}

func (a *activity) traceSummary(events int64) TraceSummary {
	t := TraceSummary{RecentTraceIDs: newestFirstCopy(a.Trace.Recent), TracedEvents: a.Trace.Traced, Events: events}
	if len(t.RecentTraceIDs) > 0 {
		t.LatestTraceID = t.RecentTraceIDs[0]
	}
	return t
}

// checks derives seed 003's diagnostics.
func (r *Run) checks(a *activity, m *ReadModel, stale bool) DiagnosticChecks {
	c := DiagnosticChecks{
		Warnings:        knownFact(int64(len(r.diagnostics))+int64(len(a.Incidents.Open))+a.Untracked["open_incidents"], stale),
		FailedTools:     famFact(a, a.Tools.FailedTools, stale, noFamily("tool.*"), famTool),
		FailedCommands:  famFact(a, a.Tools.FailedCommands+a.Processes.Failed, stale, noFamily("tool.* or process.*"), famTool, famProcess),
		PendingRequests: knownFact(len(r.requests), stale),
		StalledTasks:    knownFact(r.wdCount[topics.WatchdogSuspectDeliveryFailure], stale),
		LostWorkers:     knownFact(m.Lost.Total, stale),
		InterruptState:  knownFact("none", stale),
		QuotaBlocks:     famFact(a, 0, stale, noFamily("limit.updated"), famLimit),
		ContextGaps:     famFact(a, a.Compacted, stale, noFamily("turn.* or context.compacted"), famTurn, famCompaction),
	}
	if i := a.Interrupt; i != nil {
		state := "pending"
		if i.HonouredAt != nil {
			state = "honoured"
		}
		c.InterruptState = knownFact(state, stale)
	}
	stalled := 0
	for _, t := range a.Turns.Active {
		if r.clock.Sub(t.LastActivityAt) >= TurnStallAfter {
			stalled++
		}
	}
	c.StalledTurns = famFact(a, stalled, stale, noFamily("turn.*"), famTurn)
	if c.QuotaBlocks.Value != nil {
		for _, l := range a.Limits {
			if l.State == "exhausted" {
				*c.QuotaBlocks.Value++
			}
		}
	}
	return c
}

// copyOf is a copy of *v, nil for nil: the read model never shares the
// run's state.
func copyOf[T any](v *T) *T {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}
