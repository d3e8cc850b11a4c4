package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// fakeQuery stands in for a projector's query endpoint (the contract of
// projectorhttp.Handler) so that routing is tested on its own: it says who
// answered, and answers some runs with the contract's problems.
type fakeQuery struct {
	name string
	mu   sync.Mutex
	hits map[string]int
	// misdirect answers 421 to the first query of these runs.
	misdirect map[string]bool
}

func (f *fakeQuery) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	run := r.PathValue("run_id")
	f.hits[run]++
	n := f.hits[run]
	f.mu.Unlock()
	switch {
	case run == "unknown":
		problem.Write(w, r, problem.New(404, problem.UnknownRun, "no event of run %q was projected", run))
		return
	case run == "restoring":
		p := problem.New(503, problem.Restoring, "partition restoring")
		p.RetryAfter = 3 * time.Second
		problem.Write(w, r, p)
		return
	case f.misdirect[run] && n == 1:
		problem.Write(w, r, problem.New(421, problem.NotOwner, "not the owner"))
		return
	}
	what := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	session := "s1"
	if strings.HasSuffix(run, "-s2") {
		session = "s2"
	}
	w.Header().Set("Content-Type", "application/json")
	if what == "history" {
		// A page as the contract has it (the conformance check reads it):
		// its one entry says who answered and what query it got.
		corr := r.URL.RawQuery
		_ = json.NewEncoder(w).Encode(projection.HistoryPage{RunID: run, Entries: []projection.HistoryEntry{
			{Seq: 1, EventID: f.name, Type: "fake", AgentID: run, At: topics.NewTime(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)), CorrelationID: &corr}}, OldestRetainedSeq: 1, WindowSize: 1})
		return
	}
	// A snapshot or read model as the contract has it (the conformance
	// check reads it against schema/openapi.yaml), made by a projection of
	// one event: the run's root node, named after who answered.
	proj, err := projection.New(projection.Config{})
	if err == nil {
		_, _, err = proj.ApplyEvent(&topics.Event{ID: "01JM0000000000000000000001", Source: "/fake", Type: topics.TypeNodeCreated,
			Time: topics.NewTime(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)), RunID: run, AgentID: f.name, SchemaVersion: 1,
			SessionID: session, Data: &topics.NodeCreated{Role: topics.RoleConductor}})
	}
	var body any
	if err == nil && what == "snapshot" {
		body, _, err = proj.Snapshot(run, time.Now())
	} else if err == nil {
		body, err = proj.ReadModel(run, time.Now(), false)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

// answeredBy reads who answered a snapshot or read model of fakeQuery (its
// root node) and for which run.
func answeredBy(body []byte) (who, run string) {
	var d struct {
		Root  string `json:"root_agent_id"`
		RunID string `json:"run_id"`
		Scope struct {
			RunID string `json:"run_id"`
		} `json:"scope"`
	}
	_ = json.Unmarshal(body, &d)
	return d.Root, d.RunID + d.Scope.RunID
}

func newFakeQuery(t *testing.T, name string) (*fakeQuery, *httptest.Server) {
	f := &fakeQuery{name: name, hits: map[string]int{}, misdirect: map[string]bool{}}
	mux := http.NewServeMux()
	mux.Handle("GET /internal/v1/runs/{run_id}/{what}", f)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

// runOn returns a run id in partition part.
func runOn(part, partitions int32, suffix string) string {
	for i := 0; ; i++ {
		r := fmt.Sprintf("run-%d%s", i, suffix)
		if topics.Partition([]byte(r), partitions) == part {
			return r
		}
	}
}

// TestRouting: with two real projector instances advertising two query
// endpoints, each read reaches the instance that owns the run's partition;
// a 421 refreshes the assignment and retries once; the projector's problems
// reach the client; a session-scoped token is checked against the run's
// snapshot scope.
func TestRouting(t *testing.T) {
	e := newEnv(t, 2)
	fa, sa := newFakeQuery(t, "A")
	fb, sb := newFakeQuery(t, "B")
	e.projector(sa.Listener.Addr().String())
	e.projector(sb.Listener.Addr().String())
	adm := kadm.NewClient(e.client)
	var assign map[int32]cluster.Member
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the two instances share the partitions", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		assign, err = cluster.Assignment(ctx, adm, e.group, e.names)
		return err == nil && len(assign) == 2 && assign[0].Addr != assign[1].Addr
	}))
	who := map[string]string{sa.Listener.Addr().String(): "A", sb.Listener.Addr().String(): "B"}
	_, srv := e.gateway(e.config())

	for part := range int32(2) {
		run := runOn(part, 2, "")
		for _, what := range []string{"snapshot", "read-model", "history?cursor=c1&limit=7"} {
			r := call(t, "GET", srv.URL+"/v1/runs/"+run+"/"+what, tokAll, nil)
			var got map[string]any
			if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
				t.Fatalf("%s %s: %d %s", run, what, r.status, r.body)
			}
			got["who"], got["run"] = answeredBy(r.body)
			if strings.HasPrefix(what, "history") {
				var pg projection.HistoryPage
				if err := json.Unmarshal(r.body, &pg); err != nil {
					t.Fatal(err)
				}
				if len(pg.Entries) != 1 || pg.Entries[0].CorrelationID == nil || *pg.Entries[0].CorrelationID != "cursor=c1&limit=7" {
					t.Errorf("history query relayed as %s", r.body)
				} else {
					got["who"], got["run"] = pg.Entries[0].EventID, pg.RunID
				}
			}
			if got["who"] != who[assign[part].Addr] || got["run"] != run {
				t.Errorf("%s of %s (partition %d) answered by %v, want %s", what, run, part, got["who"], who[assign[part].Addr])
			}
		}
	}

	// 421: the instance asked is no longer the owner; the gateway asks the
	// group again and retries once.
	moved := runOn(0, 2, "-moved")
	owner := fa
	if who[assign[0].Addr] == "B" {
		owner = fb
	}
	owner.misdirect[moved] = true
	if r := call(t, "GET", srv.URL+"/v1/runs/"+moved+"/snapshot", tokAll, nil); r.status != 200 {
		t.Errorf("after a 421: %d %s", r.status, r.body)
	}
	if owner.hits[moved] != 2 {
		t.Errorf("the owner was asked %d times, want 2", owner.hits[moved])
	}

	r := call(t, "GET", srv.URL+"/v1/runs/unknown/snapshot", tokAll, nil)
	if p := r.problem(t); r.status != 404 || p.Type != problem.UnknownRun || p.Instance != "/v1/runs/unknown/snapshot" {
		t.Errorf("unknown run: %d %+v", r.status, p)
	}
	r = call(t, "GET", srv.URL+"/v1/runs/restoring/read-model", tokAll, nil)
	if p := r.problem(t); r.status != 503 || p.Type != problem.Restoring || r.header.Get("Retry-After") != "3" {
		t.Errorf("restoring: %d %+v Retry-After %q", r.status, p, r.header.Get("Retry-After"))
	}

	// carol's token names session s1 only.
	if r := call(t, "GET", srv.URL+"/v1/runs/run-a-s1/snapshot", tokSession, nil); r.status != 200 {
		t.Errorf("session token, run in its session: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", srv.URL+"/v1/runs/run-a-s2/snapshot", tokSession, nil); r.status != 403 || r.problem(t).Type != problem.Forbidden {
		t.Errorf("session token, run in another session: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", srv.URL+"/v1/runs/unknown/snapshot", tokSession, nil); r.status != 403 {
		t.Errorf("session token, unknown run: %d %s", r.status, r.body)
	}
	acc := decodeAccepted(t, post(t, srv, "run-b-s1", tokSession, msg))
	if r := post(t, srv, "run-b-s1", tokSession, `{"input_kind":"message","session_id":"s2"}`); r.status != 403 {
		t.Errorf("session token naming another session: %d %s", r.status, r.body)
	}
	for _, rec := range e.records(e.names.HumanInput()) {
		ev, err := topics.DecodeRecord(rec.Key, rec.Value, rec.Headers)
		if err != nil || (ev.ID == acc.EventID && ev.SessionID != "s1") {
			t.Errorf("record %+v %v: want the run's session s1 filled in", ev, err)
		}
	}
	if r := post(t, srv, "run-b-s2", tokSession, msg); r.status != 403 {
		t.Errorf("session token, input to a run of another session: %d %s", r.status, r.body)
	}
}
