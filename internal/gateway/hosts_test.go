package gateway

import (
	"io"
	"net/http"
	"testing"

	"github.com/canopy-dev/canopy/internal/problem"
)

// noRedirect is a client that shows a redirect instead of following it.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// raw sends a request for target with Host host and returns the status,
// the problem type ("" when the body is not a problem) and the Location.
func raw(t *testing.T, base, method, target, host string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Authorization", "Bearer "+tokAll)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	typ := ""
	if resp.Header.Get("Content-Type") == problem.ContentType {
		typ = reply{resp.StatusCode, resp.Header, b}.problem(t).Type
	}
	return resp.StatusCode, typ, resp.Header.Get("Location")
}

// TestAllowedHosts: a gateway with AllowedHosts (as make run's, on
// loopback with a public development token) refuses a request that names
// another host, as a browser does after DNS rebinding; names in the list
// pass, with any port and in any case.
func TestAllowedHosts(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.AllowedHosts = LoopbackHosts
	_, srv := e.gateway(cfg)
	for host, want := range map[string]int{
		"evil.example":      400,
		"evil.example:8080": 400,
		"127.0.0.2":         400,
		"localhost":         404, // reaches the API: the run is unknown, nobody owns it
		"LOCALHOST:8080":    404,
		"127.0.0.1:1":       404,
		"[::1]:8080":        404,
	} {
		status, typ, _ := raw(t, srv.URL, "GET", "/v1/runs/run-1/history?limit=1", host)
		if want == 400 && (status != 400 || typ != problem.BadRequest) {
			t.Errorf("Host %s: %d %s; want a 400 problem", host, status, typ)
		}
		if want != 400 && status == 400 {
			t.Errorf("Host %s: refused", host)
		}
	}
}

// TestNoRedirects: a path ServeMux would clean is answered with a 404
// problem, never a redirect (which the document does not give, and which a
// client would follow with its token to another path); a run id that holds
// "/" and ".." is served when path-escaped.
func TestNoRedirects(t *testing.T) {
	e := newEnv(t, 2)
	_, srv := e.gateway(e.config())
	for _, target := range []string{"/v1/runs//input", "/v1/runs/a/./snapshot", "/v1/runs/a/../b/snapshot",
		"/v1//runs/a/snapshot", "/v1/runs/a/snapshot/", "/v1/runs/a/snapshot/.."} {
		for _, method := range []string{"GET", "POST"} {
			status, typ, loc := raw(t, srv.URL, method, target, "")
			if status != 404 || typ != problem.NotFound || loc != "" {
				t.Errorf("%s %s: %d %q Location %q; want a 404 problem", method, target, status, typ, loc)
			}
		}
	}
	// Escaped, the run id "a/../b" is one segment: the request reaches the
	// handler (which finds no owner for it: no projector runs).
	status, typ, _ := raw(t, srv.URL, "GET", "/v1/runs/a%2F..%2Fb/snapshot", "")
	if status != 503 || typ != problem.NoOwner {
		t.Errorf("escaped run id: %d %s; want the handler's 503 no-owner", status, typ)
	}
}
