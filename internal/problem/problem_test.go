package problem

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestWriteRead(t *testing.T) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/runs/r1/snapshot", nil)
	p := New(http.StatusServiceUnavailable, Restoring, "partition %d is restoring", 3)
	p.RetryAfter = 1500 * time.Millisecond
	Error(rec, req, p)
	resp := rec.Result()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || resp.Header.Get("Content-Type") != ContentType {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	got, ok := Read(resp)
	if !ok || got.Type != Restoring || got.Detail != "partition 3 is restoring" || got.Instance != "/v1/runs/r1/snapshot" ||
		got.RetryAfter != 2*time.Second || got.Title != "Service Unavailable" {
		t.Fatalf("read back %+v, %v", got, ok)
	}
	rec = httptest.NewRecorder()
	Error(rec, req, http.ErrHandlerTimeout)
	if rec.Code != 500 {
		t.Fatalf("plain error: status %d", rec.Code)
	}
}
