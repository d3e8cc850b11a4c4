package topics

import "encoding/binary"

// validJSON reports whether b is exactly one JSON value with optional
// whitespace around it: the same answer as encoding/json.Valid for every
// input (FuzzValidJSON holds it to that), but in one direct pass rather than
// a state machine called per byte. Every event is validated before it is
// decoded, and json.Valid was a fifth of the projector's decoding time.
func validJSON(b []byte) bool {
	v := validator{b: b}
	v.space()
	if !v.value(0) {
		return false
	}
	v.space()
	return v.i == len(b)
}

// maxJSONDepth is encoding/json's limit on nested arrays and objects: deeper
// input is invalid there, so it is here.
const maxJSONDepth = 10000

type validator struct {
	b []byte
	i int
	// ms, when not nil, gets the members of the outermost object as it is
	// validated (splitObject: one pass for both).
	ms *members
	// data, when withData, gets the members of the outermost object's data
	// member when it is an object (the last one's, when it repeats), and
	// inData is set while that object is validated.
	data     dataSplit
	withData bool
	inData   bool
}

func (v *validator) space() {
	for v.i < len(v.b) && isJSONSpace(v.b[v.i]) {
		v.i++
	}
}

// value consumes one value at v.i; depth is how many arrays and objects
// enclose it.
func (v *validator) value(depth int) bool {
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '"':
		return v.string()
	case c == '{':
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
	case c == '-' || c >= '0' && c <= '9':
		return v.number()
	case c == 't':
		return v.literal("true")
	case c == 'f':
		return v.literal("false")
	case c == 'n':
		return v.literal("null")
	}
	return false
}

func (v *validator) literal(lit string) bool {
	if len(v.b)-v.i < len(lit) || string(v.b[v.i:v.i+len(lit)]) != lit {
		return false
	}
	v.i += len(lit)
	return true
}

func (v *validator) object(depth int) bool {
	if depth > maxJSONDepth {
		return false
	}
	v.i++ // {
	v.space()
	if v.i < len(v.b) && v.b[v.i] == '}' {
		v.i++
		return true
	}
	for {
		name := v.i
		if v.i >= len(v.b) || v.b[v.i] != '"' || !v.string() {
			return false
		}
		nameEnd := v.i
		v.space()
		if v.i >= len(v.b) || v.b[v.i] != ':' {
			return false
		}
		v.i++
		v.space()
		val := v.i
		var key string
		collect := v.ms != nil && depth == 1 || v.inData && depth == 2
		if collect {
			key, _ = unquote(v.b[name:nameEnd])
		}
		data := v.withData && depth == 1 && key == attrData
		if data {
			// A data member that repeats replaces the one before, as in
			// members.get.
			v.data.members, v.data.raw = v.data.members[:0], nil
			v.inData = val < len(v.b) && v.b[val] == '{'
		}
		ok := v.value(depth)
		if data {
			v.inData = false
		}
		if !ok {
			return false
		}
		switch {
		case data && v.b[val] == '{':
			v.data.raw = v.b[val:v.i]
			fallthrough
		case depth == 1 && collect:
			*v.ms = append(*v.ms, member{key, v.b[val:v.i]})
		case collect:
			v.data.members = append(v.data.members, member{key, v.b[val:v.i]})
		}
		v.space()
		if v.i >= len(v.b) {
			return false
		}
		switch v.b[v.i] {
		case ',':
			v.i++
			v.space()
		case '}':
			v.i++
			return true
		default:
			return false
		}
	}
}

func (v *validator) array(depth int) bool {
	if depth > maxJSONDepth {
		return false
	}
	v.i++ // [
	v.space()
	if v.i < len(v.b) && v.b[v.i] == ']' {
		v.i++
		return true
	}
	for {
		if !v.value(depth) {
			return false
		}
		v.space()
		if v.i >= len(v.b) {
			return false
		}
		switch v.b[v.i] {
		case ',':
			v.i++
			v.space()
		case ']':
			v.i++
			return true
		default:
			return false
		}
	}
}

// string consumes a string. Like encoding/json it accepts any byte from
// 0x20 up, invalid UTF-8 included, and checks only the escapes.
func (v *validator) string() bool {
	v.i++ // "
	for v.i < len(v.b) {
		// Eight plain bytes at a time: most of an event is ids and text
		// with nothing to look at.
		for len(v.b)-v.i >= 8 && plain8(binary.LittleEndian.Uint64(v.b[v.i:])) {
			v.i += 8
		}
		if v.i >= len(v.b) {
			break
		}
		switch c := v.b[v.i]; {
		case c == '"':
			v.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			v.i++
			if v.i >= len(v.b) {
				return false
			}
			switch v.b[v.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.i++
			case 'u':
				if len(v.b)-v.i < 5 {
					return false
				}
				for _, h := range v.b[v.i+1 : v.i+5] {
					if !isHex(h) {
						return false
					}
				}
				v.i += 5
			default:
				return false
			}
		default:
			v.i++
		}
	}
	return false
}

// plain8 reports whether none of the eight bytes in x is a quote, a
// backslash or a control character (below 0x20): bytes a JSON string's
// scan can step over. Each test is the exact "has a byte that is zero" (or
// "less than n") bit trick on all eight bytes at once; bytes from 0x80 up,
// UTF-8's, are plain.
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	return ((quote-ones)&^quote|(backslash-ones)&^backslash|(x-ones*0x20)&^x)&highs == 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number consumes -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *validator) number() bool {
	if v.b[v.i] == '-' {
		v.i++
	}
	switch {
	case v.i >= len(v.b):
		return false
	case v.b[v.i] == '0':
		v.i++
	case v.b[v.i] >= '1' && v.b[v.i] <= '9':
		v.digits()
	default:
		return false
	}
	if v.i < len(v.b) && v.b[v.i] == '.' {
		v.i++
		if v.digits() == 0 {
			return false
		}
	}
	if v.i < len(v.b) && (v.b[v.i] == 'e' || v.b[v.i] == 'E') {
		v.i++
		if v.i < len(v.b) && (v.b[v.i] == '+' || v.b[v.i] == '-') {
			v.i++
		}
		if v.digits() == 0 {
			return false
		}
	}
	return true
}

func (v *validator) digits() int {
	start := v.i
	for v.i < len(v.b) && v.b[v.i] >= '0' && v.b[v.i] <= '9' {
		v.i++
	}
	return v.i - start
}
