package topics_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// A textField is a string field of an event that FuzzDecodeText fills with
// the fuzzer's bytes: where it is, what the contract allows in it, and how
// to read it back from a decoded event.
type textField struct {
	// attr is the CloudEvents attribute (a ce_ header in binary mode), or
	// "" for a field of data, or "(key)" for the record key.
	attr string
	// typ and data are the event's type and data; data holds the field's
	// value as "PLACEHOLDER".
	typ  topics.EventType
	data string
	// path is the field's name in the decoder's problems (data.text).
	path string
	// limit is the most code points the field takes; 0: no limit, and the
	// decoder does not look at the value beyond its text (an extension).
	limit int
	// id: no control characters, and never empty (empty is "omit it").
	id bool
	// optional: binary mode reads an empty ce_ header as absent.
	optional bool
	get      func(*topics.Event) string
}

const placeholder = "PLACEHOLDER"

var textFields = []textField{
	{attr: "agentid", path: "agentid", limit: topics.MaxIDLength, id: true, get: func(e *topics.Event) string { return e.AgentID }},
	{attr: "runid", path: "runid", limit: topics.MaxIDLength, id: true, get: func(e *topics.Event) string { return e.RunID }},
	{attr: "id", path: "id", limit: topics.MaxIDLength, id: true, get: func(e *topics.Event) string { return e.ID }},
	{attr: "sessionid", path: "sessionid", limit: topics.MaxIDLength, id: true, optional: true, get: func(e *topics.Event) string { return e.SessionID }},
	{attr: "correlationid", path: "correlationid", limit: topics.MaxIDLength, id: true, optional: true, get: func(e *topics.Event) string { return e.CorrelationID }},
	{attr: "traceparent", path: "traceparent", get: func(*topics.Event) string { return "" }},
	{attr: "(key)", path: "(key)", limit: topics.MaxIDLength, id: true, get: func(e *topics.Event) string { return e.RunID }},
	{typ: topics.TypeInput, data: `{"input_kind":"message","text":"PLACEHOLDER"}`, path: "data.text", limit: topics.MaxInputTextLength,
		get: func(e *topics.Event) string { return e.Data.(*topics.Input).Text }},
	{typ: topics.TypeInput, data: `{"input_kind":"message","input_id":"PLACEHOLDER"}`, path: "data.input_id", limit: topics.MaxIDLength, id: true,
		get: func(e *topics.Event) string { return e.Data.(*topics.Input).InputID }},
	{typ: topics.TypeNodeCreated, data: `{"role":"worker","parent_agent_id":"PLACEHOLDER"}`, path: "data.parent_agent_id", limit: topics.MaxIDLength, id: true,
		get: func(e *topics.Event) string { return e.Data.(*topics.NodeCreated).ParentAgentID }},
	{typ: topics.TypeFailed, data: `{"error_code":"PLACEHOLDER","retryable":true}`, path: "data.error_code", limit: topics.MaxIDLength, id: true,
		get: func(e *topics.Event) string { return e.Data.(*topics.Failed).ErrorCode }},
	{typ: topics.TypeWakeReceived, data: `{"wake_id":"w","agent_ids":["PLACEHOLDER"]}`, path: "data.agent_ids[0]", limit: topics.MaxIDLength, id: true,
		get: func(e *topics.Event) string { return e.Data.(*topics.WakeReceived).AgentIDs[0] }},
}

// How FuzzDecodeText writes the bytes into a JSON string.
const (
	asBytes    = iota // escaped only where JSON requires it; other bytes as they are
	asEscapes         // every character but ASCII as \uXXXX escapes (pairs above U+FFFF)
	asVerbatim        // the bytes are the string token's content, escapes and all
	modes
)

// FuzzDecodeText puts any bytes into a string field of an event (an
// attribute, a ce_ header, the key, a payload field or list entry, an
// extension the decoder ignores), in either mode, written raw, escaped or
// as a JSON string's content verbatim (which is how escaped lone
// surrogates come in), and checks the contract (docs/CONTRACT.md "Text"):
// the event is accepted if and only if the string is valid UTF-8, within
// the field's limit in code points and otherwise legal for the field, and
// then decodes to exactly that string; text that is not UTF-8 is refused
// as ErrInvalidUTF8 naming the field, and nothing else is.
func FuzzDecodeText(f *testing.F) {
	for i := range textFields {
		for _, s := range []string{"w1", "w1\xff\xfe", "w1\xc0\xaf", "\xed\xa0\x80", "é工😀", "e\u0301", "👩🏽\u200d💻", "क्ष", "",
			"a\x01b", "\u0085", strings.Repeat("😀", 256), strings.Repeat("😀", 257), `\ud83d\ude00`, `w1\ud800`, `\udc00\ud800`, `\u00e9\"`} {
			for mode := range modes {
				f.Add(uint8(i), uint8(mode), false, []byte(s))
			}
			f.Add(uint8(i), uint8(asBytes), true, []byte(s))
		}
	}
	f.Add(uint8(7), uint8(asBytes), false, []byte(strings.Repeat("é", topics.MaxInputTextLength)))
	f.Add(uint8(7), uint8(asEscapes), true, []byte(strings.Repeat("😀", topics.MaxInputTextLength+1)))
	f.Fuzz(func(t *testing.T, which, mode uint8, binary bool, s []byte) {
		fd := textFields[int(which)%len(textFields)]
		mode %= modes
		if fd.attr == "(key)" {
			binary = true // a structured-mode key must equal the runid
		}
		header := binary && fd.attr != ""
		// want is the string the field must hold, and text whether it is
		// text; a verbatim token that is not one JSON string has no
		// expectation but the decoder's usual ones.
		want, text := s, utf8.Valid(s)
		token := jsonString(s, mode)
		if !header && mode == asVerbatim {
			var ok bool
			if want, text, ok = unescapeJSON(s); !ok {
				ev, err := decodeWith(t, fd, binary, s, token)
				checkDecodeResult(t, ev, err)
				return
			}
		}
		ev, err := decodeWith(t, fd, binary, s, token)
		checkDecodeResult(t, ev, err)

		path := fd.path
		if header && fd.attr != "(key)" {
			path = "ce_" + fd.attr
		}
		switch {
		case !text:
			if !errors.Is(err, topics.ErrInvalidUTF8) {
				t.Fatalf("%s = %q (mode %d, binary %v): not UTF-8, and %v", path, s, mode, binary, err)
			}
			var de *topics.DecodeError
			errors.As(err, &de)
			if len(de.Problems) != 1 || de.Problems[0].Field != path || !strings.HasPrefix(de.Problems[0].Problem, topics.CodeInvalidUTF8+": ") {
				t.Fatalf("%s = %q: problems %+v, want one of %s", path, s, de.Problems, path)
			}
		case errors.Is(err, topics.ErrInvalidUTF8):
			t.Fatalf("%s = %q (mode %d, binary %v): valid UTF-8 refused as not: %v", path, s, mode, binary, err)
		case legal(fd, header, want):
			if err != nil {
				t.Fatalf("%s = %q (mode %d, binary %v): refused: %v", path, s, mode, binary, err)
			}
			if got := fd.get(ev); fd.limit > 0 && !(len(want) == 0 && fd.optional && header) && got != string(want) {
				t.Fatalf("%s = %q decodes to %q", path, want, got)
			}
		default:
			if err == nil {
				t.Fatalf("%s = %q (mode %d, binary %v): accepted, but it breaks the field's rules", path, want, mode, binary)
			}
		}
	})
}

// legal reports whether the contract takes v, valid UTF-8, in fd.
func legal(fd textField, header bool, v []byte) bool {
	if len(v) == 0 {
		return !fd.id || fd.optional && header
	}
	if fd.limit > 0 && utf8.RuneCount(v) > fd.limit {
		return false
	}
	if fd.id {
		for _, r := range string(v) {
			if r < 0x20 || r >= 0x7f && r <= 0x9f { // the schemas' control characters
				return false
			}
		}
	}
	return true
}

// decodeWith decodes the event with s (raw, in a header or the key) or
// token (a JSON string) in fd.
func decodeWith(t *testing.T, fd textField, binary bool, s, token []byte) (*topics.Event, error) {
	t.Helper()
	typ, data := topics.TypeNodeCreated, `{"role":"worker"}`
	if fd.typ != "" {
		typ, data = fd.typ, fd.data
	}
	if binary {
		data = strings.Replace(data, `"`+placeholder+`"`, string(token), 1)
		hs := hset("ce_type", string(typ))(binaryHeaders())
		key := []byte(testRun)
		switch fd.attr {
		case "":
		case "(key)":
			hs, key = hdel("ce_runid")(hs), s
		case "runid":
			hs, key = hset("ce_runid", string(s))(hs), nil
		default:
			hs = hset("ce_"+fd.attr, string(s))(hs)
		}
		return topics.DecodeRecord(key, []byte(data), hs)
	}
	edits := []edit{set("type", string(typ)), set("data", json.RawMessage(data))}
	if fd.attr != "" {
		edits = append(edits, set(fd.attr, placeholder))
	}
	doc := bytes.Replace(structured(t, edits...), []byte(`"`+placeholder+`"`), token, 1)
	return topics.DecodeRecord(nil, doc, nil)
}

// jsonString is s as a JSON string token written in mode.
func jsonString(s []byte, mode uint8) []byte {
	if mode == asVerbatim {
		return append(append([]byte{'"'}, s...), '"')
	}
	b := []byte{'"'}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
			i++
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			i++
		case c < utf8.RuneSelf || mode == asBytes:
			b = append(b, c)
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, c) // not UTF-8: as it is
			} else if r > 0xFFFF {
				r -= 0x10000
				b = append(b, escape(0xD800+r>>10)...)
				b = append(b, escape(0xDC00+r&0x3FF)...)
			} else {
				b = append(b, escape(r)...)
			}
			i += n
		}
	}
	return append(b, '"')
}

func escape(u rune) []byte {
	h := strconv.FormatInt(int64(u), 16)
	return []byte(`\u` + strings.Repeat("0", 4-len(h)) + h)
}

// unescapeJSON decodes body as the content of a JSON string token (RFC
// 8259 §7): ok is false when it is not one; text is false when a byte is
// not UTF-8 or an escaped surrogate is not half of an escaped pair.
func unescapeJSON(body []byte) (out []byte, text, ok bool) {
	text = utf8.Valid(body)
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '"' || c < 0x20:
			return nil, false, false
		case c != '\\':
			out = append(out, c)
			continue
		}
		if i+1 >= len(body) {
			return nil, false, false
		}
		i++
		switch body[i] {
		case '"', '\\', '/':
			out = append(out, body[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			u, ok := hexUnit(body, i+1)
			if !ok {
				return nil, false, false
			}
			i += 4
			if u >= 0xD800 && u <= 0xDBFF && i+2 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
				if lo, ok := hexUnit(body, i+3); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					out = utf8.AppendRune(out, 0x10000+(u-0xD800)<<10+(lo-0xDC00))
					i += 6
					continue
				}
			}
			if u >= 0xD800 && u <= 0xDFFF {
				text = false
				continue
			}
			out = utf8.AppendRune(out, u)
		default:
			return nil, false, false
		}
	}
	return out, text, true
}

func hexUnit(b []byte, i int) (rune, bool) {
	if len(b)-i < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(n), err == nil
}
