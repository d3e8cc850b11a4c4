package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Content types of record values.
const (
	// ContentTypeCloudEvents marks a structured-mode CloudEvent in the value.
	ContentTypeCloudEvents = "application/cloudevents+json"
	// ContentTypeJSON marks plain JSON: a binary-mode event's data, or a wake.
	ContentTypeJSON = "application/json"
)

// envelope attribute names, CloudEvents spelling.
const (
	attrSpecVersion     = "specversion"
	attrID              = "id"
	attrSource          = "source"
	attrType            = "type"
	attrTime            = "time"
	attrDataContentType = "datacontenttype"
	attrDataSchema      = "dataschema"
	attrSubject         = "subject"
	attrRunID           = "runid"
	attrAgentID         = "agentid"
	attrSchemaVersion   = "schemaversion"
	attrSessionID       = "sessionid"
	attrThreadID        = "threadid"
	attrCorrelationID   = "correlationid"
	attrCausationID     = "causationid"
	attrData            = "data"
	attrDataBase64      = "data_base64"
)

// snakeHints maps DESIGN.md's snake_case names, which a producer may
// reasonably try, to the attribute CloudEvents requires instead.
var snakeHints = map[string]string{
	"event_id": attrID, "occurred_at": attrTime, "run_id": attrRunID, "agent_id": attrAgentID,
	"schema_version": attrSchemaVersion, "session_id": attrSessionID, "thread_id": attrThreadID,
	"correlation_id": attrCorrelationID, "causation_id": attrCausationID, "payload": attrData,
}

// DecodeEvent decodes a structured-mode CloudEvent (the JSON object of the
// whole event). Unknown CloudEvents extension attributes are ignored, as the
// CloudEvents spec requires; everything canopy reads is checked strictly.
//
// The error, if any, is a *DecodeError wrapping ErrInvalidEvent,
// ErrUnknownType or ErrUnsupportedVersion; an ErrInvalidEvent is also an
// ErrInvalidUTF8 when a string of the value is not valid UTF-8 (then its
// problems are those alone, docs/CONTRACT.md "Text").
func DecodeEvent(value []byte) (*Event, error) {
	return decodeEvent(value, fastPath, nil)
}

// decodePath is how the decoder splits a JSON object into its members and
// sets a payload's fields. Every path reaches the same event, or the same
// error with the same problems: fastPath, the decoder's, validates and
// splits an event's object and its data object in one pass (split) and
// sets plain values directly (decodeFast); FuzzDecodeDifferential holds
// it to a path that validates first and splits in a second pass
// (decodeObjectTwoPass) and leaves every payload to encoding/json.
type decodePath struct {
	object func(b []byte) (members, error)
	// event, when not nil, splits an event's value as object does and may
	// also split its data member's object in the same pass (fastPath:
	// decodeEventObject), so that the payload's bytes are not validated
	// twice.
	event func(b []byte) (members, dataSplit, error)
	// payload sets p's fields from ms, the members of its valid JSON
	// object; false, with p as it was, leaves them to encoding/json.
	payload func(p Payload, ms members) bool
}

var fastPath = decodePath{object: decodeObject, event: decodeEventObject, payload: decodeFast}

// decodeEvent is DecodeEvent by path, into dst when it is not nil.
func decodeEvent(value []byte, path decodePath, dst *Event) (*Event, error) {
	var (
		attrs members
		ds    dataSplit
		err   error
	)
	if path.event != nil {
		attrs, ds, err = path.event(value)
	} else {
		attrs, err = path.object(value)
	}
	defer attrs.free()
	defer ds.members.free()
	if err != nil {
		return nil, &DecodeError{kind: ErrInvalidEvent, Problems: []Problem{{"(value)", "not a JSON object: " + jsonProblem(err)}}}
	}
	if attrs == nil {
		return nil, &DecodeError{kind: ErrInvalidEvent, Problems: []Problem{{"(value)", "not a JSON object: null"}}}
	}
	var ps problems
	if !valueTextProblems(value, "", &ps) {
		return nil, textError(ps, textAttr(attrs, attrID), textAttr(attrs, attrType))
	}
	// get returns an attribute as the string a ce_* header would carry:
	// strings unquoted, and a JSON number (schemaversion is an Integer
	// attribute) as its text.
	slots := slotsOf(attrs)
	get := func(name string) (string, bool, string) {
		raw, ok := slots.get(attrs, name)
		if !ok || string(raw) == "null" {
			return "", false, ""
		}
		if name == attrSchemaVersion {
			// An Integer attribute: a JSON number in the JSON format (a
			// ce_ header's text only in binary mode).
			if raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9' {
				return string(raw), true, ""
			}
			return "", true, "want an integer, got " + clip(string(raw), 40)
		}
		if s, ok := unquote(raw); ok {
			return s, true, ""
		}
		return "", true, "want a string, got " + clip(string(raw), 40)
	}
	var data []byte
	if raw, ok := slots.get(attrs, attrData); ok && string(raw) != "null" {
		data = raw
	}
	if _, ok := slots.get(attrs, attrDataBase64); ok {
		ps.add(attrDataBase64, "binary data is not accepted; send data as a JSON object")
	}
	if slots.unknown {
		for _, name := range attrs.names(func(name string) bool { return !knownAttr(name) }) {
			if hint, ok := snakeHints[name]; ok {
				ps.add(name, "not a CloudEvents attribute; use "+quote(hint))
			} else if !extensionName.MatchString(name) {
				ps.add(name, "not a valid CloudEvents attribute name (lower-case letters and digits only)")
			}
		}
	}
	return decode(get, data, ds.of(data), "", ps, path, dst)
}

// DecodeRecord decodes an event from a Kafka record in either CloudEvents
// Kafka protocol binding mode: binary (ce_* headers, data in the value) when
// a ce_specversion header is present, structured otherwise. A non-empty key
// must equal the event's run id; an event without a runid takes the key's.
// The key, the value's strings and a binary-mode record's ce_* headers
// must be valid UTF-8 (ErrInvalidUTF8).
func DecodeRecord(key, value []byte, headers []kgo.RecordHeader) (*Event, error) {
	return decodeRecord(key, value, headers, nil)
}

// DecodeRecordInto is DecodeRecord decoding into *dst rather than a new
// Event: the event it returns, when not nil, is dst, every field decoded
// anew; after an error dst holds nothing to use. A consumer done with
// each event before it decodes the next (a projector's worker) saves an
// allocation per record. The event's strings and payload are new, as
// DecodeRecord's, and may be kept after dst is reused.
func DecodeRecordInto(dst *Event, key, value []byte, headers []kgo.RecordHeader) (*Event, error) {
	return decodeRecord(key, value, headers, dst)
}

// decodeRecord is DecodeRecord, into dst when it is not nil.
func decodeRecord(key, value []byte, headers []kgo.RecordHeader, dst *Event) (*Event, error) {
	var binary bool
	for _, h := range headers {
		if h.Key == "ce_"+attrSpecVersion {
			binary = true
			break
		}
	}
	if !binary {
		ev, err := decodeEvent(value, fastPath, dst)
		if p := textProblem(key); p != "" {
			return nil, keyTextError(ev, err, p)
		}
		if ev, err = checkKey(ev, err, key); err == nil {
			setTraceID(ev, headers)
		}
		return ev, err
	}
	get := func(name string) (string, bool, string) {
		for _, h := range headers {
			if h.Key == "ce_"+name {
				return string(h.Value), true, ""
			}
		}
		return "", false, ""
	}
	var data []byte
	if len(bytes.TrimSpace(value)) > 0 {
		data = value
	}
	if ps := binaryTextProblems(key, data, headers); len(ps) > 0 {
		id, _, _ := get(attrID)
		typ, _, _ := get(attrType)
		return nil, textError(ps, validText(id), validText(typ))
	}
	var ps problems
	for _, h := range headers {
		if h.Key == HeaderContentType {
			ct := mediaType(string(h.Value))
			if ct != ContentTypeJSON && ct != "" {
				ps.add("content-type", "binary-mode data must be "+ContentTypeJSON+", got "+quote(string(h.Value)))
			}
		}
	}
	ev, err := decode(get, data, nil, "ce_", ps, fastPath, dst)
	if ev, err = checkKey(ev, err, key); err == nil {
		setTraceID(ev, headers)
	}
	return ev, err
}

// setTraceID sets ev's TraceID from a traceparent header of W3C trace
// context's version 00 form (00-<32 hex trace id>-<16 hex parent id>-<2 hex
// flags>), whose trace id is not all zeros; anything else is ignored, as a
// tracer ignores a traceparent it cannot parse.
func setTraceID(ev *Event, headers []kgo.RecordHeader) {
	for _, h := range headers {
		if h.Key != HeaderTraceParent {
			continue
		}
		v := h.Value
		if len(v) != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || !lowerHex(v[:2]) || !lowerHex(v[3:35]) ||
			!lowerHex(v[36:52]) || !lowerHex(v[53:]) || allZero(v[3:35]) || allZero(v[36:52]) {
			return
		}
		ev.TraceID = string(v[3:35])
		return
	}
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

// textError is the error of a record with text that is not UTF-8: those
// problems only (anything else would be read through U+FFFD), with the id
// and type for the log line when they are text.
func textError(ps problems, id, typ string) *DecodeError {
	return &DecodeError{kind: ErrInvalidEvent, EventID: id, Type: typ, Problems: ps}
}

// textAttr is the value of a string attribute when it is text, else "".
func textAttr(attrs members, name string) string {
	raw, ok := attrs.get(name)
	if !ok || len(raw) < 2 || raw[0] != '"' || jsonStringProblem(raw) != "" {
		return ""
	}
	s, _ := unquote(raw)
	return s
}

func validText(s string) string {
	if !utf8.ValidString(s) {
		return ""
	}
	return s
}

// binaryTextProblems are the problems of text of a binary-mode record:
// its key, the names and values of its ce_* headers (the event's
// attributes, extensions included) and its data.
func binaryTextProblems(key, data []byte, headers []kgo.RecordHeader) problems {
	var ps problems
	if p := textProblem(key); p != "" {
		ps.add("(key)", p)
	}
	for _, h := range headers {
		if !strings.HasPrefix(h.Key, "ce_") {
			continue
		}
		name := h.Key
		if p := TextProblem(name); p != "" {
			name = strings.ToValidUTF8(name, "\uFFFD")
			ps.add(name, CodeInvalidUTF8+": in the header's name"+strings.TrimPrefix(p, CodeInvalidUTF8))
		}
		if p := textProblem(h.Value); p != "" {
			ps.add(name, p)
		}
	}
	valueTextProblems(data, "data", &ps)
	return ps
}

// keyTextError is the error of a structured-mode record whose key is not
// text: that problem, and the value's problems of text if it has any.
func keyTextError(ev *Event, err error, p string) *DecodeError {
	de := textError(problems{{"(key)", p}}, "", "")
	var vde *DecodeError
	switch {
	case errors.As(err, &vde):
		de.EventID, de.Type = vde.EventID, vde.Type
		if errors.Is(vde, ErrInvalidUTF8) {
			de.Problems = append(de.Problems, vde.Problems...)
		}
	case ev != nil:
		de.EventID, de.Type = ev.ID, string(ev.Type)
	}
	return de
}

func checkKey(ev *Event, err error, key []byte) (*Event, error) {
	if err != nil {
		return ev, err
	}
	if len(key) == 0 {
		if ev.RunID == "" {
			return nil, &DecodeError{kind: ErrInvalidEvent, EventID: ev.ID, Type: string(ev.Type),
				Problems: []Problem{{"ce_" + attrRunID, "required (or key the record by run id)"}}}
		}
		return ev, nil
	}
	if ev.RunID == "" {
		if msg := IDProblem(string(key)); msg != "" {
			return nil, &DecodeError{kind: ErrInvalidEvent, EventID: ev.ID, Type: string(ev.Type),
				Problems: []Problem{{"(key)", "taken as the run id: " + msg}}}
		}
		ev.RunID = string(key)
		return ev, nil
	}
	if ev.RunID != string(key) {
		return nil, &DecodeError{kind: ErrInvalidEvent, EventID: ev.ID, Type: string(ev.Type),
			Problems: []Problem{{"(key)", fmt.Sprintf("record key %s differs from runid %s; key records by run id", quote(string(key)), quote(ev.RunID))}}}
	}
	return ev, nil
}

// decode is shared by both modes: get returns an attribute's string form
// (whether present, and a problem with its JSON type, if any); split, when
// not nil, is data's members, split already. The event is dst, when it
// is not nil.
func decode(get attrGetter, data []byte, split *members, prefix string, ps problems, path decodePath, dst *Event) (*Event, error) {
	a := attrReader{get: get, prefix: prefix, ps: &ps}
	ev := a.envelope(dst)
	kind := a.schemaVersion(ev)
	if ev.Type != "" && !ev.Type.Known() && len(ps) == 0 {
		return ev, &DecodeError{kind: ErrUnknownType, EventID: ev.ID, Type: string(ev.Type),
			Problems: []Problem{{prefix + attrType, "unknown event type " + quote(string(ev.Type)) + " (newer producer?)"}}}
	}
	if ev.Type.Known() && kind == ErrInvalidEvent {
		ev.Data = NewPayload(ev.Type)
		decodePayload(ev.Data, data, split, &ps, path)
	}
	if len(ps) > 0 {
		return nil, &DecodeError{kind: kind, EventID: ev.ID, Type: string(ev.Type), Problems: ps}
	}
	return ev, nil
}

// attrGetter returns an attribute's string form: whether it is present,
// and a problem with its JSON type, if any.
type attrGetter func(name string) (v string, ok bool, bad string)

// attrReader reads an event's attributes in either mode, adding their
// problems to *ps under the mode's prefix ("ce_" for binary mode's
// headers).
type attrReader struct {
	get    attrGetter
	prefix string
	ps     *problems
}

// attr returns an attribute's value, adding a problem when it is required
// and absent or empty, empty where it is optional, or not a string.
func (a attrReader) attr(name string, required bool) string {
	v, ok, bad := a.get(name)
	switch {
	case bad != "":
		a.ps.add(a.prefix+name, bad)
	case !ok && required:
		a.ps.add(a.prefix+name, "required")
	case v == "" && required:
		a.ps.add(a.prefix+name, "required; got an empty string")
	case ok && v == "" && a.prefix == "":
		// Optional: absent, or null (CloudEvents' JSON format reads a
		// null attribute as an absent one), but never empty. (An empty
		// ce_ header in binary mode reads as absent.)
		a.ps.add(a.prefix+name, "empty; omit the attribute or send null")
	}
	return v
}

// envelope returns the event with its attributes, each checked, but for
// schemaversion and the payload: dst, or a new one when dst is nil. (dst
// is not a field of a: a field that flows to the result would make the
// escape analysis send all of a, and the getter closure with it, to the
// heap.)
func (a attrReader) envelope(dst *Event) *Event {
	ps, prefix := a.ps, a.prefix
	ev := dst
	if ev == nil {
		ev = &Event{}
	} else {
		*ev = Event{}
	}
	if v := a.attr(attrSpecVersion, true); v != "" && v != SpecVersion {
		ps.add(prefix+attrSpecVersion, "want \"1.0\", got "+quote(v))
	}
	ev.ID = a.attr(attrID, true)
	checkID(ps, prefix+attrID, ev.ID, false)
	ev.Source = a.attr(attrSource, true)
	checkID(ps, prefix+attrSource, ev.Source, false)
	checkURIReference(ps, prefix+attrSource, ev.Source)
	ev.Type = EventType(a.attr(attrType, true))
	if t := a.attr(attrTime, true); t != "" {
		tt, err := ParseTime(t)
		if err != nil {
			ps.add(prefix+attrTime, err.Error())
		}
		ev.Time = tt
	}
	if ct := a.attr(attrDataContentType, false); ct != "" && mediaType(ct) != ContentTypeJSON {
		ps.add(prefix+attrDataContentType, "want "+ContentTypeJSON+", got "+quote(ct))
	}
	checkURI(ps, prefix+attrDataSchema, a.attr(attrDataSchema, false))
	a.attr(attrSubject, false)
	ev.RunID = a.attr(attrRunID, prefix == "") // binary mode may take it from the key
	checkID(ps, prefix+attrRunID, ev.RunID, false)
	ev.AgentID = a.attr(attrAgentID, true)
	checkID(ps, prefix+attrAgentID, ev.AgentID, false)
	ev.SessionID = a.attr(attrSessionID, false)
	checkID(ps, prefix+attrSessionID, ev.SessionID, false)
	ev.ThreadID = a.attr(attrThreadID, false)
	checkID(ps, prefix+attrThreadID, ev.ThreadID, false)
	ev.CorrelationID = a.attr(attrCorrelationID, false)
	checkID(ps, prefix+attrCorrelationID, ev.CorrelationID, false)
	ev.CausationID = a.attr(attrCausationID, false)
	checkID(ps, prefix+attrCausationID, ev.CausationID, false)
	return ev
}

// schemaVersion sets ev.SchemaVersion and returns the kind of the event's
// error, if it has one: ErrUnsupportedVersion for an otherwise valid event
// newer than this build speaks, else ErrInvalidEvent.
func (a attrReader) schemaVersion(ev *Event) error {
	ps, prefix := a.ps, a.prefix
	switch v, ok, bad := a.get(attrSchemaVersion); {
	case bad != "":
		ps.add(prefix+attrSchemaVersion, bad)
	case !ok:
		ps.add(prefix+attrSchemaVersion, "required; this build speaks 1")
	default:
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			ev.SchemaVersion = n
		} else {
			ps.add(prefix+attrSchemaVersion, "want a positive integer, got "+quote(v))
		}
	}
	if ev.SchemaVersion > CurrentSchemaVersion && len(*ps) == 0 {
		ps.add(prefix+attrSchemaVersion, fmt.Sprintf("version %d is newer than this build speaks (%d); upgrade canopy", ev.SchemaVersion, CurrentSchemaVersion))
		return ErrUnsupportedVersion
	}
	return ErrInvalidEvent
}

// decodePayload sets p from data, a JSON object; split, when not nil, is
// its members, split already (and then data is a valid object).
func decodePayload(p Payload, data []byte, split *members, ps *problems, path decodePath) {
	if data != nil {
		var (
			keys members
			err  error
		)
		if split != nil {
			keys = *split
		} else {
			if bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) || !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
				ps.add("data", "want a JSON object")
				return
			}
			keys, err = path.object(data)
			defer keys.free()
		}
		if err == nil {
			// encoding/json matches keys case-insensitively; the contract does not.
			fields := payloadFields[reflect.TypeOf(p)]
			if unknown := keys.names(func(k string) bool { return !fields[k] }); len(unknown) > 0 {
				for _, k := range unknown {
					ps.add("data."+k, "unknown field for "+string(p.EventType()))
				}
				return
			}
			if !checkMembers(p.EventType(), keys, ps) {
				return
			}
			// data is one valid JSON object whose every key names a field:
			// the fast path sets plain values (fastpayload.go); Unmarshal
			// decodes the rest as the strict decoder below would.
			if path.payload(p, keys) {
				p.validate(ps)
				return
			}
			if err := json.Unmarshal(data, p); err != nil {
				addPayloadError(p, err, ps)
				return
			}
		} else {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(p); err != nil {
				addPayloadError(p, err, ps)
				return
			}
			if _, err := dec.Token(); err != io.EOF {
				ps.add("data", "trailing data after the JSON object")
				return
			}
		}
	}
	p.validate(ps)
}

// addPayloadError reports an error of decoding data into p.
func addPayloadError(p Payload, err error, ps *problems) {
	if pr, ok := payloadTypeError(err); ok {
		ps.add(pr.Field, pr.Problem)
	} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		ps.add("data."+strings.Trim(f, `"`), "unknown field for "+string(p.EventType()))
	} else {
		ps.add("data", jsonProblem(err))
	}
}

// decodeObject returns the members of a JSON object exactly as
// json.Unmarshal into a map[string]json.RawMessage would, errors included,
// but faster: once validJSON has checked b, a simple scan splits it into
// members without reflection, and the values are slices of b, not copies.
func decodeObject(b []byte) (members, error) {
	if ms, ok := splitObject(b); ok {
		return ms, nil
	}
	return decodeObjectTwoPass(b)
}

// splitObject validates b and splits it into members in one pass, when b
// is a JSON object (with whitespace around it): ok is false when it is not
// one, or not valid, and decodeObjectTwoPass says what it is.
func splitObject(b []byte) (members, bool) {
	ms, _, ok := split(b, false)
	return ms, ok
}

// dataSplit is the members of an event's data object, split in the pass
// that split the event: raw is the object's text in the event's value (nil
// when the last data member is not an object).
type dataSplit struct {
	members members
	raw     []byte
}

// of returns the members split for data, the event's data member, when
// they were split from these very bytes; else nil.
func (d *dataSplit) of(data []byte) *members {
	if d.members == nil || len(d.raw) == 0 || len(data) != len(d.raw) || &data[0] != &d.raw[0] {
		return nil
	}
	return &d.members
}

// decodeEventObject is decodeObject for an event's value, which also
// splits the data member's object in the same pass.
func decodeEventObject(b []byte) (members, dataSplit, error) {
	if ms, d, ok := split(b, true); ok {
		return ms, d, nil
	}
	ms, err := decodeObjectTwoPass(b)
	return ms, dataSplit{}, err
}

// split is splitObject, and with withData also the members of the data
// member's object.
func split(b []byte, withData bool) (members, dataSplit, bool) {
	v := validator{b: b}
	v.space()
	if v.i >= len(b) || b[v.i] != '{' {
		return nil, dataSplit{}, false
	}
	ms := newMembers()
	v.ms = &ms
	if withData {
		v.data.members, v.withData = newMembers(), true
	}
	ok := v.value(0)
	v.space()
	if !ok || v.i != len(b) {
		ms.free()
		v.data.members.free()
		return nil, dataSplit{}, false
	}
	return ms, v.data, true
}

// decodeObjectTwoPass is decodeObject in two passes: validJSON first, then
// a scan of the valid text. It is the path that reports what is wrong with
// an invalid object, and the one FuzzDecodeDifferential holds splitObject
// to.
func decodeObjectTwoPass(b []byte) (members, error) {
	s := jsonScanner{b: b}
	s.skipSpace()
	if !validJSON(b) || s.peek() != '{' {
		// Let encoding/json say what is wrong (or return nil for null).
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		return nil, nil
	}
	// A slice, not a map: an event has a dozen attributes, and filling a
	// map for them cost more than the scan. Pooled: every event decodes two
	// objects (its attributes and its data), and the slices were a quarter
	// of the projector's allocated bytes (BenchmarkEventPath).
	ms := newMembers()
	s.i++ // {
	s.skipSpace()
	if s.peek() == '}' {
		return ms, nil
	}
	for {
		s.skipSpace()
		key, _ := unquote(s.string())
		s.skipSpace()
		s.i++ // :
		s.skipSpace()
		ms = append(ms, member{key, s.value()})
		s.skipSpace()
		if s.peek() == '}' {
			return ms, nil
		}
		s.i++ // ,
	}
}

// member is one name and raw value of a JSON object.
type member struct {
	name string
	raw  json.RawMessage
}

// members are a JSON object's members in order.
type members []member

// pooledMembers is the capacity of membersPool's arrays: an event has a
// dozen attributes, and its data a handful of fields.
const pooledMembers = 16

// membersPool recycles decodeObject's slices; free puts one back. It holds
// array pointers, not slices, so that a Put allocates no slice header.
var membersPool = sync.Pool{New: func() any { return new([pooledMembers]member) }}

// newMembers returns an empty slice from membersPool.
func newMembers() members {
	return membersPool.Get().(*[pooledMembers]member)[:0]
}

// free returns ms to the pool: nothing may use it, nor a member's name,
// after (the raw values are slices of the decoded bytes, not of ms).
func (ms members) free() {
	if cap(ms) != pooledMembers {
		return // none, or one grown by an outsized object: let it go
	}
	arr := (*[pooledMembers]member)(ms[:pooledMembers])
	clear(arr[:])
	membersPool.Put(arr)
}

// get returns the value of name; a repeated name's last value counts, as in
// json.Unmarshal.
func (ms members) get(name string) (json.RawMessage, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].name == name {
			return ms[i].raw, true
		}
	}
	return nil, false
}

// names returns the distinct names for which keep is true, sorted, so that
// the same record gives the same error.
func (ms members) names(keep func(string) bool) []string {
	var out []string
	for _, m := range ms {
		if keep(m.name) {
			out = append(out, m.name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// unquote returns the value of a JSON string token, and false if raw is
// not a string. raw must be valid JSON. Its text is not checked here: the
// decoder refuses a value with a string that is not UTF-8
// (valueTextProblems) before it uses what unquote returns.
func unquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
		return intern(inner), true // nothing to unescape
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

// jsonScanner walks JSON text already known to be valid.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jsonScanner) skipSpace() {
	for s.i < len(s.b) && isJSONSpace(s.b[s.i]) {
		s.i++
	}
}

// string consumes the string token at s.i and returns it, quotes included.
func (s *jsonScanner) string() []byte {
	start := s.i
	for s.i++; s.b[s.i] != '"'; s.i++ {
		if s.b[s.i] == '\\' {
			s.i++ // the escaped character, which may be a quote
		}
	}
	s.i++
	return s.b[start:s.i]
}

// value consumes the value at s.i and returns it.
func (s *jsonScanner) value() []byte {
	start, depth := s.i, 0
	for {
		switch c := s.b[s.i]; {
		case c == '"':
			s.string()
		case c == '{' || c == '[':
			depth++
			s.i++
		case c == '}' || c == ']':
			if depth == 0 { // the end of the enclosing object ends a number or literal
				return s.b[start:s.i]
			}
			depth--
			s.i++
		case depth == 0 && (c == ',' || isJSONSpace(c)): // the end of a number or literal
			return s.b[start:s.i]
		default:
			s.i++
			continue
		}
		if depth == 0 { // a string, object or array has ended
			return s.b[start:s.i]
		}
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// payloadFields has the JSON field names of each payload type.
var payloadFields = func() map[reflect.Type]map[string]bool {
	m := map[reflect.Type]map[string]bool{}
	for _, f := range payloadFactories {
		p := reflect.TypeOf(f())
		names := map[string]bool{}
		for i := range p.Elem().NumField() {
			if tag, ok := p.Elem().Field(i).Tag.Lookup("json"); ok {
				name, _, _ := strings.Cut(tag, ",")
				names[name] = true
			}
		}
		m[p] = names
	}
	return m
}()

func jsonProblem(err error) string {
	if f, problem, ok := timeProblem(err); ok {
		if f == "" {
			return problem
		}
		return f + ": " + problem
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func knownAttr(name string) bool { return attrSlot(name) >= 0 }

// numAttrs is how many attributes the decoder knows: attrSlot numbers
// them 0 to numAttrs-1.
const numAttrs = 17

// attrSlot numbers the attributes the decoder knows, from 0; -1 for any
// other name.
func attrSlot(name string) int {
	switch name {
	case attrSpecVersion:
		return 0
	case attrID:
		return 1
	case attrSource:
		return 2
	case attrType:
		return 3
	case attrTime:
		return 4
	case attrDataContentType:
		return 5
	case attrDataSchema:
		return 6
	case attrSubject:
		return 7
	case attrRunID:
		return 8
	case attrAgentID:
		return 9
	case attrSchemaVersion:
		return 10
	case attrSessionID:
		return 11
	case attrThreadID:
		return 12
	case attrCorrelationID:
		return 13
	case attrCausationID:
		return 14
	case attrData:
		return 15
	case attrDataBase64:
		return 16
	}
	return -1
}

// attrSlots is where each attribute the decoder knows is among an event's
// members: one pass over them, rather than a scan of them for each of the
// seventeen names the decoder reads. Small, and used by value, so that the
// decoder's attribute getter holds a copy on the stack.
type attrSlots struct {
	// at is a member's index plus one, by attrSlot (0: absent); the last
	// of a repeated name, as in members.get.
	at [numAttrs]uint8
	// unknown: a member's name may not be a known attribute (members.names
	// says which); false when every one is.
	unknown bool
	// many: more members than at can index; get scans them.
	many bool
}

func slotsOf(ms members) attrSlots {
	var s attrSlots
	if len(ms) >= math.MaxUint8 {
		s.many, s.unknown = true, true // names does the work when there are this many
		return s
	}
	for i, m := range ms {
		if k := attrSlot(m.name); k >= 0 {
			s.at[k] = uint8(i + 1)
		} else {
			s.unknown = true
		}
	}
	return s
}

// get is ms.get(name) for a known attribute's name.
func (s attrSlots) get(ms members, name string) (json.RawMessage, bool) {
	k := attrSlot(name)
	if s.many || k < 0 {
		return ms.get(name)
	}
	if s.at[k] == 0 {
		return nil, false
	}
	return ms[s.at[k]-1].raw, true
}

func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// MarshalJSON encodes the event as a structured-mode CloudEvent.
func (e *Event) MarshalJSON() ([]byte, error) {
	type wire struct {
		SpecVersion     string  `json:"specversion"`
		ID              string  `json:"id"`
		Source          string  `json:"source"`
		Type            string  `json:"type"`
		Time            Time    `json:"time"`
		DataContentType string  `json:"datacontenttype"`
		RunID           string  `json:"runid"`
		AgentID         string  `json:"agentid"`
		SchemaVersion   int     `json:"schemaversion"`
		SessionID       string  `json:"sessionid,omitempty"`
		ThreadID        string  `json:"threadid,omitempty"`
		CorrelationID   string  `json:"correlationid,omitempty"`
		CausationID     string  `json:"causationid,omitempty"`
		Data            Payload `json:"data"`
	}
	typ := e.Type
	if typ == "" && e.Data != nil {
		typ = e.Data.EventType()
	}
	sv := e.SchemaVersion
	if sv == 0 {
		sv = CurrentSchemaVersion
	}
	data := e.Data
	if data == nil {
		data = &Heartbeat{}
	}
	return Marshal(wire{SpecVersion, e.ID, e.Source, string(typ), e.Time, ContentTypeJSON, e.RunID, e.AgentID, sv,
		e.SessionID, e.ThreadID, e.CorrelationID, e.CausationID, data})
}

// Validate checks an event built in Go the way DecodeEvent checks one read
// from the wire, so producers find their mistakes before sending.
func (e *Event) Validate() error {
	b, err := e.MarshalJSON()
	if err != nil {
		return err
	}
	if _, err = DecodeEvent(b); err != nil {
		return err
	}
	// JSON encoding replaces invalid UTF-8, so what is sent can differ from
	// e (a run id that no longer equals the record key): check e's own
	// strings as well.
	var ps problems
	for _, a := range [...]struct{ name, v string }{{attrID, e.ID}, {attrSource, e.Source}, {attrRunID, e.RunID},
		{attrAgentID, e.AgentID}, {attrSessionID, e.SessionID}, {attrThreadID, e.ThreadID},
		{attrCorrelationID, e.CorrelationID}, {attrCausationID, e.CausationID}} {
		checkID(&ps, a.name, a.v, false)
	}
	if e.Data != nil {
		e.Data.validate(&ps)
	}
	if len(ps) > 0 {
		return &DecodeError{kind: ErrInvalidEvent, EventID: e.ID, Type: string(e.Type), Problems: ps}
	}
	return nil
}

// Marshal encodes v as compact JSON without HTML escaping, the one encoding
// every canopy message uses: the same value always gives the same bytes.
//
// The wake and its parts (Wake, AgentTreeSnapshot, NodeDigest, Trigger and
// what they contain) are encoded without reflection, to the very bytes
// encoding/json would write (see wakejson.go); every other type, and every
// error, is encoding/json's.
func Marshal(v any) ([]byte, error) {
	if b, ok := marshalFast(v); ok {
		return b, nil
	}
	return marshalReflect(v)
}
