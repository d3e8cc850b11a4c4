package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// InputRequest is the body of POST /v1/runs/{run_id}/input: a human input
// (the contract's signal.input payload) and its optional scope and causality.
type InputRequest struct {
	// InputKind is message, interrupt, cancel, steer, approve or reject. Required.
	InputKind string `json:"input_kind"`
	// Text is the input's text: UTF-8, at most 16,384 characters (Unicode
	// code points, topics.MaxInputTextLength), within the body's bound in
	// bytes (Config.MaxBodyBytes).
	Text string `json:"text,omitempty"`
	// ContentRef references larger content stored elsewhere.
	ContentRef string `json:"content_ref,omitempty"`
	// InputID is the client's id of the input.
	InputID       string `json:"input_id,omitempty"`
	SessionID     string `json:"session_id,omitempty"`
	ThreadID      string `json:"thread_id,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
	CausationID   string `json:"causation_id,omitempty"`
}

// DecodeInput decodes a request body strictly: one JSON object of
// InputRequest's fields, nothing unknown, nothing after it. The error says
// what is wrong, for a person.
func DecodeInput(body []byte) (*InputRequest, error) {
	// encoding/json would turn each byte that is not UTF-8 into U+FFFD and
	// carry on: the human's text must arrive as sent, or not at all.
	if ps := topics.TextProblems(body); len(ps) > 0 {
		parts := make([]string, len(ps))
		for i, p := range ps {
			parts[i] = p.String()
		}
		return nil, errors.New(strings.Join(parts, "; "))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var in InputRequest
	if err := dec.Decode(&in); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("the body is empty; want a JSON object with input_kind")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errors.New("the body is not valid JSON: it ends early")
		case errors.As(err, &se):
			return nil, fmt.Errorf("the body is not valid JSON (at byte %d): %v", se.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return nil, fmt.Errorf("unknown field %s; want %s", strings.TrimPrefix(err.Error(), "json: unknown field "), strings.Join(inputNames, ", "))
		case errors.As(err, &te) && te.Field != "":
			return nil, fmt.Errorf("%s: want a JSON %s, got %s", te.Field, jsonKind(te.Type), te.Value)
		}
		return nil, errors.New("the body is not a JSON object of input fields")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the body has data after the JSON object")
	}
	// encoding/json takes the last of a name given twice and matches names
	// case-insensitively; the contract's names are exact, so "Text" is
	// refused rather than taken for "text", as a token's claims are.
	if msg := checkNames(body, inputNames); msg != "" {
		return nil, fmt.Errorf("the body: %s; want the names %s", msg, strings.Join(inputNames, ", "))
	}
	return &in, nil
}

// event is the signal.input event of in, sent by subject to run; its ID is
// left to the caller.
func (in *InputRequest) event(source, run, subject string, now time.Time) *topics.Event {
	return &topics.Event{Source: source, Type: topics.TypeInput, Time: topics.NewTime(now), RunID: run,
		AgentID: "human:" + subject, SchemaVersion: topics.CurrentSchemaVersion,
		SessionID: in.SessionID, ThreadID: in.ThreadID, CorrelationID: in.CorrelationID, CausationID: in.CausationID,
		Data: &topics.Input{InputID: in.InputID, InputKind: in.InputKind, Text: in.Text, ContentRef: in.ContentRef}}
}

// bodyReadReason says why a body could not be read, without the Go error's
// text (which can name addresses).
func bodyReadReason(err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "it did not arrive before the server's read timeout"
	}
	return "the connection ended before the whole body arrived"
}

// jsonKind names t as JSON does, so that an error names no Go type.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "object"
}

// inputNames are InputRequest's JSON names.
var inputNames = []string{"input_kind", "text", "content_ref", "input_id", "session_id", "thread_id", "correlation_id", "causation_id"}

// idempotencyKeyRE is what an Idempotency-Key may be: visible ASCII, so that
// it is safe to log and hash.
var idempotencyKeyRE = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// traceparentRE is W3C trace context's traceparent, version 00.
var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// input is POST /v1/runs/{run_id}/input: the checks of the request, in
// the order that tells the client the first thing to fix, then the
// event's record, produced once per Idempotency-Key (idempotency.go).
func (g *Gateway) input(w http.ResponseWriter, r *http.Request, p *Principal, run string) error {
	key, err := inputHeaders(r)
	if err != nil {
		return err
	}
	in, err := g.readInput(w, r)
	if err != nil {
		return err
	}
	if err := g.scopeInput(r.Context(), in, p, run); err != nil {
		return err
	}
	ev := in.event(g.cfg.Source, run, p.Subject, g.cfg.Now())
	// Redacted before it is produced: the human input topic, and all that
	// is made of it downstream, never holds a secret a person pasted by
	// mistake (docs/CONTRACT.md "Redaction").
	g.redaction.Event(ev, g.cfg.Hooks.Redacted)
	// What the Idempotency-Key cache remembers the input by: who sent it,
	// for which run, under which key. Without a key the gateway makes one
	// and answers with it, the 503 of a produce that timed out included: a
	// retry that sends it back is the same event, applied once, however
	// the first attempt ended. No earlier request can have sent a key made
	// just now, so such an input is not remembered (it would push the
	// clients' own keys out of the cache).
	idemKey := ""
	if key == "" {
		if key, err = g.makeKey(); err != nil {
			return err
		}
	} else {
		idemKey = p.Subject + "\x00" + run + "\x00" + key
	}
	w.Header().Set("Idempotency-Key", key)
	ev.ID = idempotentEventID(p.Subject, run, key)
	rec, err := g.inputRecord(r.Context(), ev)
	if err != nil {
		return err
	}
	res, replayed, err := g.produceOnce(r.Context(), in, rec, ev.ID, run, idemKey)
	if err != nil {
		return err
	}
	writeAccepted(w, res, replayed)
	return nil
}

// makeKey makes an Idempotency-Key for an input sent without one.
func (g *Gateway) makeKey() (string, error) {
	key, err := g.newULID()
	if err != nil {
		g.cfg.Logger.Error("gateway: making an Idempotency-Key", "err", err)
		return "", problem.New(http.StatusInternalServerError, problem.Internal, "the gateway could not make an Idempotency-Key; send one")
	}
	return key, nil
}

// inputHeaders checks an input's Content-Type and returns its
// Idempotency-Key, "" when the client sent none.
func inputHeaders(r *http.Request) (string, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return "", problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMedia, "send the input as Content-Type: application/json")
	}
	key := r.Header.Get("Idempotency-Key")
	if _, set := r.Header["Idempotency-Key"]; set && !idempotencyKeyRE.MatchString(key) {
		msg := "want 1-255 visible ASCII characters"
		if p := topics.TextProblem(key); p != "" {
			msg = p + "; " + msg
		}
		return "", problem.New(http.StatusBadRequest, problem.BadRequest, "Idempotency-Key: %s", msg)
	}
	return key, nil
}

// readInput reads and decodes the body, within MaxBodyBytes and
// BodyTimeout.
func (g *Gateway) readInput(w http.ResponseWriter, r *http.Request) (*InputRequest, error) {
	if r.ContentLength > g.cfg.MaxBodyBytes {
		return nil, tooLarge(g.cfg.MaxBodyBytes)
	}
	// The body has BodyTimeout to arrive. The deadline is lifted once it
	// has (a deadline left on the connection would end the request's
	// context while the input waits for Kafka), and kept when it has not,
	// so that the server gives up on the rest of the body and closes the
	// connection after the 400 rather than waiting for it.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(g.cfg.MaxBodyBytes)
		}
		return nil, problem.New(http.StatusBadRequest, problem.BadRequest, "the body could not be read: %s", bodyReadReason(err))
	}
	_ = rc.SetReadDeadline(time.Time{})
	in, err := DecodeInput(body)
	if err != nil {
		return nil, problem.New(http.StatusBadRequest, problem.BadRequest, "%v", err)
	}
	return in, nil
}

// scopeInput checks that p may send in to run, and fills in the run's
// session when the token holds the run through it. The first event of a
// run fixes its session, and sessions grant access: a token may only name
// a session it holds, or, holding the run through its session, that
// session.
func (g *Gateway) scopeInput(ctx context.Context, in *InputRequest, p *Principal, run string) error {
	session, err := g.authorizeSession(ctx, p, run)
	if err != nil {
		return err
	}
	switch {
	case session != "" && in.SessionID == "":
		in.SessionID = session
	case session != "" && in.SessionID != session:
		return problem.New(http.StatusForbidden, problem.Forbidden, "session_id %q is not the run's session", in.SessionID)
	case session == "" && in.SessionID != "" && !p.CoversSession(in.SessionID) && !slices.Contains(p.Runs, "*"):
		return problem.New(http.StatusForbidden, problem.Forbidden,
			"the token of %q does not cover session_id %q; leave it out or use a token whose sessions claim names it", p.Subject, in.SessionID)
	}
	return nil
}

// inputRecord is ev's record on the human input topic, in the run's
// partition, carrying the request's trace context: the request's span
// (ServeHTTP's, a child of the caller's traceparent if any) is the parent
// of everything the input causes downstream.
func (g *Gateway) inputRecord(ctx context.Context, ev *topics.Event) (*kgo.Record, error) {
	tc := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, tc)
	tp := tc.Get("traceparent")
	if !traceparentRE.MatchString(tp) {
		tp = "" // a malformed trace context is dropped, not refused: tracing is best effort
	}
	rec, err := topics.EventRecord(g.cfg.Names.HumanInput(), ev, tp)
	if err != nil {
		return nil, problem.New(http.StatusBadRequest, problem.BadRequest, "the input violates the event contract: %s", contractDetail(err))
	}
	rec.Partition = topics.Partition(rec.Key, g.partitions)
	return rec, nil
}

// produceOnce produces rec unless a request with the same idemKey did:
// its answer is then replayed, and replayed is true. An empty idemKey is
// produced without being remembered.
func (g *Gateway) produceOnce(ctx context.Context, in *InputRequest, rec *kgo.Record, eventID, run, idemKey string) (res *accepted, replayed bool, err error) {
	if idemKey == "" {
		res, err = g.produce(rec, eventID, run)
		return res, false, err
	}
	// The fingerprint is of the decoded request, so that the same input
	// sent with different whitespace is the same request. Marshalling
	// strings cannot fail.
	canon, _ := json.Marshal(in)
	res, owner, err := g.idem.begin(ctx, idemKey, sha256.Sum256(canon))
	if err != nil || owner == nil {
		return res, err == nil, err
	}
	res, err = g.produce(rec, eventID, run)
	g.idem.finish(owner, res)
	return res, false, err
}

func tooLarge(n int64) *problem.Problem {
	return problem.New(http.StatusRequestEntityTooLarge, problem.TooLarge, "the body is larger than %d bytes", n)
}

// contractDetail lists a contract violation's problems with the gateway's
// field names where they differ from the event's.
func contractDetail(err error) string {
	var de *topics.DecodeError
	if !errors.As(err, &de) {
		return err.Error()
	}
	var parts []string
	for _, p := range de.Problems {
		f := strings.TrimPrefix(p.Field, "data.")
		switch f {
		case "sessionid":
			f = "session_id"
		case "threadid":
			f = "thread_id"
		case "correlationid":
			f = "correlation_id"
		case "causationid":
			f = "causation_id"
		case "agentid":
			f = "token sub"
		}
		parts = append(parts, f+": "+p.Problem)
	}
	return strings.Join(parts, "; ")
}

// produce sends rec and waits for Kafka's acknowledgement, at most
// ProduceTimeout. Only an acknowledged record is a success: a timeout is a
// 503 even though the idempotent producer may still deliver the record
// later, which a retry with the same Idempotency-Key makes harmless.
func (g *Gateway) produce(rec *kgo.Record, eventID, run string) (*accepted, error) {
	type result struct {
		rec *kgo.Record
		err error
	}
	done := make(chan result, 1)
	// No context cancels the record: a client that hangs up must not abort
	// a record that may already be on its way, and neither may Drain,
	// which comes while Shutdown lets open requests finish. Its bound is
	// the producer's RecordDeliveryTimeout; Close fails what is left.
	g.cl.Produce(context.Background(), rec, func(rec *kgo.Record, err error) { done <- result{rec, err} })
	t := time.NewTimer(g.cfg.ProduceTimeout)
	defer t.Stop()
	select {
	case res := <-done:
		if res.err != nil {
			// The cause goes to the log: it names brokers and internals.
			g.cfg.Logger.Warn("gateway: produce failed", "run", run, "event_id", eventID, "err", res.err)
			return nil, g.unavailable(problem.Unavailable, "Kafka did not accept the input; retry with the same Idempotency-Key (in this response's header) so that it is applied once")
		}
		return &accepted{EventID: eventID, RunID: run, Topic: res.rec.Topic, Partition: res.rec.Partition, Offset: res.rec.Offset}, nil
	case <-t.C:
		g.cfg.Logger.Warn("gateway: produce timed out", "run", run, "event_id", eventID, "timeout", g.cfg.ProduceTimeout)
		return nil, g.unavailable(problem.Unavailable,
			"Kafka did not acknowledge the input within %s: it may still be written; retry with the same Idempotency-Key (in this response's header) so that it is applied once", g.cfg.ProduceTimeout)
	}
}

func writeAccepted(w http.ResponseWriter, res *accepted, replayed bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	h.Set("Location", "/v1/runs/"+url.PathEscape(res.RunID)+"/snapshot")
	w.WriteHeader(http.StatusAccepted)
	b, _ := topics.Marshal(res)
	_, _ = w.Write(append(b, '\n'))
}
