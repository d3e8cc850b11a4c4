package projection

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// An event id names one content. The dedupe window keeps, with each id, a
// 64-bit hash of the content of the event applied under it, so that an
// event sent again is told apart from another event under a reused id: the
// same content is a duplicate, ignored; other content is a conflict,
// refused (DuplicateConflictError), and the first content stays.
//
// An event's content is what the decoder makes of it, never its bytes, so
// that neither the CloudEvents mode (structured or binary), nor JSON member
// order, whitespace, escapes, a time's offset or fraction digits, nor a
// number's spelling changes it: its type, source, time (to the
// millisecond), agent id, session, thread, correlation and causation ids,
// and every field of its typed payload (an absent list and an empty one
// alike). Not content: the id itself, the run id (the window is the
// run's), the schema version, what the decoder does not keep
// (datacontenttype, dataschema, subject, unknown extension attributes,
// headers such as traceparent), and the source and time of the events
// canopy's own components send under ids derived from what they stand
// for, stamped on each attempt (restamped): a signal.input, whose id the
// gateway derives from the request's Idempotency-Key, so that a retry of
// the same request (after a produce that timed out, through another
// instance) is the same input, as the gateway itself judges it by the
// request's body; and a conductor.wake_received, whose id a conductor
// derives from the wake (pkg/wake AckEvent and the examples), so that
// acknowledging a redelivered wake again is the same acknowledgement. The hash is XXH64 of a canonical binary
// encoding of those values (appendContent): stable across builds and
// machines, since it is state. Two contents with one hash (about one in
// 2^64 per pair, more for a producer that crafts them) are taken for a
// duplicate, as an id from a journal without hashes is.

// ErrDuplicateConflict is wrapped by the error of an event whose id its run
// has applied with other content (DuplicateConflictError).
var ErrDuplicateConflict = errors.New("projection: event id reused with other content")

// DuplicateConflictCode names a DuplicateConflictError where reasons are
// codes: the projector's dead-letter reason and replay's report of one
// start with it.
const DuplicateConflictCode = "duplicate_id_conflict"

// DuplicateConflictError is the error of an event whose id is among the
// last Config.DedupeWindow applied to its run, with a content other than
// the one applied under it: the event is not applied, the run is
// unchanged, and the first content stays. It wraps ErrDuplicateConflict.
type DuplicateConflictError struct {
	// Run and EventID name the run and the reused id.
	Run, EventID string
	// Type and AgentID are the refused event's.
	Type    topics.EventType
	AgentID string
	// Seq is the run's event the first content was applied as (its
	// history entry's seq, while the history window holds it).
	Seq int64
}

func (e *DuplicateConflictError) Error() string {
	return fmt.Sprintf("projection: run %q: event id %q was applied as the run's event %d with other content; this %s event for %q is not applied",
		e.Run, e.EventID, e.Seq, e.Type, e.AgentID)
}

func (e *DuplicateConflictError) Unwrap() error { return ErrDuplicateConflict }

// contentHash is the hash of ev's content, never 0: 0 is an id whose
// content is unknown (a journal chunk of the first encoding), which any
// content repeats. buf is scratch space, returned for reuse.
func contentHash(ev *topics.Event, buf []byte) (uint64, []byte) {
	buf, _ = appendContent(buf[:0], ev)
	h := xxhash.Sum64(buf)
	if h == 0 {
		h = 1
	}
	return h, buf
}

// appendContent appends the canonical encoding of ev's content to b: each
// value in a fixed order, strings as a uvarint length and bytes, integers
// as zigzag varints, times as a presence byte and Unix ms, flags as a
// byte, optional values as a presence byte and the value, lists as a count
// and their strings. The event type fixes the payload's fields, so no
// field names are needed. typed is false when the payload is of a type the
// switch does not know (then its JSON encoding stands in, stable within a
// build): a test keeps every event type in the switch.
func appendContent(b []byte, ev *topics.Event) (_ []byte, typed bool) {
	c := contentWriter{b}
	c.str(string(ev.Type))
	if !restamped(ev.Type) {
		c.str(ev.Source)
		c.time(ev.Time)
	}
	c.str(ev.AgentID)
	c.str(ev.SessionID)
	c.str(ev.ThreadID)
	c.str(ev.CorrelationID)
	c.str(ev.CausationID)
	typed = c.signalPayload(ev.Data) || c.treePayload(ev.Data) || c.activityPayload(ev.Data)
	if !typed {
		enc, err := topics.Marshal(ev.Data)
		if err != nil {
			enc = []byte(err.Error())
		}
		c.str(string(enc))
	}
	return c.b, typed
}

// treePayload appends the content of a tree.* event's payload (and of
// signal.result's, which tree.node_result shares); false, with nothing
// appended, for another payload.
func (c *contentWriter) treePayload(data any) bool {
	switch p := data.(type) {
	case *topics.NodeCreated:
		c.str(p.ParentAgentID)
		c.str(string(p.Role))
		c.str(p.Capability)
		c.str(p.TaskID)
	case *topics.NodeDelegated:
		c.timePtr(p.ExpectedBy)
		c.str(p.TaskID)
		c.str(p.ChildRunID)
		c.str(p.ChildSessionKey)
		c.str(p.Capability)
	case *topics.NodeStatus:
		c.str(string(p.Status))
		c.str(p.Reason)
	case *topics.NodeCompleted:
		c.str(p.ResultSource)
	case *topics.Result:
		c.str(p.ResultKind)
		c.flag(p.Success != nil)
		if p.Success != nil {
			c.flag(*p.Success)
		}
		c.strs(p.ArtifactIDs)
		c.str(p.PrimaryArtifactID)
	case *topics.PlanCreated:
		c.str(p.PlanID)
		c.int(int64(p.BandCount))
		c.flag(p.Replan)
	case *topics.PlanBandCreated:
		c.str(p.PlanID)
		c.int(int64(p.BandIndex))
		c.flag(p.Parallelizable)
		c.int(int64(p.StepCount))
	case *topics.StepCreated:
		c.str(p.PlanID)
		c.int(int64(p.BandIndex))
		c.str(p.StepID)
		c.int(int64(p.StepIndex))
		c.str(p.ChildAgentID)
	case *topics.ArtifactCreated:
		c.str(p.ArtifactID)
		c.str(p.ArtifactType)
		c.str(p.Label)
		c.flag(p.IsPrimary)
	case *topics.ParentHint:
		c.str(p.HintType)
		c.strs(p.ArtifactIDs)
	case *topics.ScratchpadUpdated:
		c.str(p.ScratchpadID)
		c.str(p.Ref)
		c.int(p.AppendedBytes)
	case *topics.ReplanRequested:
		c.str(p.PlanID)
		c.str(p.ReasonCode)
	default:
		return false
	}
	return true
}

// signalPayload appends the content of a lease.*, signal.* or
// conductor.* event's payload, or of none; false, with nothing appended,
// for another payload.
func (c *contentWriter) signalPayload(data any) bool {
	switch p := data.(type) {
	case nil:
		c.flag(false)
	case *topics.Lease:
		c.str(p.Owner)
		c.time(p.ExpiresAt)
	case *topics.LeaseReleased:
		c.str(p.Owner)
	case *topics.Progress:
		c.flag(p.Fraction != nil)
		if p.Fraction != nil {
			f := *p.Fraction
			if f == 0 {
				f = 0 // -0 and 0 alike
			}
			c.b = binary.LittleEndian.AppendUint64(c.b, math.Float64bits(f))
		}
		c.str(p.StepID)
	case *topics.Failed:
		c.str(p.ErrorCode)
		c.flag(p.Retryable)
	case *topics.Request:
		c.str(p.RequestID)
		c.str(p.RequestKind)
		c.str(p.DedupeKey)
		c.int(p.TTLMs)
	case *topics.RequestResolved:
		c.str(p.RequestID)
		c.str(p.Resolution)
	case *topics.Heartbeat:
	case *topics.Input:
		c.str(p.InputID)
		c.str(p.InputKind)
		c.str(p.Text)
		c.str(p.ContentRef)
	case *topics.WakeReceived:
		c.str(p.WakeID)
		c.str(p.SnapshotID)
		c.strs(p.AgentIDs)
	default:
		return false
	}
	return true
}

// activityPayload appends the content of an event of the activity
// vocabulary (pkg/topics activity.go); false, with nothing appended, for
// another payload.
func (c *contentWriter) activityPayload(data any) bool {
	switch p := data.(type) {
	case *topics.TurnQueued:
		c.str(p.TurnID)
		c.str(p.InputID)
	case *topics.TurnStarted:
		c.str(p.TurnID)
		c.str(p.InputID)
	case *topics.TurnCompleted:
		c.strs([]string{p.TurnID, p.Outcome, p.ErrorCode, p.Summary})
	case *topics.ToolStarted:
		c.strs([]string{p.CallID, p.ToolName, p.CallKind, p.Command, p.TurnID})
	case *topics.ToolFinished:
		c.strs([]string{p.CallID, p.Outcome, p.ErrorCode, p.OutputRef})
		c.int(p.DurationMs)
		c.intPtr(p.ExitCode)
	case *topics.EvidenceRecorded:
		c.strs([]string{p.EvidenceID, p.EvidenceKind, p.Verdict, p.ArtifactID, p.Ref})
	case *topics.IncidentOpened:
		c.strs([]string{p.IncidentID, p.IncidentKind, p.Severity, p.Title})
	case *topics.IncidentResolved:
		c.strs([]string{p.IncidentID, p.Resolution})
	case *topics.ProcessStarted:
		c.strs([]string{p.ProcessID, p.Command, p.Environment, p.EnvironmentRef, p.OutputRef})
	case *topics.ProcessExited:
		c.strs([]string{p.ProcessID, p.Signal, p.OutputRef})
		c.intPtr(p.ExitCode)
	case *topics.ModelUsage:
		c.strs([]string{p.Model, p.Provider, p.Profile})
		c.int(p.InputTokens)
		c.int(p.OutputTokens)
		c.int(p.CachedTokens)
		c.int(p.CostMicros)
	case *topics.LimitUpdated:
		c.strs([]string{p.LimitKind, p.State})
		c.intPtr(p.Remaining)
		c.timePtr(p.ResetAt)
	case *topics.RuntimeConfigured:
		c.strs([]string{p.PermissionMode, p.SandboxProfile, p.ExecutionEnvironment, p.EnvironmentRef})
		c.flag(p.NetworkAccess != nil)
		if p.NetworkAccess != nil {
			c.flag(*p.NetworkAccess)
		}
	case *topics.ContextCompacted:
		c.strs([]string{p.BoundaryID, p.ThroughTurnID})
		c.int(p.TokensBefore)
		c.int(p.TokensAfter)
	case *topics.ChannelState:
		c.strs([]string{p.ChannelID, p.ChannelKind, p.State})
	case *topics.SessionUpdated:
		c.strs([]string{p.Title, p.WorkspaceID, p.AccountID})
		c.strs(p.PinnedThreadIDs)
	default:
		return false
	}
	return true
}

// restamped reports whether events of type t are sent again with a new
// source and time under the same id (see the top of this file): then
// those are not content.
func restamped(t topics.EventType) bool {
	return t == topics.TypeInput || t == topics.TypeWakeReceived
}

type contentWriter struct{ b []byte }

func (c *contentWriter) str(s string) {
	c.b = binary.AppendUvarint(c.b, uint64(len(s)))
	c.b = append(c.b, s...)
}

func (c *contentWriter) int(v int64) { c.b = binary.AppendVarint(c.b, v) }

func (c *contentWriter) flag(v bool) {
	if v {
		c.b = append(c.b, 1)
	} else {
		c.b = append(c.b, 0)
	}
}

func (c *contentWriter) time(t topics.Time) {
	c.flag(!t.IsZero())
	if !t.IsZero() {
		c.int(t.UnixMilli())
	}
}

func (c *contentWriter) timePtr(t *topics.Time) {
	c.flag(t != nil)
	if t != nil {
		c.time(*t)
	}
}

func (c *contentWriter) intPtr(v *int64) {
	c.flag(v != nil)
	if v != nil {
		c.int(*v)
	}
}

func (c *contentWriter) strs(ss []string) {
	c.b = binary.AppendUvarint(c.b, uint64(len(ss)))
	for _, s := range ss {
		c.str(s)
	}
}
