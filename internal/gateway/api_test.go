package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/problem"
)

// TestWriteError: the one writer of error answers. A problem, wrapped or
// not, is the answer; any other error is a 500 that does not quote it (it
// can name addresses), the cause going to the log; an error after the
// answer began is logged, not written over it; nil writes nothing.
func TestWriteError(t *testing.T) {
	var log bytes.Buffer
	g := &Gateway{cfg: Config{Logger: slog.New(slog.NewTextHandler(&log, nil))}}
	serve := func(h func(w http.ResponseWriter) error) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		w := &statusWriter{ResponseWriter: rec}
		g.writeError(w, httptest.NewRequest("GET", "/v1/runs/r/snapshot", nil), h(w))
		return rec
	}

	rec := serve(func(http.ResponseWriter) error {
		return fmt.Errorf("asking: %w", problem.New(http.StatusForbidden, problem.Forbidden, "not yours"))
	})
	p, ok := problem.Read(rec.Result())
	if rec.Code != 403 || !ok || p.Type != problem.Forbidden || p.Detail != "not yours" || p.Instance != "/v1/runs/r/snapshot" {
		t.Errorf("a wrapped problem: %d %+v", rec.Code, p)
	}

	rec = serve(func(http.ResponseWriter) error { return errors.New("dial tcp 10.1.2.3:9092: connection refused") })
	p, ok = problem.Read(rec.Result())
	if rec.Code != 500 || !ok || p.Type != problem.Internal || strings.Contains(p.Detail, "10.1.2.3") {
		t.Errorf("a plain error: %d %+v", rec.Code, p)
	}
	if !strings.Contains(log.String(), "10.1.2.3") {
		t.Errorf("the log lacks the cause: %s", log.String())
	}

	log.Reset()
	rec = serve(func(w http.ResponseWriter) error {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("event: open\n\n"))
		return problem.New(http.StatusServiceUnavailable, problem.Unavailable, "too late")
	})
	if rec.Code != 200 || rec.Body.String() != "event: open\n\n" || !strings.Contains(log.String(), "too late") {
		t.Errorf("an error after the answer began: %d %q, log %s", rec.Code, rec.Body, log.String())
	}

	rec = serve(func(http.ResponseWriter) error { return nil })
	if rec.Body.Len() != 0 || len(rec.Result().Header) != 0 {
		t.Errorf("nil: %d %q %v", rec.Code, rec.Body, rec.Result().Header)
	}
}
