package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectorhttp"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// uiStack is a real stack for the live view: a kfake broker on loopback,
// one projector with its query server, and a gateway in front.
type uiStack struct {
	e   *env
	p   *projector.Projector
	srv *httptest.Server
	cl  *kgo.Client
}

func newUIStack(t *testing.T) *uiStack { t.Helper(); return newUIStackWith(t, 0) }

// newUIStackWith is newUIStack with a projector that keeps up to hot nodes
// of a run in memory (0: the default): a run larger than that reads its
// nodes back from Pebble as its events touch them, which makes generating
// a 10,000-node run slow.
func newUIStackWith(t *testing.T, hot int) *uiStack {
	t.Helper()
	e := newEnv(t, 2)
	// The endpoint listens first: the instance advertises its address.
	qsrv := httptest.NewUnstartedServer(nil)
	t.Cleanup(qsrv.Close)
	var p *projector.Projector
	if hot == 0 {
		p, _ = e.projector(qsrv.Listener.Addr().String())
	} else {
		cfg := projector.Config{Kafka: kafkaconn.Conn{Brokers: e.brokers}, Names: e.names, DataDir: t.TempDir(), Group: e.group,
			SessionTimeout: 2 * time.Second, AdvertiseAddr: qsrv.Listener.Addr().String(),
			Projection: projection.Config{MaxHotNodesPerRun: hot},
			Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
		ctx, cancel := context.WithCancel(context.Background())
		var err error
		if p, err = projector.New(ctx, cfg); err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("projector: %v", err)
			}
		})
	}
	qsrv.Config.Handler = projectorhttp.New(projectorhttp.Config{Source: p})
	qsrv.Start()
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the projector owns both partitions", func() bool { return len(p.Owned()) == 2 }))
	// The wall clock, not the env's frozen test clock: the page's lease
	// countdowns run on it, and the rate limiter refills by it (a frozen
	// clock never refills a token subject's bucket).
	cfg := e.config()
	cfg.Now = time.Now
	_, srv := e.gateway(cfg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &uiStack{e: e, p: p, srv: srv, cl: cl}
}

// produce produces events to their runs' partitions of the agent events.
func (s *uiStack) produce(t *testing.T, evs ...topics.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, 0, len(evs))
	for i := range evs {
		rec, err := topics.EventRecord(s.e.names.AgentEvents(), &evs[i], "")
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = topics.Partition(rec.Key, s.e.parts)
		recs = append(recs, rec)
	}
	if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// generate produces a workload run of n nodes whose events are timed from
// now (so that the leases it holds run on the wall clock) and waits until
// the projector applied all of them.
func (s *uiStack) generate(t *testing.T, run string, n int) []topics.Event {
	t.Helper()
	return s.generateUntil(t, run, n, false)
}

// generateUntil is generate that, with nodesOnly, waits only until the
// run has its n nodes (the workload creates the tree first), not for
// every event.
func (s *uiStack) generateUntil(t *testing.T, run string, n int, nodesOnly bool) []topics.Event {
	t.Helper()
	return s.generateSpec(t, workload.Spec{RunID: run, Nodes: n}, nodesOnly)
}

// generateSpec is generateUntil of the workload run spec describes (its
// run id, nodes and Activity; session s1, seed 7, events 1 ms apart).
func (s *uiStack) generateSpec(t *testing.T, spec workload.Spec, nodesOnly bool) []topics.Event {
	t.Helper()
	run, n := spec.RunID, spec.Nodes
	spec.SessionID, spec.Step, spec.Seed = "s1", time.Millisecond, 7
	// The events end now, none from the future: the same spec makes the
	// same number of events whatever its start.
	count := len(workload.Generate(spec))
	spec.Start = time.Now().Add(-time.Duration(count)*time.Millisecond - 5*time.Second)
	evs := workload.Generate(spec)
	s.produce(t, evs...)
	var seq int64
	testenv.WaitFor(t, 60*time.Second+time.Duration(n)*100*time.Millisecond, testenv.Until(run+" is projected", func() bool {
		// carol's token (session s1), so that alice's, which the page
		// uses, keeps its whole rate-limit burst.
		r := call(t, "GET", s.srv.URL+"/v1/runs/"+run+"/read-model", tokSession, nil)
		var m projection.ReadModel
		if r.status != 200 || json.Unmarshal(r.body, &m) != nil {
			return false // e.g. 429: this loop polls faster than the rate limit
		}
		if m.AsOfEventSeq != seq {
			seq = m.AsOfEventSeq
			t.Logf("%s: %d of %d events applied, %d nodes", run, seq, len(evs), m.Counts.Nodes)
		}
		if nodesOnly {
			return m.Counts.Nodes >= n
		}
		return seq == int64(len(evs))
	}))
	return evs
}

// TestUINodesLongIDs: ids are bounded in code points, not bytes, so a run
// id of 100 CJK characters (300 bytes) is served, and a node listing pages
// through agent ids of up to 256 code points of any width (1,024 bytes of
// emoji): every next_cursor the owner gives is taken back.
func TestUINodesLongIDs(t *testing.T) {
	s := newUIStack(t)
	run := strings.Repeat("工", 100)
	at := time.Now().Add(-time.Minute)
	ev := func(i int, agent string, p topics.Payload) topics.Event {
		return topics.Event{ID: fmt.Sprintf("ev-%d", i), Source: "/agents/test", Type: p.EventType(), Time: topics.NewTime(at.Add(time.Duration(i) * time.Millisecond)),
			RunID: run, AgentID: agent, SchemaVersion: topics.CurrentSchemaVersion, SessionID: "s1", Data: p}
	}
	agents := []string{
		strings.Repeat("a", 200),        // a cursor of 267 characters
		strings.Repeat("😀", 256),        // 1,024 bytes
		strings.Repeat("工", 256),        // 768 bytes
		strings.Repeat("e\u0301", 128),  // 256 code points, 128 characters seen
		strings.Repeat("👩🏽\u200d💻", 64), // 256 code points
	}
	evs := []topics.Event{ev(0, "conductor", &topics.NodeCreated{Role: topics.RoleConductor})}
	for i, a := range agents {
		evs = append(evs, ev(i+1, a, &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
	}
	s.produce(t, evs...)
	path := s.srv.URL + "/v1/runs/" + url.PathEscape(run)
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the run is projected", func() bool {
		r := call(t, "GET", path+"/read-model", tokSession, nil)
		var m projection.ReadModel
		return r.status == 200 && json.Unmarshal(r.body, &m) == nil && m.Counts.Nodes == len(evs)
	}))
	seen := map[string]bool{}
	for cursor, pages := "", 0; ; pages++ {
		if pages > len(evs) {
			t.Fatal("the listing does not end")
		}
		r := call(t, "GET", path+"/nodes?limit=1&cursor="+cursor, tokAll, nil)
		if r.status != 200 {
			t.Fatalf("page %d (cursor of %d characters): %d %s", pages, len(cursor), r.status, r.body)
		}
		var pg projection.NodesPage
		if err := json.Unmarshal(r.body, &pg); err != nil {
			t.Fatal(err)
		}
		for _, n := range pg.Nodes {
			seen[n.AgentID] = true
		}
		if cursor = pg.NextCursor; cursor == "" {
			break
		}
	}
	for _, a := range append(agents, "conductor") {
		if !seen[a] {
			t.Errorf("node %.20q... not listed", a)
		}
	}
	// One code point more is refused, as the contract says.
	if r := call(t, "GET", s.srv.URL+"/v1/runs/"+url.PathEscape(strings.Repeat("工", 257))+"/snapshot", tokAll, nil); r.status != 400 ||
		!strings.Contains(r.problem(t).Detail, "run_id: longer than 256 characters (Unicode code points)") {
		t.Errorf("a run id of 257 code points: %d %s", r.status, r.body)
	}
}

// TestUIPageServed: the live view's page and assets are served without a
// token, carry no data, and keep to their own origin (CSP); /ui redirects.
func TestUIPageServed(t *testing.T) {
	e := newEnv(t, 1)
	_, srv := e.gateway(e.config())
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css",
		"/ui/session.js": "text/javascript", "/ui/session.css": "text/css"} {
		resp, err := noRedirect.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
	}
	resp, err := noRedirect.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != UIPath {
		t.Errorf("GET /ui: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if r := call(t, "GET", srv.URL+"/ui/missing.js", "", nil); r.status != 404 {
		t.Errorf("a file the page does not have: %d", r.status)
	}
}

// TestUINodesEndpoint: GET /v1/runs/{run}/nodes pages through every node of
// a run (not only the bounded snapshot's), each once, with honest nulls;
// bad cursors and limits are 400s, an unknown run 404, no token 401.
func TestUINodesEndpoint(t *testing.T) {
	s := newUIStack(t)
	s.generate(t, "ui-nodes", 150)
	seen := map[string]bool{}
	cursor, pages, planned := "", 0, 0
	for {
		u := s.srv.URL + "/v1/runs/ui-nodes/nodes?limit=40"
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		r := call(t, "GET", u, tokAll, nil)
		if r.status != 200 {
			t.Fatalf("nodes page %d: %d %s", pages, r.status, r.body)
		}
		var pg projection.NodesPage
		if err := json.Unmarshal(r.body, &pg); err != nil {
			t.Fatal(err)
		}
		pages++
		if pg.Total != 150 || len(pg.Nodes) > 40 {
			t.Fatalf("page %d: total %d, %d nodes", pages, pg.Total, len(pg.Nodes))
		}
		for _, n := range pg.Nodes {
			if seen[n.AgentID] {
				t.Errorf("node %s on two pages", n.AgentID)
			}
			seen[n.AgentID] = true
			if n.Status == "" || n.Role == "" {
				t.Errorf("node %s without an honest status/role: %+v", n.AgentID, n)
			}
			if n.AgentID != "conductor" && n.ParentAgentID == nil {
				t.Errorf("node %s has no parent", n.AgentID)
			}
			if n.Plan != nil {
				planned++
				if n.Plan.PlanID == "" || n.Plan.Band < 0 || n.Plan.Band >= n.Plan.BandCount {
					t.Errorf("node %s: plan place %+v", n.AgentID, *n.Plan)
				}
			}
		}
		if cursor = pg.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != 150 || pages != 4 {
		t.Errorf("%d nodes on %d pages, want 150 on 4", len(seen), pages)
	}
	if planned != 149 {
		t.Errorf("%d nodes placed in a plan's bands, want every node but the root (149)", planned)
	}
	for _, q := range []string{"limit=0", "limit=1001", "cursor=%21%21"} {
		if r := call(t, "GET", s.srv.URL+"/v1/runs/ui-nodes/nodes?"+q, tokAll, nil); r.status != 400 {
			t.Errorf("nodes?%s: %d %s", q, r.status, r.body)
		}
	}
	if r := call(t, "GET", s.srv.URL+"/v1/runs/never-seen/nodes", tokAll, nil); r.status != 404 || r.problem(t).Type != problem.UnknownRun {
		t.Errorf("unknown run: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", s.srv.URL+"/v1/runs/ui-nodes/nodes", "", nil); r.status != 401 {
		t.Errorf("no token: %d", r.status)
	}
	if r := call(t, "GET", s.srv.URL+"/v1/runs/ui-nodes/nodes", tokRun1, nil); r.status != 403 {
		t.Errorf("a token of another run: %d", r.status)
	}
}

// TestUIRunsList: GET /v1/runs merges the runs of two projector instances
// (each owns one partition), pages through them by run id, and lists only
// the runs a token covers.
func TestUIRunsList(t *testing.T) {
	e := newEnv(t, 2)
	e.twoOwners(t)
	_, srv := e.gateway(e.config())
	s := &uiStack{e: e, srv: srv}
	var err error
	if s.cl, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cl.Close)
	runs := []string{"run-1", "run-2", "run-3", "run-4", "run-5"}
	parts := map[int32]bool{}
	for _, run := range runs {
		s.generate(t, run, 5)
		parts[topics.Partition([]byte(run), 2)] = true
	}
	if len(parts) != 2 {
		t.Fatalf("the runs are all on one partition: %v", parts)
	}
	var got []string
	after := ""
	for range 10 {
		u := srv.URL + "/v1/runs?limit=2"
		if after != "" {
			u += "&after=" + after
		}
		r := call(t, "GET", u, tokAll, nil)
		var l runsList
		if r.status != 200 || json.Unmarshal(r.body, &l) != nil {
			t.Fatalf("GET %s: %d %s", u, r.status, r.body)
		}
		if !l.Complete || len(l.UnavailablePartitions) != 0 || len(l.Runs) > 2 {
			t.Fatalf("page after %q: %s", after, r.body)
		}
		for _, ref := range l.Runs {
			got = append(got, ref.RunID)
			if ref.AsOfEventSeq == 0 || ref.SessionID == nil || *ref.SessionID != "s1" {
				t.Errorf("run %+v", ref)
			}
		}
		if after = l.NextAfter; after == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(runs, ",") {
		t.Errorf("listed %v, want %v", got, runs)
	}
	r := call(t, "GET", srv.URL+"/v1/runs", tokRun1, nil)
	var l runsList
	if err := json.Unmarshal(r.body, &l); err != nil || len(l.Runs) != 1 || l.Runs[0].RunID != "run-1" {
		t.Errorf("bob's list: %d %s", r.status, r.body)
	}
	for _, q := range []string{"limit=0", "limit=1001"} {
		if r := call(t, "GET", srv.URL+"/v1/runs?"+q, tokAll, nil); r.status != 400 {
			t.Errorf("runs?%s: %d", q, r.status)
		}
	}
	if r := call(t, "GET", srv.URL+"/v1/runs", "", nil); r.status != 401 {
		t.Errorf("no token: %d", r.status)
	}
}
