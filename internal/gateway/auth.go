package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/canopy-dev/canopy/internal/problem"
)

// Principal is who a bearer token speaks for and what it may touch.
type Principal struct {
	// Subject is the token's "sub": the rate limit and the idempotency keys
	// are per subject, and inputs are attributed to agent "human:<sub>".
	Subject string `json:"sub"`
	// Runs the token may touch; "*" is every run.
	Runs []string `json:"runs"`
	// Sessions the token may touch: a run is covered when its snapshot's
	// scope names one of them. "*" is every session.
	Sessions []string `json:"sessions"`
}

// CoversRun reports whether the token names run (or every run).
func (p *Principal) CoversRun(run string) bool {
	return slices.Contains(p.Runs, "*") || slices.Contains(p.Runs, run)
}

// CoversSession reports whether the token names session (or every session).
func (p *Principal) CoversSession(session string) bool {
	return session != "" && (slices.Contains(p.Sessions, "*") || slices.Contains(p.Sessions, session))
}

// authenticator checks bearer tokens: static ones from the token file, and
// HS256 JWTs signed with the configured key.
type authenticator struct {
	key    []byte
	static map[string]Principal
	now    func() time.Time
}

// LoadTokenFile reads a static token file: a JSON object mapping each token
// to its principal.
func LoadTokenFile(path string) (map[string]Principal, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway: token file: %w", err)
	}
	var m map[string]Principal
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("gateway: token file %s: want {\"<token>\": {\"sub\": ..., \"runs\": [...], \"sessions\": [...]}}: %v", path, err)
	}
	for tok, p := range m {
		if len(tok) < 16 {
			return nil, fmt.Errorf("gateway: token file %s: the token of %q is shorter than 16 characters", path, p.Subject)
		}
		if p.Subject == "" {
			return nil, fmt.Errorf("gateway: token file %s: a token has no \"sub\"", path)
		}
	}
	return m, nil
}

var unauthorized = func(format string, args ...any) *problem.Problem {
	return problem.New(http.StatusUnauthorized, problem.Unauthorized, format, args...)
}

// authenticate returns the request's principal, or a 401 problem saying
// what is wrong with its credentials.
func (a *authenticator) authenticate(r *http.Request) (*Principal, *problem.Problem) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, unauthorized("no bearer token: send Authorization: Bearer <token>")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return nil, unauthorized("the Authorization header is not \"Bearer <token>\"")
	}
	tok = strings.TrimSpace(tok)
	if p, ok := a.static[tok]; ok {
		return &p, nil
	}
	if len(a.key) == 0 {
		return nil, unauthorized("the token is not known")
	}
	return a.verifyJWT(tok)
}

// jwtClaims are the claims canopy reads from a token.
type jwtClaims struct {
	Principal
	Exp *float64 `json:"exp"`
	Nbf *float64 `json:"nbf"`
}

// verifyJWT checks an HS256 JWT (RFC 7519) and its exp and nbf. Only HS256
// is accepted, whatever the header says, so that "alg": "none" or a public
// key used as an HMAC secret cannot pass.
func (a *authenticator) verifyJWT(tok string) (*Principal, *problem.Problem) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, unauthorized("the token is neither a known static token nor a JWT")
	}
	hb, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	cb, err2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, unauthorized("the token is not a JWT: a part is not unpadded base64url")
	}
	var head struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(hb, &head); err != nil || head.Alg != "HS256" {
		return nil, unauthorized("the token's alg must be HS256")
	}
	mac := hmac.New(sha256.New, a.key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, unauthorized("the token's signature does not verify")
	}
	var c jwtClaims
	if err := json.Unmarshal(cb, &c); err != nil {
		return nil, unauthorized("the token's claims are not a JSON object of sub, runs, sessions, exp: %v", err)
	}
	now := float64(a.now().Unix())
	switch {
	case c.Subject == "":
		return nil, unauthorized("the token has no sub claim")
	case c.Exp == nil:
		return nil, unauthorized("the token has no exp claim; tokens must expire")
	case math.IsNaN(*c.Exp) || *c.Exp <= now:
		return nil, unauthorized("the token expired")
	case c.Nbf != nil && *c.Nbf > now:
		return nil, unauthorized("the token is not valid yet (nbf)")
	}
	return &c.Principal, nil
}

// SignJWT makes an HS256 JWT for p that expires at exp: for tests and for
// issuing development tokens.
func SignJWT(key []byte, p Principal, exp time.Time) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	claims, _ := json.Marshal(jwtClaims{Principal: p, Exp: ptr(float64(exp.Unix()))})
	msg := head + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msg))
	return msg + "." + enc.EncodeToString(mac.Sum(nil))
}

func ptr[T any](v T) *T { return &v }

// limiter is a token bucket per subject, on the injected clock, so that one
// token cannot starve the others.
type limiter struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	now     func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxBuckets bounds the limiter's memory: past it, buckets that have
// refilled (idle subjects) are forgotten, which loses nothing.
const maxBuckets = 100_000

// allow takes one token of subject's bucket; when there is none it says how
// long until there will be.
func (l *limiter) allow(subject string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[subject]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.evictFull(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[subject] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = min(l.burst, b.tokens+el*l.rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, max(wait, time.Second)
}

func (l *limiter) evictFull(now time.Time) {
	for s, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, s)
		}
	}
}
