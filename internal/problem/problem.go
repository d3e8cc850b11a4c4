// Package problem writes and reads HTTP error bodies as
// application/problem+json (RFC 9457), the one error format of canopy's
// HTTP APIs (the gateway and the projectors' internal query endpoint).
//
// Type is a URI naming the kind of problem, under TypeBase, so that clients
// branch on it rather than on the text; Detail says, for a person, what was
// wrong with this request and what to do about it.
package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// TypeBase prefixes every problem type canopy defines.
const TypeBase = "https://canopy.dev/problems/"

// ContentType is the media type of a problem body.
const ContentType = "application/problem+json"

// Problem types canopy's APIs answer with. Each is TypeBase + a slug.
const (
	BadRequest       = TypeBase + "bad-request"        // 400: the request is malformed or violates the contract
	Unauthorized     = TypeBase + "unauthorized"       // 401: no valid token
	Forbidden        = TypeBase + "forbidden"          // 403: the token does not cover the run or session
	NotFound         = TypeBase + "not-found"          // 404: no such route
	UnknownRun       = TypeBase + "unknown-run"        // 404: no event of the run was projected
	UnknownSession   = TypeBase + "unknown-session"    // 404: no run of the session was projected
	RunExpired       = TypeBase + "run-expired"        // 410: the run finished and its state was deleted after the retention
	MethodNotAllowed = TypeBase + "method-not-allowed" // 405
	Conflict         = TypeBase + "idempotency-conflict"
	TooLarge         = TypeBase + "body-too-large"    // 413
	UnsupportedMedia = TypeBase + "unsupported-media" // 415
	RateLimited      = TypeBase + "rate-limited"      // 429, with Retry-After
	NotOwner         = TypeBase + "not-owner"         // 421: this projector does not own the run's partition
	Restoring        = TypeBase + "restoring"         // 503: the owner is restoring the partition, with Retry-After
	NoOwner          = TypeBase + "no-owner"          // 503: no projector owns the run's partition now, with Retry-After
	Unavailable      = TypeBase + "unavailable"       // 503: Kafka or a projector cannot be reached, with Retry-After
	Internal         = TypeBase + "internal"          // 500
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// RetryAfter, when set, is sent as the Retry-After header (whole
	// seconds, at least 1); it is not part of the body.
	RetryAfter time.Duration `json:"-"`
}

// Error makes a Problem an error, for code that returns one.
func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }

// New returns a problem of type typ with the status's standard title.
func New(status int, typ, format string, args ...any) *Problem {
	return &Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: fmt.Sprintf(format, args...)}
}

// Write sends p as the response.
func Write(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(max((p.RetryAfter+time.Second-1)/time.Second, 1))))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// Error writes err: as itself when it is (or wraps) a *Problem, else as a
// 500 whose detail is err's text.
func Error(w http.ResponseWriter, r *http.Request, err error) {
	var p *Problem
	if errors.As(err, &p) {
		Write(w, r, p)
		return
	}
	Write(w, r, New(http.StatusInternalServerError, Internal, "%v", err))
}

// Read decodes a problem from a response whose content type says it has
// one; ok is false otherwise. Retry-After is read too.
func Read(resp *http.Response) (p *Problem, ok bool) {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), ContentType) {
		return nil, false
	}
	p = new(Problem)
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(p); err != nil {
		return nil, false
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	return p, true
}
