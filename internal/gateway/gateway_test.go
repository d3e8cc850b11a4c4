package gateway

import (
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

const msg = `{"input_kind":"message","text":"hello"}`

func TestConfigValidateListsEveryProblem(t *testing.T) {
	err := Config{JWTKey: []byte("short"), MaxStreams: -1, ProjectorScheme: "ftp", AllowedHosts: []string{"localhost", "::1", "[::1]", "localhost:8080"}}.Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate: %v, want ErrConfig", err)
	}
	for _, want := range []string{"Brokers: required", "JWTKey: 5 bytes", "MaxStreams", "ProjectorScheme", `AllowedHosts: "[::1]"`, `AllowedHosts: "localhost:8080"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; does not mention %q", err, want)
		}
	}
	for _, ok := range []string{`"localhost"`, `"::1"`} {
		if strings.Contains(err.Error(), ok) {
			t.Errorf("Validate: %v; refuses the valid host %s", err, ok)
		}
	}
	if err := (Config{Kafka: kafkaconn.Conn{Brokers: []string{"x:1"}}}).Validate(); err == nil || !strings.Contains(err.Error(), "JWTKey or TokenFile") {
		t.Errorf("Validate without keys: %v", err)
	}
}

// TestRefusals checks every refusal that needs no projector: each is a
// problem that says what was wrong, and none produces anything.
func TestRefusals(t *testing.T) {
	e := newEnv(t, 4)
	cfg := e.config()
	cfg.MaxBodyBytes = 2048
	_, srv := e.gateway(cfg)
	now := e.clock.Now()
	expired := SignJWT(jwtKey, Principal{Subject: "dave", Runs: []string{"*"}}, now.Add(-time.Second))
	otherKey := SignJWT([]byte("another key, 32 bytes long......"), Principal{Subject: "eve", Runs: []string{"*"}}, now.Add(time.Hour))
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"eve","runs":["*"],"exp":9999999999}`)) + "."
	for _, c := range []struct {
		name, method, path, token, body string
		header                          []string
		status                          int
		typ, detail                     string
	}{
		{"no token", "POST", "/v1/runs/run-1/input", "", msg, nil, 401, problem.Unauthorized, "no bearer token"},
		{"not bearer", "POST", "/v1/runs/run-1/input", "", msg, []string{"Authorization", "Basic abc"}, 401, problem.Unauthorized, "Bearer"},
		{"unknown token", "POST", "/v1/runs/run-1/input", "nope", msg, nil, 401, problem.Unauthorized, "neither"},
		{"expired", "POST", "/v1/runs/run-1/input", expired, msg, nil, 401, problem.Unauthorized, "expired"},
		{"wrong key", "POST", "/v1/runs/run-1/input", otherKey, msg, nil, 401, problem.Unauthorized, "signature"},
		{"alg none", "POST", "/v1/runs/run-1/input", none, msg, nil, 401, problem.Unauthorized, "HS256"},
		{"run not covered", "POST", "/v1/runs/run-2/input", tokRun1, msg, nil, 403, problem.Forbidden, `run "run-2"`},
		{"session not held", "POST", "/v1/runs/run-1/input", tokRun1, `{"input_kind":"message","session_id":"s9"}`, nil, 403, problem.Forbidden, `session_id "s9"`},
		{"read not covered", "GET", "/v1/runs/run-2/snapshot", tokRun1, "", nil, 403, problem.Forbidden, `run "run-2"`},
		{"too large", "POST", "/v1/runs/run-1/input", tokAll, `{"input_kind":"message","text":"` + strings.Repeat("x", 4096) + `"}`, nil, 413, problem.TooLarge, "2048 bytes"},
		{"not json", "POST", "/v1/runs/run-1/input", tokAll, `{"input_kind":`, nil, 400, problem.BadRequest, "not valid JSON"},
		{"unknown field", "POST", "/v1/runs/run-1/input", tokAll, `{"input_kind":"message","colour":"red"}`, nil, 400, problem.BadRequest, "colour"},
		{"bad kind", "POST", "/v1/runs/run-1/input", tokAll, `{"input_kind":"shout"}`, nil, 400, problem.BadRequest, "input_kind"},
		{"text too long", "POST", "/v1/runs/run-1/input", tokAll, `{"input_kind":"message","text":"` + strings.Repeat("x", 17<<10) + `"}`, nil, 413, problem.TooLarge, ""},
		{"bad session", "POST", "/v1/runs/run-1/input", tokAll, `{"input_kind":"message","session_id":"a\u0007b"}`, nil, 400, problem.BadRequest, "session_id: contains a control character"},
		{"bad key", "POST", "/v1/runs/run-1/input", tokAll, msg, []string{"Idempotency-Key", "has space"}, 400, problem.BadRequest, "Idempotency-Key"},
		{"bad run", "POST", "/v1/runs/" + strings.Repeat("r", 300) + "/input", tokAll, msg, nil, 400, problem.BadRequest, "run_id"},
		// Text that is not UTF-8, which encoding/json would read as U+FFFD.
		{"text not UTF-8", "POST", "/v1/runs/run-1/input", tokAll, "{\"input_kind\":\"message\",\"text\":\"caf\xe9\"}", nil, 400, problem.BadRequest,
			"text: invalid_utf8: byte 0xe9 at offset 3 is not UTF-8"},
		{"text with a lone surrogate", "POST", "/v1/runs/run-1/input", tokAll, `{"input_kind":"message","text":"a\ud800"}`, nil, 400, problem.BadRequest,
			`text: invalid_utf8: \ud800 at offset 1 is an unpaired surrogate`},
		{"session not UTF-8", "POST", "/v1/runs/run-1/input", tokAll, "{\"input_kind\":\"message\",\"session_id\":\"s\xc0\xaf\"}", nil, 400, problem.BadRequest,
			"session_id: invalid_utf8: byte 0xc0 at offset 1"},
		{"name not UTF-8", "POST", "/v1/runs/run-1/input", tokAll, "{\"input_kind\":\"message\",\"te\xffxt\":\"x\"}", nil, 400, problem.BadRequest,
			"te\uFFFDxt: invalid_utf8: in the member's name: byte 0xff at offset 2"},
		{"run not UTF-8", "POST", "/v1/runs/run-%FF/input", tokAll, msg, nil, 400, problem.BadRequest, "run_id: invalid_utf8: byte 0xff at offset 4"},
		{"run overlong", "GET", "/v1/runs/run-%C0%AF/snapshot", tokAll, "", nil, 400, problem.BadRequest, "run_id: invalid_utf8: byte 0xc0 at offset 4"},
		{"key not UTF-8", "POST", "/v1/runs/run-1/input", tokAll, msg, []string{"Idempotency-Key", "k\xff"}, 400, problem.BadRequest,
			"Idempotency-Key: invalid_utf8: byte 0xff at offset 1"},
		{"method", "DELETE", "/v1/runs/run-1/input", tokAll, "", nil, 405, problem.MethodNotAllowed, "POST"},
		{"no route", "GET", "/v2/whatever", tokAll, "", nil, 404, problem.NotFound, "openapi"},
		{"bad limit", "GET", "/v1/runs/run-1/history?limit=0", tokAll, "", nil, 400, problem.BadRequest, "limit"},
		{"bad resume", "GET", "/v1/runs/run-1/wakes", tokAll, "", []string{"Last-Event-ID", "x"}, 400, problem.BadRequest, "Last-Event-ID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			r := call(t, c.method, srv.URL+c.path, c.token, body, c.header...)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			p := r.problem(t)
			if p.Type != c.typ || p.Status != c.status || !strings.Contains(p.Detail, c.detail) {
				t.Errorf("problem %+v, want type %s with %q in the detail", p, c.typ, c.detail)
			}
			if c.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	r := call(t, "POST", srv.URL+"/v1/runs/run-1/input", tokAll, []byte(msg), "Content-Type", "text/plain")
	if r.status != 415 || r.problem(t).Type != problem.UnsupportedMedia {
		t.Errorf("text/plain body: %d %s", r.status, r.body)
	}
	if n := len(e.records(e.names.HumanInput())); n != 0 {
		t.Errorf("refused requests produced %d records", n)
	}
}

// TestRateLimit: a subject's burst passes, the next request is 429 with
// Retry-After, other subjects are not affected, and time refills the bucket.
func TestRateLimit(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.RatePerSecond, cfg.RateBurst = 0.5, 3
	_, srv := e.gateway(cfg)
	get := func(tok string) reply { return call(t, "GET", srv.URL+"/v1/runs/run-1/history?limit=abc", tok, nil) }
	for i := range 3 {
		if r := get(tokAll); r.status != 400 {
			t.Fatalf("request %d: %d %s, want 400 (passed the limiter)", i, r.status, r.body)
		}
	}
	r := get(tokAll)
	if r.status != 429 || r.problem(t).Type != problem.RateLimited || r.header.Get("Retry-After") != "2" {
		t.Fatalf("over the burst: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := get(tokRun1); r.status != 400 {
		t.Errorf("another subject: %d, want 400", r.status)
	}
	e.clock.Advance(2 * time.Second)
	if r := get(tokAll); r.status != 400 {
		t.Errorf("after the Retry-After: %d %s", r.status, r.body)
	}
}

// TestNoOwner: with no projector running, reads say so with 503 no-owner
// and Retry-After, and a session-scoped token cannot be checked.
func TestNoOwner(t *testing.T) {
	e := newEnv(t, 2)
	_, srv := e.gateway(e.config())
	for _, path := range []string{"snapshot", "read-model", "history?limit=5"} {
		r := call(t, "GET", srv.URL+"/v1/runs/run-1/"+path, tokAll, nil)
		p := r.problem(t)
		if r.status != 503 || p.Type != problem.NoOwner || r.header.Get("Retry-After") == "" || !strings.Contains(p.Detail, "no projector instance owns partition") {
			t.Errorf("%s: %d %+v", path, r.status, p)
		}
	}
	r := post(t, srv, "run-1", tokSession, msg)
	if r.status != 503 || r.problem(t).Type != problem.NoOwner {
		t.Errorf("session token without an owner: %d %s", r.status, r.body)
	}
}

// TestInputAcceptedIdempotent: a 202 names the record Kafka holds and the
// Idempotency-Key of the input (the client's, or one the gateway made); the
// same key gives the same answer without a second record, to another
// instance the same event id; another body under the key is 422; the key the
// gateway made, sent back, is the same input.
func TestInputAcceptedIdempotent(t *testing.T) { brokertest.Run(t, testInputAcceptedIdempotent) }

func testInputAcceptedIdempotent(t *testing.T, broker *brokertest.Broker) {
	e := newEnvOn(t, broker, 4)
	_, srv := e.gateway(e.config())
	_, srv2 := e.gateway(e.config())

	noKey := post(t, srv, "run-1", tokRun1, msg)
	a := decodeAccepted(t, noKey)
	if a.Partition != topics.Partition([]byte("run-1"), 4) || a.Topic != e.names.HumanInput() || len(a.EventID) != 26 {
		t.Errorf("accepted %+v", a)
	}
	made := noKey.header.Get("Idempotency-Key")
	if made == "" {
		t.Fatal("an input without an Idempotency-Key got none back")
	}
	// Its retry, to another instance, with the key it was given: the same event.
	if r := decodeAccepted(t, post(t, srv2, "run-1", tokRun1, msg, "Idempotency-Key", made)); r.EventID != a.EventID {
		t.Errorf("retry with the key the gateway made: event %s, want %s", r.EventID, a.EventID)
	}
	first := post(t, srv, "run-1", tokRun1, msg, "Idempotency-Key", "k-1")
	k1 := decodeAccepted(t, first)
	again := post(t, srv, "run-1", tokRun1, "{ \"text\": \"hello\", \"input_kind\": \"message\" }", "Idempotency-Key", "k-1")
	if k2 := decodeAccepted(t, again); k2 != k1 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: %+v (replayed %q), want %+v", k2, again.header.Get("Idempotent-Replayed"), k1)
	}
	other := decodeAccepted(t, post(t, srv2, "run-1", tokRun1, msg, "Idempotency-Key", "k-1"))
	if other.EventID != k1.EventID || other.Offset == k1.Offset {
		t.Errorf("retry to another instance: %+v, want event id %s in a new record", other, k1.EventID)
	}
	r := post(t, srv, "run-1", tokRun1, `{"input_kind":"steer"}`, "Idempotency-Key", "k-1")
	if r.status != 422 || r.problem(t).Type != problem.Conflict {
		t.Errorf("same key, other body: %d %s", r.status, r.body)
	}
	// The key is per subject: alice's k-1 is another input.
	if k := decodeAccepted(t, post(t, srv, "run-1", tokAll, msg, "Idempotency-Key", "k-1")); k.EventID == k1.EventID {
		t.Error("two subjects' keys gave one event id")
	}

	recs := e.records(e.names.HumanInput())
	byOffset := map[int64]*topics.Event{}
	for _, rec := range recs {
		ev, err := topics.DecodeRecord(rec.Key, rec.Value, rec.Headers)
		if err != nil {
			t.Fatalf("record at %d fails the contract: %v", rec.Offset, err)
		}
		if rec.Partition != a.Partition || string(rec.Key) != "run-1" {
			t.Errorf("record at %d/%d key %q", rec.Partition, rec.Offset, rec.Key)
		}
		byOffset[rec.Offset] = ev
	}
	if len(recs) != 5 {
		t.Errorf("%d records, want 5 (the replay to the same instance produces nothing)", len(recs))
	}
	for _, acc := range []accepted{a, k1, other} {
		ev := byOffset[acc.Offset]
		if ev == nil || ev.ID != acc.EventID || ev.AgentID != "human:bob" || ev.Type != topics.TypeInput {
			t.Errorf("offset %d holds %+v, want event %s", acc.Offset, ev, acc.EventID)
		}
	}
}

// TestBrokerDown: while Kafka refuses produce requests an input is 503 with
// Retry-After, never 2xx; every 202 before and after is in the topic, and
// the retry of a 503 with its key is accepted once the broker is back.
func TestBrokerDown(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.ProduceTimeout = time.Second
	_, srv := e.gateway(cfg)
	var down atomic.Bool
	e.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		e.cluster.KeepControl()
		return nil, errors.New("broker down"), true
	})
	var acked []accepted
	for i := range 3 {
		acked = append(acked, decodeAccepted(t, post(t, srv, "run-1", tokAll, msg, "Idempotency-Key", "before-"+string(rune('a'+i)))))
	}
	down.Store(true)
	r := post(t, srv, "run-1", tokAll, msg, "Idempotency-Key", "during")
	if r.status != 503 || r.problem(t).Type != problem.Unavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("broker down: %d %s, want 503 with Retry-After", r.status, r.body)
	}
	down.Store(false)
	var retried accepted
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the retry is accepted", func() bool {
		r := post(t, srv, "run-1", tokAll, msg, "Idempotency-Key", "during")
		if r.status == 202 {
			retried = decodeAccepted(t, r)
			return true
		}
		if r.status != 503 {
			t.Fatalf("retry: %d %s", r.status, r.body)
		}
		return false
	}))
	acked = append(acked, retried)
	acked = append(acked, decodeAccepted(t, post(t, srv, "run-1", tokAll, msg)))
	got := map[int64]string{}
	for _, rec := range e.records(e.names.HumanInput()) {
		ev, err := topics.DecodeRecord(rec.Key, rec.Value, rec.Headers)
		if err != nil {
			t.Fatal(err)
		}
		got[rec.Offset] = ev.ID
	}
	for _, a := range acked {
		if got[a.Offset] != a.EventID {
			t.Errorf("acknowledged %s at offset %d, the topic holds %q there", a.EventID, a.Offset, got[a.Offset])
		}
	}
}

// TestDecodeInput covers the decoder's messages.
func TestDecodeInput(t *testing.T) {
	for body, want := range map[string]string{
		"":                                    "empty",
		`[]`:                                  "not a JSON object",
		`"text"`:                              "not a JSON object",
		`{"text":{"a":1}}`:                    "text: want a JSON string, got object",
		`{"input_kind":"x","colour":1}`:       "unknown field \"colour\"",
		`{"input_kind":"message"} {}`:         "after the JSON object",
		`{"input_kind":1}`:                    "input_kind: want a JSON string",
		`{"input_kind":"message"}`:            "",
		`{"input_kind":"message","Text":"x"}`: `"Text" differs from canopy's "text" only in case`,
		`{"input_kind":"message","input_kind":"cancel"}`: `"input_kind" is named twice`,
		`{"input_kind":"x","text":""}`:                   "",
	} {
		_, err := DecodeInput([]byte(body))
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("DecodeInput(%q) = %v, want %q", body, err, want)
		}
		// Messages are for the client: no Go type names or package prefixes.
		if err != nil && (strings.Contains(err.Error(), "json:") || strings.Contains(err.Error(), "gateway.") || strings.Contains(err.Error(), "*")) {
			t.Errorf("DecodeInput(%q) = %v: names Go internals", body, err)
		}
	}
}

// TestProduceTimeoutCarriesTheKey: a produce Kafka does not acknowledge in
// time is a 503 that carries the Idempotency-Key the gateway made for the
// input (the record may still be written), and a retry with that key is the
// same event (a 503 that was written must not become a second input).
// And a body that is not valid UTF-8 is refused, not mended.
func TestProduceTimeoutCarriesTheKey(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.ProduceTimeout = 300 * time.Millisecond
	_, srv := e.gateway(cfg)
	release := make(chan struct{})
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	var hold atomic.Bool
	hold.Store(true)
	e.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		if hold.Load() {
			e.cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	r := post(t, srv, "run-1", tokRun1, msg)
	key := r.header.Get("Idempotency-Key")
	if r.status != 503 || key == "" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a produce that timed out: %d, Idempotency-Key %q, Retry-After %q: %s", r.status, key, r.header.Get("Retry-After"), r.body)
	}
	hold.Store(false)
	closeRelease()
	retry := post(t, srv, "run-1", tokRun1, msg, "Idempotency-Key", key)
	if a := decodeAccepted(t, retry); a.EventID != idempotentEventID("bob", "run-1", key) {
		t.Errorf("the retry with the key is event %s, want the first attempt's %s", a.EventID, idempotentEventID("bob", "run-1", key))
	}

	bad := post(t, srv, "run-1", tokRun1, "{\"input_kind\":\"message\",\"text\":\"caf\xe9\"}")
	if bad.status != 400 || !strings.Contains(bad.problem(t).Detail, "text: invalid_utf8") {
		t.Errorf("a body that is not UTF-8: %d %s", bad.status, bad.body)
	}
}

// TestDrainLetsInputsFinish: Drain (http.Server.Shutdown's first step) ends
// the wake streams, but an input whose request is still open, here one
// that reaches the producer after Drain, is produced and answered 202, as
// Shutdown waits for open requests to finish.
func TestDrainLetsInputsFinish(t *testing.T) {
	e := newEnv(t, 2)
	g, srv := e.gateway(e.streamConfig())
	s := openStream(t, srv, "run-1", tokAll, "")
	s.next("open")
	g.Drain()
	for ev := range s.events {
		t.Errorf("after Drain, the stream sent %q", ev.name)
	}
	for i := range 5 {
		r := post(t, srv, "run-1", tokAll, msg)
		if r.status != 202 {
			t.Fatalf("input %d after Drain: %d %s, want 202", i, r.status, r.body)
		}
	}
}
