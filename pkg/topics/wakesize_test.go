package topics_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestWakeSizeBoundsHoldAtTheDecodersLimits: a human input trigger made
// from an event the decoder accepts with every id and the text at their
// longest, of characters of every width and escape, encodes within
// MaxTriggerJSONBytes, and a wake envelope with such a run id and the
// widest part within MaxWakeEnvelopeJSONBytes. The longest accepted string
// is found by asking the decoder, so the test holds whether it counts bytes
// or characters.
func TestWakeSizeBoundsHoldAtTheDecodersLimits(t *testing.T) {
	inputKind := ""
	for _, k := range topics.InputKinds {
		if len(k) > len(inputKind) {
			inputKind = k
		}
	}
	// event is a signal.input event with every id id and the text text.
	event := func(id, text string) []byte {
		b, err := json.Marshal(map[string]any{
			"specversion": "1.0", "id": id, "source": "/gateway", "type": "signal.input", "time": testTime,
			"runid": id, "agentid": id, "correlationid": id, "schemaversion": 1,
			"data": map[string]any{"input_kind": inputKind, "text": text, "content_ref": id},
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	accepted := func(id, text string) bool {
		_, err := topics.DecodeEvent(event(id, text))
		return err == nil
	}
	// longest is the most repetitions of c the decoder accepts in a field
	// limited to limit (characters or bytes), and whether it accepts c at
	// all.
	longest := func(c string, limit int, ok func(string) bool) (int, bool) {
		for _, n := range []int{limit, limit / len(c)} {
			if n > 0 && ok(strings.Repeat(c, n)) {
				if ok(strings.Repeat(c, n+1)) {
					t.Fatalf("%q: %d accepted, and %d too: the limit is not where MaxIDLength or MaxInputTextLength say", c, n, n+1)
				}
				return n, true
			}
		}
		return 0, false
	}
	widths := []string{"a", `"`, `\`, "é", "漢", "🙂", "\u2028", "\x00", "\x1f"}
	checked := 0
	for _, idChar := range widths {
		nID, ok := longest(idChar, topics.MaxIDLength, func(s string) bool { return accepted(s, "") })
		if !ok {
			continue // not a character an id may hold (a control character)
		}
		id := strings.Repeat(idChar, nID)
		for _, textChar := range widths {
			nText, ok := longest(textChar, topics.MaxInputTextLength, func(s string) bool { return accepted(id, s) })
			if !ok {
				continue
			}
			ev, err := topics.DecodeEvent(event(id, strings.Repeat(textChar, nText)))
			if err != nil {
				t.Fatal(err)
			}
			in := ev.Data.(*topics.Input)
			trig := topics.Trigger{Kind: topics.TriggerHumanInput, EventID: &ev.ID, AgentID: ev.AgentID, CorrelationID: &ev.CorrelationID,
				At: ev.Time, Detail: &in.InputKind, Input: &topics.TriggerInput{InputKind: in.InputKind, Text: in.Text, ContentRef: in.ContentRef}}
			enc, err := trig.AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(enc) > topics.MaxTriggerJSONBytes() {
				t.Errorf("ids of %d %q and a text of %d %q: the trigger takes %d bytes, over MaxTriggerJSONBytes (%d)",
					nID, idChar, nText, textChar, len(enc), topics.MaxTriggerJSONBytes())
			}
			w := topics.Wake{WakeID: "01KHDSFKPW9PAS3N1TPD1AE3EA", SchemaVersion: topics.WakeSchemaVersion, RunID: ev.RunID,
				Lane: topics.LanePriority, Part: &topics.WakePart{Number: math.MaxInt, Count: math.MaxInt}, Triggers: []topics.Trigger{}}
			env, err := topics.AppendWakeJSON(nil, &w, []byte{})
			if err != nil {
				t.Fatal(err)
			}
			if len(env) > topics.MaxWakeEnvelopeJSONBytes() {
				t.Errorf("a run id of %d %q: the envelope takes %d bytes, over MaxWakeEnvelopeJSONBytes (%d)",
					nID, idChar, len(env), topics.MaxWakeEnvelopeJSONBytes())
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d combinations of characters were accepted: the test no longer tries what it should", checked)
	}
}

// TestWakeSizeBounds pins what the bounds count: a character escaped at
// its widest (6 bytes) for each of MaxIDLength characters of five ids and
// MaxInputTextLength of the text, and of the run id, and no more than the
// fixed keys, quotes and numbers besides.
func TestWakeSizeBounds(t *testing.T) {
	trig, env := topics.MaxTriggerJSONBytes(), topics.MaxWakeEnvelopeJSONBytes()
	if all := 6 * (5*topics.MaxIDLength + topics.MaxInputTextLength); trig < all || trig > all+300 {
		t.Errorf("MaxTriggerJSONBytes = %d, want its strings' %d and at most 300 bytes of keys besides", trig, all)
	}
	if runID := 6 * topics.MaxIDLength; env < runID+2*19 || env > runID+200 {
		t.Errorf("MaxWakeEnvelopeJSONBytes = %d, want the run id's %d, two 19-digit numbers and at most 200 bytes besides", env, runID)
	}
}
