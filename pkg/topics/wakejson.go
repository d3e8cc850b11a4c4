package topics

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"
)

// The wake path's encoders. Every wake (about 24 KB) and every snapshot the
// builder measures went through encoding/json's reflection, a top CPU cost of
// the projector. These methods write the same bytes directly: field by field
// in struct order, strings escaped as encoding/json escapes them with HTML
// escaping off. They are held to encoding/json byte for byte by
// TestAppendJSONMatchesEncodingJSON (every golden snapshot and every wake of
// the examples) and FuzzAppendJSON, so a change to any of these types must
// change its encoder here too; TestAppendJSONCoversEveryField notices a field
// that is not written.
//
// None of these types but Time implements json.Marshaler, and Time's
// MarshalJSON does not call Marshal (TestWakeTypesAreNotMarshalers): so
// encoding/json stays the plain reflective reference they are compared
// with, and Marshal cannot recurse into itself through it.
//
// The internal encoders return false only where encoding/json fails (a Time
// outside years 0000-9999); the caller then lets encoding/json encode the
// value, so that the error is exactly the one it always was.

// AppendJSON appends the JSON encoding of w to dst: exactly the bytes
// Marshal(w) returns, without a copy. On error dst is returned unchanged
// with Marshal's error.
func (w *Wake) AppendJSON(dst []byte) ([]byte, error) {
	if w == nil {
		return append(dst, "null"...), nil
	}
	if out, ok := w.appendJSON(dst); ok {
		return out, nil
	}
	return appendReflect(dst, w)
}

// AppendJSON appends the JSON encoding of s to dst: exactly the bytes
// Marshal(s) returns. The snapshot builder measures candidate snapshots
// with it into one reused buffer rather than allocating an encoding each
// time. On error dst is returned unchanged with Marshal's error.
func (s *AgentTreeSnapshot) AppendJSON(dst []byte) ([]byte, error) {
	if s == nil {
		return append(dst, "null"...), nil
	}
	if out, ok := s.appendJSON(dst); ok {
		return out, nil
	}
	return appendReflect(dst, s)
}

// AppendSnapshotJSON appends s's JSON encoding to dst, exactly the bytes
// s.AppendJSON appends, but with node i's encoding written by
// appendNode(dst, i) rather than encoded from s.Nodes[i]. The snapshot
// builder keeps its nodes' encodings from wake to wake (snapshot.Cache) and
// splices them in, so that a wake encodes only its envelope and the nodes
// that changed. The caller vouches that appendNode appends exactly the
// encoding of s.Nodes[i] (NodeDigest.AppendJSON's bytes); a nil appendNode
// encodes the nodes. On error dst is returned unchanged with Marshal's
// error.
func AppendSnapshotJSON(dst []byte, s *AgentTreeSnapshot, appendNode func(dst []byte, i int) []byte) ([]byte, error) {
	if s == nil {
		return append(dst, "null"...), nil
	}
	if out, ok := s.appendJSONWith(dst, appendNode); ok {
		return out, nil
	}
	// A time outside encoding/json's years (the envelope's, or a node's
	// encoded here): encoding/json fails on it too, with its own error.
	return appendReflect(dst, s)
}

// AppendJSON appends the JSON encoding of t to dst: exactly the bytes
// Marshal(t) returns. The projection measures each trigger with it to
// split a run's triggers over wakes of bounded size. On error dst is
// returned unchanged with Marshal's error.
func (t *Trigger) AppendJSON(dst []byte) ([]byte, error) {
	if t == nil {
		return append(dst, "null"...), nil
	}
	if out, ok := t.appendJSON(dst); ok {
		return out, nil
	}
	return appendReflect(dst, t)
}

// AppendJSON appends the JSON encoding of d to dst: exactly the bytes
// Marshal(d) returns. The snapshot builder sizes every candidate digest with
// it. On error dst is returned unchanged with Marshal's error.
func (d *NodeDigest) AppendJSON(dst []byte) ([]byte, error) {
	if d == nil {
		return append(dst, "null"...), nil
	}
	if out, ok := d.appendJSON(dst); ok {
		return out, nil
	}
	return appendReflect(dst, d)
}

// appendReflect appends encoding/json's encoding of v, or returns dst and
// its error. A failed fast encoding may have written past len(dst); append
// overwrites those bytes.
func appendReflect(dst []byte, v any) ([]byte, error) {
	b, err := marshalReflect(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// marshalReflect is Marshal by encoding/json: compact, no HTML escaping, no
// trailing newline. Types without a fast encoder, and the errors of those
// with one, come from here.
func marshalReflect(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// marshalFast encodes the wake path's types, and pointers to them, without
// reflection. ok is false for any other type, and where encoding/json would
// fail.
func marshalFast(v any) (b []byte, ok bool) {
	switch x := v.(type) {
	case *Wake:
		return pooled(x, (*Wake).appendJSON)
	case Wake:
		return pooled(&x, (*Wake).appendJSON)
	case *AgentTreeSnapshot:
		return pooled(x, (*AgentTreeSnapshot).appendJSON)
	case AgentTreeSnapshot:
		return pooled(&x, (*AgentTreeSnapshot).appendJSON)
	case *NodeDigest:
		return pooled(x, (*NodeDigest).appendJSON)
	case NodeDigest:
		return pooled(&x, (*NodeDigest).appendJSON)
	case *Trigger:
		return pooled(x, (*Trigger).appendJSON)
	case Trigger:
		return pooled(&x, (*Trigger).appendJSON)
	case *Time:
		return pooled(x, (*Time).appendJSON)
	case Time:
		return pooled(&x, (*Time).appendJSON)
	case *WakePart:
		return pooled(x, infallible((*WakePart).appendJSON))
	case WakePart:
		return pooled(&x, infallible((*WakePart).appendJSON))
	case *TriggerInput:
		return pooled(x, infallible((*TriggerInput).appendJSON))
	case TriggerInput:
		return pooled(&x, infallible((*TriggerInput).appendJSON))
	case *Scope:
		return pooled(x, infallible((*Scope).appendJSON))
	case Scope:
		return pooled(&x, infallible((*Scope).appendJSON))
	case *Summary:
		return pooled(x, infallible((*Summary).appendJSON))
	case Summary:
		return pooled(&x, infallible((*Summary).appendJSON))
	case *StatusCounts:
		return pooled(x, infallible((*StatusCounts).appendJSON))
	case StatusCounts:
		return pooled(&x, infallible((*StatusCounts).appendJSON))
	case *TruncationMeta:
		return pooled(x, infallible((*TruncationMeta).appendJSON))
	case TruncationMeta:
		return pooled(&x, infallible((*TruncationMeta).appendJSON))
	}
	return nil, false
}

// infallible adapts the encoder of a type without a Time, which cannot fail.
func infallible[T any](appendJSON func(*T, []byte) []byte) func(*T, []byte) ([]byte, bool) {
	return func(p *T, dst []byte) ([]byte, bool) { return appendJSON(p, dst), true }
}

// encodeBuffers hold the buffers marshalFast encodes into, so that a wake's
// encoding grows one buffer once rather than a new one through every size
// on the way to 24 KB; the caller gets an exact-size copy.
var encodeBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBuffer is the largest buffer kept for reuse: a rare huge wake
// should not pin its memory.
const maxPooledBuffer = 1 << 20

// pooled encodes *p (null if p is nil, as encoding/json has it) in a pooled
// buffer and returns a copy of the bytes.
func pooled[T any](p *T, appendJSON func(*T, []byte) ([]byte, bool)) ([]byte, bool) {
	if p == nil {
		return []byte("null"), true
	}
	bp := encodeBuffers.Get().(*[]byte)
	b, ok := appendJSON(p, (*bp)[:0])
	var out []byte
	if ok {
		out = make([]byte, len(b))
		copy(out, b)
	}
	if cap(b) <= maxPooledBuffer {
		*bp = b[:0]
		encodeBuffers.Put(bp)
	}
	return out, ok
}

// AppendWakeJSON appends w's JSON encoding to dst, exactly the bytes
// Marshal(w) returns, with snapshotJSON, when not nil, as the encoding of
// w.AgentTreeSnapshot (snapshot.Info.Encoded: the builder has encoded it
// already). The caller vouches that snapshotJSON is that encoding.
func AppendWakeJSON(dst []byte, w *Wake, snapshotJSON []byte) ([]byte, error) {
	if w == nil || snapshotJSON == nil {
		return w.AppendJSON(dst)
	}
	if out, ok := w.appendJSONWith(dst, snapshotJSON); ok {
		return out, nil
	}
	return appendReflect(dst, w)
}

// WakeJSONAround returns w's JSON encoding, exactly the bytes Marshal(w)
// returns, written around the encoding of w.AgentTreeSnapshot where it lies
// rather than copied: framed ends with that encoding (snapshot.Info.Encoded),
// has room free bytes before it and capacity for one more after it, as
// snapshot.Build leaves them when asked (snapshot.Wake.Room). A wake is
// mostly its snapshot, so this saves allocating and copying the snapshot
// once more per wake. The result shares framed's array. ok is false, and
// framed untouched, when w's envelope (its fields before the snapshot) is
// longer than room or cannot be encoded here: then use AppendWakeJSON. The
// caller vouches that framed ends with the snapshot's encoding.
func WakeJSONAround(framed []byte, room int, w *Wake) ([]byte, bool) {
	if w == nil || room < 0 || room > len(framed) || cap(framed) == len(framed) {
		return nil, false
	}
	var stack [512]byte
	env, ok := w.appendEnvelope(stack[:0])
	if !ok || len(env) > room {
		return nil, false
	}
	start := room - len(env)
	copy(framed[start:room], env)
	return append(framed[start:], '}'), true
}

// EnvelopeJSONLen returns the length of w's envelope as WakeJSONAround
// writes it (its fields before the snapshot), for a snapshot builder to
// leave room for; 0 when w cannot be encoded without reflection.
func (w *Wake) EnvelopeJSONLen() int {
	var stack [512]byte
	env, ok := w.appendEnvelope(stack[:0])
	if !ok {
		return 0
	}
	return len(env)
}

func (w *Wake) appendJSON(dst []byte) ([]byte, bool) { return w.appendJSONWith(dst, nil) }

// appendJSONWith is appendJSON with the snapshot's encoding given, or
// encoded here when snap is nil.
func (w *Wake) appendJSONWith(dst, snap []byte) ([]byte, bool) {
	dst, ok := w.appendEnvelope(dst)
	if !ok {
		return dst, false
	}
	if snap != nil {
		return append(append(dst, snap...), '}'), true
	}
	dst, ok = w.AgentTreeSnapshot.appendJSON(dst)
	return append(dst, '}'), ok
}

// appendEnvelope appends w's encoding up to its snapshot's value: every
// field before it, and the snapshot's key.
func (w *Wake) appendEnvelope(dst []byte) ([]byte, bool) {
	dst = append(dst, `{"wake_id":`...)
	dst = appendJSONString(dst, w.WakeID)
	dst = append(dst, `,"schema_version":`...)
	dst = strconv.AppendInt(dst, int64(w.SchemaVersion), 10)
	dst = append(dst, `,"run_id":`...)
	dst = appendJSONString(dst, w.RunID)
	dst = append(dst, `,"lane":`...)
	dst = appendJSONString(dst, string(w.Lane))
	if w.Part != nil { // omitempty
		dst = append(dst, `,"part":`...)
		dst = w.Part.appendJSON(dst)
	}
	dst = append(dst, `,"triggers":`...)
	if w.Triggers == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range w.Triggers {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = w.Triggers[i].appendJSON(dst); !ok {
				return dst, false
			}
		}
		dst = append(dst, ']')
	}
	return append(dst, `,"agent_tree_snapshot":`...), true
}

func (p *WakePart) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"number":`...)
	dst = strconv.AppendInt(dst, int64(p.Number), 10)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, int64(p.Count), 10)
	return append(dst, '}')
}

func (t *Trigger) appendJSON(dst []byte) ([]byte, bool) {
	dst = append(dst, `{"kind":`...)
	dst = appendJSONString(dst, string(t.Kind))
	dst = append(dst, `,"event_id":`...)
	dst = appendJSONStringPtr(dst, t.EventID)
	dst = append(dst, `,"agent_id":`...)
	dst = appendJSONString(dst, t.AgentID)
	dst = append(dst, `,"correlation_id":`...)
	dst = appendJSONStringPtr(dst, t.CorrelationID)
	dst = append(dst, `,"at":`...)
	dst, ok := t.At.appendJSON(dst)
	if !ok {
		return dst, false
	}
	dst = append(dst, `,"detail":`...)
	dst = appendJSONStringPtr(dst, t.Detail)
	if t.Input != nil { // omitempty
		dst = append(dst, `,"input":`...)
		dst = t.Input.appendJSON(dst)
	}
	return append(dst, '}'), true
}

func (in *TriggerInput) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"input_kind":`...)
	dst = appendJSONString(dst, in.InputKind)
	if in.Text != "" { // omitempty
		dst = append(dst, `,"text":`...)
		dst = appendJSONString(dst, in.Text)
	}
	if in.ContentRef != "" { // omitempty
		dst = append(dst, `,"content_ref":`...)
		dst = appendJSONString(dst, in.ContentRef)
	}
	return append(dst, '}')
}

func (s *AgentTreeSnapshot) appendJSON(dst []byte) ([]byte, bool) { return s.appendJSONWith(dst, nil) }

// appendJSONWith is appendJSON with each node's encoding appended by
// appendNode, or encoded here when appendNode is nil.
func (s *AgentTreeSnapshot) appendJSONWith(dst []byte, appendNode func([]byte, int) []byte) ([]byte, bool) {
	dst = append(dst, `{"snapshot_id":`...)
	dst = appendJSONString(dst, s.SnapshotID)
	dst = append(dst, `,"generated_at":`...)
	dst, ok := s.GeneratedAt.appendJSON(dst)
	if !ok {
		return dst, false
	}
	dst = append(dst, `,"as_of_event_seq":`...)
	dst = strconv.AppendInt(dst, s.AsOfEventSeq, 10)
	dst = append(dst, `,"root_agent_id":`...)
	dst = appendJSONStringPtr(dst, s.RootAgentID)
	dst = append(dst, `,"scope":`...)
	dst = s.Scope.appendJSON(dst)
	dst = append(dst, `,"nodes":`...)
	if s.Nodes == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range s.Nodes {
			if i > 0 {
				dst = append(dst, ',')
			}
			if appendNode != nil {
				dst = appendNode(dst, i)
			} else if dst, ok = s.Nodes[i].appendJSON(dst); !ok {
				return dst, false
			}
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"summary":`...)
	dst = s.Summary.appendJSON(dst)
	dst = append(dst, `,"truncated":`...)
	dst = strconv.AppendBool(dst, s.Truncated)
	dst = append(dst, `,"truncation_meta":`...)
	dst = s.TruncationMeta.appendJSON(dst)
	dst = append(dst, `,"stale":`...)
	dst = strconv.AppendBool(dst, s.Stale)
	dst = append(dst, `,"snapshot_age_ms":`...)
	dst = strconv.AppendInt(dst, s.SnapshotAgeMs, 10)
	return append(dst, '}'), true
}

func (s *Scope) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"run_id":`...)
	dst = appendJSONString(dst, s.RunID)
	dst = append(dst, `,"session_id":`...)
	dst = appendJSONStringPtr(dst, s.SessionID)
	dst = append(dst, `,"thread_id":`...)
	dst = appendJSONStringPtr(dst, s.ThreadID)
	return append(dst, '}')
}

func (d *NodeDigest) appendJSON(dst []byte) ([]byte, bool) {
	var ok bool
	dst = append(dst, `{"agent_id":`...)
	dst = appendJSONString(dst, d.AgentID)
	dst = append(dst, `,"role":`...)
	dst = appendJSONString(dst, string(d.Role))
	dst = append(dst, `,"parent_agent_id":`...)
	dst = appendJSONStringPtr(dst, d.ParentAgentID)
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, string(d.Status))
	dst = append(dst, `,"status_updated_at":`...)
	if dst, ok = appendJSONTimePtr(dst, d.StatusUpdatedAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"lease_owner":`...)
	dst = appendJSONStringPtr(dst, d.LeaseOwner)
	dst = append(dst, `,"lease_expires_at":`...)
	if dst, ok = appendJSONTimePtr(dst, d.LeaseExpiresAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"lease_remaining_ms":`...)
	if d.LeaseRemainingMs == nil {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, *d.LeaseRemainingMs, 10)
	}
	dst = append(dst, `,"active_run_id":`...)
	dst = appendJSONStringPtr(dst, d.ActiveRunID)
	dst = append(dst, `,"active_task_id":`...)
	dst = appendJSONStringPtr(dst, d.ActiveTaskID)
	dst = append(dst, `,"capability":`...)
	dst = appendJSONStringPtr(dst, d.Capability)
	dst = append(dst, `,"last_signal_kind":`...)
	if d.LastSignalKind == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, string(*d.LastSignalKind))
	}
	dst = append(dst, `,"last_signal_at":`...)
	if dst, ok = appendJSONTimePtr(dst, d.LastSignalAt); !ok {
		return dst, false
	}
	dst = append(dst, `,"last_correlation_id":`...)
	dst = appendJSONStringPtr(dst, d.LastCorrelationID)
	dst = append(dst, `,"open_request_count":`...)
	dst = strconv.AppendInt(dst, int64(d.OpenRequestCount), 10)
	dst = append(dst, `,"last_request_kind":`...)
	dst = appendJSONStringPtr(dst, d.LastRequestKind)
	dst = append(dst, `,"recent_request_dedupe_keys":`...)
	dst = appendJSONStrings(dst, d.RecentRequestDedupeKeys)
	return append(dst, '}'), true
}

func (s *Summary) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"node_count_total":`...)
	dst = strconv.AppendInt(dst, int64(s.NodeCountTotal), 10)
	dst = append(dst, `,"node_count_included":`...)
	dst = strconv.AppendInt(dst, int64(s.NodeCountIncluded), 10)
	dst = append(dst, `,"counts_by_status":`...)
	dst = s.CountsByStatus.appendJSON(dst)
	dst = append(dst, `,"blocked_count":`...)
	dst = strconv.AppendInt(dst, int64(s.BlockedCount), 10)
	dst = append(dst, `,"failed_count":`...)
	dst = strconv.AppendInt(dst, int64(s.FailedCount), 10)
	dst = append(dst, `,"overdue_lease_count":`...)
	dst = strconv.AppendInt(dst, int64(s.OverdueLeaseCount), 10)
	dst = append(dst, `,"active_correlation_handles":`...)
	dst = appendJSONStrings(dst, s.ActiveCorrelationHandles)
	dst = append(dst, `,"open_request_count":`...)
	dst = strconv.AppendInt(dst, int64(s.OpenRequestCount), 10)
	return append(dst, '}')
}

func (c *StatusCounts) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"idle":`...)
	dst = strconv.AppendInt(dst, int64(c.Idle), 10)
	dst = append(dst, `,"running":`...)
	dst = strconv.AppendInt(dst, int64(c.Running), 10)
	dst = append(dst, `,"blocked":`...)
	dst = strconv.AppendInt(dst, int64(c.Blocked), 10)
	dst = append(dst, `,"failed":`...)
	dst = strconv.AppendInt(dst, int64(c.Failed), 10)
	dst = append(dst, `,"completed":`...)
	dst = strconv.AppendInt(dst, int64(c.Completed), 10)
	dst = append(dst, `,"unknown":`...)
	dst = strconv.AppendInt(dst, int64(c.Unknown), 10)
	return append(dst, '}')
}

func (m *TruncationMeta) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"omitted_count_total":`...)
	dst = strconv.AppendInt(dst, int64(m.OmittedCountTotal), 10)
	dst = append(dst, `,"omitted_by_status":`...)
	dst = m.OmittedByStatus.appendJSON(dst)
	dst = append(dst, `,"byte_budget":`...)
	dst = strconv.AppendInt(dst, int64(m.ByteBudget), 10)
	dst = append(dst, `,"policy_version":`...)
	dst = appendJSONString(dst, m.PolicyVersion)
	dst = append(dst, `,"omitted_correlation_handles":`...)
	dst = strconv.AppendInt(dst, int64(m.OmittedCorrelationHandles), 10)
	dst = append(dst, `,"cut_strings":`...)
	dst = strconv.AppendInt(dst, int64(m.CutStrings), 10)
	return append(dst, '}')
}

// appendJSON appends what MarshalJSON returns (encoding/json's compacting of
// it changes nothing: it has no spaces and nothing to escape), or returns
// false where MarshalJSON fails. It writes the digits itself rather than
// calling AppendFormat: the same digits of the same Date and Clock that
// TimeLayout asks for, the fraction truncated to milliseconds as
// AppendFormat truncates it, in a fraction of the time.
func (t Time) appendJSON(dst []byte) ([]byte, bool) {
	std := t.Std()
	year, month, day := std.Date()
	if year < 0 || year > 9999 {
		return dst, false
	}
	hour, minute, sec := std.Clock()
	ms := std.Nanosecond() / 1e6
	return append(dst, '"',
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':',
		byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.',
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z', '"'), true
}

func appendJSONTimePtr(dst []byte, t *Time) ([]byte, bool) {
	if t == nil {
		return append(dst, "null"...), true
	}
	return t.appendJSON(dst)
}

func appendJSONStringPtr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return appendJSONString(dst, *s)
}

// appendJSONStrings encodes a []string: null when nil, [] when empty, as
// encoding/json tells the two apart.
func appendJSONStrings(dst []byte, ss []string) []byte {
	if ss == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, s)
	}
	return append(dst, ']')
}

const jsonHex = "0123456789abcdef"

// jsonPlain marks the bytes a JSON string holds as they are: ASCII from
// U+0020 up but '"' and '\\'. The rest need escaping, or (from 0x80) a
// check of their UTF-8.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString quotes s as encoding/json does with SetEscapeHTML(false):
// '"' and '\\' and the control characters below U+0020 escaped (\b \f \n
// \r \t by name, the rest as \u00XX), each byte of invalid UTF-8 replaced by
// \ufffd, U+2028 and U+2029 escaped (always, for JSONP's sake), and
// everything else, '<', '>', '&' and DEL included, as it is.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if jsonPlain[s[i]] {
			i++
			continue
		}
		if c := s[i]; c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', jsonHex[c>>4], jsonHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', jsonHex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
