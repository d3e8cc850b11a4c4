package topics

import "fmt"

// The activity vocabulary: what an agent runtime does inside a node, beyond
// the tree's shape and lifecycle, as seed 003's thread read model asks for
// it: turns, tool and command calls, evidence, incidents, processes, model
// usage and limits, the runtime's permissions and sandbox, context
// compaction, remote channels and the session's own facts. Each type is
// what a runtime emits at one moment (a call started, a call finished),
// never one event per field; payloads are flat, carry references rather
// than contents (a tool's output is an output_ref, never the output), and
// free text is short and redacted before it is kept (docs/CONTRACT.md
// "Redaction").
//
// Approvals are requests (signal.request) whose request_kind is one of
// ApprovalRequestKinds: they open, wake and resolve as every request does,
// and the read model lists them apart.

// The activity event types.
const (
	TypeTurnQueued        EventType = "turn.queued"
	TypeTurnStarted       EventType = "turn.started"
	TypeTurnCompleted     EventType = "turn.completed"
	TypeToolStarted       EventType = "tool.started"
	TypeToolFinished      EventType = "tool.finished"
	TypeEvidenceRecorded  EventType = "tree.evidence_recorded"
	TypeIncidentOpened    EventType = "incident.opened"
	TypeIncidentResolved  EventType = "incident.resolved"
	TypeProcessStarted    EventType = "process.started"
	TypeProcessExited     EventType = "process.exited"
	TypeModelUsage        EventType = "model.usage"
	TypeLimitUpdated      EventType = "limit.updated"
	TypeRuntimeConfigured EventType = "runtime.configured"
	TypeContextCompacted  EventType = "context.compacted"
	TypeChannelState      EventType = "channel.state"
	TypeSessionUpdated    EventType = "session.updated"
)

// MaxSummaryLength bounds every free-text field of the activity vocabulary
// (a turn's summary, a command line, an incident's title, a session's
// title): the read model shows them at a glance, and the full text stays
// where the runtime keeps it (a ref).
const MaxSummaryLength = 512

// Enumerations of the activity vocabulary's fields.
var (
	// TurnOutcomes is how a turn ended.
	TurnOutcomes = []string{"succeeded", "failed", "cancelled", "interrupted"}
	// CallKinds is what a tool.started called: a tool of the agent's, a
	// shell command, or a tool of an MCP server.
	CallKinds = []string{"tool", "command", "mcp"}
	// CallOutcomes is how a call ended.
	CallOutcomes = []string{"succeeded", "failed", "cancelled"}
	// EvidenceVerdicts is what a piece of evidence says.
	EvidenceVerdicts = []string{"passed", "failed", "inconclusive"}
	// Severities is how bad an incident is.
	Severities = []string{"info", "warning", "error", "critical"}
	// Environments is where a process or the runtime executes.
	Environments = []string{"local", "container", "vm", "remote"}
	// LimitStates is where a limit stands: ok, near its end, or exhausted
	// (the work is blocked until it resets).
	LimitStates = []string{"ok", "near", "exhausted"}
	// PermissionModes is what the runtime may do without asking.
	PermissionModes = []string{"ask", "auto_edit", "full_auto", "read_only"}
	// ChannelStates is a remote channel's connection.
	ChannelStates = []string{"connected", "degraded", "disconnected"}
	// ApprovalRequestKinds are the request kinds that ask a person to
	// approve an action: the read model's pending approvals.
	ApprovalRequestKinds = []string{"approval", "permission"}
)

// TurnQueued (turn.queued): a turn of the node's thread is waiting to
// start, e.g. a message that arrived while another turn runs.
type TurnQueued struct {
	TurnID string `json:"turn_id"`
	// InputID is the human input the turn answers, when one.
	InputID string `json:"input_id,omitempty"`
}

// TurnStarted (turn.started): the node began a turn.
type TurnStarted struct {
	TurnID  string `json:"turn_id"`
	InputID string `json:"input_id,omitempty"`
}

// TurnCompleted (turn.completed): a turn ended, with its outcome.
type TurnCompleted struct {
	TurnID    string `json:"turn_id"`
	Outcome   string `json:"outcome"`
	ErrorCode string `json:"error_code,omitempty"`
	// Summary is a short free text of what the turn did (redacted).
	Summary string `json:"summary,omitempty"`
}

// ToolStarted (tool.started): the node called a tool or ran a command.
type ToolStarted struct {
	CallID   string `json:"call_id"`
	ToolName string `json:"tool_name"`
	// CallKind is tool (default), command or mcp.
	CallKind string `json:"call_kind,omitempty"`
	// Command is the command line of a command call, free text (redacted).
	Command string `json:"command,omitempty"`
	TurnID  string `json:"turn_id,omitempty"`
}

// ToolFinished (tool.finished): a call ended. The output stays where the
// runtime put it: OutputRef names it.
type ToolFinished struct {
	CallID     string `json:"call_id"`
	Outcome    string `json:"outcome"`
	DurationMs int64  `json:"duration_ms,omitempty"`
	ExitCode   *int64 `json:"exit_code,omitempty"`
	ErrorCode  string `json:"error_code,omitempty"`
	OutputRef  string `json:"output_ref,omitempty"`
}

// EvidenceRecorded (tree.evidence_recorded): evidence of the node's work
// (a test run, a review, a screenshot), by reference, optionally an
// artifact of the run's.
type EvidenceRecorded struct {
	EvidenceID   string `json:"evidence_id"`
	EvidenceKind string `json:"evidence_kind"`
	Verdict      string `json:"verdict,omitempty"`
	ArtifactID   string `json:"artifact_id,omitempty"`
	Ref          string `json:"ref,omitempty"`
}

// IncidentOpened (incident.opened): something is wrong that a person or the
// conductor should know (a provider outage, a crash loop, a guard).
type IncidentOpened struct {
	IncidentID   string `json:"incident_id"`
	IncidentKind string `json:"incident_kind"`
	Severity     string `json:"severity"`
	// Title is a short free text (redacted).
	Title string `json:"title,omitempty"`
}

// IncidentResolved (incident.resolved) closes an incident.
type IncidentResolved struct {
	IncidentID string `json:"incident_id"`
	Resolution string `json:"resolution,omitempty"`
}

// ProcessStarted (process.started): the node started a long-lived process
// (a dev server, a build, a shell).
type ProcessStarted struct {
	ProcessID string `json:"process_id"`
	// Command is its command line, free text (redacted).
	Command     string `json:"command,omitempty"`
	Environment string `json:"environment,omitempty"`
	// EnvironmentRef names where it runs: an image, a host, a sandbox id.
	EnvironmentRef string `json:"environment_ref,omitempty"`
	OutputRef      string `json:"output_ref,omitempty"`
}

// ProcessExited (process.exited): a process ended.
type ProcessExited struct {
	ProcessID string `json:"process_id"`
	ExitCode  *int64 `json:"exit_code,omitempty"`
	Signal    string `json:"signal,omitempty"`
	OutputRef string `json:"output_ref,omitempty"`
}

// ModelUsage (model.usage): one model call's routing and usage (seed 001's
// onUsage): which model served it, under which routing profile, and what
// it cost.
type ModelUsage struct {
	Model        string `json:"model"`
	Provider     string `json:"provider,omitempty"`
	Profile      string `json:"profile,omitempty"`
	InputTokens  int64  `json:"input_tokens,omitempty"`
	OutputTokens int64  `json:"output_tokens,omitempty"`
	CachedTokens int64  `json:"cached_tokens,omitempty"`
	// CostMicros is the call's cost in millionths of a US dollar.
	CostMicros int64 `json:"cost_micros,omitempty"`
}

// LimitUpdated (limit.updated): where one of the runtime's limits stands
// (tokens, requests, cost, a quota); exhausted blocks the work until
// ResetAt.
type LimitUpdated struct {
	LimitKind string `json:"limit_kind"`
	State     string `json:"state"`
	Remaining *int64 `json:"remaining,omitempty"`
	ResetAt   *Time  `json:"reset_at,omitempty"`
}

// RuntimeConfigured (runtime.configured): what the runtime executing the
// node may do and where it runs; fields not given are unchanged.
type RuntimeConfigured struct {
	PermissionMode       string `json:"permission_mode,omitempty"`
	SandboxProfile       string `json:"sandbox_profile,omitempty"`
	NetworkAccess        *bool  `json:"network_access,omitempty"`
	ExecutionEnvironment string `json:"execution_environment,omitempty"`
	EnvironmentRef       string `json:"environment_ref,omitempty"`
}

// ContextCompacted (context.compacted): the node's context was compacted;
// what came before the boundary is a summary from now on.
type ContextCompacted struct {
	BoundaryID   string `json:"boundary_id"`
	TokensBefore int64  `json:"tokens_before,omitempty"`
	TokensAfter  int64  `json:"tokens_after,omitempty"`
	// ThroughTurnID is the last turn the summary covers.
	ThroughTurnID string `json:"through_turn_id,omitempty"`
}

// ChannelState (channel.state): a remote channel of the run (a chat
// workspace, an IDE, a remote tab) changed its connection.
type ChannelState struct {
	ChannelID   string `json:"channel_id"`
	ChannelKind string `json:"channel_kind"`
	State       string `json:"state"`
}

// SessionUpdated (session.updated): the facts of the session the run
// belongs to (the event's session id): its title, scope and pinned
// threads. Fields not given are unchanged.
type SessionUpdated struct {
	// Title is free text (redacted).
	Title           string   `json:"title,omitempty"`
	WorkspaceID     string   `json:"workspace_id,omitempty"`
	AccountID       string   `json:"account_id,omitempty"`
	PinnedThreadIDs []string `json:"pinned_thread_ids,omitempty"`
}

func (*TurnQueued) EventType() EventType        { return TypeTurnQueued }
func (*TurnStarted) EventType() EventType       { return TypeTurnStarted }
func (*TurnCompleted) EventType() EventType     { return TypeTurnCompleted }
func (*ToolStarted) EventType() EventType       { return TypeToolStarted }
func (*ToolFinished) EventType() EventType      { return TypeToolFinished }
func (*EvidenceRecorded) EventType() EventType  { return TypeEvidenceRecorded }
func (*IncidentOpened) EventType() EventType    { return TypeIncidentOpened }
func (*IncidentResolved) EventType() EventType  { return TypeIncidentResolved }
func (*ProcessStarted) EventType() EventType    { return TypeProcessStarted }
func (*ProcessExited) EventType() EventType     { return TypeProcessExited }
func (*ModelUsage) EventType() EventType        { return TypeModelUsage }
func (*LimitUpdated) EventType() EventType      { return TypeLimitUpdated }
func (*RuntimeConfigured) EventType() EventType { return TypeRuntimeConfigured }
func (*ContextCompacted) EventType() EventType  { return TypeContextCompacted }
func (*ChannelState) EventType() EventType      { return TypeChannelState }
func (*SessionUpdated) EventType() EventType    { return TypeSessionUpdated }

// FreeTextFields are, per event type, the payload fields that hold free
// text rather than identifiers or enums: the fields redaction rewrites,
// and the only ones that may hold spaces and punctuation of any kind.
var FreeTextFields = map[EventType][]string{
	TypeInput:          {"text"},
	TypeTurnCompleted:  {"summary"},
	TypeToolStarted:    {"command"},
	TypeIncidentOpened: {"title"},
	TypeProcessStarted: {"command"},
	TypeSessionUpdated: {"title"},
}

func (p *TurnQueued) validate(ps *problems) {
	checkID(ps, "data.turn_id", p.TurnID, true)
	checkID(ps, "data.input_id", p.InputID, false)
}

func (p *TurnStarted) validate(ps *problems) {
	checkID(ps, "data.turn_id", p.TurnID, true)
	checkID(ps, "data.input_id", p.InputID, false)
}

func (p *TurnCompleted) validate(ps *problems) {
	checkID(ps, "data.turn_id", p.TurnID, true)
	checkEnum(ps, "data.outcome", p.Outcome, TurnOutcomes, true)
	checkID(ps, "data.error_code", p.ErrorCode, false)
	checkSummary(ps, "data.summary", p.Summary)
}

func (p *ToolStarted) validate(ps *problems) {
	checkID(ps, "data.call_id", p.CallID, true)
	checkID(ps, "data.tool_name", p.ToolName, true)
	checkEnum(ps, "data.call_kind", p.CallKind, CallKinds, false)
	checkSummary(ps, "data.command", p.Command)
	checkID(ps, "data.turn_id", p.TurnID, false)
}

func (p *ToolFinished) validate(ps *problems) {
	checkID(ps, "data.call_id", p.CallID, true)
	checkEnum(ps, "data.outcome", p.Outcome, CallOutcomes, true)
	checkNonNegative(ps, "data.duration_ms", p.DurationMs)
	checkID(ps, "data.error_code", p.ErrorCode, false)
	checkID(ps, "data.output_ref", p.OutputRef, false)
}

func (p *EvidenceRecorded) validate(ps *problems) {
	checkID(ps, "data.evidence_id", p.EvidenceID, true)
	checkID(ps, "data.evidence_kind", p.EvidenceKind, true)
	checkEnum(ps, "data.verdict", p.Verdict, EvidenceVerdicts, false)
	checkID(ps, "data.artifact_id", p.ArtifactID, false)
	checkID(ps, "data.ref", p.Ref, false)
}

func (p *IncidentOpened) validate(ps *problems) {
	checkID(ps, "data.incident_id", p.IncidentID, true)
	checkID(ps, "data.incident_kind", p.IncidentKind, true)
	checkEnum(ps, "data.severity", p.Severity, Severities, true)
	checkSummary(ps, "data.title", p.Title)
}

func (p *IncidentResolved) validate(ps *problems) {
	checkID(ps, "data.incident_id", p.IncidentID, true)
	checkID(ps, "data.resolution", p.Resolution, false)
}

func (p *ProcessStarted) validate(ps *problems) {
	checkID(ps, "data.process_id", p.ProcessID, true)
	checkSummary(ps, "data.command", p.Command)
	checkEnum(ps, "data.environment", p.Environment, Environments, false)
	checkID(ps, "data.environment_ref", p.EnvironmentRef, false)
	checkID(ps, "data.output_ref", p.OutputRef, false)
}

func (p *ProcessExited) validate(ps *problems) {
	checkID(ps, "data.process_id", p.ProcessID, true)
	checkID(ps, "data.signal", p.Signal, false)
	checkID(ps, "data.output_ref", p.OutputRef, false)
}

func (p *ModelUsage) validate(ps *problems) {
	checkID(ps, "data.model", p.Model, true)
	checkID(ps, "data.provider", p.Provider, false)
	checkID(ps, "data.profile", p.Profile, false)
	checkNonNegative(ps, "data.input_tokens", p.InputTokens)
	checkNonNegative(ps, "data.output_tokens", p.OutputTokens)
	checkNonNegative(ps, "data.cached_tokens", p.CachedTokens)
	checkNonNegative(ps, "data.cost_micros", p.CostMicros)
}

func (p *LimitUpdated) validate(ps *problems) {
	checkID(ps, "data.limit_kind", p.LimitKind, true)
	checkEnum(ps, "data.state", p.State, LimitStates, true)
	if p.Remaining != nil {
		checkNonNegative(ps, "data.remaining", *p.Remaining)
	}
}

func (p *RuntimeConfigured) validate(ps *problems) {
	checkEnum(ps, "data.permission_mode", p.PermissionMode, PermissionModes, false)
	checkID(ps, "data.sandbox_profile", p.SandboxProfile, false)
	checkEnum(ps, "data.execution_environment", p.ExecutionEnvironment, Environments, false)
	checkID(ps, "data.environment_ref", p.EnvironmentRef, false)
	if p.PermissionMode == "" && p.SandboxProfile == "" && p.NetworkAccess == nil && p.ExecutionEnvironment == "" && p.EnvironmentRef == "" {
		ps.add("data", "names nothing: give at least one of permission_mode, sandbox_profile, network_access, execution_environment, environment_ref")
	}
}

func (p *ContextCompacted) validate(ps *problems) {
	checkID(ps, "data.boundary_id", p.BoundaryID, true)
	checkNonNegative(ps, "data.tokens_before", p.TokensBefore)
	checkNonNegative(ps, "data.tokens_after", p.TokensAfter)
	checkID(ps, "data.through_turn_id", p.ThroughTurnID, false)
}

func (p *ChannelState) validate(ps *problems) {
	checkID(ps, "data.channel_id", p.ChannelID, true)
	checkID(ps, "data.channel_kind", p.ChannelKind, true)
	checkEnum(ps, "data.state", p.State, ChannelStates, true)
}

func (p *SessionUpdated) validate(ps *problems) {
	checkSummary(ps, "data.title", p.Title)
	checkID(ps, "data.workspace_id", p.WorkspaceID, false)
	checkID(ps, "data.account_id", p.AccountID, false)
	checkIDs(ps, "data.pinned_thread_ids", p.PinnedThreadIDs)
}

// checkSummary checks a free-text field: valid UTF-8 and at most
// MaxSummaryLength code points. Control characters other than a line feed
// or a tab are refused: a summary is shown, never run.
func checkSummary(ps *problems, field, v string) {
	if v == "" {
		return
	}
	if msg := TextProblem(v); msg != "" {
		ps.add(field, msg)
		return
	}
	if longerThan(v, MaxSummaryLength) {
		ps.add(field, tooLong(MaxSummaryLength))
		return
	}
	for _, r := range v {
		if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
			ps.add(field, fmt.Sprintf("contains the control character U+%04X", r))
			return
		}
	}
}

func checkNonNegative(ps *problems, field string, v int64) {
	if v < 0 {
		ps.add(field, "must not be negative")
	}
}

// IsApproval reports whether a request kind asks for an approval.
func IsApproval(kind string) bool { return oneOf(kind, ApprovalRequestKinds) }
