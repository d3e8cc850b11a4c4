package schema_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestSchemasAgreeWithDecoder runs the JSON Schema of events and the Go
// decoder (topics.DecodeEvent) over one corpus and fails on any input one
// accepts and the other refuses (a producer validating against the schema
// must not be refused by the projector, nor the reverse). The corpus is
// generated rather than picked: every example event (schema/examples),
// every event of the example logs (examples/*.jsonl) and the decoder's fuzz
// corpus (pkg/topics/testdata/fuzz), and each example mutated, attribute by
// attribute and payload field by payload field, to each of a set of values
// a producer gets wrong (absent, empty, null, other types, out of range, a
// control character, too long, ...), and every string field with a
// maxLength set to text of each kind (2-, 3- and 4-byte UTF-8, combining
// sequences, emoji with modifiers and ZWJ, CJK, ...) at limit-1, limit and
// limit+1 code points: both count code points.
//
// Text that is not UTF-8 is not JSON, and the schemas cannot judge it (a
// validator's JSON decoder reads U+FFFD): such inputs, the fuzz corpus's
// and a variant of every string of every example, are checked against the
// contract instead (docs/CONTRACT.md "Text"): the decoder refuses each as
// topics.ErrInvalidUTF8, naming the field.
func TestSchemasAgreeWithDecoder(t *testing.T) {
	s := newSchemas(t)
	corpus, fieldOf := eventCorpus(t)

	var disagree []string
	accepted, notText := 0, 0
	for _, in := range corpus {
		_, derr := topics.DecodeEvent(in.doc)
		if !isText(in.doc) {
			// Invalid UTF-8 is not JSON (RFC 8259 §8.1; an escaped lone
			// surrogate is not a character, §8.2): a schema validator
			// reads it through its JSON decoder, which makes U+FFFD of
			// it, so the schemas cannot say. The decoder must refuse it,
			// as text that is not UTF-8 when it is a JSON object otherwise.
			notText++
			object := json.Valid(in.doc) && bytes.HasPrefix(bytes.TrimSpace(in.doc), []byte("{"))
			if derr == nil || object && !errors.Is(derr, topics.ErrInvalidUTF8) {
				disagree = append(disagree, fmt.Sprintf("%s: not UTF-8, and the decoder %v\n    %q", in.name, verdict(derr), clipDoc(in.doc)))
			} else if field, ok := fieldOf[in.name]; ok && !namesField(derr, field) {
				disagree = append(disagree, fmt.Sprintf("%s: the decoder does not name the field %s alone: %v", in.name, field, derr))
			}
			continue
		}
		verr := s.validate(eventSchema, in.doc)
		if se := (*schemaError)(nil); errors.As(verr, &se) {
			t.Fatal(verr)
		}
		if (derr == nil) != (verr == nil) && !knownException(in.name, derr == nil, verr == nil) {
			disagree = append(disagree, fmt.Sprintf("%s: decoder %v, schema %v\n    %s", in.name, verdict(derr), verdict(verr), clipDoc(in.doc)))
		}
		if derr == nil {
			accepted++
		}
	}
	t.Logf("%d inputs, %d accepted by both, %d not UTF-8 and refused as such", len(corpus), accepted, notText)
	if len(corpus) < 1000 || accepted < 100 || notText < 500 {
		t.Fatalf("the corpus is too small to mean anything (%d inputs, %d accepted)", len(corpus), accepted)
	}
	if len(disagree) > 0 {
		t.Fatalf("the schema and the decoder disagree on %d of %d inputs:\n%s", len(disagree), len(corpus), strings.Join(disagree, "\n"))
	}
}

// input is one document of the differential corpus.
type input struct {
	name string
	doc  []byte
}

// eventCorpus is TestSchemasAgreeWithDecoder's corpus (described there),
// and the field each input that is not UTF-8 spoils, by input name.
func eventCorpus(t *testing.T) ([]input, map[string]string) {
	t.Helper()
	var corpus []input
	add := func(name string, doc []byte) { corpus = append(corpus, input{name, doc}) }

	// The examples, and their mutations.
	for _, et := range topics.EventTypes() {
		base := loadExample(t, et)
		enc, _ := json.Marshal(base)
		add(string(et), enc)
		// The optional attributes an example leaves out are mutated too.
		keys := sortedKeys(base)
		for _, k := range []string{"dataschema", "subject", "datacontenttype", "sessionid", "threadid", "correlationid", "causationid"} {
			if _, ok := base[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, key := range keys {
			for _, m := range mutations {
				doc := clone(t, base)
				if m.value == absent {
					delete(doc, key)
				} else {
					doc[key] = m.value
				}
				enc, _ := json.Marshal(doc)
				add(fmt.Sprintf("%s: %s %s", et, key, m.name), enc)
			}
		}
		data, ok := base["data"].(map[string]any)
		if !ok {
			continue
		}
		for _, key := range sortedKeys(data) {
			for _, m := range mutations {
				doc := clone(t, base)
				d := doc["data"].(map[string]any)
				if m.value == absent {
					delete(d, key)
				} else {
					d[key] = m.value
				}
				enc, _ := json.Marshal(doc)
				add(fmt.Sprintf("%s: data.%s %s", et, key, m.name), enc)
			}
		}
	}
	// Non-ASCII strings, of each width and kind, around the limit of every
	// string field that has one: limit-1, limit and limit+1 code points,
	// the unit of maxLength and of the decoder.
	envelope := readJSON(t, filepath.Join(schemaDir(t), envelopeSchema))
	nonASCII := 0
	for _, et := range topics.EventTypes() {
		base := loadExample(t, et)
		typ := readJSON(t, filepath.Join(schemaDir(t), typeSchema(et)))
		dataProps, _ := typ["properties"].(map[string]any)["data"].(map[string]any)["properties"].(map[string]any)
		for _, f := range append(limitedFields(envelope["properties"].(map[string]any), envelope, ""), limitedFields(dataProps, envelope, "data.")...) {
			for _, v := range limitStrings(f.limit) {
				doc := clone(t, base)
				var val any = v.value
				if f.list {
					val = []any{"a", v.value}
				}
				if name, ok := strings.CutPrefix(f.name, "data."); ok {
					d, _ := doc["data"].(map[string]any)
					if d == nil {
						d = map[string]any{}
						doc["data"] = d
					}
					d[name] = val
				} else {
					doc[f.name] = val
				}
				enc, _ := json.Marshal(doc)
				add(fmt.Sprintf("%s: %s %s", et, f.name, v.name), enc)
				nonASCII++
			}
		}
	}
	if nonASCII < 5000 {
		t.Fatalf("only %d non-ASCII inputs: the schemas' limits were not found", nonASCII)
	}
	// The example logs.
	logs, _ := filepath.Glob(filepath.Join(repoRoot(t), "examples", "*.jsonl"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			add(fmt.Sprintf("%s:%d", filepath.Base(path), n), slices.Clone(sc.Bytes()))
		}
		f.Close()
	}
	// The decoder's fuzz corpus: every []byte argument of every entry.
	entries, _ := filepath.Glob(filepath.Join(repoRoot(t), "pkg", "topics", "testdata", "fuzz", "FuzzDecode*", "*"))
	for _, path := range entries {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if q, ok := strings.CutPrefix(line, "[]byte("); ok {
				if v, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
					add(fmt.Sprintf("fuzz %s/%s:%d", filepath.Base(filepath.Dir(path)), filepath.Base(path), i+1), []byte(v))
				}
			}
		}
	}

	// Text that is not UTF-8, in every string of every example: its own
	// corpus, since the schemas cannot judge it (below).
	fieldOf := map[string]string{}
	for _, et := range topics.EventTypes() {
		for _, in := range invalidTextVariants(t, et, loadExample(t, et)) {
			add(in.name, in.doc)
			fieldOf[in.name] = in.field
		}
	}

	return corpus, fieldOf
}

// absent marks a mutation that deletes the member.
var absent = new(struct{})

// mutations are the values a member is set to, in turn.
var mutations = []struct {
	name  string
	value any
}{
	{"absent", absent},
	{"empty", ""},
	{"null", nil},
	{"zero", 0},
	{"one", 1},
	{"minus one", -1},
	{"a fraction", 1.5},
	{`"1"`, "1"},
	{`"1.0"`, "1.0"},
	{"true", true},
	{"an empty array", []any{}},
	{"an array of one string", []any{"x"}},
	{"an empty object", map[string]any{}},
	{"a plain string", "worker-7"},
	{"a control character", "a\x01b"},
	{"a line separator", "a\u2028b"},
	{"257 bytes", strings.Repeat("a", 257)},
	{"256 bytes", strings.Repeat("a", 256)},
	{"a time", "2026-02-14T10:00:01Z"},
	{"a time with an offset", "2026-02-14T11:00:01+01:00"},
	{"a fractional time", "2026-02-14T10:00:01.123456789Z"},
	{"the zero instant", "0001-01-01T00:00:00.000Z"},
	{"a time in year 0 in UTC", "0001-01-01T00:30:00+01:00"},
	{"a time in year 10000 in UTC", "9999-12-31T23:30:00-01:00"},
	{"a time on the first day with a positive offset", "0001-01-01T12:00:00+01:00"},
	{"a time on the last day with a negative offset", "9999-12-31T12:00:00-01:00"},
	{"a time on the first day with a negative offset", "0001-01-01T00:00:00-00:01"},
	{"a huge number", 1e300},
	{"one written 1.0", json.Number("1.0")},
	{"one written 1e0", json.Number("1e0")},
	{"a relative path", "/agents/worker-7"},
	{"an absolute URI", "https://canopy.dev/schemas/x"},
	{"a space", "a b"},
}

// knownException reports whether a disagreement is one docs/CONTRACT.md
// states: an integer written with a fraction or an exponent (1.0, 1e0),
// which JSON Schema's integer takes and the decoder refuses.
func knownException(name string, decoderOK, schemaOK bool) bool {
	return strings.Contains(name, " one written ") && !decoderOK && schemaOK
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func clone(t *testing.T, m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func verdict(err error) string {
	if err == nil {
		return "accepts"
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return "refuses (" + msg + ")"
}

func clipDoc(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// badText are ways a string is not UTF-8, as JSON string tokens: raw
// bytes and escapes, each an input encoding/json reads as U+FFFD.
var badText = []struct{ name, token string }{
	{"bytes FF FE", "\"w1\xff\xfe\""},
	{"an overlong", "\"w1\xc0\xaf\""},
	{"a truncated sequence", "\"\xe2\x82\""},
	{"a surrogate in UTF-8", "\"a\xed\xa0\x80\""},
	{"above U+10FFFF", "\"\xf4\x90\x80\x80\""},
	{"a lone escaped surrogate", `"w1\ud800"`},
	{"escaped surrogates reversed", `"\udc00\ud800"`},
}

// invalidTextVariants are base with each string (attribute, payload field,
// list entry), in turn, replaced by each of badText, and with one in a
// member's name and in an extension attribute; each named by the field the
// decoder must name.
func invalidTextVariants(t *testing.T, et topics.EventType, base map[string]any) []textVariant {
	const ph = "\x01PLACEHOLDER\x01"
	var out []textVariant
	add := func(field string, doc map[string]any) {
		enc, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		quoted, _ := json.Marshal(ph)
		for _, b := range badText {
			out = append(out, textVariant{fmt.Sprintf("%s: %s %s", et, field, b.name), bytes.Replace(enc, quoted, []byte(b.token), 1), field})
		}
	}
	for _, key := range sortedKeys(base) {
		if _, ok := base[key].(string); ok {
			doc := clone(t, base)
			doc[key] = ph
			add(key, doc)
		}
	}
	doc := clone(t, base)
	doc["traceparent"] = ph
	add("traceparent", doc)
	doc = clone(t, base)
	doc["ex"] = map[string]any{ph: 1}
	add("ex.", doc) // the name itself, shown with U+FFFD
	data, _ := base["data"].(map[string]any)
	for _, key := range sortedKeys(data) {
		doc := clone(t, base)
		d := doc["data"].(map[string]any)
		switch v := d[key].(type) {
		case string:
			d[key] = ph
			add("data."+key, doc)
		case []any:
			d[key] = append(v, ph)
			add(fmt.Sprintf("data.%s[%d]", key, len(v)), doc)
		}
	}
	return out
}

// textVariant is an event with one string that is not UTF-8, in field.
type textVariant struct {
	name  string
	doc   []byte
	field string
}

// namesField reports whether err's only problem is of field (a prefix of
// it when field ends in "."), coded invalid_utf8.
func namesField(err error, field string) bool {
	var de *topics.DecodeError
	if !errors.As(err, &de) || len(de.Problems) != 1 || !strings.HasPrefix(de.Problems[0].Problem, topics.CodeInvalidUTF8+": ") {
		return false
	}
	f := de.Problems[0].Field
	return f == field || strings.HasSuffix(field, ".") && strings.HasPrefix(f, field)
}

// isText reports whether every string of doc is text: doc is valid UTF-8,
// and every escaped surrogate is half of an escaped pair. It does not
// check that doc is JSON.
func isText(doc []byte) bool {
	if !utf8.Valid(doc) {
		return false
	}
	inString := false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(doc):
			if doc[i+1] != 'u' {
				i++ // the escaped character, a quote perhaps
				continue
			}
			u, ok := escapedUnit(doc, i)
			switch {
			case !ok:
				return true // not JSON: the decoder says so
			case u >= 0xDC00 && u <= 0xDFFF:
				return false // a low half first
			case u >= 0xD800 && u <= 0xDBFF:
				lo, ok := escapedUnit(doc, i+6)
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return false
				}
				i += 11
			default:
				i += 5
			}
		}
	}
	return true
}

// escapedUnit is the code unit of the \uXXXX escape at doc[i:].
func escapedUnit(doc []byte, i int) (rune, bool) {
	if len(doc)-i < 6 || doc[i] != '\\' || doc[i+1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(doc[i+2:i+6]), 16, 16)
	return rune(n), err == nil
}

// limitedField is a string field of a schema with a maximum length, or a
// list of such strings.
type limitedField struct {
	name  string
	limit int
	list  bool
}

// limitedFields are the properties of props (under prefix) whose strings
// have a maxLength, $ref to the envelope's definitions resolved.
func limitedFields(props, envelope map[string]any, prefix string) []limitedField {
	var out []limitedField
	for _, name := range sortedKeys(props) {
		if limit, list, ok := maxLength(props[name], envelope); ok {
			out = append(out, limitedField{prefix + name, limit, list})
		}
	}
	return out
}

// maxLength finds the maxLength of the strings schema s describes: of s,
// of what it refers to, of an alternative, or of its items (list).
func maxLength(s any, envelope map[string]any) (limit int, list, ok bool) {
	m, _ := s.(map[string]any)
	if n, ok := m["maxLength"].(float64); ok {
		return int(n), false, true
	}
	if ref, ok := m["$ref"].(string); ok {
		_, def, _ := strings.Cut(ref, "#/$defs/")
		return maxLength(envelope["$defs"].(map[string]any)[def], envelope)
	}
	for _, alt := range asSlice(m["anyOf"]) {
		if limit, list, ok := maxLength(alt, envelope); ok {
			return limit, list, true
		}
	}
	if items, ok := m["items"]; ok {
		limit, _, ok := maxLength(items, envelope)
		return limit, true, ok
	}
	return 0, false, false
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// repertoire are the kinds of text a producer sends, from ASCII to
// emoji sequences: each is repeated, code point by code point, to a length.
var repertoire = []struct{ name, unit string }{
	{"ASCII", "a"},
	{"2-byte UTF-8", "é"},
	{"3-byte UTF-8 (CJK)", "工作者"},
	{"4-byte UTF-8 (emoji)", "😀"},
	{"a letter and a combining accent", "e\u0301"},
	{"emoji with a skin tone, ZWJ", "👩🏽\u200d💻"},
	{"a flag", "🇳🇴"},
	{"a Devanagari conjunct", "क्ष"},
	{"Hangul jamo", "\u1100\u1161\u11a8"},
	{"a mix", "aé工😀"},
}

// limitStrings are strings of each kind of the repertoire at limit-1,
// limit and limit+1 code points (a long limit, only some kinds: they are
// large).
func limitStrings(limit int) []struct {
	name  string
	value string
} {
	var out []struct {
		name  string
		value string
	}
	for i, r := range repertoire {
		if limit > 1000 && i%3 != 0 {
			continue
		}
		for _, n := range []int{limit - 1, limit, limit + 1} {
			out = append(out, struct {
				name  string
				value string
			}{fmt.Sprintf("%d code points of %s", n, r.name), ofLength(r.unit, n)})
		}
	}
	return out
}

// ofLength is unit repeated, code point by code point, to n code points.
func ofLength(unit string, n int) string {
	cps := []rune(unit)
	var b strings.Builder
	for i := range n {
		b.WriteRune(cps[i%len(cps)])
	}
	return b.String()
}
