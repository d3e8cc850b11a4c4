package gateway

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/problem"
)

// TestPreAuthLimit: an address flooding bad tokens gets 429 before its
// tokens are read, while another address still gets through; the limit is
// per connection address unless TrustForwardedFor, and then per the
// address the proxy added.
func TestPreAuthLimit(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.PreAuthRatePerSecond, cfg.PreAuthBurst = 1, 5
	g, _ := e.gateway(cfg)
	serve := func(addr, tok string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/v1/runs/run-1/history?limit=abc", nil)
		r.RemoteAddr = addr
		r.Header.Set("Authorization", "Bearer "+tok)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	bad := rawJWT([]byte("not the key, but 32 bytes long.."), hs256, `{"sub":"x","exp":9999999999}`)
	for i := range 5 {
		// Each with another forwarded address: not trusted, so one key.
		if w := serve("203.0.113.7:4000", bad, "X-Forwarded-For", fmt.Sprintf("10.0.0.%d", i)); w.Code != 401 {
			t.Fatalf("bad token %d: %d %s, want 401", i, w.Code, w.Body)
		}
	}
	w := serve("203.0.113.7:4001", bad)
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("WWW-Authenticate") != "" {
		t.Fatalf("flood: %d Retry-After %q %s, want 429 before authentication", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	var p problem.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != problem.RateLimited || !strings.Contains(p.Detail, "client address") {
		t.Errorf("flood problem %+v %v", p, err)
	}
	if w := serve("203.0.113.7:4002", tokAll); w.Code != 429 {
		t.Errorf("a good token from the flooding address: %d, want 429", w.Code)
	}
	if w := serve("198.51.100.9:5000", tokAll); w.Code != 400 {
		t.Errorf("another address: %d %s, want 400 (authenticated)", w.Code, w.Body)
	}
	e.clock.Advance(time.Second)
	if w := serve("203.0.113.7:4003", tokAll); w.Code != 400 {
		t.Errorf("a second later: %d %s, want 400", w.Code, w.Body)
	}

	// Behind a trusted proxy: the key is the last X-Forwarded-For address.
	cfg.TrustForwardedFor = true
	g, _ = e.gateway(cfg)
	for i := range 5 {
		if w := serve("10.1.1.1:80", bad, "X-Forwarded-For", fmt.Sprintf("192.0.2.%d, 203.0.113.8", i)); w.Code != 401 {
			t.Fatalf("proxied bad token %d: %d", i, w.Code)
		}
	}
	if w := serve("10.1.1.1:80", tokAll, "X-Forwarded-For", "203.0.113.8"); w.Code != 429 {
		t.Errorf("proxied flood: %d, want 429", w.Code)
	}
	if w := serve("10.1.1.1:80", tokAll, "X-Forwarded-For", "203.0.113.9"); w.Code != 400 {
		t.Errorf("another client of the proxy: %d %s, want 400", w.Code, w.Body)
	}
}

func TestClientKey(t *testing.T) {
	for _, c := range []struct {
		remote, xff string
		trust       bool
		want        string
	}{
		{"203.0.113.7:4000", "", false, "203.0.113.7"},
		{"203.0.113.7:4000", "198.51.100.1", false, "203.0.113.7"},
		{"10.0.0.1:80", "198.51.100.1, 203.0.113.7", true, "203.0.113.7"},
		{"10.0.0.1:80", "203.0.113.7:5555", true, "203.0.113.7"},
		{"10.0.0.1:80", "garbage", true, "10.0.0.1"},
		{"[::ffff:203.0.113.7]:4000", "", false, "203.0.113.7"},
		{"[2001:db8:1:2:3:4:5:6]:443", "", false, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1%eth0]:443", "", false, "2001:db8:1:2::/64"},
		{"10.0.0.1:80", "[2001:db8::1]", true, "2001:db8::/64"},
		{"@", "", false, "@"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := clientKey(r, c.trust); got != c.want {
			t.Errorf("clientKey(%q, X-Forwarded-For %q, trust %v) = %q, want %q", c.remote, c.xff, c.trust, got, c.want)
		}
	}
}

// TestSubjectLimitRetryAfter: the per-subject limit holds across tokens of
// one subject, and Retry-After says when the next request will pass.
func TestSubjectLimitRetryAfter(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.RatePerSecond, cfg.RateBurst = 0.25, 1
	_, srv := e.gateway(cfg)
	get := func(tok string) reply { return call(t, "GET", srv.URL+"/v1/runs/run-1/history?limit=abc", tok, nil) }
	exp := e.clock.Now().Add(time.Hour)
	one := SignJWT(jwtKey, Principal{Subject: "zed", Runs: []string{"*"}}, exp)
	two := SignJWT(jwtKey, Principal{Subject: "zed", Runs: []string{"run-1"}}, exp)
	if r := get(one); r.status != 400 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	r := get(two)
	if r.status != 429 || r.header.Get("Retry-After") != "4" || r.problem(t).Type != problem.RateLimited {
		t.Fatalf("same subject, other token: %d Retry-After %q %s, want 429 after 4s", r.status, r.header.Get("Retry-After"), r.body)
	}
	e.clock.Advance(3 * time.Second)
	if r := get(one); r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Errorf("3s later: %d Retry-After %q, want 429 after 1s (a refused request costs nothing)", r.status, r.header.Get("Retry-After"))
	}
	e.clock.Advance(time.Second)
	if r := get(one); r.status != 400 {
		t.Errorf("after the Retry-After: %d %s", r.status, r.body)
	}
}

// TestLimiterBounded: however many keys come, the limiter remembers at
// most its maximum, forgetting idle keys before busy ones.
func TestLimiterBounded(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)}
	l := newLimiter(1, 2, c.Now)
	l.max = 100
	for i := range 99 {
		l.allow(fmt.Sprintf("idle-%d", i))
	}
	c.Advance(time.Minute) // they refill
	l.allow("busy")
	l.allow("busy")
	if ok, _ := l.allow("busy"); ok {
		t.Fatal("busy passed its burst")
	}
	for i := range 10_000 {
		l.allow(fmt.Sprintf("new-%d", i))
		if n := len(l.buckets); n > l.max {
			t.Fatalf("%d buckets after %d new keys, want at most %d", n, i+1, l.max)
		}
		if i == 0 {
			if ok, _ := l.allow("busy"); ok {
				t.Fatal("busy was forgotten while idle keys were kept")
			}
		}
	}
}
