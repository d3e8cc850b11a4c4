package gateway

import (
	"net/http"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// methodHooks records the method of every request the gateway reports.
type methodHooks struct {
	mu      sync.Mutex
	methods []string
}

func (h *methodHooks) Request(_, method string, _ int, _ time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.methods = append(h.methods, method)
}

func (h *methodHooks) Redacted(string) {}

func (h *methodHooks) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.methods) == 0 {
		return ""
	}
	return h.methods[len(h.methods)-1]
}

// TestMethodIsBounded: net/http hands the gateway whatever method token a
// client sends; metrics (Hooks) and span names must see one of a fixed set,
// or a client could make a series per request. A made-up method is
// "_OTHER", its span is "HTTP <route>" and keeps the original as an
// attribute; known methods pass unchanged.
func TestMethodIsBounded(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	hooks := &methodHooks{}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(t.Context())
	cfg.Hooks, cfg.TracerProvider = hooks, tp
	_, srv := e.gateway(cfg)

	for _, c := range []struct{ sent, want, span string }{
		// A client may send any token as a method.
		{"BREW", "_OTHER", "HTTP /v1/runs/{run_id}/input"},
		{"get", "_OTHER", "HTTP /v1/runs/{run_id}/input"}, // methods are case-sensitive
		{"X-RANDOM-0001", "_OTHER", "HTTP /v1/runs/{run_id}/input"},
		{http.MethodPost, http.MethodPost, "POST /v1/runs/{run_id}/input"},
		{http.MethodDelete, http.MethodDelete, "DELETE /v1/runs/{run_id}/input"},
	} {
		r := call(t, c.sent, srv.URL+"/v1/runs/run-1/input", tokAll, []byte(msg))
		if c.sent != http.MethodPost && r.status != http.StatusMethodNotAllowed {
			t.Errorf("%s: status %d, want 405", c.sent, r.status)
		}
		// Hooks.Request runs as ServeHTTP returns, just after the span
		// ends; the client may have its answer a moment before.
		testenv.WaitFor(t, 5*time.Second, testenv.Until(c.sent+" reported", func() bool { return hooks.last() != "" }))
		if got := hooks.last(); got != c.want {
			t.Errorf("%s: Hooks saw method %q, want %q", c.sent, got, c.want)
		}
		ended := spans.Ended()
		s := ended[len(ended)-1]
		if s.Name() != c.span {
			t.Errorf("%s: span %q, want %q", c.sent, s.Name(), c.span)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if attrs["http.request.method"] != c.want {
			t.Errorf("%s: http.request.method %q, want %q", c.sent, attrs["http.request.method"], c.want)
		}
		if orig, ok := attrs["http.request.method_original"]; (c.want == "_OTHER") != ok || ok && orig != c.sent {
			t.Errorf("%s: http.request.method_original %q (present %v)", c.sent, orig, ok)
		}
		hooks.mu.Lock()
		hooks.methods = nil
		hooks.mu.Unlock()
	}
}
