package topics

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// CurrentSchemaVersion is the event schema version this build reads and
// writes. A newer version is refused with ErrUnsupportedVersion rather than
// half-understood.
const CurrentSchemaVersion = 1

// SpecVersion is the CloudEvents version of the envelope.
const SpecVersion = "1.0"

// Contract limits on what producers send, in Unicode code points (the unit
// of JSON Schema's maxLength; TextLength counts them), never in bytes: an
// identifier of 256 CJK characters (768 bytes) is valid, one of 257 ASCII
// letters is not.
const (
	// MaxIDLength bounds every identifier (ids, keys, owners, kinds).
	MaxIDLength = 256
	// MaxInputTextLength bounds the text of a human input.
	MaxInputTextLength = 16 << 10
)

// Event is one agent event: a CloudEvents 1.0 event whose extension
// attributes carry canopy's envelope fields. The design card names the fields
// event_id, occurred_at, run_id...; CloudEvents attribute names admit only
// lower-case letters and digits, so they travel as id, time, runid...
// docs/CONTRACT.md has the full mapping.
type Event struct {
	// ID is the event_id: unique per event, a ULID by convention. Events with
	// an ID already applied are applied once.
	ID string
	// Source is the CloudEvents source, a URI-reference naming the producer
	// (for example "/agents/worker-7").
	Source string
	// Type is the event type, e.g. "tree.node_created".
	Type EventType
	// Time is occurred_at: when the producer says the event happened.
	Time Time
	// RunID is the run the event belongs to; it is also the record key.
	RunID string
	// AgentID is the node of the tree the event is about.
	AgentID string
	// SchemaVersion is the payload schema version, CurrentSchemaVersion.
	SchemaVersion int
	// Optional scope and causality.
	SessionID     string
	ThreadID      string
	CorrelationID string
	CausationID   string
	// Data is the typed payload; its concrete type is fixed by Type.
	Data Payload
	// TraceID is the W3C trace id of the record's traceparent header (32
	// lower-case hex digits), "" when it has none or a malformed one: the
	// read model's telemetry correlation. Not content: a record's headers
	// are not the event.
	TraceID string
}

// Payload is the typed data of an event.
type Payload interface {
	// EventType is the type whose data this is.
	EventType() EventType
	validate(ps *problems)
}

// EventType names a kind of event.
type EventType string

// The event vocabulary: seed 001's tree.* events, seed 000/002's leases and
// signals, and the conductor's acknowledgement.
const (
	TypeNodeCreated       EventType = "tree.node_created"
	TypeNodeDelegated     EventType = "tree.node_delegated"
	TypeNodeStatus        EventType = "tree.node_status"
	TypeNodeResult        EventType = "tree.node_result"
	TypeNodeCompleted     EventType = "tree.node_completed"
	TypePlanCreated       EventType = "tree.plan_created"
	TypePlanBandCreated   EventType = "tree.plan_band_created"
	TypeStepCreated       EventType = "tree.step_created"
	TypeArtifactCreated   EventType = "tree.artifact_created"
	TypeParentHint        EventType = "tree.parent_hint"
	TypeScratchpadUpdated EventType = "tree.scratchpad_updated"
	TypeReplanRequested   EventType = "tree.replan_requested"
	TypeLeaseAcquired     EventType = "lease.acquired"
	TypeLeaseRenewed      EventType = "lease.renewed"
	TypeLeaseReleased     EventType = "lease.released"
	TypeProgress          EventType = "signal.progress"
	TypeResult            EventType = "signal.result"
	TypeFailed            EventType = "signal.failed"
	TypeRequest           EventType = "signal.request"
	TypeRequestResolved   EventType = "signal.request_resolved"
	TypeHeartbeat         EventType = "signal.heartbeat"
	TypeInput             EventType = "signal.input"
	TypeWakeReceived      EventType = "conductor.wake_received"
)

var payloadFactories = map[EventType]func() Payload{
	TypeNodeCreated:       func() Payload { return &NodeCreated{} },
	TypeNodeDelegated:     func() Payload { return &NodeDelegated{} },
	TypeNodeStatus:        func() Payload { return &NodeStatus{} },
	TypeNodeResult:        func() Payload { return &Result{typ: TypeNodeResult} },
	TypeNodeCompleted:     func() Payload { return &NodeCompleted{} },
	TypePlanCreated:       func() Payload { return &PlanCreated{} },
	TypePlanBandCreated:   func() Payload { return &PlanBandCreated{} },
	TypeStepCreated:       func() Payload { return &StepCreated{} },
	TypeArtifactCreated:   func() Payload { return &ArtifactCreated{} },
	TypeParentHint:        func() Payload { return &ParentHint{} },
	TypeScratchpadUpdated: func() Payload { return &ScratchpadUpdated{} },
	TypeReplanRequested:   func() Payload { return &ReplanRequested{} },
	TypeLeaseAcquired:     func() Payload { return &Lease{typ: TypeLeaseAcquired} },
	TypeLeaseRenewed:      func() Payload { return &Lease{typ: TypeLeaseRenewed} },
	TypeLeaseReleased:     func() Payload { return &LeaseReleased{} },
	TypeProgress:          func() Payload { return &Progress{} },
	TypeResult:            func() Payload { return &Result{typ: TypeResult} },
	TypeFailed:            func() Payload { return &Failed{} },
	TypeRequest:           func() Payload { return &Request{} },
	TypeRequestResolved:   func() Payload { return &RequestResolved{} },
	TypeHeartbeat:         func() Payload { return &Heartbeat{} },
	TypeInput:             func() Payload { return &Input{} },
	TypeWakeReceived:      func() Payload { return &WakeReceived{} },

	TypeTurnQueued:        func() Payload { return &TurnQueued{} },
	TypeTurnStarted:       func() Payload { return &TurnStarted{} },
	TypeTurnCompleted:     func() Payload { return &TurnCompleted{} },
	TypeToolStarted:       func() Payload { return &ToolStarted{} },
	TypeToolFinished:      func() Payload { return &ToolFinished{} },
	TypeEvidenceRecorded:  func() Payload { return &EvidenceRecorded{} },
	TypeIncidentOpened:    func() Payload { return &IncidentOpened{} },
	TypeIncidentResolved:  func() Payload { return &IncidentResolved{} },
	TypeProcessStarted:    func() Payload { return &ProcessStarted{} },
	TypeProcessExited:     func() Payload { return &ProcessExited{} },
	TypeModelUsage:        func() Payload { return &ModelUsage{} },
	TypeLimitUpdated:      func() Payload { return &LimitUpdated{} },
	TypeRuntimeConfigured: func() Payload { return &RuntimeConfigured{} },
	TypeContextCompacted:  func() Payload { return &ContextCompacted{} },
	TypeChannelState:      func() Payload { return &ChannelState{} },
	TypeSessionUpdated:    func() Payload { return &SessionUpdated{} },
}

// EventTypes lists every known event type, sorted.
func EventTypes() []EventType {
	out := make([]EventType, 0, len(payloadFactories))
	for t := range payloadFactories {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Known reports whether t is an event type of this build.
func (t EventType) Known() bool { _, ok := payloadFactories[t]; return ok }

// NewPayload returns an empty payload for t, or nil when t is unknown.
func NewPayload(t EventType) Payload {
	f, ok := payloadFactories[t]
	if !ok {
		return nil
	}
	return f()
}

// NodeCreated (tree.node_created) adds a node to the tree (seed 001 §6.2).
type NodeCreated struct {
	// ParentAgentID is the parent node; empty only for the run's root.
	ParentAgentID string `json:"parent_agent_id,omitempty"`
	Role          Role   `json:"role"`
	Capability    string `json:"capability,omitempty"`
	TaskID        string `json:"task_id,omitempty"`
}

// NodeDelegated (tree.node_delegated) is the dispatch receipt of seed 004:
// the node's parent has handed it work, expected to complete by ExpectedBy.
type NodeDelegated struct {
	ExpectedBy      *Time  `json:"expected_by,omitempty"`
	TaskID          string `json:"task_id,omitempty"`
	ChildRunID      string `json:"child_run_id,omitempty"`
	ChildSessionKey string `json:"child_session_key,omitempty"`
	Capability      string `json:"capability,omitempty"`
}

// NodeStatus (tree.node_status) changes a node's lifecycle status. Reason is a
// short code such as "planning" or "guard:maxDepth" (seed 001 §7).
type NodeStatus struct {
	Status Status `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// NodeCompleted (tree.node_completed) is the completion receipt of seed 004.
type NodeCompleted struct {
	// ResultSource says where the evidence of completion came from:
	// completion_event (default), history_fetch or manual_recovery.
	ResultSource string `json:"result_source,omitempty"`
}

// Result is the payload of tree.node_result (seed 001) and signal.result
// (seed 002): a node produced a result. Artifacts are referenced by id only.
type Result struct {
	ResultKind        string   `json:"result_kind,omitempty"`
	Success           *bool    `json:"success,omitempty"`
	ArtifactIDs       []string `json:"artifact_ids,omitempty"`
	PrimaryArtifactID string   `json:"primary_artifact_id,omitempty"`
	typ               EventType
}

// PlanCreated (tree.plan_created): a node chose to decompose (seed 001 §6.1).
type PlanCreated struct {
	PlanID    string `json:"plan_id"`
	BandCount int    `json:"band_count"`
	Replan    bool   `json:"replan,omitempty"`
}

// PlanBandCreated (tree.plan_band_created): one band of a plan.
type PlanBandCreated struct {
	PlanID         string `json:"plan_id"`
	BandIndex      int    `json:"band_index"`
	Parallelizable bool   `json:"parallelizable,omitempty"`
	StepCount      int    `json:"step_count"`
}

// StepCreated (tree.step_created): one step of a band, optionally already
// bound to the child node that will run it.
type StepCreated struct {
	PlanID       string `json:"plan_id"`
	BandIndex    int    `json:"band_index"`
	StepID       string `json:"step_id"`
	StepIndex    int    `json:"step_index"`
	ChildAgentID string `json:"child_agent_id,omitempty"`
}

// ArtifactCreated (tree.artifact_created): an artifact, by reference only.
type ArtifactCreated struct {
	ArtifactID   string `json:"artifact_id"`
	ArtifactType string `json:"artifact_type"`
	Label        string `json:"label,omitempty"`
	IsPrimary    bool   `json:"is_primary,omitempty"`
}

// ParentHint (tree.parent_hint): what the parent should read of this node.
type ParentHint struct {
	HintType    string   `json:"hint_type"`
	ArtifactIDs []string `json:"artifact_ids"`
}

// ScratchpadUpdated (tree.scratchpad_updated): the scratchpad changed; its
// content stays where it is stored and only a reference travels.
type ScratchpadUpdated struct {
	ScratchpadID  string `json:"scratchpad_id"`
	Ref           string `json:"ref,omitempty"`
	AppendedBytes int64  `json:"appended_bytes,omitempty"`
}

// ReplanRequested (tree.replan_requested): the aggregator asked to replan.
type ReplanRequested struct {
	PlanID     string `json:"plan_id,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
}

// Lease is the payload of lease.acquired and lease.renewed.
type Lease struct {
	Owner     string `json:"owner"`
	ExpiresAt Time   `json:"expires_at"`
	typ       EventType
}

// LeaseReleased (lease.released) ends a lease.
type LeaseReleased struct {
	Owner string `json:"owner,omitempty"`
}

// Progress (signal.progress): work is advancing. Fraction, when known, is in [0,1].
type Progress struct {
	Fraction *float64 `json:"fraction,omitempty"`
	StepID   string   `json:"step_id,omitempty"`
}

// Failed (signal.failed): the node's work failed.
type Failed struct {
	ErrorCode string `json:"error_code"`
	Retryable bool   `json:"retryable,omitempty"`
}

// Request (signal.request) is seed 002's request message v0: the node needs
// something from the conductor (or a human through it).
type Request struct {
	RequestID   string `json:"request_id"`
	RequestKind string `json:"request_kind"`
	DedupeKey   string `json:"dedupe_key,omitempty"`
	// TTLMs, when positive, closes the request that many milliseconds after
	// the event's time if it has not been resolved.
	TTLMs int64 `json:"ttl_ms,omitempty"`
}

// RequestResolved (signal.request_resolved) closes an open request.
type RequestResolved struct {
	RequestID  string `json:"request_id"`
	Resolution string `json:"resolution,omitempty"`
}

// Heartbeat (signal.heartbeat): the node is alive. It never wakes the conductor.
type Heartbeat struct{}

// Input (signal.input) is human input, produced by the gateway onto the
// priority lane. The text travels in the wake's trigger, never in the snapshot.
type Input struct {
	InputID    string `json:"input_id,omitempty"`
	InputKind  string `json:"input_kind"`
	Text       string `json:"text,omitempty"`
	ContentRef string `json:"content_ref,omitempty"`
}

// WakeReceived (conductor.wake_received) is a conductor's acknowledgement of a
// wake. AgentIDs are the nodes whose results the wake delivered: the watchdog
// marks them forwarded (seed 004 forwardedToMain).
type WakeReceived struct {
	WakeID     string   `json:"wake_id"`
	SnapshotID string   `json:"snapshot_id,omitempty"`
	AgentIDs   []string `json:"agent_ids,omitempty"`
}

// Enumerations of payload fields.
var (
	ResultKinds   = []string{"json", "document", "hybrid"}
	ResultSources = []string{"completion_event", "history_fetch", "manual_recovery"}
	ArtifactTypes = []string{"document", "json"}
	HintTypes     = []string{"read_documents", "read_json"}
	InputKinds    = []string{"message", "interrupt", "cancel", "steer", "approve", "reject"}
	Resolutions   = []string{"answered", "cancelled", "expired", "rejected"}
)

// EventType implementations.
func (*NodeCreated) EventType() EventType       { return TypeNodeCreated }
func (*NodeDelegated) EventType() EventType     { return TypeNodeDelegated }
func (*NodeStatus) EventType() EventType        { return TypeNodeStatus }
func (*NodeCompleted) EventType() EventType     { return TypeNodeCompleted }
func (*PlanCreated) EventType() EventType       { return TypePlanCreated }
func (*PlanBandCreated) EventType() EventType   { return TypePlanBandCreated }
func (*StepCreated) EventType() EventType       { return TypeStepCreated }
func (*ArtifactCreated) EventType() EventType   { return TypeArtifactCreated }
func (*ParentHint) EventType() EventType        { return TypeParentHint }
func (*ScratchpadUpdated) EventType() EventType { return TypeScratchpadUpdated }
func (*ReplanRequested) EventType() EventType   { return TypeReplanRequested }
func (*LeaseReleased) EventType() EventType     { return TypeLeaseReleased }
func (*Progress) EventType() EventType          { return TypeProgress }
func (*Failed) EventType() EventType            { return TypeFailed }
func (*Request) EventType() EventType           { return TypeRequest }
func (*RequestResolved) EventType() EventType   { return TypeRequestResolved }
func (*Heartbeat) EventType() EventType         { return TypeHeartbeat }
func (*Input) EventType() EventType             { return TypeInput }
func (*WakeReceived) EventType() EventType      { return TypeWakeReceived }

// EventType is tree.node_result or signal.result, whichever it was made for.
func (r *Result) EventType() EventType {
	if r.typ == "" {
		return TypeResult
	}
	return r.typ
}

// EventType is lease.acquired or lease.renewed, whichever it was made for.
func (l *Lease) EventType() EventType {
	if l.typ == "" {
		return TypeLeaseAcquired
	}
	return l.typ
}

// NewResult returns a Result payload for t (tree.node_result or signal.result).
func NewResult(t EventType, r Result) *Result { r.typ = t; return &r }

// NewLease returns a Lease payload for t (lease.acquired or lease.renewed).
func NewLease(t EventType, l Lease) *Lease { l.typ = t; return &l }

// Validation of payloads. Field names are JSON paths under "data".

func (p *NodeCreated) validate(ps *problems) {
	checkID(ps, "data.parent_agent_id", p.ParentAgentID, false)
	if !oneOf(p.Role, Roles) {
		ps.add("data.role", "want one of "+join(Roles)+", got "+quote(string(p.Role)))
	}
	checkID(ps, "data.capability", p.Capability, false)
	checkID(ps, "data.task_id", p.TaskID, false)
}

func (p *NodeDelegated) validate(ps *problems) {
	checkID(ps, "data.task_id", p.TaskID, false)
	checkID(ps, "data.child_run_id", p.ChildRunID, false)
	checkID(ps, "data.child_session_key", p.ChildSessionKey, false)
	checkID(ps, "data.capability", p.Capability, false)
}

func (p *NodeStatus) validate(ps *problems) {
	if !oneOf(p.Status, ReportableStatuses) {
		ps.add("data.status", "want one of "+join(ReportableStatuses)+", got "+quote(string(p.Status)))
	}
	checkID(ps, "data.reason", p.Reason, false)
}

func (p *NodeCompleted) validate(ps *problems) {
	checkEnum(ps, "data.result_source", p.ResultSource, ResultSources, false)
}

func (p *Result) validate(ps *problems) {
	checkEnum(ps, "data.result_kind", p.ResultKind, ResultKinds, false)
	checkIDs(ps, "data.artifact_ids", p.ArtifactIDs)
	checkID(ps, "data.primary_artifact_id", p.PrimaryArtifactID, false)
}

func (p *PlanCreated) validate(ps *problems) {
	checkID(ps, "data.plan_id", p.PlanID, true)
	checkCount(ps, "data.band_count", p.BandCount)
}

func (p *PlanBandCreated) validate(ps *problems) {
	checkID(ps, "data.plan_id", p.PlanID, true)
	checkCount(ps, "data.band_index", p.BandIndex)
	checkCount(ps, "data.step_count", p.StepCount)
}

func (p *StepCreated) validate(ps *problems) {
	checkID(ps, "data.plan_id", p.PlanID, true)
	checkCount(ps, "data.band_index", p.BandIndex)
	checkID(ps, "data.step_id", p.StepID, true)
	checkCount(ps, "data.step_index", p.StepIndex)
	checkID(ps, "data.child_agent_id", p.ChildAgentID, false)
}

func (p *ArtifactCreated) validate(ps *problems) {
	checkID(ps, "data.artifact_id", p.ArtifactID, true)
	checkEnum(ps, "data.artifact_type", p.ArtifactType, ArtifactTypes, true)
	checkID(ps, "data.label", p.Label, false)
}

func (p *ParentHint) validate(ps *problems) {
	checkEnum(ps, "data.hint_type", p.HintType, HintTypes, true)
	checkIDs(ps, "data.artifact_ids", p.ArtifactIDs)
}

func (p *ScratchpadUpdated) validate(ps *problems) {
	checkID(ps, "data.scratchpad_id", p.ScratchpadID, true)
	checkID(ps, "data.ref", p.Ref, false)
	if p.AppendedBytes < 0 {
		ps.add("data.appended_bytes", "must not be negative")
	}
}

func (p *ReplanRequested) validate(ps *problems) {
	checkID(ps, "data.plan_id", p.PlanID, false)
	checkID(ps, "data.reason_code", p.ReasonCode, false)
}

func (p *Lease) validate(ps *problems) {
	checkID(ps, "data.owner", p.Owner, true)
	if p.ExpiresAt.IsZero() {
		ps.add("data.expires_at", "required")
	}
}

func (p *LeaseReleased) validate(ps *problems) { checkID(ps, "data.owner", p.Owner, false) }

func (p *Progress) validate(ps *problems) {
	if p.Fraction != nil && (math.IsNaN(*p.Fraction) || *p.Fraction < 0 || *p.Fraction > 1) {
		ps.add("data.fraction", "must be between 0 and 1")
	}
	checkID(ps, "data.step_id", p.StepID, false)
}

func (p *Failed) validate(ps *problems) { checkID(ps, "data.error_code", p.ErrorCode, true) }

func (p *Request) validate(ps *problems) {
	checkID(ps, "data.request_id", p.RequestID, true)
	checkID(ps, "data.request_kind", p.RequestKind, true)
	checkID(ps, "data.dedupe_key", p.DedupeKey, false)
	if p.TTLMs < 0 {
		ps.add("data.ttl_ms", "must not be negative")
	}
}

func (p *RequestResolved) validate(ps *problems) {
	checkID(ps, "data.request_id", p.RequestID, true)
	checkEnum(ps, "data.resolution", p.Resolution, Resolutions, false)
}

func (p *Heartbeat) validate(*problems) {}

func (p *Input) validate(ps *problems) {
	checkID(ps, "data.input_id", p.InputID, false)
	checkEnum(ps, "data.input_kind", p.InputKind, InputKinds, true)
	if msg := TextProblem(p.Text); msg != "" {
		ps.add("data.text", msg)
	} else if longerThan(p.Text, MaxInputTextLength) {
		ps.add("data.text", tooLong(MaxInputTextLength))
	}
	checkID(ps, "data.content_ref", p.ContentRef, false)
}

func (p *WakeReceived) validate(ps *problems) {
	checkID(ps, "data.wake_id", p.WakeID, true)
	checkID(ps, "data.snapshot_id", p.SnapshotID, false)
	checkIDs(ps, "data.agent_ids", p.AgentIDs)
}

// requiredMembers are the payload fields that must be present though their
// zero value is valid (band 0, step 0, no artifacts), so that the decoded
// value cannot tell a missing one: checked on the JSON members.
var requiredMembers = map[EventType][]string{
	TypePlanCreated:     {"band_count"},
	TypePlanBandCreated: {"band_index", "step_count"},
	TypeStepCreated:     {"band_index", "step_index"},
	TypeParentHint:      {"artifact_ids"},
}

// emptyMembers are the payload fields whose value may be the empty string
// (free text); every other string field is an id or an enum, and an empty
// one is refused rather than read as absent.
var emptyMembers = map[string]bool{"text": true}

// nullMembers are the payload fields whose value may be null: a parent
// hint's artifact_ids, always sent, null for none (how Go encodes an empty
// list). Any other null member is refused: omit the field instead.
var nullMembers = map[EventType]map[string]bool{TypeParentHint: {"artifact_ids": true}}

// checkMembers checks a payload's JSON members as the JSON Schemas do where
// the decoded value cannot: a member set to null or to an empty string
// (omit it instead), and a required member that is absent. It reports
// whether they were all right.
func checkMembers(t EventType, ms members, ps *problems) bool {
	before := len(*ps)
	for _, m := range ms {
		// Compared in place: string(m.raw) in a comparison does not copy.
		switch {
		case string(m.raw) == "null" && !nullMembers[t][m.name]:
			ps.add("data."+m.name, "null; omit the field instead")
		case string(m.raw) == `""` && !emptyMembers[m.name]:
			ps.add("data."+m.name, "empty; omit the field instead")
		}
	}
	for _, name := range requiredMembers[t] {
		if _, ok := ms.get(name); !ok {
			ps.add("data."+name, "required")
		}
	}
	return len(*ps) == before
}

// checkURIReference checks that v (not empty) is a URI-reference (RFC 3986),
// as CloudEvents asks of source, the way the JSON Schema's format does.
func checkURIReference(ps *problems, field, v string) {
	if v == "" {
		return
	}
	if plainPath(v) {
		return // a relative reference of path characters only, as most sources are: no parse
	}
	if strings.Contains(v, `\`) {
		ps.add(field, "not a URI-reference: contains a backslash")
		return
	}
	u, err := url.Parse(v)
	if err != nil {
		ps.add(field, "not a URI-reference: "+strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(v)+": "))
		return
	}
	if h := u.Hostname(); strings.Contains(h, ":") && (!strings.Contains(u.Host, "[") || net.ParseIP(h) == nil) {
		ps.add(field, "not a URI-reference: a bad IPv6 host")
	}
}

// checkURI checks that v (not empty) is an absolute URI, as CloudEvents
// asks of dataschema and the JSON Schema's format "uri" does: a
// URI-reference with a scheme.
func checkURI(ps *problems, field, v string) {
	before := len(*ps)
	checkURIReference(ps, field, v)
	if v == "" || len(*ps) > before {
		return
	}
	if u, err := url.Parse(v); err != nil || u.Scheme == "" {
		ps.add(field, "not an absolute URI: want a scheme, e.g. https://")
	}
}

// plainPath reports whether v holds only unreserved characters and "/":
// a URI-reference (a relative path, "/agents/worker-7") whatever their
// order, since none of them is a ':' that could make a first segment look
// like a scheme.
func plainPath(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// printableASCII reports whether v is ASCII without control characters:
// valid UTF-8 of one byte per code point, none of them a control.
func printableASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkID enforces the contract for identifiers (IDProblem).
func checkID(ps *problems, field, v string, required bool) {
	if v == "" {
		if required {
			ps.add(field, "required")
		}
		return
	}
	if msg := IDProblem(v); msg != "" {
		ps.add(field, msg)
	}
}

// IDProblem says what is wrong with v, not empty, as an identifier of the
// contract: it must be valid UTF-8 (else a problem starting with
// CodeInvalidUTF8), at most MaxIDLength code points, without control
// characters. It is "" when v is one.
func IDProblem(v string) string {
	if len(v) <= MaxIDLength && printableASCII(v) {
		return "" // most ids: one pass over the bytes answers
	}
	if msg := TextProblem(v); msg != "" {
		return msg
	}
	if longerThan(v, MaxIDLength) {
		return tooLong(MaxIDLength)
	}
	if strings.IndexFunc(v, unicode.IsControl) >= 0 {
		return "contains a control character"
	}
	return ""
}

// tooLong is the problem of a string over a limit.
func tooLong(limit int) string {
	return fmt.Sprintf("longer than %d characters (Unicode code points)", limit)
}

const maxListLength = 64

func checkIDs(ps *problems, field string, vs []string) {
	if len(vs) > maxListLength {
		ps.add(field, fmt.Sprintf("more than %d entries", maxListLength))
		return
	}
	for i, v := range vs {
		checkID(ps, fmt.Sprintf("%s[%d]", field, i), v, true)
	}
}

func checkEnum(ps *problems, field, v string, allowed []string, required bool) {
	if v == "" {
		if required {
			ps.add(field, "required; want one of "+join(allowed))
		}
		return
	}
	if !oneOf(v, allowed) {
		ps.add(field, "want one of "+join(allowed)+", got "+quote(v))
	}
}

func checkCount(ps *problems, field string, v int) {
	if v < 0 {
		ps.add(field, "must not be negative")
	}
}

var extensionName = regexp.MustCompile(`^[a-z0-9]{1,20}$`)

func join[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, "|")
}

func quote(s string) string { return fmt.Sprintf("%q", clip(s, 40)) }

// payloadTypeError turns a JSON type error inside data into a Problem with
// the field's path.
func payloadTypeError(err error) (Problem, bool) {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		f := te.Field
		if f == "" {
			f = "data"
		} else {
			f = "data." + f
		}
		if _, problem, ok := timeProblem(err); ok {
			return Problem{f, problem}, true
		}
		return Problem{f, "want " + te.Type.String() + ", got JSON " + te.Value}, true
	}
	return Problem{}, false
}
