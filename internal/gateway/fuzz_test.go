package gateway

import (
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// FuzzDecodeInput feeds arbitrary bodies and run ids through what the input
// endpoint does before producing: decode, build the event, check it against
// the contract. Nothing may panic, and whatever passes must be a record the
// projector decodes back to the same input.
func FuzzDecodeInput(f *testing.F) {
	f.Add([]byte(`{"input_kind":"message","text":"hello"}`), "run-1")
	f.Add([]byte(`{"input_kind":"approve","session_id":"s1","thread_id":"t","correlation_id":"c","causation_id":"x","input_id":"i","content_ref":"r"}`), "run-2")
	f.Add([]byte(`{"input_kind":"steer","text":"\u0000\ud800"}`), "r")
	f.Add([]byte(`{"input_kind":"cancel"} {}`), "run")
	f.Add([]byte(`{"input_kind":null,"text":1}`), "\xff")
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte, run string) {
		in, err := DecodeInput(body)
		if err != nil {
			if in != nil {
				t.Fatal("an error with an input")
			}
			return
		}
		if idProblem(run) != "" {
			return // the handler refuses the run id before decoding
		}
		ev := in.event("/gateway", run, "fuzz", now)
		ev.ID = idempotentEventID("fuzz", run, "k")
		rec, err := topics.EventRecord("t", ev, "")
		if err != nil {
			_ = contractDetail(err)
			return
		}
		back, err := topics.DecodeRecord(rec.Key, rec.Value, rec.Headers)
		if err != nil {
			t.Fatalf("a record that passed EventRecord does not decode: %v", err)
		}
		got, ok := back.Data.(*topics.Input)
		if !ok || back.RunID != run || back.ID != ev.ID || got.Text != in.Text || got.InputKind != in.InputKind || back.SessionID != in.SessionID {
			t.Fatalf("round trip: %+v %+v, want %+v", back, back.Data, in)
		}
	})
}
