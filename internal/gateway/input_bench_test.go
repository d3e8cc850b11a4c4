package gateway

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkInput: one POST /v1/runs/{run_id}/input served in process
// (ServeHTTP, no network) by a gateway on kfake, one request at a time:
// accepted with the client's Idempotency-Key (remembered), accepted with
// a key the gateway makes, and refused (a body that is not JSON: a 400
// that never reaches Kafka, so the handler's own cost). The accepted rows
// include kfake's acknowledgement.
func BenchmarkInput(b *testing.B) {
	e := newEnv(b, 4)
	cfg := e.config()
	cfg.RatePerSecond, cfg.RateBurst = 1e9, 1<<30 // the limiters are not under test
	cfg.PreAuthRatePerSecond, cfg.PreAuthBurst = 1e9, 1<<30
	cfg.IdempotencyKeys = 1 << 20
	g, _ := e.gateway(cfg)
	serve := func(b *testing.B, body, key string, want int) {
		r := httptest.NewRequest(http.MethodPost, "/v1/runs/bench-run/input", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+tokAll)
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != want {
			b.Fatalf("status %d, want %d: %s", w.Code, want, w.Body)
		}
	}
	const body = `{"input_kind":"steer","text":"go left at the fork"}`
	keys := 0 // every key new: -count runs the sub-benchmarks again on this gateway
	b.Run("accepted/key=client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			keys++
			serve(b, body, "bench-key-"+strconv.Itoa(keys), http.StatusAccepted)
		}
	})
	b.Run("accepted/key=made", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			serve(b, body, "", http.StatusAccepted)
		}
	})
	b.Run("refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			serve(b, `{"input_kind":`, "", http.StatusBadRequest)
		}
	})
}
