package gateway

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/problem"
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

// FuzzRequest sends arbitrary requests through the whole handler, against
// a real broker: whatever comes in, the gateway answers (no panic), every
// error is a problem+json, and no 5xx but a 503 (Kafka or projectors
// unavailable, which here means no projector runs) is possible.
func FuzzRequest(f *testing.F) {
	f.Add("POST", "/v1/runs/run-1/input", tokAll, "application/json", "", []byte(`{"input_kind":"message","text":"hi"}`))
	f.Add("POST", "/v1/runs/run-1/input", tokRun1, "application/json; charset=utf-8", "k1", []byte(`{"input_kind":"steer","session_id":"s"}`))
	f.Add("POST", "/v1/runs/run%2F1/input", tokSession, "application/json", "", []byte(`{"input_kind":"approve"}`))
	f.Add("GET", "/v1/runs/run-1/history?limit=5&cursor=x", tokAll, "", "", []byte(nil))
	f.Add("GET", "/v1/runs/run-1/wakes", tokAll, "", "", []byte(nil))
	f.Add("GET", "/v1/runs//snapshot", "", "", "", []byte(nil))
	f.Add("PATCH", "/v1/runs/r/read-model", "Bearer x.y.z", "", "", []byte("{"))
	e := newEnv(f, 2)
	cfg := e.config()
	cfg.RatePerSecond, cfg.RateBurst = 1e9, 1<<30
	cfg.PreAuthRatePerSecond, cfg.PreAuthBurst = 1e9, 1<<30
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	g, err := New(ctx, cfg)
	cancel()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(g.Close) // before newEnv's cleanup closes the broker
	f.Fuzz(func(t *testing.T, method, target, token, ctype, key string, body []byte) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if strings.Contains(target, "wakes") {
			// A stream that opens lasts until its context ends; one that
			// has ended already still goes through every check before.
			cancel()
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://gw"+target, bytes.NewReader(body))
		if err != nil {
			return // net/http's server would not get this far either
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", ctype)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, req)
		res := w.Result()
		if res.StatusCode >= 500 && res.StatusCode != 503 {
			t.Fatalf("%s %s: %d %s", method, target, res.StatusCode, w.Body.Bytes())
		}
		ct := res.Header.Get("Content-Type")
		if res.StatusCode >= 400 && ct != problem.ContentType {
			t.Fatalf("%s %s: %d as %q, want a problem", method, target, res.StatusCode, ct)
		}
		if res.StatusCode/100 == 3 {
			t.Fatalf("%s %s: redirect %d to %q; the API answers, it does not redirect", method, target, res.StatusCode, res.Header.Get("Location"))
		}
		// No answer names the broker's address (it belongs in the logs).
		for _, addr := range e.brokers {
			if bytes.Contains(w.Body.Bytes(), []byte(addr)) {
				t.Fatalf("%s %s: the answer names the broker %s: %s", method, target, addr, w.Body.Bytes())
			}
		}
	})
}
