package topics

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text (docs/CONTRACT.md "Text"). Every string of an event, in whichever
// place it travels (a JSON string of the value, a member's name, a ce_*
// header, the record key), is valid UTF-8, and every length limit counts
// Unicode code points, the unit of JSON Schema's maxLength.
//
// encoding/json decodes a byte that is not UTF-8, and the escape of half a
// surrogate pair (\ud800), to U+FFFD without a word: two different inputs
// ("w1\xff\xfe", "w1\xc0\xaf") would become one node. Invalid UTF-8 is not
// JSON (RFC 8259 §8.1), so the decoder refuses it, naming the field, before
// it reads anything else.

// CodeInvalidUTF8 starts the problem reported for a string that is not
// valid UTF-8; the projector's dead-letter reason and the gateway's 400
// carry it.
const CodeInvalidUTF8 = "invalid_utf8"

// TextLength is the length of s in the unit of every limit of the
// contract: Unicode code points (a byte that is not UTF-8 counts as one).
func TextLength(s string) int { return utf8.RuneCountInString(s) }

// longerThan reports whether s is longer than limit code points. It counts
// them only when s has more bytes than that: a string of at most limit
// bytes has at most limit code points.
func longerThan(s string, limit int) bool {
	return len(s) > limit && utf8.RuneCountInString(s) > limit
}

// TextProblem says why s is not valid UTF-8, as a problem that starts
// with CodeInvalidUTF8 and gives the first offending byte and its offset;
// "" when s is valid UTF-8.
func TextProblem(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return badByte(s[i], i)
		}
		i += n
	}
	return ""
}

func badByte(c byte, at int) string {
	return fmt.Sprintf("%s: byte 0x%02x at offset %d is not UTF-8", CodeInvalidUTF8, c, at)
}

// textProblem is TextProblem of b, without copying b when it is valid.
func textProblem(b []byte) string {
	if utf8.Valid(b) {
		return ""
	}
	return TextProblem(string(b))
}

// jsonStringProblem says why the JSON string token raw (quotes included,
// valid JSON) is not text: a byte that is not UTF-8, or the escape of a
// surrogate code point that is not half of an escaped pair. Offsets count
// the bytes between the quotes as sent, escapes undecoded.
func jsonStringProblem(raw []byte) string {
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\' && s[i+1] == 'u':
			u := hex4(s[i+2:])
			switch {
			case u < 0xD800 || u > 0xDFFF:
				i += 6
			case u < 0xDC00 && lowSurrogateAt(s, i+6):
				i += 12
			default:
				return fmt.Sprintf(`%s: \u%s at offset %d is an unpaired surrogate, not a character`, CodeInvalidUTF8, s[i+2:i+6], i)
			}
		case c == '\\':
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				return badByte(c, i)
			}
			i += n
		}
	}
	return ""
}

// hex4 is the value of the four hex digits that start b (valid JSON: they
// are there).
func hex4(b []byte) rune {
	var u rune
	for _, c := range b[:4] {
		u <<= 4
		switch {
		case c >= '0' && c <= '9':
			u |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			u |= rune(c - 'a' + 10)
		default:
			u |= rune(c - 'A' + 10)
		}
	}
	return u
}

// lowSurrogateAt reports whether s holds the escape of a low surrogate
// (\udc00-\udfff) at i.
func lowSurrogateAt(s []byte, i int) bool {
	if len(s)-i < 6 || s[i] != '\\' || s[i+1] != 'u' {
		return false
	}
	for _, c := range s[i+2 : i+6] {
		if !isHex(c) {
			return false
		}
	}
	u := hex4(s[i+2:])
	return u >= 0xDC00 && u <= 0xDFFF
}

// valueTextProblems adds a problem for every string of b, a record's value
// or a binary-mode event's data, that is not text, named by its JSON path
// under field. b that is not JSON is left to the decoder, which refuses it
// as such. It reports whether it found none.
func valueTextProblems(b []byte, field string, ps *problems) bool {
	if utf8.Valid(b) && !surrogateEscape(b) {
		return true // the common case: one fast pass
	}
	if !validJSON(b) {
		return true
	}
	before := len(*ps)
	s := jsonScanner{b: b}
	s.skipSpace()
	s.textProblems(field, ps)
	return len(*ps) == before
}

// surrogateEscape reports whether b may hold the escape of a surrogate
// code point (\ud800-\udfff), paired or not: then textProblems looks.
func surrogateEscape(b []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 {
			return false
		}
		i += j
		if len(b)-i >= 4 && b[i+1] == 'u' && (b[i+2] == 'd' || b[i+2] == 'D') && b[i+3] >= '8' && (b[i+3] <= '9' || b[i+3] >= 'A' && b[i+3] <= 'F' || b[i+3] >= 'a' && b[i+3] <= 'f') {
			return true
		}
		i += 2 // the escaped character, a backslash perhaps
		if i >= len(b) {
			return false
		}
	}
}

// textProblems walks the valid JSON value at s.i, adding a problem for
// each string, member names included, that is not text.
func (s *jsonScanner) textProblems(field string, ps *problems) {
	switch s.peek() {
	case '"':
		if p := jsonStringProblem(s.string()); p != "" {
			ps.add(orValue(field), p)
		}
	case '{':
		s.i++
		s.skipSpace()
		if s.peek() == '}' {
			s.i++
			return
		}
		for {
			s.skipSpace()
			raw := s.string()
			name, _ := unquote(raw)
			path := name
			if field != "" {
				path = field + "." + name
			}
			if p := jsonStringProblem(raw); p != "" {
				// The name is shown with U+FFFD for what is not text.
				ps.add(strings.ToValidUTF8(path, "\uFFFD"), CodeInvalidUTF8+": in the member's name"+strings.TrimPrefix(p, CodeInvalidUTF8))
			}
			s.skipSpace()
			s.i++ // :
			s.skipSpace()
			s.textProblems(path, ps)
			s.skipSpace()
			if s.peek() == '}' {
				s.i++
				return
			}
			s.i++ // ,
		}
	case '[':
		s.i++
		s.skipSpace()
		if s.peek() == ']' {
			s.i++
			return
		}
		for n := 0; ; n++ {
			s.skipSpace()
			s.textProblems(orValue(field)+"["+strconv.Itoa(n)+"]", ps)
			s.skipSpace()
			if s.peek() == ']' {
				s.i++
				return
			}
			s.i++ // ,
		}
	default: // a number or a literal
		for s.i < len(s.b) && !isJSONSpace(s.b[s.i]) && s.b[s.i] != ',' && s.b[s.i] != '}' && s.b[s.i] != ']' {
			s.i++
		}
	}
}

// orValue names the whole value where there is no field name.
func orValue(field string) string {
	if field == "" {
		return "(value)"
	}
	return field
}

// TextProblems returns a Problem for each string of the JSON value b,
// member names included, that is not valid UTF-8 (a problem starting with
// CodeInvalidUTF8, as the decoder reports it), named by its JSON path
// ("text", "data.artifact_ids[1]"; "(value)" for b itself). It returns
// none when b is not JSON: what is wrong with that is a JSON decoder's to
// say. For a service that reads JSON of its own with encoding/json, which
// would read U+FFFD in place of what is not text.
func TextProblems(b []byte) []Problem {
	var ps problems
	valueTextProblems(b, "", &ps)
	return ps
}
