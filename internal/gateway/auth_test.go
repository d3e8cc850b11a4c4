package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/problem"
)

// rawJWT signs header and claims exactly as written, so that a test can
// send what a well-behaved library would never make (duplicate names).
func rawJWT(key []byte, header, claims string) string {
	enc := base64.RawURLEncoding
	msg := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(mac.Sum(nil))
}

const hs256 = `{"alg":"HS256","typ":"JWT"}`

// TestJWTClaims: with an audience and an issuer configured, a token passes
// only when it is HS256, unambiguous (no claim named twice or in another
// case), without crit, within exp and nbf, and names the audience and the
// issuer; each refusal is a 401 problem that says what was wrong and does
// not quote the token.
func TestJWTClaims(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.Audience, cfg.Issuer = "canopy-gw", "https://issuer.example"
	cfg.RatePerSecond, cfg.RateBurst = 1e9, 1<<30
	_, srv := e.gateway(cfg)
	now := e.clock.Now()
	exp, past, future := now.Add(time.Hour).Unix(), now.Add(-time.Second).Unix(), now.Add(time.Minute).Unix()
	// claims is a token's claims with the audience and issuer, around extra.
	claims := func(extra string) string {
		return fmt.Sprintf(`{"aud":"canopy-gw","iss":"https://issuer.example",%s}`, extra)
	}
	valid := fmt.Sprintf(`"sub":"zed","runs":["*"],"exp":%d`, exp)
	for _, c := range []struct {
		name, header, claims string
		detail               string // "" passes authentication
	}{
		{"valid", hs256, claims(valid), ""},
		{"aud among several", hs256, fmt.Sprintf(`{"aud":["other","canopy-gw"],"iss":"https://issuer.example",%s}`, valid), ""},
		{"nbf and iat past", hs256, claims(valid + fmt.Sprintf(`,"nbf":%d,"iat":%d`, past, past)), ""},
		{"unknown claims pass", hs256, claims(valid + `,"jti":"x","scope":"y"`), ""},
		{"duplicate sub", hs256, claims(valid + `,"sub":"admin"`), `"sub" is named twice`},
		{"duplicate runs", hs256, claims(`"runs":["run-1"],` + valid), `"runs" is named twice`},
		{"duplicate exp", hs256, claims(fmt.Sprintf(`"exp":%d,`, past) + valid), `"exp" is named twice`},
		{"duplicate other claim", hs256, claims(valid + `,"x":1,"x":2`), `"x" is named twice`},
		{"SUB", hs256, claims(fmt.Sprintf(`"SUB":"admin","runs":["*"],"exp":%d`, exp)), `"SUB" differs from canopy's "sub" only in case`},
		{"Runs beside sub", hs256, claims(fmt.Sprintf(`"sub":"zed","Runs":["*"],"exp":%d`, exp)), `"Runs"`},
		{"escaped SUB", hs256, claims(fmt.Sprintf(`"\u0053UB":"admin","runs":["*"],"exp":%d`, exp)), `"SUB"`},
		{"long s", hs256, claims(fmt.Sprintf(`"ſub":"admin","runs":["*"],"exp":%d`, exp)), `only in case`},
		{"Sessions", hs256, claims(valid + `,"Sessions":["*"]`), `canopy's "sessions" only in case`},
		{"EXP", hs256, claims(fmt.Sprintf(`"sub":"zed","runs":["*"],"EXP":%d`, exp)), `canopy's "exp" only in case`},
		{"Aud", hs256, fmt.Sprintf(`{"Aud":"canopy-gw","iss":"https://issuer.example",%s}`, valid), `canopy's "aud" only in case`},
		{"crit", `{"alg":"HS256","crit":["exp"]}`, claims(valid), "crit"},
		{"empty crit", `{"alg":"HS256","crit":[]}`, claims(valid), "crit"},
		{"header names alg twice", `{"alg":"none","alg":"HS256"}`, claims(valid), `"alg" is named twice`},
		{"alg none", `{"alg":"none"}`, claims(valid), "HS256"},
		{"alg HS512", `{"alg":"HS512"}`, claims(valid), "HS256"},
		{"header not an object", `["HS256"]`, claims(valid), "header: not a JSON object"},
		{"wrong aud", hs256, fmt.Sprintf(`{"aud":"other","iss":"https://issuer.example",%s}`, valid), "aud does not name"},
		{"no aud", hs256, fmt.Sprintf(`{"iss":"https://issuer.example",%s}`, valid), "no aud claim"},
		{"wrong iss", hs256, fmt.Sprintf(`{"aud":"canopy-gw","iss":"https://evil.example",%s}`, valid), "iss is not this gateway's issuer"},
		{"no iss", hs256, fmt.Sprintf(`{"aud":"canopy-gw",%s}`, valid), "no iss claim"},
		{"nbf future", hs256, claims(valid + fmt.Sprintf(`,"nbf":%d`, future)), "not valid yet (nbf)"},
		{"expired", hs256, claims(fmt.Sprintf(`"sub":"zed","runs":["*"],"exp":%d`, past)), "expired"},
		{"expires now", hs256, claims(fmt.Sprintf(`"sub":"zed","runs":["*"],"exp":%d`, now.Unix())), "expired"},
		{"no exp", hs256, claims(`"sub":"zed","runs":["*"]`), "no exp claim"},
		{"exp not a number", hs256, claims(`"sub":"zed","runs":["*"],"exp":"tomorrow"`), "not a well-formed JWT"},
		{"runs not an array", hs256, claims(fmt.Sprintf(`"sub":"zed","runs":"*","exp":%d`, exp)), "not a well-formed JWT"},
		{"no sub", hs256, claims(fmt.Sprintf(`"runs":["*"],"exp":%d`, exp)), "no sub claim"},
		{"too long", hs256, claims(valid + `,"pad":"` + strings.Repeat("x", maxJWTBytes) + `"`), "longer than 8192 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok := rawJWT(jwtKey, c.header, c.claims)
			// history?limit=abc is a 400 once past authentication.
			r := call(t, "GET", srv.URL+"/v1/runs/run-1/history?limit=abc", tok, nil)
			if c.detail == "" {
				if r.status != 400 {
					t.Fatalf("%d %s, want 400 (authenticated)", r.status, r.body)
				}
				return
			}
			p := r.problem(t)
			if r.status != 401 || p.Type != problem.Unauthorized || !strings.Contains(p.Detail, c.detail) {
				t.Fatalf("%d %+v, want 401 with %q in the detail", r.status, p, c.detail)
			}
			if r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			for _, part := range strings.Split(tok, ".") {
				if len(part) > 8 && strings.Contains(string(r.body), part) {
					t.Errorf("the problem quotes the token: %s", r.body)
				}
			}
		})
	}
	// A signature made with another key fails whatever the claims.
	if r := call(t, "GET", srv.URL+"/v1/runs/run-1/history?limit=abc", rawJWT([]byte("another key, 32 bytes long......"), hs256, claims(valid)), nil); r.status != 401 || !strings.Contains(r.problem(t).Detail, "signature") {
		t.Errorf("other key: %d %s", r.status, r.body)
	}
}

// TestPrincipalExpires: a JWT's principal carries its exp, a static
// token's none; SignJWT makes tokens the gateway accepts.
func TestPrincipalExpires(t *testing.T) {
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	a := newAuthenticator(jwtKey, "", "", func() time.Time { return now })
	a.static = map[string]Principal{"static-token-0123456789": {Subject: "dev", Runs: []string{"*"}}}
	exp := now.Add(90 * time.Minute)
	req := func(tok string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return r
	}
	p, prob := a.authenticate(req(SignJWT(jwtKey, Principal{Subject: "zed", Runs: []string{"run-1"}, Sessions: []string{"s1"}}, exp)))
	if prob != nil {
		t.Fatal(prob)
	}
	if !p.Expires.Equal(exp) || p.Subject != "zed" || !p.CoversRun("run-1") || !p.CoversSession("s1") {
		t.Errorf("principal %+v, want zed's, expiring at %s", p, exp)
	}
	p, prob = a.authenticate(req("static-token-0123456789"))
	if prob != nil || !p.Expires.IsZero() {
		t.Errorf("static token: %+v %v, want no expiry", p, prob)
	}
	// The token file cannot give a static token an expiry it would not keep.
	path := t.TempDir() + "/tokens.json"
	if err := os.WriteFile(path, []byte(`{"static-token-0123456789":{"sub":"dev","exp":1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokenFile(path); err == nil || !strings.Contains(err.Error(), "exp") {
		t.Errorf("token file with exp: %v", err)
	}
}

// FuzzVerifyJWT signs arbitrary headers and claims with the key: nothing
// may panic, and a token that passes has an HS256 header without crit,
// names no claim twice nor one of canopy's in another case, has a sub, and
// has not expired.
func FuzzVerifyJWT(f *testing.F) {
	f.Add(hs256, `{"sub":"a","runs":["*"],"exp":1900000000}`)
	f.Add(hs256, `{"sub":"a","sub":"b","exp":1900000000}`)
	f.Add(hs256, `{"SUB":"a","exp":1900000000}`)
	f.Add(`{"alg":"HS256","crit":["b64"]}`, `{"sub":"a","exp":1900000000}`)
	f.Add(`{"alg":"none"}`, `{"sub":"a","exp":1900000000,"nbf":1e300}`)
	f.Add(hs256, `{"sub":"a","exp":1e300,"aud":["x",1]}`)
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	a := newAuthenticator(jwtKey, "", "", func() time.Time { return now })
	f.Fuzz(func(t *testing.T, header, claims string) {
		p, prob := a.verifyJWT(rawJWT(jwtKey, header, claims))
		if prob != nil {
			if prob.Status != http.StatusUnauthorized || prob.Type != problem.Unauthorized {
				t.Fatalf("refusal %+v", prob)
			}
			return
		}
		if checkNames([]byte(claims), canonicalClaims) != "" || checkNames([]byte(header), nil) != "" {
			t.Fatalf("accepted ambiguous names: %s %s", header, claims)
		}
		var head map[string]any
		if json.Unmarshal([]byte(header), &head) != nil || head["alg"] != "HS256" || head["crit"] != nil {
			t.Fatalf("accepted header %s", header)
		}
		if p.Subject == "" || !p.Expires.After(now) {
			t.Fatalf("accepted %+v from %s", p, claims)
		}
	})
}
