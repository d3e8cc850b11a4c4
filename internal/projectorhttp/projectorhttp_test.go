package projectorhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// window is the history window of the tests' projector.
const window = 24

// process is a projector process as projector run makes one, on kfake: a
// Supervisor, not running until run, and the run it was given (its events
// produced, none of its timers due while the test runs), and the events of
// the more runs it was given.
type process struct {
	sup    *projector.Supervisor
	run    string
	events int
	more   map[string]int
	logs   testenv.Buffer
}

func newProcess(t *testing.T, more ...workload.Spec) *process {
	t.Helper()
	b := brokertest.NewKfake(t)
	names := topics.Names{Prefix: "http", Version: 1}
	cl, err := kgo.NewClient(kafkaconn.Conn{Brokers: b.Addrs}.Opts(kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 2, 1); err != nil {
		t.Fatal(err)
	}
	p := &process{run: "http-run", more: map[string]int{}}
	evs := workload.Generate(workload.Spec{RunID: p.run, Nodes: 12, Seed: 7, Start: time.Now().Add(time.Hour).UTC(), Step: 10 * time.Millisecond})
	p.events = len(evs)
	for _, spec := range more {
		m := workload.Generate(spec)
		p.more[spec.RunID] = len(m)
		evs = append(evs, m...)
	}
	for i := range evs {
		r, err := topics.EventRecord(names.AgentEvents(), &evs[i], "")
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = topics.Partition(r.Key, 2)
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := projector.Config{Kafka: kafkaconn.Conn{Brokers: b.Addrs}, Names: names, DataDir: t.TempDir(), Group: "http",
		SessionTimeout: 2 * time.Second, Projection: projection.Config{HistorySize: window},
		Logger: slog.New(slog.NewTextHandler(&p.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if p.sup, err = projector.NewSupervisor(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("projector log:\n%s", p.logs.String())
		}
	})
	return p
}

// start runs the Supervisor until stop, which returns once it has.
func (p *process) start(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.sup.Run(ctx) }()
	var once atomic.Bool
	stop = func() {
		if once.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Supervisor.Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// client makes requests of a Handler served over HTTP.
type client struct {
	t   *testing.T
	url string
}

func serve(t *testing.T, h *Handler) *client {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &client{t: t, url: srv.URL}
}

// get answers GET path with authorization (none if empty).
func (c *client) get(path, authorization string) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.url+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// problem checks that GET path is the problem typ with status, with a
// Retry-After or not.
func (c *client) problem(path string, status int, typ string, retry bool) {
	c.t.Helper()
	code, h, body := c.get(path, "")
	var pr problem.Problem
	if code != status || h.Get("Content-Type") != problem.ContentType || json.Unmarshal(body, &pr) != nil ||
		pr.Type != typ || pr.Status != status || pr.Instance == "" || (h.Get("Retry-After") != "") != retry {
		c.t.Errorf("GET %s: %d %s %q (Retry-After %q), want %d problem %s (Retry-After: %v)", path, code, h.Get("Content-Type"), body,
			h.Get("Retry-After"), status, typ, retry)
	}
}

// TestEndpoint: the endpoint of a projector process answers for the
// instance its Supervisor runs now. Before the first instance, and once the
// Supervisor stopped, a read is 503 Unavailable with Retry-After and
// /readyz 503; while one runs, the run's snapshot, read model, history
// (paged), nodes and the run list are its JSON, and a bad request or an
// unknown run the problem that says so. /metrics is the handler given, and
// /readyz says 503 once the process shuts down, whatever the instance says.
func TestEndpoint(t *testing.T) {
	p := newProcess(t)
	var serving atomic.Bool
	serving.Store(true)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("canopy_metric 1\n")) })
	c := serve(t, New(Config{Source: p.sup, Metrics: metrics, Serving: serving.Load}))
	snapshot := "/internal/v1/runs/" + p.run + "/snapshot"

	c.problem(snapshot, http.StatusServiceUnavailable, problem.Unavailable, true)
	if code, _, body := c.get("/readyz", ""); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "no projector instance") {
		t.Errorf("/readyz before an instance: %d %s, want 503 saying none has started", code, body)
	}
	if code, _, body := c.get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}

	stop := p.start(t)
	testenv.WaitFor(t, 60*time.Second, func() error {
		code, _, body := c.get(snapshot, "")
		var snap topics.AgentTreeSnapshot
		if code != http.StatusOK || json.Unmarshal(body, &snap) != nil || snap.AsOfEventSeq != int64(p.events) {
			return fmt.Errorf("the run's snapshot as of its %d events: %d %.200s", p.events, code, body)
		}
		return nil
	})
	testenv.WaitFor(t, 60*time.Second, func() error {
		if code, _, body := c.get("/readyz", ""); code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
	code, h, body := c.get(snapshot, "")
	var snap topics.AgentTreeSnapshot
	if code != http.StatusOK || h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" ||
		json.Unmarshal(body, &snap) != nil || snap.Scope.RunID != p.run {
		t.Errorf("GET snapshot: %d %s %s %.200s", code, h.Get("Content-Type"), h.Get("Cache-Control"), body)
	}
	code, _, body = c.get("/internal/v1/runs/"+p.run+"/read-model", "")
	var rm map[string]json.RawMessage
	if code != http.StatusOK || json.Unmarshal(body, &rm) != nil {
		t.Fatalf("GET read-model: %d %.200s", code, body)
	}
	// What the run's events did not say is unknown, not a default; what
	// they say none of is known (no approval waits).
	for _, f := range []string{"model_routing", "permission_state", "sandbox_profile", "active_turn_id"} {
		var fact projection.Fact[string]
		if err := json.Unmarshal(rm[f], &fact); err != nil || fact.Status != projection.Unknown || fact.Value != nil || fact.Reason == "" {
			t.Errorf("read model %s: %s, want status unknown with a reason and no value", f, rm[f])
		}
	}
	var approvals projection.Fact[projection.PendingRequests]
	if err := json.Unmarshal(rm["pending_approvals"], &approvals); err != nil || approvals.Status != projection.Known || approvals.Value == nil || approvals.Value.Total != 0 {
		t.Errorf("read model pending_approvals: %s, want known, none", rm["pending_approvals"])
	}
	var page, page2 projection.HistoryPage
	code, _, body = c.get("/internal/v1/runs/"+p.run+"/history?limit=3", "")
	if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Entries) != 3 || page.NextCursor == "" {
		t.Fatalf("GET history: %d %.300s", code, body)
	}
	code, _, body = c.get("/internal/v1/runs/"+p.run+"/history?limit=3&cursor="+page.NextCursor, "")
	if code != http.StatusOK || json.Unmarshal(body, &page2) != nil || len(page2.Entries) != 3 ||
		page2.Entries[0].Seq != page.Entries[2].Seq-1 {
		t.Errorf("GET history, second page: %d %.300s", code, body)
	}
	var nodes projection.NodesPage
	code, _, body = c.get("/internal/v1/runs/"+p.run+"/nodes?limit=5", "")
	if code != http.StatusOK || json.Unmarshal(body, &nodes) != nil || len(nodes.Nodes) != 5 || nodes.Total != 12 || nodes.NextCursor == "" {
		t.Errorf("GET nodes: %d %.300s", code, body)
	}
	var runs projector.RunsPage
	code, _, body = c.get("/internal/v1/runs", "")
	if code != http.StatusOK || json.Unmarshal(body, &runs) != nil || len(runs.Runs) != 1 || runs.Runs[0].RunID != p.run || len(runs.Partitions) != 2 {
		t.Errorf("GET runs: %d %.300s", code, body)
	}

	c.problem("/internal/v1/runs/never-seen/read-model", http.StatusNotFound, problem.UnknownRun, false)
	c.problem("/internal/v1/runs/"+p.run+"/history?cursor=%21%21", http.StatusBadRequest, problem.BadRequest, false)
	for _, l := range []string{"0", strconv.Itoa(projection.MaxPage(window) + 1), "-1", "x"} {
		c.problem("/internal/v1/runs/"+p.run+"/history?limit="+l, http.StatusBadRequest, problem.BadRequest, false)
	}
	c.problem("/internal/v1/runs/"+p.run+"/nodes?limit="+strconv.Itoa(projection.MaxNodesLimit+1), http.StatusBadRequest, problem.BadRequest, false)
	c.problem("/internal/v1/runs?limit=0", http.StatusBadRequest, problem.BadRequest, false)
	c.problem("/internal/v1/nothing", http.StatusNotFound, problem.NotFound, false)

	if code, _, body := c.get("/metrics", ""); code != http.StatusOK || string(body) != "canopy_metric 1\n" {
		t.Errorf("/metrics: %d %s, want the metrics handler's answer", code, body)
	}
	serving.Store(false)
	if code, _, body := c.get("/readyz", ""); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "shutting down") {
		t.Errorf("/readyz once the process shuts down: %d %s, want 503 saying so", code, body)
	}
	serving.Store(true)

	stop()
	c.problem(snapshot, http.StatusServiceUnavailable, problem.Unavailable, true)
	if code, _, _ := c.get("/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the Supervisor stopped: %d, want 503", code)
	}

	// Without a metrics handler there is no /metrics.
	bare := serve(t, New(Config{Source: p.sup}))
	bare.problem("/metrics", http.StatusNotFound, problem.NotFound, false)
}

// TestSecret: with a secret, the endpoint answers for a run only to a
// caller that presents it as its bearer token. No token, a wrong one, the
// right one under another scheme: each is 401 problem+json, and the same
// answer, so that a caller cannot tell which it got wrong; an unknown path
// under /internal/ is 401 too, not 404. The probes and /metrics stay open:
// they say nothing about any run.
func TestSecret(t *testing.T) {
	p := newProcess(t)
	p.start(t)
	secret := []byte("0123456789abcdef0123456789abcdef-the-secret")
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("canopy_metric 1\n")) })
	c := serve(t, New(Config{Source: p.sup, Secret: secret, Metrics: metrics}))
	snapshot := "/internal/v1/runs/" + p.run + "/snapshot"
	bearer := "Bearer " + string(secret)
	testenv.WaitFor(t, 60*time.Second, func() error {
		if code, _, body := c.get(snapshot, bearer); code != http.StatusOK {
			return fmt.Errorf("the run's snapshot with the secret: %d %.200s", code, body)
		}
		return nil
	})

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
		code, h, body := c.get(snapshot, auth)
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
	for _, path := range []string{"/internal/v1/runs/" + p.run + "/read-model", "/internal/v1/runs/" + p.run + "/history",
		"/internal/v1/runs/" + p.run + "/nodes", "/internal/v1/runs", "/internal/v1/nothing", "/elsewhere"} {
		if code, _, body := c.get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the secret: %d %s, want 401", path, code, body)
		}
	}

	// The right secret, its scheme in any case.
	for _, auth := range []string{bearer, "bearer " + string(secret)} {
		code, _, body := c.get(snapshot, auth)
		var snap topics.AgentTreeSnapshot
		if code != http.StatusOK || json.Unmarshal(body, &snap) != nil || snap.Scope.RunID != p.run {
			t.Errorf("GET snapshot with the secret (%q): %d %.200s", auth[:7], code, body)
		}
	}
	if code, _, body := c.get("/internal/v1/runs/"+p.run+"/history?limit=2", bearer); code != http.StatusOK {
		t.Errorf("GET history with the secret: %d %.200s", code, body)
	}
	if code, _, body := c.get("/internal/v1/nothing", bearer); code != http.StatusNotFound {
		t.Errorf("GET an unknown path with the secret: %d %s, want 404", code, body)
	}
	testenv.WaitFor(t, 60*time.Second, func() error {
		if code, _, body := c.get("/readyz", ""); code != http.StatusOK {
			return fmt.Errorf("/readyz without the secret: %d %s, want 200: the probes are open", code, body)
		}
		return nil
	})
	for _, path := range []string{"/healthz", "/metrics"} {
		if code, _, body := c.get(path, ""); code != http.StatusOK {
			t.Errorf("GET %s without the secret: %d %s, want 200: it is open", path, code, body)
		}
	}

	// Without a secret the endpoint answers anyone (it listens on loopback
	// only: Endpoint.Validate).
	open := serve(t, New(Config{Source: p.sup}))
	if code, _, body := open.get(snapshot, ""); code != http.StatusOK {
		t.Errorf("GET snapshot of an endpoint without a secret: %d %s", code, body)
	}

	// The profiles: only when asked for, and behind the secret like the
	// reads (a heap profile shows what the heap holds).
	if code, _, _ := open.get("/debug/pprof/heap", ""); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/heap without Profiling: %d, want 404", code)
	}
	prof := serve(t, New(Config{Source: p.sup, Secret: secret, Profiling: true}))
	if code, _, _ := prof.get("/debug/pprof/heap", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /debug/pprof/heap without the secret: %d, want 401", code)
	}
	if code, _, body := prof.get("/debug/pprof/heap?debug=1", bearer); code != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Errorf("GET /debug/pprof/heap with the secret: %d %.100s, want the heap profile", code, body)
	}
}

// TestReadProblems: each error a read can end with is the problem, status
// and Retry-After the gateway acts on: the owner moved (421, ask again),
// restoring, paused or no instance (503, retry after a moment), the run
// unknown (404) or expired (410), a bad cursor or limit (400); anything
// else is a 500.
func TestReadProblems(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		typ    string
		retry  bool
	}{
		{fmt.Errorf("%w: partition 1 of run %q", projector.ErrNotOwner, "r"), http.StatusMisdirectedRequest, problem.NotOwner, false},
		{fmt.Errorf("%w: partition 1 of run %q", projector.ErrRestoring, "r"), http.StatusServiceUnavailable, problem.Restoring, true},
		{fmt.Errorf("%w (partition 1)", projector.ErrSessionUncertain), http.StatusServiceUnavailable, problem.Unavailable, true},
		{projector.ErrNoInstance, http.StatusServiceUnavailable, problem.Unavailable, true},
		{projector.ErrStopped, http.StatusServiceUnavailable, problem.Unavailable, true},
		{fmt.Errorf("%w: disk", projection.ErrStore), http.StatusServiceUnavailable, problem.Unavailable, true},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, problem.Unavailable, true},
		{context.Canceled, http.StatusServiceUnavailable, problem.Unavailable, false},
		{fmt.Errorf("%w: %q", projection.ErrUnknownRun, "r"), http.StatusNotFound, problem.UnknownRun, false},
		{&projection.ExpiredError{RunID: "r", At: time.Unix(0, 0), Retention: time.Hour}, http.StatusGone, problem.RunExpired, false},
		{fmt.Errorf("%w: %q", projection.ErrBadCursor, "!!"), http.StatusBadRequest, problem.BadRequest, false},
		{fmt.Errorf("%w: 0", projection.ErrBadLimit), http.StatusBadRequest, problem.BadRequest, false},
		{errors.New("something else"), http.StatusInternalServerError, problem.Internal, false},
	} {
		pr := readProblem(tc.err)
		if pr.Status != tc.status || pr.Type != tc.typ || (pr.RetryAfter > 0) != tc.retry || !strings.Contains(pr.Detail, tc.err.Error()) {
			t.Errorf("%v: %d %s (Retry-After %v) %q, want %d %s (Retry-After: %v)", tc.err, pr.Status, pr.Type, pr.RetryAfter, pr.Detail,
				tc.status, tc.typ, tc.retry)
		}
	}
}
