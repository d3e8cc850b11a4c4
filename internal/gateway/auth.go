package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

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
	// Expires is the JWT's "exp": past it the token is refused, so whatever
	// it opened (a wake stream) should end then. Zero for a static token,
	// which does not expire; a token file cannot set it.
	Expires time.Time `json:"-"`
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
// HS256 JWTs signed with the configured key (github.com/golang-jwt/jwt/v5
// verifies the signature, exp, nbf, and aud and iss when configured; the
// checks the library does not make are here).
type authenticator struct {
	key              []byte
	static           map[string]Principal
	audience, issuer string
	parser           *jwt.Parser
}

func newAuthenticator(key []byte, audience, issuer string, now func() time.Time) *authenticator {
	opts := []jwt.ParserOption{
		// Only HS256, whatever the header says, so that "alg": "none" or a
		// public key used as an HMAC secret cannot pass.
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(now),
		// One encoding per token: no padding, no stray bits.
		jwt.WithStrictDecoding(),
	}
	if audience != "" {
		opts = append(opts, jwt.WithAudience(audience))
	}
	if issuer != "" {
		opts = append(opts, jwt.WithIssuer(issuer))
	}
	return &authenticator{key: key, audience: audience, issuer: issuer, parser: jwt.NewParser(opts...)}
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

// unauthorized is a 401 problem: what is wrong with the credentials.
func unauthorized(format string, args ...any) *problem.Problem {
	return problem.New(http.StatusUnauthorized, problem.Unauthorized, format, args...)
}

// authenticate returns the request's principal, or a 401 problem saying
// what is wrong with its credentials. No message quotes the token.
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

// maxJWTBytes bounds the token the JWT parser is given: canopy's claims fit
// in far less.
const maxJWTBytes = 8 << 10

// canonicalClaims are the claim names canopy reads. A token naming one of
// them twice, or in another case ("SUB", "Runs"), is refused: encoding/json
// would take the last of duplicates and match names case-insensitively, so
// such a token could mean one thing to its issuer and another here.
var canonicalClaims = []string{"sub", "runs", "sessions", "exp", "nbf", "aud", "iss", "iat"}

// tokenClaims are the claims canopy reads from a JWT.
type tokenClaims struct {
	jwt.RegisteredClaims
	Runs     []string `json:"runs,omitempty"`
	Sessions []string `json:"sessions,omitempty"`
}

// verifyJWT checks an HS256 JWT (RFC 7519): its header, then (the library)
// its signature, exp, nbf, aud and iss, then its claim names.
func (a *authenticator) verifyJWT(tok string) (*Principal, *problem.Problem) {
	if len(tok) > maxJWTBytes {
		return nil, unauthorized("the token is longer than %d bytes", maxJWTBytes)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, unauthorized("the token is neither a known static token nor a JWT")
	}
	hb, err := base64.RawURLEncoding.Strict().DecodeString(parts[0])
	if err != nil {
		return nil, unauthorized("the token is not a JWT: its header is not unpadded base64url")
	}
	if prob := checkHeader(hb); prob != nil {
		return nil, prob
	}
	var c tokenClaims
	if _, err := a.parser.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return a.key, nil }); err != nil {
		return nil, a.jwtProblem(err, &c)
	}
	cb, err := base64.RawURLEncoding.Strict().DecodeString(parts[1])
	if err != nil { // the parser decoded it already
		return nil, unauthorized("the token is not a JWT: its claims are not unpadded base64url")
	}
	if msg := checkNames(cb, canonicalClaims); msg != "" {
		return nil, unauthorized("the token's claims: %s", msg)
	}
	if c.Subject == "" {
		return nil, unauthorized("the token has no sub claim")
	}
	p := &Principal{Subject: c.Subject, Runs: c.Runs, Sessions: c.Sessions}
	if c.ExpiresAt != nil { // required: the parser refused a token without
		p.Expires = c.ExpiresAt.Time
	}
	return p, nil
}

// checkHeader refuses a header that is not a JSON object, names a member
// twice, has an alg other than HS256, or has crit: canopy implements no
// extension, and RFC 7515 (4.1.11) says a recipient that does not
// understand a critical extension must refuse the token.
func checkHeader(hb []byte) *problem.Problem {
	if msg := checkNames(hb, nil); msg != "" {
		return unauthorized("the token's header: %s", msg)
	}
	var head map[string]any
	if err := json.Unmarshal(hb, &head); err != nil {
		return unauthorized("the token's header is not a JSON object")
	}
	if alg, _ := head["alg"].(string); alg != jwt.SigningMethodHS256.Alg() {
		return unauthorized("the token's alg must be HS256")
	}
	if _, ok := head["crit"]; ok {
		return unauthorized("the token's header has crit; canopy understands no critical extension")
	}
	return nil
}

// checkNames walks the member names of the JSON object b and says what is
// wrong with them: a name given twice, or one of canonical in another case
// (by Unicode case folding, as strings.EqualFold; "ſub" is "sub" to it,
// and to encoding/json). "" when nothing is; b's syntax is the decoder's
// business.
func checkNames(b []byte, canonical []string) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "not a JSON object"
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "not a JSON object"
		}
		name, _ := t.(string)
		if seen[name] {
			return fmt.Sprintf("%s is named twice", quoteName(name))
		}
		seen[name] = true
		for _, c := range canonical {
			if name != c && strings.EqualFold(name, c) {
				return fmt.Sprintf("%s differs from canopy's %q only in case", quoteName(name), c)
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "not a JSON object"
		}
	}
	return ""
}

// quoteName quotes a member name for a message, cut short: the name comes
// from the client.
func quoteName(s string) string {
	if len(s) > 32 {
		return fmt.Sprintf("%q...", strings.ToValidUTF8(s[:32], ""))
	}
	return fmt.Sprintf("%q", s)
}

// jwtProblem says what the library found wrong with a token, in words of
// canopy's own: the library's messages can quote the token. c is what the
// library decoded of the claims.
func (a *authenticator) jwtProblem(err error, c *tokenClaims) *problem.Problem {
	var msgs []string
	if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
		if c.ExpiresAt == nil {
			msgs = append(msgs, "the token has no exp claim; tokens must expire")
		}
		if a.audience != "" && len(c.Audience) == 0 {
			msgs = append(msgs, "the token has no aud claim; this gateway's audience must be in it")
		}
		if a.issuer != "" && c.Issuer == "" {
			msgs = append(msgs, "the token has no iss claim; it must name this gateway's issuer")
		}
	}
	for _, m := range []struct {
		err error
		msg string
	}{
		{jwt.ErrTokenMalformed, "the token is not a well-formed JWT: each part must be unpadded base64url, and the claims a JSON object whose sub and iss are strings, aud a string or strings, runs and sessions arrays of strings, and exp, nbf and iat numbers"},
		{jwt.ErrTokenUnverifiable, "the token's alg must be HS256"},
		{jwt.ErrTokenSignatureInvalid, "the token's signature does not verify"},
		{jwt.ErrTokenExpired, "the token expired"},
		{jwt.ErrTokenNotValidYet, "the token is not valid yet (nbf)"},
		{jwt.ErrTokenInvalidAudience, "the token's aud does not name this gateway's audience"},
		{jwt.ErrTokenInvalidIssuer, "the token's iss is not this gateway's issuer"},
	} {
		if errors.Is(err, m.err) {
			msgs = append(msgs, m.msg)
		}
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "the token is not valid")
	}
	return unauthorized("%s", strings.Join(msgs, "; "))
}

// SignJWT makes an HS256 JWT for p that expires at exp: for tests and for
// issuing development tokens.
func SignJWT(key []byte, p Principal, exp time.Time) string {
	// json.Marshal cannot fail on tokenClaims (strings, string slices and
	// a NumericDate, whose MarshalJSON returns no error), and HMAC-SHA256
	// with a []byte key cannot fail either: signed here, the token has no
	// error to report, where jwt's SignedString would return one.
	claims, _ := json.Marshal(tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: p.Subject, ExpiresAt: jwt.NewNumericDate(exp)},
		Runs:             p.Runs, Sessions: p.Sessions,
	})
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}
