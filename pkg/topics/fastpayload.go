package topics

import (
	"reflect"
	"strconv"
)

// The payload fast path. encoding/json's Unmarshal would scan a payload's
// bytes again (they are already checked and split into members) and set
// fields by reflection walking: about a quarter of all decoding. The fast
// path sets each member's field from its raw value directly, for the plain
// values producers send (strings, integers, booleans, numbers, timestamps,
// arrays of strings, and pointers to them where a field may be absent). Anything else (null, a value of the wrong JSON type,
// a number out of range, a timestamp that does not parse) makes it give
// up, reset what it set, and leave the payload to encoding/json, so that
// accepted and rejected inputs, decoded values and error messages are
// those encoding/json gives. FuzzDecodeDifferential holds it to a decoder
// that leaves every payload to encoding/json (decodePath).

// fieldKind is what the fast path knows how to set.
type fieldKind uint8

const (
	kindString   fieldKind = iota + 1 // string, or a string type (Role, Status)
	kindInt                           // int, int64
	kindIntPtr                        // *int64
	kindBool                          // bool
	kindBoolPtr                       // *bool
	kindFloatPtr                      // *float64
	kindStrings                       // []string
	kindTime                          // Time
	kindTimePtr                       // *Time
)

type fastField struct {
	index int
	kind  fieldKind
}

// fastFields has, per payload type, each JSON field name's struct field;
// a type with a field the fast path cannot set has none (always the slow
// path).
var fastFields = func() map[reflect.Type]map[string]fastField {
	m := map[reflect.Type]map[string]fastField{}
	for _, f := range payloadFactories {
		p := reflect.TypeOf(f())
		fields := map[string]fastField{}
		ok := true
		for i := range p.Elem().NumField() {
			sf := p.Elem().Field(i)
			tag, tagged := sf.Tag.Lookup("json")
			if !tagged {
				continue
			}
			name := jsonName(tag)
			k := kindOf(sf.Type)
			if k == 0 {
				ok = false
				break
			}
			fields[name] = fastField{i, k}
		}
		if ok {
			m[p] = fields
		}
	}
	return m
}()

func kindOf(t reflect.Type) fieldKind {
	switch {
	case t == timeType:
		return kindTime
	case t.Kind() == reflect.Pointer && t.Elem() == timeType:
		return kindTimePtr
	case t.Kind() == reflect.String:
		return kindString
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return kindInt
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Int64:
		return kindIntPtr
	case t.Kind() == reflect.Bool:
		return kindBool
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Bool:
		return kindBoolPtr
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Float64:
		return kindFloatPtr
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return kindStrings
	}
	return 0
}

// decodeFast sets p's fields from ms, the members of its valid JSON object,
// every name of which is one of p's fields. It reports false, with p as it
// was, when a value needs encoding/json.
func decodeFast(p Payload, ms members) bool {
	fields, ok := fastFields[reflect.TypeOf(p)]
	if !ok {
		return false
	}
	v := reflect.ValueOf(p).Elem()
	for _, m := range ms {
		f, ok := fields[m.name]
		if !ok || !setFast(v.Field(f.index), f.kind, m.raw) {
			// Back to what NewPayload made: every field the fast path sets
			// is exported and zero there.
			for _, f := range fields {
				fv := v.Field(f.index)
				fv.Set(reflect.Zero(fv.Type()))
			}
			return false
		}
	}
	return true
}

// setFast sets fv from raw, valid JSON, when it is a plain value of the
// field's kind.
func setFast(fv reflect.Value, k fieldKind, raw []byte) bool {
	switch k {
	case kindString:
		s, ok := unquote(raw)
		if !ok {
			return false
		}
		fv.SetString(s)
	case kindInt:
		if !isInteger(raw) {
			return false
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || fv.OverflowInt(n) {
			return false
		}
		fv.SetInt(n)
	case kindIntPtr:
		if !isInteger(raw) {
			return false
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return false
		}
		fv.Set(reflect.ValueOf(&n))
	case kindBool, kindBoolPtr:
		var b bool
		switch string(raw) {
		case "true":
			b = true
		case "false":
		default:
			return false
		}
		if k == kindBool {
			fv.SetBool(b)
		} else {
			fv.Set(reflect.ValueOf(&b))
		}
	case kindFloatPtr:
		if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return false // not a number
		}
		x, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return false
		}
		fv.Set(reflect.ValueOf(&x))
	case kindStrings:
		ss, ok := stringArray(raw)
		if !ok {
			return false
		}
		fv.Set(reflect.ValueOf(ss))
	case kindTime, kindTimePtr:
		var t Time
		if len(raw) < 2 || raw[0] != '"' || t.UnmarshalJSON(raw) != nil {
			return false
		}
		if k == kindTime {
			fv.Set(reflect.ValueOf(t))
		} else {
			fv.Set(reflect.ValueOf(&t))
		}
	default:
		return false
	}
	return true
}

// isInteger reports whether raw, a valid JSON number or other value, is an
// integer literal: an optional minus and digits only.
func isInteger(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stringArray decodes raw, valid JSON, when it is an array of strings only.
func stringArray(raw []byte) ([]string, bool) {
	s := jsonScanner{b: raw}
	s.skipSpace()
	if s.peek() != '[' {
		return nil, false
	}
	s.i++
	s.skipSpace()
	out := []string{}
	if s.peek() == ']' {
		return out, true
	}
	for {
		s.skipSpace()
		if s.peek() != '"' {
			return nil, false
		}
		str, ok := unquote(s.string())
		if !ok {
			return nil, false
		}
		out = append(out, str)
		s.skipSpace()
		switch s.peek() {
		case ']':
			return out, true
		case ',':
			s.i++
		default:
			return nil, false
		}
	}
}
