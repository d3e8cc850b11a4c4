package topics_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// withRaw returns a structured-mode event whose JSON has each placeholder
// string (quotes included) replaced by raw bytes: json.Marshal would turn
// invalid UTF-8 into U+FFFD, and these tests need it as sent.
func withRaw(t *testing.T, doc []byte, oldnew ...string) []byte {
	t.Helper()
	for i := 0; i < len(oldnew); i += 2 {
		if !bytes.Contains(doc, []byte(oldnew[i])) {
			t.Fatalf("no %s in %s", oldnew[i], doc)
		}
		doc = bytes.Replace(doc, []byte(oldnew[i]), []byte(oldnew[i+1]), 1)
	}
	return doc
}

// checkTextErr asserts err is an ErrInvalidUTF8 (and so an ErrInvalidEvent,
// and no other sentinel) whose message carries every msg.
func checkTextErr(t *testing.T, ev *topics.Event, err error, msgs ...string) *topics.DecodeError {
	t.Helper()
	de := checkDecodeErr(t, err, topics.ErrInvalidEvent, msgs...)
	if !errors.Is(err, topics.ErrInvalidUTF8) {
		t.Errorf("errors.Is(err, ErrInvalidUTF8) = false: %v", err)
	}
	if ev != nil {
		t.Errorf("an event with invalid text: %+v", ev)
	}
	for _, p := range de.Problems {
		if !strings.HasPrefix(p.Problem, topics.CodeInvalidUTF8+": ") {
			t.Errorf("problem %q beside the problems of text", p)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "invalid_utf8") || strings.ToValidUTF8(msg, "?") != msg {
		t.Errorf("message %q: want valid UTF-8 naming invalid_utf8", msg)
	}
	return de
}

// TestDecodeRefusesInvalidUTF8: a byte that is not UTF-8, an overlong
// encoding, a surrogate encoded in UTF-8, or an escaped surrogate that is
// not half of a pair, anywhere in a structured-mode value, is refused with
// invalid_utf8 naming the field, where encoding/json would have read
// U+FFFD and applied the event.
func TestDecodeRefusesInvalidUTF8(t *testing.T) {
	const ph = `"PLACEHOLDER"`
	cases := []struct {
		name  string
		edits []edit
		raw   []string // placeholder, bytes
		msgs  []string
	}{
		{"bytes FF FE in agentid", []edit{set("agentid", "PLACEHOLDER")}, []string{ph, "\"w1\xff\xfe\""},
			[]string{"agentid: invalid_utf8: byte 0xff at offset 2 is not UTF-8"}},
		{"overlong C0 AF in agentid", []edit{set("agentid", "PLACEHOLDER")}, []string{ph, "\"w1\xc0\xaf\""},
			[]string{"agentid: invalid_utf8: byte 0xc0 at offset 2"}},
		{"truncated sequence in runid", []edit{set("runid", "PLACEHOLDER")}, []string{ph, "\"run-u\xff\""},
			[]string{"runid: invalid_utf8: byte 0xff at offset 5"}},
		{"surrogate encoded in UTF-8", []edit{set("id", "PLACEHOLDER")}, []string{ph, "\"01J\xed\xa0\x80\""},
			[]string{"id: invalid_utf8: byte 0xed at offset 3"}},
		{"code point above U+10FFFF", []edit{set("source", "PLACEHOLDER")}, []string{ph, "\"/a\xf4\x90\x80\x80\""},
			[]string{"source: invalid_utf8: byte 0xf4 at offset 2"}},
		{"escaped lone high surrogate", []edit{set("agentid", "PLACEHOLDER")}, []string{ph, `"w1\ud800"`},
			[]string{`agentid: invalid_utf8: \ud800 at offset 2 is an unpaired surrogate`}},
		{"escaped lone low surrogate", []edit{set("agentid", "PLACEHOLDER")}, []string{ph, `"w1\uDC00"`},
			[]string{`agentid: invalid_utf8: \uDC00 at offset 2`}},
		{"escaped high surrogate before a letter", []edit{set("sessionid", "PLACEHOLDER")}, []string{ph, `"s\ud83d\u0041"`},
			[]string{`sessionid: invalid_utf8: \ud83d at offset 1`}},
		{"escaped surrogates in the wrong order", []edit{set("threadid", "PLACEHOLDER")}, []string{ph, `"\ude00\ud83d"`},
			[]string{`threadid: invalid_utf8: \ude00 at offset 0`}},
		{"in a payload field", []edit{set("data", raw(`{"role":"worker","task_id":"PLACEHOLDER"}`))}, []string{ph, "\"t\xff\""},
			[]string{"data.task_id: invalid_utf8: byte 0xff at offset 1"}},
		{"in a payload field read by encoding/json", []edit{data(topics.TypeInput, `{"input_kind":"message","text":"PLACEHOLDER"}`)},
			[]string{ph, "\"caf\\u00e9 \xe9\""}, []string{"data.text: invalid_utf8: byte 0xe9 at offset 10"}},
		{"in a list", []edit{data(topics.TypeNodeResult, `{"artifact_ids":["a","PLACEHOLDER"]}`)}, []string{ph, `"b\udfff"`},
			[]string{`data.artifact_ids[1]: invalid_utf8: \udfff at offset 1`}},
		{"in an extension attribute the decoder ignores", []edit{set("traceparent", "PLACEHOLDER")}, []string{ph, "\"00-\xff\""},
			[]string{"traceparent: invalid_utf8: byte 0xff at offset 3"}},
		{"deep in an extension attribute", []edit{set("dataref", raw(`{"a":[1,{"b":"PLACEHOLDER"}]}`))}, []string{ph, "\"\xc3\""},
			[]string{"dataref.a[1].b: invalid_utf8: byte 0xc3 at offset 0"}},
		{"in an attribute's name", []edit{set("PLACEHOLDER", "x")}, []string{ph, "\"ag\xffentid\""},
			[]string{"ag\uFFFDentid: invalid_utf8: in the member's name: byte 0xff at offset 2"}},
		{"in a payload member's name", []edit{set("data", raw(`{"role":"worker","PLACEHOLDER":1}`))}, []string{ph, `"x\ud800"`},
			[]string{"data.x\uFFFD: invalid_utf8: in the member's name: \\ud800 at offset 1"}},
		{"everywhere at once", []edit{set("agentid", "A_PLACEHOLDER"), data(topics.TypeInput, `{"input_kind":"message","text":"PLACEHOLDER"}`)},
			[]string{`"A_PLACEHOLDER"`, "\"w\xff\"", ph, "\"\xfe\""},
			[]string{"agentid: invalid_utf8: byte 0xff at offset 1", "data.text: invalid_utf8: byte 0xfe at offset 0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := withRaw(t, structured(t, c.edits...), c.raw...)
			ev, err := topics.DecodeEvent(doc)
			de := checkTextErr(t, ev, err, c.msgs...)
			if len(de.Problems) != len(c.msgs) {
				t.Errorf("problems %+v, want %d", de.Problems, len(c.msgs))
			}
			// The log line still names the event, when its id is text.
			wantID := testID
			if strings.HasPrefix(c.msgs[0], "id: ") {
				wantID = ""
			}
			if de.EventID != wantID {
				t.Errorf("EventID %q, want %q", de.EventID, wantID)
			}
			// The differential test's oracle says the same.
			if _, oerr := topics.DecodeEventOracle(doc); oerr == nil || oerr.Error() != err.Error() {
				t.Errorf("the oracle path says %v", oerr)
			}
			// A structured-mode record the same.
			ev, err = topics.DecodeRecord([]byte(testRun), doc, nil)
			checkTextErr(t, ev, err, c.msgs...)
		})
	}
}

// TestDecodeRecordRefusesInvalidUTF8: the same in a record's key, in a
// binary-mode event's ce_* headers (names and values, extensions
// included) and in its data.
func TestDecodeRecordRefusesInvalidUTF8(t *testing.T) {
	value := `{"role":"worker"}`
	cases := []struct {
		name  string
		key   string
		value string
		edits []hedit
		msgs  []string
	}{
		{name: "key", key: "run-1\xff", value: value, msgs: []string{"(key): invalid_utf8: byte 0xff at offset 5"}},
		{name: "key as the run id", key: "run-u\xff", value: value, edits: []hedit{hdel("ce_runid")}, msgs: []string{"(key): invalid_utf8: byte 0xff at offset 5"}},
		{name: "agentid header", key: testRun, value: value, edits: []hedit{hset("ce_agentid", "w1\xff\xfe")}, msgs: []string{"ce_agentid: invalid_utf8: byte 0xff at offset 2"}},
		{name: "overlong agentid header", key: testRun, value: value, edits: []hedit{hset("ce_agentid", "w1\xc0\xaf")}, msgs: []string{"ce_agentid: invalid_utf8: byte 0xc0 at offset 2"}},
		{name: "type header", key: testRun, value: value, edits: []hedit{hset("ce_type", "tree.node_created\xff")}, msgs: []string{"ce_type: invalid_utf8: byte 0xff at offset 17"}},
		{name: "extension header", key: testRun, value: value, edits: []hedit{hset("ce_traceparent", "00-\xed\xa0\x80")}, msgs: []string{"ce_traceparent: invalid_utf8: byte 0xed at offset 3"}},
		{name: "header name", key: testRun, value: value, edits: []hedit{hset("ce_x\xff", "1")}, msgs: []string{"ce_x\uFFFD: invalid_utf8: in the header's name: byte 0xff at offset 4"}},
		{name: "data", key: testRun, value: "{\"role\":\"worker\",\"task_id\":\"t\xff\"}", msgs: []string{"data.task_id: invalid_utf8: byte 0xff at offset 1"}},
		{name: "data escape", key: testRun, value: `{"role":"w\ud800orker"}`, msgs: []string{`data.role: invalid_utf8: \ud800 at offset 1`}},
		{name: "everywhere at once", key: "r\xff", value: "{\"role\":\"\xff\"}", edits: []hedit{hset("ce_source", "/\xff"), hset("ce_runid", "r\xff")},
			msgs: []string{"(key): invalid_utf8", "ce_source: invalid_utf8", "ce_runid: invalid_utf8", "data.role: invalid_utf8"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hs := binaryHeaders()
			for _, e := range c.edits {
				hs = e(hs)
			}
			ev, err := topics.DecodeRecord([]byte(c.key), []byte(c.value), hs)
			de := checkTextErr(t, ev, err, c.msgs...)
			if len(de.Problems) != len(c.msgs) {
				t.Errorf("problems %+v, want %d", de.Problems, len(c.msgs))
			}
		})
	}

	// A structured-mode record: the key, and the value's problems with it.
	doc := withRaw(t, structured(t, set("agentid", "PLACEHOLDER")), `"PLACEHOLDER"`, "\"w\xff\"")
	ev, err := topics.DecodeRecord([]byte("run-1\xc3"), doc, nil)
	de := checkTextErr(t, ev, err, "(key): invalid_utf8: byte 0xc3 at offset 5", "agentid: invalid_utf8: byte 0xff at offset 1")
	if len(de.Problems) != 2 || de.EventID != testID {
		t.Errorf("problems %+v, event id %q", de.Problems, de.EventID)
	}
	ev, err = topics.DecodeRecord([]byte("run-1\xc3"), structured(t), nil)
	de = checkTextErr(t, ev, err, "(key): invalid_utf8: byte 0xc3 at offset 5")
	if len(de.Problems) != 1 || de.EventID != testID || de.Type != string(topics.TypeNodeCreated) {
		t.Errorf("problems %+v, event %q %q", de.Problems, de.EventID, de.Type)
	}
}

// TestInvalidUTF8InputsNoLongerCollide: the two inputs that became the
// one node "w1\uFFFD\uFFFD" are both refused, and distinct valid texts
// stay distinct.
func TestInvalidUTF8InputsNoLongerCollide(t *testing.T) {
	for _, agent := range []string{"w1\xff\xfe", "w1\xc0\xaf"} {
		doc := withRaw(t, structured(t, set("agentid", "PLACEHOLDER")), `"PLACEHOLDER"`, `"`+agent+`"`)
		ev, err := topics.DecodeEvent(doc)
		checkTextErr(t, ev, err, "agentid: invalid_utf8")
	}
	ev, err := topics.DecodeEvent(structured(t, set("agentid", "w1\uFFFD\uFFFD")))
	if err != nil || ev.AgentID != "w1\uFFFD\uFFFD" {
		t.Fatalf("U+FFFD sent as itself: %v %+v", err, ev)
	}
}

// TestDecodeKeepsTextExactly: valid text, however written (raw UTF-8 of
// 1 to 4 bytes, escapes, escaped surrogate pairs as Python's json.dumps
// writes them, U+FFFD and noncharacters sent as themselves), decodes to
// exactly its characters.
func TestDecodeKeepsTextExactly(t *testing.T) {
	cases := []struct{ json, want string }{
		{`"wörker-ß-7"`, "wörker-ß-7"},
		{`"क्षत्रिय"`, "क्षत्रिय"},
		{`"工作者-七"`, "工作者-七"},
		{`"👩🏽‍💻"`, "👩🏽\u200d💻"},
		{`"\ud83d\ude00 and \uD83D\uDE00"`, "😀 and 😀"},
		{`"w\u00f6rker"`, "wörker"},
		{`"\\ud800 is text"`, `\ud800 is text`},
		{`"\ufffd\uffff\U"`, ""}, // not JSON: \U is no escape
		{"\"\uFFFD\uFFFE\U0010FFFF\"", "\uFFFD\uFFFE\U0010FFFF"},
	}
	for _, c := range cases {
		doc := withRaw(t, structured(t, set("agentid", "PLACEHOLDER")), `"PLACEHOLDER"`, c.json)
		ev, err := topics.DecodeEvent(doc)
		if c.want == "" {
			if err == nil || errors.Is(err, topics.ErrInvalidUTF8) {
				t.Errorf("%s: %v, want a JSON error", c.json, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		if ev.AgentID != c.want {
			t.Errorf("%s decodes to %q, want %q", c.json, ev.AgentID, c.want)
		}
	}
	// Binary mode: headers as sent.
	ev, err := topics.DecodeRecord([]byte(testRun), []byte(`{"role":"worker","task_id":"t\ud83d\ude00"}`), hset("ce_agentid", "क्ष-👩🏽‍💻")(binaryHeaders()))
	if err != nil || ev.AgentID != "क्ष-👩🏽‍💻" || ev.Data.(*topics.NodeCreated).TaskID != "t😀" {
		t.Fatalf("binary mode: %v %+v", err, ev)
	}
}

// TestValidateRefusesInvalidUTF8: an event built in Go with a string that
// is not UTF-8 (which JSON encoding would change into U+FFFD) is refused
// as ErrInvalidUTF8.
func TestValidateRefusesInvalidUTF8(t *testing.T) {
	for _, edit := range []func(*topics.Event){
		func(e *topics.Event) { e.AgentID = "w1\xff\xfe" },
		func(e *topics.Event) { e.CausationID = "\xed\xa0\x80" },
		func(e *topics.Event) { e.Data = &topics.NodeCreated{Role: "worker", Capability: "c\xc0\xaf"} },
		func(e *topics.Event) {
			e.Type, e.Data = topics.TypeInput, &topics.Input{InputKind: "message", Text: "caf\xc3"}
		},
	} {
		ev := wantEvent()
		edit(ev)
		err := ev.Validate()
		if !errors.Is(err, topics.ErrInvalidUTF8) || !errors.Is(err, topics.ErrInvalidEvent) {
			t.Errorf("Validate = %v, want ErrInvalidUTF8", err)
		}
		if _, err := topics.EventRecord("t", ev, ""); !errors.Is(err, topics.ErrInvalidUTF8) {
			t.Errorf("EventRecord = %v, want ErrInvalidUTF8", err)
		}
	}
	if err := wantEvent().Validate(); errors.Is(err, topics.ErrInvalidUTF8) {
		t.Fatal(err)
	}
	// Another invalid event is not one.
	_, err := topics.DecodeEvent(structured(t, set("agentid", "")))
	if errors.Is(err, topics.ErrInvalidUTF8) || !errors.Is(err, topics.ErrInvalidEvent) {
		t.Errorf("an empty agentid: %v", err)
	}
	if !errors.Is(topics.ErrInvalidUTF8, topics.ErrInvalidEvent) {
		t.Error("ErrInvalidUTF8 is not in the ErrInvalidEvent family")
	}
}

// TestLimitsCountCodePoints: every length limit counts Unicode code points,
// JSON Schema's maxLength unit, whatever their UTF-8 length: what the
// schemas take (65 emoji, 100 CJK characters, 16,384 é) the decoder takes,
// and one code point more it refuses, in both modes.
func TestLimitsCountCodePoints(t *testing.T) {
	rep := strings.Repeat
	ids := []struct {
		name string
		id   string
		ok   bool
	}{
		{"65 emoji (260 bytes)", rep("😀", 65), true},
		{"100 CJK characters (300 bytes)", rep("工", 100), true},
		{"256 emoji (1024 bytes)", rep("😀", 256), true},
		{"257 emoji", rep("😀", 257), false},
		{"256 ASCII", rep("a", 256), true},
		{"257 ASCII", rep("a", 257), false},
		{"128 e + combining acute (256 code points)", rep("e\u0301", 128), true},
		{"128 e + combining acute and one more", rep("e\u0301", 128) + "e", false},
		{"64 emoji with a skin tone and ZWJ (256 code points)", rep("👩🏽\u200d💻", 64), true},
		{"and one more code point", rep("👩🏽\u200d💻", 64) + "\u200d", false},
		{"255 ASCII and one 4-byte character", rep("a", 255) + "😀", true},
	}
	for _, c := range ids {
		t.Run(c.name, func(t *testing.T) {
			if n := topics.TextLength(c.id); c.ok != (n <= topics.MaxIDLength) {
				t.Fatalf("TextLength = %d", n)
			}
			check := func(how string, ev *topics.Event, err error) {
				t.Helper()
				if c.ok {
					if err != nil {
						t.Errorf("%s: %v", how, err)
					} else if ev.AgentID != c.id {
						t.Errorf("%s: agent id changed", how)
					}
					return
				}
				checkDecodeErr(t, err, topics.ErrInvalidEvent, "agentid: longer than 256 characters (Unicode code points)")
			}
			ev, err := topics.DecodeEvent(structured(t, set("agentid", c.id)))
			check("structured", ev, err)
			ev, err = topics.DecodeRecord([]byte(testRun), []byte(`{"role":"worker"}`), hset("ce_agentid", c.id)(binaryHeaders()))
			check("ce_agentid", ev, err)
			// The run id taken from the key, and the id of a payload field.
			ev, err = topics.DecodeRecord([]byte(c.id), []byte(`{"role":"worker"}`), hdel("ce_runid")(binaryHeaders()))
			if c.ok != (err == nil) || err == nil && ev.RunID != c.id {
				t.Errorf("key as the run id: %v", err)
			}
			ev, err = topics.DecodeEvent(structured(t, data(topics.TypeFailed, `{"error_code":"`+c.id+`"}`)))
			if c.ok != (err == nil) || err == nil && ev.Data.(*topics.Failed).ErrorCode != c.id {
				t.Errorf("data.error_code: %v", err)
			}
		})
	}

	text := []struct {
		name string
		text string
		ok   bool
	}{
		{"16,384 é (32 KiB)", rep("é", 16384), true},
		{"16,385 é", rep("é", 16385), false},
		{"16,384 emoji (64 KiB)", rep("😀", 16384), true},
		{"16,384 ASCII", rep("x", 16384), true},
		{"16,385 ASCII", rep("x", 16385), false},
	}
	for _, c := range text {
		t.Run(c.name, func(t *testing.T) {
			d, _ := json.Marshal(map[string]string{"input_kind": "message", "text": c.text})
			ev, err := topics.DecodeEvent(structured(t, data(topics.TypeInput, string(d))))
			if c.ok {
				if err != nil || ev.Data.(*topics.Input).Text != c.text {
					t.Fatalf("refused or changed: %v", err)
				}
				return
			}
			checkDecodeErr(t, err, topics.ErrInvalidEvent, "data.text: longer than 16384 characters (Unicode code points)")
		})
	}
}
