package projection

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// A run's activity: what its agents did inside their nodes (turns, tool
// calls, processes, incidents, model usage, limits, the runtime's
// permissions, compaction, channels, artifacts, evidence, trace ids), kept
// for the read model (readmodel.go) and the session snapshot, never for a
// snapshot or a wake. A run has none until its first event that feeds it;
// it is persisted as one record per run ('a', JSON), bounded: every map
// holds at most maxTracked entries and every list maxRecent, with exact
// totals beside them, and the record is cut (fit) when its encoding would
// pass maxActivityBytes.

const (
	// maxTracked bounds each map of open things (running calls, open
	// incidents, running processes, queued and active turns, limits,
	// channels, models): beyond it, a new one is counted, not listed.
	maxTracked = 64
	// maxRecent bounds each list of recent things (failed calls, exited
	// processes, artifacts, evidence, trace ids).
	maxRecent = MaxReadModelList
	// maxArtifactIDs bounds the artifact ids a run remembers (as 64-bit
	// hashes) to check the references of parent hints and results.
	maxArtifactIDs = 4096
	// maxActivityBytes bounds the activity record's encoding, well inside
	// MaxRecordBytes.
	maxActivityBytes = MaxRecordBytes / 2
	// activityVersion is the record's version: a record of another is
	// refused rather than misread.
	activityVersion = 1
)

// activity is a run's activity state; it is its own record (JSON).
type activity struct {
	Version    int                    `json:"v"`
	Turns      turnState              `json:"turns"`
	Tools      toolState              `json:"tools"`
	Artifacts  artifactState          `json:"artifacts"`
	Evidence   evidenceState          `json:"evidence"`
	Incidents  incidentState          `json:"incidents"`
	Processes  processState           `json:"processes"`
	Models     modelState             `json:"models"`
	Limits     map[string]*LimitRef   `json:"limits,omitempty"`
	Runtime    *RuntimeFacts          `json:"runtime,omitempty"`
	Compaction *CompactionRef         `json:"compaction,omitempty"`
	Compacted  int64                  `json:"compacted,omitempty"`
	Channels   map[string]*ChannelRef `json:"channels,omitempty"`
	Trace      traceState             `json:"trace"`
	Session    *SessionFacts          `json:"session,omitempty"`
	Interrupt  *InterruptFact         `json:"interrupt,omitempty"`
	// Untracked counts, per map, what was not listed because the map was
	// full: the read model says its list is truncated.
	Untracked map[string]int64 `json:"untracked,omitempty"`
	// Seen are the families of events the run has had ("turn", "tool",
	// ...): a fact whose family was never seen is unknown, not zero.
	Seen map[string]bool `json:"seen"`
}

// TurnRef is a turn in a list of the read model.
type TurnRef struct {
	TurnID  string      `json:"turn_id"`
	AgentID string      `json:"agent_id"`
	InputID string      `json:"input_id,omitempty"`
	At      topics.Time `json:"at"`
	// LastActivityAt is when the turn last showed life (its start, or a
	// call of its node's): a turn without any for Config.StallAfter is
	// stalled.
	LastActivityAt topics.Time `json:"last_activity_at"`
}

// TurnOutcome is how the run's last turn ended.
type TurnOutcome struct {
	TurnID    string      `json:"turn_id"`
	AgentID   string      `json:"agent_id"`
	Outcome   string      `json:"outcome"`
	ErrorCode string      `json:"error_code,omitempty"`
	Summary   string      `json:"summary,omitempty"`
	At        topics.Time `json:"at"`
}

type turnState struct {
	Active    map[string]*TurnRef `json:"active,omitempty"`
	Queued    map[string]*TurnRef `json:"queued,omitempty"`
	Last      *TurnOutcome        `json:"last,omitempty"`
	Started   int64               `json:"started"`
	Completed map[string]int64    `json:"completed,omitempty"`
}

// CallRef is a tool or command call in a list of the read model.
type CallRef struct {
	CallID   string `json:"call_id"`
	ToolName string `json:"tool_name"`
	CallKind string `json:"call_kind"`
	AgentID  string `json:"agent_id"`
	TurnID   string `json:"turn_id,omitempty"`
	Command  string `json:"command,omitempty"`
	// StartedAt is null for a call whose start the run did not see (or
	// no longer lists).
	StartedAt  *topics.Time `json:"started_at"`
	FinishedAt *topics.Time `json:"finished_at,omitempty"`
	Outcome    string       `json:"outcome,omitempty"`
	DurationMs int64        `json:"duration_ms,omitempty"`
	ExitCode   *int64       `json:"exit_code,omitempty"`
	ErrorCode  string       `json:"error_code,omitempty"`
	OutputRef  string       `json:"output_ref,omitempty"`
}

// ToolCount is one tool's calls.
type ToolCount struct {
	ToolName string `json:"tool_name"`
	Calls    int64  `json:"calls"`
	Failed   int64  `json:"failed"`
}

type toolState struct {
	Running map[string]*CallRef `json:"running,omitempty"`
	// RecentFailed are the newest failed calls, newest last.
	RecentFailed []CallRef `json:"recent_failed,omitempty"`
	// ByTool counts calls per tool name, at most maxTracked names.
	ByTool         map[string]*ToolCount `json:"by_tool,omitempty"`
	Started        int64                 `json:"started"`
	Outcomes       map[string]int64      `json:"outcomes,omitempty"`
	FailedCommands int64                 `json:"failed_commands"`
	FailedTools    int64                 `json:"failed_tools"`
}

// ArtifactRef is an artifact in a list of the read model: a reference.
type ArtifactRef struct {
	ArtifactID   string      `json:"artifact_id"`
	ArtifactType string      `json:"artifact_type"`
	AgentID      string      `json:"agent_id"`
	Label        string      `json:"label,omitempty"`
	IsPrimary    bool        `json:"is_primary,omitempty"`
	At           topics.Time `json:"at"`
}

type artifactState struct {
	Total  int64            `json:"total"`
	ByType map[string]int64 `json:"by_type,omitempty"`
	Recent []ArtifactRef    `json:"recent,omitempty"`
	// IDs are the xxhash of the artifact ids seen, at most
	// maxArtifactIDs (sorted), to check references.
	IDs []uint64 `json:"ids,omitempty"`
	// Unchecked counts references not checked because IDs was full;
	// Dangling references to an artifact the run has not seen.
	Unchecked int64 `json:"unchecked,omitempty"`
	Dangling  int64 `json:"dangling,omitempty"`
}

// EvidenceRef is a piece of evidence in a list of the read model.
type EvidenceRef struct {
	EvidenceID   string      `json:"evidence_id"`
	EvidenceKind string      `json:"evidence_kind"`
	Verdict      string      `json:"verdict,omitempty"`
	AgentID      string      `json:"agent_id"`
	ArtifactID   string      `json:"artifact_id,omitempty"`
	Ref          string      `json:"ref,omitempty"`
	At           topics.Time `json:"at"`
}

type evidenceState struct {
	Total     int64            `json:"total"`
	ByKind    map[string]int64 `json:"by_kind,omitempty"`
	ByVerdict map[string]int64 `json:"by_verdict,omitempty"`
	Recent    []EvidenceRef    `json:"recent,omitempty"`
}

// IncidentRef is an open incident.
type IncidentRef struct {
	IncidentID   string      `json:"incident_id"`
	IncidentKind string      `json:"incident_kind"`
	Severity     string      `json:"severity"`
	Title        string      `json:"title,omitempty"`
	AgentID      string      `json:"agent_id"`
	OpenedAt     topics.Time `json:"opened_at"`
}

type incidentState struct {
	Open     map[string]*IncidentRef `json:"open,omitempty"`
	Opened   int64                   `json:"opened"`
	Resolved int64                   `json:"resolved"`
}

// ProcessRef is a process in a list of the read model.
type ProcessRef struct {
	ProcessID      string `json:"process_id"`
	AgentID        string `json:"agent_id"`
	Command        string `json:"command,omitempty"`
	Environment    string `json:"environment,omitempty"`
	EnvironmentRef string `json:"environment_ref,omitempty"`
	OutputRef      string `json:"output_ref,omitempty"`
	// StartedAt is null for a process whose start the run did not see
	// (or no longer lists).
	StartedAt *topics.Time `json:"started_at"`
	ExitedAt  *topics.Time `json:"exited_at,omitempty"`
	ExitCode  *int64       `json:"exit_code,omitempty"`
	Signal    string       `json:"signal,omitempty"`
}

type processState struct {
	Running map[string]*ProcessRef `json:"running,omitempty"`
	// RecentExited are the newest exited processes, newest last.
	RecentExited []ProcessRef `json:"recent_exited,omitempty"`
	Started      int64        `json:"started"`
	Exited       int64        `json:"exited"`
	// Failed counts processes that exited non-zero or by a signal.
	Failed int64 `json:"failed"`
}

// ModelUsageTotals sums model.usage events.
type ModelUsageTotals struct {
	Calls        int64 `json:"calls"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	CostMicros   int64 `json:"cost_micros"`
}

// ModelRoute is which model served the run's latest call.
type ModelRoute struct {
	Model    string      `json:"model"`
	Provider string      `json:"provider,omitempty"`
	Profile  string      `json:"profile,omitempty"`
	AgentID  string      `json:"agent_id"`
	At       topics.Time `json:"at"`
}

// ModelCount is one model's usage.
type ModelCount struct {
	Model string `json:"model"`
	ModelUsageTotals
}

type modelState struct {
	Latest  *ModelRoute            `json:"latest,omitempty"`
	Totals  ModelUsageTotals       `json:"totals"`
	ByModel map[string]*ModelCount `json:"by_model,omitempty"`
}

// LimitRef is where one limit stands.
type LimitRef struct {
	LimitKind string       `json:"limit_kind"`
	State     string       `json:"state"`
	Remaining *int64       `json:"remaining,omitempty"`
	ResetAt   *topics.Time `json:"reset_at,omitempty"`
	AgentID   string       `json:"agent_id"`
	At        topics.Time  `json:"at"`
}

// RuntimeFacts are the runtime's permissions, sandbox and environment, the
// latest value of each.
type RuntimeFacts struct {
	PermissionMode       string      `json:"permission_mode,omitempty"`
	SandboxProfile       string      `json:"sandbox_profile,omitempty"`
	NetworkAccess        *bool       `json:"network_access,omitempty"`
	ExecutionEnvironment string      `json:"execution_environment,omitempty"`
	EnvironmentRef       string      `json:"environment_ref,omitempty"`
	AgentID              string      `json:"agent_id"`
	At                   topics.Time `json:"at"`
}

// CompactionRef is a context compaction boundary.
type CompactionRef struct {
	BoundaryID    string      `json:"boundary_id"`
	AgentID       string      `json:"agent_id"`
	TokensBefore  int64       `json:"tokens_before,omitempty"`
	TokensAfter   int64       `json:"tokens_after,omitempty"`
	ThroughTurnID string      `json:"through_turn_id,omitempty"`
	At            topics.Time `json:"at"`
}

// ChannelRef is a remote channel's state.
type ChannelRef struct {
	ChannelID   string      `json:"channel_id"`
	ChannelKind string      `json:"channel_kind"`
	State       string      `json:"state"`
	AgentID     string      `json:"agent_id"`
	At          topics.Time `json:"at"`
}

type traceState struct {
	// Recent are the newest distinct trace ids, newest last.
	Recent []string `json:"recent,omitempty"`
	Traced int64    `json:"traced"`
}

// SessionFacts are the facts of the run's session its session.updated
// events gave, the latest of each.
type SessionFacts struct {
	Title           string      `json:"title,omitempty"`
	WorkspaceID     string      `json:"workspace_id,omitempty"`
	AccountID       string      `json:"account_id,omitempty"`
	PinnedThreadIDs []string    `json:"pinned_thread_ids"`
	UpdatedAt       topics.Time `json:"updated_at"`
}

// InterruptFact is the run's latest interrupt or cancel from a person.
type InterruptFact struct {
	InputKind string      `json:"input_kind"`
	AgentID   string      `json:"agent_id"`
	At        topics.Time `json:"at"`
	// HonouredAt is when a turn ended interrupted or cancelled after it;
	// null while it is pending.
	HonouredAt *topics.Time `json:"honoured_at,omitempty"`
}

// The families of activity events, for activity.Seen.
const (
	famTurn       = "turn"
	famTool       = "tool"
	famArtifact   = "artifact"
	famEvidence   = "evidence"
	famIncident   = "incident"
	famProcess    = "process"
	famModel      = "model"
	famLimit      = "limit"
	famRuntime    = "runtime"
	famCompaction = "compaction"
	famChannel    = "channel"
	famTrace      = "trace"
	famSession    = "session"
)

func newActivity() *activity {
	return &activity{Version: activityVersion, Seen: map[string]bool{}}
}

// feedsActivity reports whether ev changes a run's activity: an activity
// event, an artifact, an interrupt, or any event that carried a trace id.
// References to artifacts (parent hints, results) are checked only in a
// run that reports its artifacts (refer), so that a run of the tree's
// events alone carries no activity at all.
func feedsActivity(ev *topics.Event) bool {
	if ev.TraceID != "" {
		return true
	}
	switch p := ev.Data.(type) {
	case *topics.ArtifactCreated,
		*topics.TurnQueued, *topics.TurnStarted, *topics.TurnCompleted, *topics.ToolStarted, *topics.ToolFinished,
		*topics.EvidenceRecorded, *topics.IncidentOpened, *topics.IncidentResolved, *topics.ProcessStarted,
		*topics.ProcessExited, *topics.ModelUsage, *topics.LimitUpdated, *topics.RuntimeConfigured,
		*topics.ContextCompacted, *topics.ChannelState, *topics.SessionUpdated:
		return true
	case *topics.Input:
		return p.InputKind == "interrupt" || p.InputKind == "cancel"
	}
	return false
}

// applyActivity applies ev to the run's activity.
func (r *Run) applyActivity(ev *topics.Event) {
	if !feedsActivity(ev) {
		if r.act.seen(famArtifact) {
			r.referActivity(ev)
		}
		return
	}
	if r.act == nil {
		r.act = newActivity()
	}
	a, at, agent := r.act, ev.Time, ev.AgentID
	changed := true
	if ev.TraceID != "" {
		a.trace(ev.TraceID)
	}
	switch p := ev.Data.(type) {
	case *topics.TurnQueued, *topics.TurnStarted, *topics.TurnCompleted:
		a.turn(p, agent, at)
	case *topics.ToolStarted, *topics.ToolFinished:
		a.tool(p, agent, at)
	case *topics.ArtifactCreated:
		a.artifact(p, agent, at)
	case *topics.EvidenceRecorded:
		a.evidence(p, agent, at)
	case *topics.IncidentOpened, *topics.IncidentResolved:
		a.incident(p, agent, at)
	case *topics.ProcessStarted, *topics.ProcessExited:
		a.process(p, agent, at)
	case *topics.ModelUsage:
		a.usage(p, agent, at)
	case *topics.LimitUpdated:
		a.limit(p, agent, at)
	case *topics.RuntimeConfigured:
		a.runtime(p, agent, at)
	case *topics.ContextCompacted:
		a.Seen[famCompaction] = true
		a.Compacted++
		a.Compaction = &CompactionRef{BoundaryID: p.BoundaryID, AgentID: agent, TokensBefore: p.TokensBefore,
			TokensAfter: p.TokensAfter, ThroughTurnID: p.ThroughTurnID, At: at}
	case *topics.ChannelState:
		a.channel(p, agent, at)
	case *topics.SessionUpdated:
		a.session(p, at)
	case *topics.Input:
		if p.InputKind == "interrupt" || p.InputKind == "cancel" {
			a.Interrupt = &InterruptFact{InputKind: p.InputKind, AgentID: agent, At: at}
		} else {
			changed = ev.TraceID != ""
		}
	default:
		changed = ev.TraceID != ""
	}
	if changed && r.dirty != nil {
		r.dirty.activity = true
	}
}

// referActivity checks the references of a parent hint or a result to the
// run's artifacts.
func (r *Run) referActivity(ev *topics.Event) {
	switch p := ev.Data.(type) {
	case *topics.ParentHint:
		r.act.refer(p.ArtifactIDs...)
	case *topics.Result:
		r.act.refer(p.ArtifactIDs...)
		if p.PrimaryArtifactID != "" && !slices.Contains(p.ArtifactIDs, p.PrimaryArtifactID) {
			r.act.refer(p.PrimaryArtifactID)
		}
	default:
		return
	}
	if r.dirty != nil {
		r.dirty.activity = true
	}
}

// track puts v under id in m unless m is full (then counts it untracked
// under name); it reports whether v is in m.
func track[T any](a *activity, m *map[string]*T, name, id string, v *T) bool {
	if *m == nil {
		*m = map[string]*T{}
	}
	if _, ok := (*m)[id]; !ok && len(*m) >= maxTracked {
		a.untracked(name, 1)
		return false
	}
	(*m)[id] = v
	return true
}

func (a *activity) untracked(name string, d int64) {
	if a.Untracked == nil {
		a.Untracked = map[string]int64{}
	}
	a.Untracked[name] += d
	if a.Untracked[name] <= 0 {
		delete(a.Untracked, name)
	}
}

// forget removes id from m, or one of name's untracked ones when m does not
// hold it; it reports whether m held it.
func forget[T any](a *activity, m map[string]*T, name, id string) (*T, bool) {
	if v, ok := m[id]; ok {
		delete(m, id)
		return v, true
	}
	if a.Untracked[name] > 0 {
		a.untracked(name, -1)
	}
	return nil, false
}

func (a *activity) turn(p topics.Payload, agent string, at topics.Time) {
	a.Seen[famTurn] = true
	t := &a.Turns
	switch p := p.(type) {
	case *topics.TurnQueued:
		track(a, &t.Queued, "queued_turns", p.TurnID, &TurnRef{TurnID: p.TurnID, AgentID: agent, InputID: p.InputID, At: at, LastActivityAt: at})
	case *topics.TurnStarted:
		forget(a, t.Queued, "queued_turns", p.TurnID)
		t.Started++
		track(a, &t.Active, "active_turns", p.TurnID, &TurnRef{TurnID: p.TurnID, AgentID: agent, InputID: p.InputID, At: at, LastActivityAt: at})
	case *topics.TurnCompleted:
		forget(a, t.Queued, "queued_turns", p.TurnID)
		forget(a, t.Active, "active_turns", p.TurnID)
		if t.Completed == nil {
			t.Completed = map[string]int64{}
		}
		t.Completed[p.Outcome]++
		t.Last = &TurnOutcome{TurnID: p.TurnID, AgentID: agent, Outcome: p.Outcome, ErrorCode: p.ErrorCode, Summary: p.Summary, At: at}
		if p.Outcome == "interrupted" || p.Outcome == "cancelled" {
			a.honour(at)
		}
	}
}

// honour marks a pending interrupt honoured at at; it reports whether one
// was pending.
func (a *activity) honour(at topics.Time) bool {
	if a.Interrupt == nil || a.Interrupt.HonouredAt != nil || at.Before(a.Interrupt.At) {
		return false
	}
	a.Interrupt.HonouredAt = &at
	return true
}

// touchTurns records life in agent's active turns.
func (a *activity) touchTurns(agent string, at topics.Time) {
	for _, t := range a.Turns.Active {
		if t.AgentID == agent && at.After(t.LastActivityAt) {
			t.LastActivityAt = at
		}
	}
}

func (a *activity) tool(p topics.Payload, agent string, at topics.Time) {
	a.Seen[famTool] = true
	s := &a.Tools
	a.touchTurns(agent, at)
	switch p := p.(type) {
	case *topics.ToolStarted:
		kind := cmp.Or(p.CallKind, "tool")
		s.Started++
		counter(&s.ByTool, p.ToolName, func(name string) *ToolCount { return &ToolCount{ToolName: name} }).Calls++
		track(a, &s.Running, "running_calls", p.CallID, &CallRef{CallID: p.CallID, ToolName: p.ToolName, CallKind: kind,
			AgentID: agent, TurnID: p.TurnID, Command: p.Command, StartedAt: &at})
	case *topics.ToolFinished:
		if s.Outcomes == nil {
			s.Outcomes = map[string]int64{}
		}
		s.Outcomes[p.Outcome]++
		c, ok := forget(a, s.Running, "running_calls", p.CallID)
		if !ok {
			c = &CallRef{CallID: p.CallID, CallKind: "tool", AgentID: agent}
		}
		if p.Outcome != "failed" {
			return
		}
		if c.CallKind == "command" {
			s.FailedCommands++
		} else {
			s.FailedTools++
		}
		if tc := s.ByTool[c.ToolName]; tc != nil {
			tc.Failed++
		} else if tc := s.ByTool[otherName]; ok && tc != nil {
			tc.Failed++
		}
		done := *c
		done.FinishedAt, done.Outcome, done.DurationMs, done.ExitCode = &at, p.Outcome, p.DurationMs, p.ExitCode
		done.ErrorCode, done.OutputRef = p.ErrorCode, p.OutputRef
		s.RecentFailed = appendRecent(s.RecentFailed, done)
	}
}

func appendRecent[T any](l []T, v T) []T {
	l = append(l, v)
	if len(l) > maxRecent {
		l = slices.Delete(l, 0, len(l)-maxRecent)
	}
	return l
}

func (a *activity) artifact(p *topics.ArtifactCreated, agent string, at topics.Time) {
	a.Seen[famArtifact] = true
	s := &a.Artifacts
	s.Total++
	if s.ByType == nil {
		s.ByType = map[string]int64{}
	}
	s.ByType[p.ArtifactType]++
	s.Recent = appendRecent(s.Recent, ArtifactRef{ArtifactID: p.ArtifactID, ArtifactType: p.ArtifactType, AgentID: agent,
		Label: p.Label, IsPrimary: p.IsPrimary, At: at})
	h := xxhash.Sum64String(p.ArtifactID)
	if i, found := slices.BinarySearch(s.IDs, h); !found && len(s.IDs) < maxArtifactIDs {
		s.IDs = slices.Insert(s.IDs, i, h)
	}
}

// refer checks references to artifacts: one the run has not seen is
// dangling (a diagnostic of the read model), unless the run remembers too
// many ids to tell.
func (a *activity) refer(ids ...string) {
	s := &a.Artifacts
	for _, id := range ids {
		if _, found := slices.BinarySearch(s.IDs, xxhash.Sum64String(id)); found {
			continue
		}
		if len(s.IDs) >= maxArtifactIDs {
			s.Unchecked++
		} else {
			s.Dangling++
		}
	}
}

func (a *activity) evidence(p *topics.EvidenceRecorded, agent string, at topics.Time) {
	a.Seen[famEvidence] = true
	s := &a.Evidence
	s.Total++
	if s.ByKind == nil {
		s.ByKind, s.ByVerdict = map[string]int64{}, map[string]int64{}
	}
	if len(s.ByKind) < maxTracked || s.ByKind[p.EvidenceKind] > 0 {
		s.ByKind[p.EvidenceKind]++
	}
	s.ByVerdict[cmp.Or(p.Verdict, "none")]++
	s.Recent = appendRecent(s.Recent, EvidenceRef{EvidenceID: p.EvidenceID, EvidenceKind: p.EvidenceKind, Verdict: p.Verdict,
		AgentID: agent, ArtifactID: p.ArtifactID, Ref: p.Ref, At: at})
	if p.ArtifactID != "" {
		a.refer(p.ArtifactID)
	}
}

func (a *activity) incident(p topics.Payload, agent string, at topics.Time) {
	a.Seen[famIncident] = true
	s := &a.Incidents
	switch p := p.(type) {
	case *topics.IncidentOpened:
		s.Opened++
		track(a, &s.Open, "open_incidents", p.IncidentID, &IncidentRef{IncidentID: p.IncidentID, IncidentKind: p.IncidentKind,
			Severity: p.Severity, Title: p.Title, AgentID: agent, OpenedAt: at})
	case *topics.IncidentResolved:
		s.Resolved++
		forget(a, s.Open, "open_incidents", p.IncidentID)
	}
}

func (a *activity) process(p topics.Payload, agent string, at topics.Time) {
	a.Seen[famProcess] = true
	s := &a.Processes
	a.touchTurns(agent, at)
	switch p := p.(type) {
	case *topics.ProcessStarted:
		s.Started++
		track(a, &s.Running, "running_processes", p.ProcessID, &ProcessRef{ProcessID: p.ProcessID, AgentID: agent, Command: p.Command,
			Environment: p.Environment, EnvironmentRef: p.EnvironmentRef, OutputRef: p.OutputRef, StartedAt: &at})
	case *topics.ProcessExited:
		s.Exited++
		pr, ok := forget(a, s.Running, "running_processes", p.ProcessID)
		if !ok {
			pr = &ProcessRef{ProcessID: p.ProcessID, AgentID: agent}
		}
		done := *pr
		done.ExitedAt, done.ExitCode, done.Signal = &at, p.ExitCode, p.Signal
		done.OutputRef = cmp.Or(p.OutputRef, done.OutputRef)
		if p.Signal != "" || (p.ExitCode != nil && *p.ExitCode != 0) {
			s.Failed++
		}
		s.RecentExited = appendRecent(s.RecentExited, done)
	}
}

func (a *activity) usage(p *topics.ModelUsage, agent string, at topics.Time) {
	a.Seen[famModel] = true
	s := &a.Models
	s.Latest = &ModelRoute{Model: p.Model, Provider: p.Provider, Profile: p.Profile, AgentID: agent, At: at}
	add := func(t *ModelUsageTotals) {
		t.Calls++
		t.InputTokens = satAdd(t.InputTokens, p.InputTokens)
		t.OutputTokens = satAdd(t.OutputTokens, p.OutputTokens)
		t.CachedTokens = satAdd(t.CachedTokens, p.CachedTokens)
		t.CostMicros = satAdd(t.CostMicros, p.CostMicros)
	}
	add(&s.Totals)
	add(&counter(&s.ByModel, p.Model, func(name string) *ModelCount { return &ModelCount{Model: name} }).ModelUsageTotals)
}

// otherName is the name the counts beyond maxTracked names are kept under.
const otherName = "(other)"

// counter is name's counter in m, made by mk when new; when m holds
// maxTracked names already, a new name counts under otherName.
func counter[T any](m *map[string]*T, name string, mk func(string) *T) *T {
	if *m == nil {
		*m = map[string]*T{}
	}
	if _, ok := (*m)[name]; !ok && len(*m) >= maxTracked {
		name = otherName
	}
	if (*m)[name] == nil {
		(*m)[name] = mk(name)
	}
	return (*m)[name]
}

// satAdd adds without overflowing: usage is summed over a run's life.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

func (a *activity) limit(p *topics.LimitUpdated, agent string, at topics.Time) {
	a.Seen[famLimit] = true
	track(a, &a.Limits, "limits", p.LimitKind, &LimitRef{LimitKind: p.LimitKind, State: p.State, Remaining: p.Remaining,
		ResetAt: p.ResetAt, AgentID: agent, At: at})
}

func (a *activity) runtime(p *topics.RuntimeConfigured, agent string, at topics.Time) {
	a.Seen[famRuntime] = true
	rt := a.Runtime
	if rt == nil {
		rt = &RuntimeFacts{}
		a.Runtime = rt
	}
	rt.PermissionMode = cmp.Or(p.PermissionMode, rt.PermissionMode)
	rt.SandboxProfile = cmp.Or(p.SandboxProfile, rt.SandboxProfile)
	if p.NetworkAccess != nil {
		v := *p.NetworkAccess
		rt.NetworkAccess = &v
	}
	rt.ExecutionEnvironment = cmp.Or(p.ExecutionEnvironment, rt.ExecutionEnvironment)
	rt.EnvironmentRef = cmp.Or(p.EnvironmentRef, rt.EnvironmentRef)
	rt.AgentID, rt.At = agent, at
}

func (a *activity) channel(p *topics.ChannelState, agent string, at topics.Time) {
	a.Seen[famChannel] = true
	track(a, &a.Channels, "channels", p.ChannelID, &ChannelRef{ChannelID: p.ChannelID, ChannelKind: p.ChannelKind,
		State: p.State, AgentID: agent, At: at})
}

func (a *activity) session(p *topics.SessionUpdated, at topics.Time) {
	a.Seen[famSession] = true
	s := a.Session
	if s == nil {
		s = &SessionFacts{PinnedThreadIDs: []string{}}
		a.Session = s
	}
	s.Title = cmp.Or(p.Title, s.Title)
	s.WorkspaceID = cmp.Or(p.WorkspaceID, s.WorkspaceID)
	s.AccountID = cmp.Or(p.AccountID, s.AccountID)
	if len(p.PinnedThreadIDs) > 0 { // an empty list is an absent one (docs/CONTRACT.md)
		s.PinnedThreadIDs = slices.Clone(p.PinnedThreadIDs)
	}
	s.UpdatedAt = at
}

func (a *activity) trace(id string) {
	a.Seen[famTrace] = true
	s := &a.Trace
	s.Traced++
	if i := slices.Index(s.Recent, id); i >= 0 {
		s.Recent = slices.Delete(s.Recent, i, i+1)
	}
	s.Recent = appendRecent(s.Recent, id)
}

// encodeActivity is the activity record, cut to maxActivityBytes: the
// oldest entries of the recent lists go first, then the listed open
// things, oldest first, counted as untracked; totals stay exact.
func encodeActivity(a *activity) ([]byte, error) {
	for range 1 << 10 {
		enc, err := json.Marshal(a)
		if err != nil || len(enc) <= maxActivityBytes {
			return enc, err
		}
		a.cut()
	}
	return nil, fmt.Errorf("projection: the activity record does not fit in %d bytes", maxActivityBytes)
}

// cut drops the older half of every recent list and of every listed map
// of open things (those counted as untracked): encodeActivity repeats it
// until the record fits.
func (a *activity) cut() {
	a.Tools.RecentFailed = halve(a.Tools.RecentFailed)
	a.Processes.RecentExited = halve(a.Processes.RecentExited)
	a.Artifacts.Recent = halve(a.Artifacts.Recent)
	a.Evidence.Recent = halve(a.Evidence.Recent)
	cutMap(a, a.Tools.Running, "running_calls", func(c *CallRef) topics.Time { return *c.StartedAt })
	cutMap(a, a.Processes.Running, "running_processes", func(p *ProcessRef) topics.Time { return *p.StartedAt })
	cutMap(a, a.Incidents.Open, "open_incidents", func(i *IncidentRef) topics.Time { return i.OpenedAt })
	cutMap(a, a.Turns.Active, "active_turns", func(t *TurnRef) topics.Time { return t.At })
	cutMap(a, a.Turns.Queued, "queued_turns", func(t *TurnRef) topics.Time { return t.At })
}

func halve[T any](l []T) []T { return slices.Delete(l, 0, len(l)/2) }

// cutMap drops the oldest half of m's entries (by time, then id), counted
// as untracked.
func cutMap[T any](a *activity, m map[string]*T, name string, at func(*T) topics.Time) {
	ids := slices.SortedFunc(maps.Keys(m), func(x, y string) int {
		return cmp.Or(cmp.Compare(at(m[x]).UnixMilli(), at(m[y]).UnixMilli()), cmp.Compare(x, y))
	})
	for _, id := range ids[:len(ids)/2] {
		delete(m, id)
		a.untracked(name, 1)
	}
}

func decodeActivity(v []byte) (*activity, error) {
	a := newActivity()
	if err := json.Unmarshal(v, a); err != nil {
		return nil, err
	}
	if a.Version != activityVersion {
		return nil, fmt.Errorf("activity record of version %d, this build reads %d", a.Version, activityVersion)
	}
	if a.Seen == nil {
		a.Seen = map[string]bool{}
	}
	return a, nil
}

// footprint estimates the activity's memory: its record's size is a fair
// bound, known at the last write.
func (a *activity) footprint() int64 {
	if a == nil {
		return 0
	}
	return footprintActivity + 8*int64(len(a.Artifacts.IDs)) +
		footprintActivityEntry*int64(len(a.Tools.Running)+len(a.Processes.Running)+len(a.Incidents.Open)+
			len(a.Turns.Active)+len(a.Turns.Queued)+len(a.Tools.RecentFailed)+len(a.Processes.RecentExited)+
			len(a.Artifacts.Recent)+len(a.Evidence.Recent)+len(a.Limits)+len(a.Channels)+len(a.Tools.ByTool)+len(a.Models.ByModel))
}
