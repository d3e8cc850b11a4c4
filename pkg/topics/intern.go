package topics

import "reflect"

// interned holds the strings the decoder meets in almost every record: the
// attribute names and every payload field name, the spec version and
// content type, the event types, and the enum values payloads carry.
// unquote returns these shared strings rather than a copy per record: the
// names and enum values were more than half of the decoder's allocations
// (BenchmarkDecodeRecord: 36 to 15), and every allocation is GC work on
// the projector's hot path.
//
// It is an open-addressed table on a hash of a few bytes rather than a Go
// map: most lookups are of ids that are not in it, and a map hashed all of
// their bytes (a lookup cost as much as the allocation it saved). It is
// built once and only read after, so concurrent decoders share it.
var interned = func() *internTable {
	t := &internTable{}
	add := func(ss ...string) {
		for _, s := range ss {
			t.add(s)
		}
	}
	add(SpecVersion, ContentTypeJSON, attrSpecVersion, attrID, attrSource, attrType, attrTime,
		attrDataContentType, attrDataSchema, attrSubject, attrRunID, attrAgentID, attrSchemaVersion,
		attrSessionID, attrThreadID, attrCorrelationID, attrCausationID, attrData, attrDataBase64)
	for typ, f := range payloadFactories {
		add(string(typ))
		p := reflect.TypeOf(f()).Elem()
		for i := range p.NumField() {
			if tag, ok := p.Field(i).Tag.Lookup("json"); ok {
				add(jsonName(tag))
			}
		}
	}
	for _, r := range Roles {
		add(string(r))
	}
	for _, s := range Statuses {
		add(string(s))
	}
	add(string(SignalProgress), string(SignalResult), string(SignalFailed), string(SignalRequest),
		string(SignalHeartbeat), string(SignalInput), string(LaneNormal), string(LanePriority))
	for _, k := range TriggerKinds {
		add(string(k))
	}
	return t
}()

// internSlots is the size of internTable: a power of two, about eight
// times the strings it holds, so that a probe rarely goes past one slot.
const internSlots = 2048

// maxInterned is the length of the longest string interned may hold.
const maxInterned = 48

type internTable struct {
	slots [internSlots]string
}

// internHash hashes b's length and three of its bytes; b is not empty.
func internHash(b []byte) uint32 {
	n := uint32(len(b))
	h := n*0x9E3779B1 ^ uint32(b[0])*0x85EBCA77 ^ uint32(b[n/2])*0xC2B2AE3D ^ uint32(b[n-1])*0x27D4EB2F
	return (h ^ h>>15) & (internSlots - 1)
}

func (t *internTable) add(s string) {
	if s == "" || len(s) > maxInterned {
		return
	}
	for i := internHash([]byte(s)); ; i = (i + 1) & (internSlots - 1) {
		switch t.slots[i] {
		case s:
			return
		case "":
			t.slots[i] = s
			return
		}
	}
}

// jsonName is the name part of a json struct tag.
func jsonName(tag string) string {
	for i := range tag {
		if tag[i] == ',' {
			return tag[:i]
		}
	}
	return tag
}

// intern returns b as a string: the shared copy when interned holds it,
// else a new one.
func intern(b []byte) string {
	if len(b) == 0 || len(b) > maxInterned {
		return string(b)
	}
	for i := internHash(b); ; i = (i + 1) & (internSlots - 1) {
		s := interned.slots[i]
		if s == "" {
			return string(b)
		}
		if s == string(b) {
			return s
		}
	}
}
