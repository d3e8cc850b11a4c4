package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestSessionTokenForbiddenAlike: a token that covers a run only through
// its sessions gets one and the same 403 whether the run is unknown, has
// expired, or is in another session, so that it cannot learn which runs
// exist; a run in its session is served.
func TestSessionTokenForbiddenAlike(t *testing.T) {
	e := newEnv(t, 2)
	var mode atomic.Value // the fake owner's answer for every run
	mode.Store("unknown")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /internal/v1/runs/{run_id}/{what}", func(w http.ResponseWriter, r *http.Request) {
		run := r.PathValue("run_id")
		switch m := mode.Load().(string); m {
		case "unknown":
			problem.Write(w, r, problem.New(404, problem.UnknownRun, "no event of run %q was projected", run))
		case "expired":
			problem.Write(w, r, problem.New(410, problem.RunExpired, "run %q finished and was deleted", run))
		default: // the session
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"scope": map[string]any{"run_id": run, "session_id": m}})
		}
	})
	owner := httptest.NewServer(mux)
	t.Cleanup(owner.Close)
	e.projector(owner.Listener.Addr().String())
	adm := kadm.NewClient(e.client)
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the projector owns the partitions", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a, err := cluster.Assignment(ctx, adm, e.group, e.names)
		return err == nil && len(a) == 2
	}))
	_, srv := e.gateway(e.config())

	for _, req := range []struct{ method, path, body string }{
		{"GET", "/v1/runs/run-x/snapshot", ""},
		{"GET", "/v1/runs/run-x/history?limit=5", ""},
		{"POST", "/v1/runs/run-x/input", msg},
	} {
		answers := map[string]string{}
		for _, m := range []string{"unknown", "expired", "s2", "s1"} {
			mode.Store(m)
			var body []byte
			if req.body != "" {
				body = []byte(req.body)
			}
			if m == "s1" {
				// Past authorization the fake's body is no snapshot or page:
				// sent without call, whose conformance check reads it.
				hr, _ := http.NewRequest(req.method, srv.URL+req.path, bytes.NewReader(body))
				hr.Header.Set("Authorization", "Bearer "+tokSession)
				hr.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(hr)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					t.Errorf("%s %s in the token's session: %d", req.method, req.path, resp.StatusCode)
				}
				continue
			}
			r := call(t, req.method, srv.URL+req.path, tokSession, body)
			if r.status != 403 || r.problem(t).Type != problem.Forbidden {
				t.Errorf("%s %s, run %s: %d %s, want 403", req.method, req.path, m, r.status, r.body)
			}
			answers[m] = fmt.Sprintf("%d %s %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		if answers["unknown"] != answers["s2"] || answers["expired"] != answers["s2"] {
			t.Errorf("%s %s: the answers tell the runs apart:\nunknown: %s\nexpired: %s\nother session: %s",
				req.method, req.path, answers["unknown"], answers["expired"], answers["s2"])
		}
	}
}
