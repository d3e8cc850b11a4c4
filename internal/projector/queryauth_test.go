package projector

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestQueryServerRequiresSecret: with a secret, the query endpoint answers
// for a run (a real projector on the broker) only to a caller that presents
// it as its bearer token. No token, a wrong one, the right one under another
// scheme: each is 401 problem+json, and the same answer, so that a caller
// cannot tell which it got wrong; an unknown path under /internal/ is 401
// too, not 404. The probes stay open: they say nothing about any run.
func TestQueryServerRequiresSecret(t *testing.T) {
	const partitions = 2
	e := newEnv(t, partitions)
	run := "secret-run"
	e.produce(e.names.AgentEvents(), workload.Generate(workload.Spec{RunID: run, Nodes: 4, Seed: 7,
		Start: time.Now().Add(time.Hour).UTC(), Step: 10 * time.Millisecond})...)
	p, _ := e.start(e.config(t.TempDir()))
	testenv.WaitFor(t, 60*time.Second, until(p, "the run is projected", func() bool { return p.Stats.Applied.Load() >= 4 }))

	secret := []byte("0123456789abcdef0123456789abcdef-the-secret")
	qs := NewQueryServer(p)
	qs.Secret = secret
	srv := httptest.NewServer(qs)
	defer srv.Close()
	get := func(path, authorization string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, body
	}

	snapshot := "/internal/v1/runs/" + run + "/snapshot"
	var first []byte
	for _, auth := range []string{
		"",                                // none
		"Bearer wrong-" + string(secret),  // wrong
		"Bearer " + string(secret[:31]),   // a prefix of it
		"Bearer " + string(secret) + "x",  // longer
		"Basic " + string(secret),         // another scheme
		"Bearer",                          // a scheme without a token
		string(secret),                    // no scheme
		"Bearer  " + strings.ToUpper("x"), // junk
	} {
		code, h, body := get(snapshot, auth)
		var pr problem.Problem
		if code != http.StatusUnauthorized || h.Get("Content-Type") != problem.ContentType || json.Unmarshal(body, &pr) != nil ||
			pr.Type != problem.Unauthorized || pr.Status != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET snapshot with Authorization %q: %d %s %s (WWW-Authenticate %q), want 401 problem %s",
				auth, code, h.Get("Content-Type"), body, h.Get("WWW-Authenticate"), problem.Unauthorized)
		}
		if first == nil {
			first = body
		} else if string(body) != string(first) {
			t.Errorf("Authorization %q is refused with %s, no token with %s: the answers must not say which was wrong", auth, body, first)
		}
	}
	for _, path := range []string{"/internal/v1/runs/" + run + "/read-model", "/internal/v1/runs/" + run + "/history", "/internal/v1/nothing", "/elsewhere"} {
		if code, _, body := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the secret: %d %s, want 401", path, code, body)
		}
	}

	// The right secret, its scheme in any case.
	for _, auth := range []string{"Bearer " + string(secret), "bearer " + string(secret)} {
		code, _, body := get(snapshot, auth)
		var snap topics.AgentTreeSnapshot
		if code != http.StatusOK || json.Unmarshal(body, &snap) != nil || snap.Scope.RunID != run {
			t.Errorf("GET snapshot with the secret (%q): %d %.200s", auth[:7], code, body)
		}
	}
	if code, _, body := get("/internal/v1/runs/"+run+"/history?limit=2", "Bearer "+string(secret)); code != http.StatusOK {
		t.Errorf("GET history with the secret: %d %.200s", code, body)
	}
	if code, _, body := get("/internal/v1/nothing", "Bearer "+string(secret)); code != http.StatusNotFound {
		t.Errorf("GET an unknown path with the secret: %d %s, want 404", code, body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _, body := get(path, ""); code != http.StatusOK {
			t.Errorf("GET %s without the secret: %d %s, want 200: the probes are open", path, code, body)
		}
	}

	// Without a secret the server answers anyone (it listens on loopback
	// only: QueryEndpoint.Validate).
	open := NewQueryServer(p)
	rec := httptest.NewRecorder()
	open.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, snapshot, nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET snapshot of a server without a secret: %d %s", rec.Code, rec.Body)
	}
}

// TestQueryEndpointValidate: without a secret the query endpoint may listen
// on loopback only, and refusing anything else says what to set; with one
// it may listen anywhere. The default address follows.
func TestQueryEndpointValidate(t *testing.T) {
	secret := []byte(strings.Repeat("s", cluster.MinQuerySecretLen))
	for _, tc := range []struct {
		addr   string
		secret []byte
		ok     bool
	}{
		{"", nil, true}, // no endpoint
		{"127.0.0.1:8081", nil, true},
		{"127.0.0.2:0", nil, true},
		{"[::1]:8081", nil, true},
		{"localhost:8081", nil, true},
		{":8081", nil, false},
		{"0.0.0.0:8081", nil, false},
		{"[::]:8081", nil, false},
		{"10.1.2.3:8081", nil, false},
		{"projector-0.example:8081", nil, false},
		{"8081", nil, false}, // not host:port
		{":8081", secret, true},
		{"10.1.2.3:8081", secret, true},
		{":8081", secret[:cluster.MinQuerySecretLen-1], false}, // too short
		{":8081", append([]byte("a b"), secret...), false},
	} {
		err := QueryEndpoint{Addr: tc.addr, Secret: tc.secret}.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("Validate(%q, %d-byte secret): %v, want ok=%v", tc.addr, len(tc.secret), err, tc.ok)
		}
		if err != nil && tc.secret == nil && strings.Contains(tc.addr, ":") &&
			(!strings.Contains(err.Error(), "-query-secret-file") || !strings.Contains(err.Error(), "127.0.0.1:8081")) {
			t.Errorf("Validate(%q): %v; want it to name -query-secret-file and a loopback address", tc.addr, err)
		}
	}
	if a := DefaultQueryAddrFor(nil); a != "127.0.0.1:8081" {
		t.Errorf("default address without a secret: %q, want loopback", a)
	}
	if a := DefaultQueryAddrFor(secret); a != ":8081" {
		t.Errorf("default address with a secret: %q, want :8081", a)
	}
}
