package gateway

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// produceEvents produces evs to their runs' partitions of the agent events.
func (e *env) produceEvents(t *testing.T, evs []topics.Event) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, 0, len(evs))
	for i := range evs {
		rec, err := topics.EventRecord(e.names.AgentEvents(), &evs[i], "")
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = topics.Partition(rec.Key, e.parts)
		recs = append(recs, rec)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestSessionSnapshot: a session whose runs are on both partitions, each
// owned by another projector instance, is one snapshot: every run, its
// threads, its facts and a history merged across the runs, paged by the
// cursors the gateway hands out; a token sees the runs it covers only; a
// bad limit or cursor is a 400, a session without runs a 404. With one
// instance unreachable, the snapshot and the history say they are
// incomplete and name its partition, and still give the other's runs.
func TestSessionSnapshot(t *testing.T) { brokertest.Run(t, testSessionSnapshot) }

func testSessionSnapshot(t *testing.T, broker *brokertest.Broker) {
	e := newEnvOn(t, broker, 2)
	o := e.twoOwners(t)
	near := topics.Partition([]byte("run-1"), 2) // run-1: bob's token covers it
	far := 1 - near
	runs := map[string]int{"run-1": 0, runOn(far, 2, "-sa"): 0, runOn(near, 2, "-sb"): 0}
	start := e.clock.Now()
	var evs []topics.Event
	i := 0
	for _, run := range slices.Sorted(mapsKeys(runs)) {
		thread := "t-2"
		if run == "run-1" {
			thread = "t-1"
		}
		g := workload.Generate(workload.Spec{RunID: run, SessionID: "s1", ThreadID: thread, Nodes: 5, Seed: uint64(i + 1),
			Start: start.Add(time.Duration(i) * time.Minute), Step: time.Millisecond, Activity: i == 0})
		runs[run] = len(g)
		evs = append(evs, g...)
		i++
	}
	evs = append(evs, workload.Generate(workload.Spec{RunID: "run-s2", SessionID: "s2", Nodes: 2, Start: start, Step: time.Millisecond})...)
	e.produceEvents(t, evs)
	cfg := e.config()
	cfg.RateBurst = 1000 // the env's clock stands still: no bucket refills
	_, srv := e.gateway(cfg)
	path := srv.URL + "/v1/sessions/s1"

	var snap sessionSnapshot
	testenv.WaitFor(t, 60*time.Second, testenv.Until("every run of the session is projected", func() bool {
		snap = sessionSnapshot{}
		r := call(t, "GET", path, tokAll, nil)
		if r.status != 200 || json.Unmarshal(r.body, &snap) != nil || snap.RunsTotal != len(runs) {
			return false
		}
		for _, run := range snap.Runs {
			if run.AsOfEventSeq != int64(runs[run.RunID]) {
				return false
			}
		}
		return true
	}))
	if !snap.Complete || len(snap.UnavailablePartitions) != 0 || len(snap.Runs) != 3 || snap.NextCursor != "" ||
		snap.FirstEventAt == nil || !snap.FirstEventAt.Std().Equal(start) || snap.LastEventAt == nil {
		t.Errorf("the snapshot: complete %v %v, %d runs, next %q, first %v last %v", snap.Complete, snap.UnavailablePartitions,
			len(snap.Runs), snap.NextCursor, snap.FirstEventAt, snap.LastEventAt)
	}
	threads := map[string]int{}
	for _, th := range snap.Threads {
		threads[*th.ThreadID] = th.Runs
	}
	if threads["t-1"] != 1 || threads["t-2"] != 2 || len(threads) != 2 {
		t.Errorf("threads %v", threads)
	}
	first := slices.Sorted(mapsKeys(runs))[0]
	if snap.Title == nil || *snap.Title != "Demo session "+first || *snap.FactsRunID != first || !slices.Equal(snap.PinnedThreadIDs, []string{"thread-main"}) {
		t.Errorf("facts: title %v from %v, pinned %v", snap.Title, snap.FactsRunID, snap.PinnedThreadIDs)
	}
	if snap.History == nil || len(snap.History.Entries) != 20 || snap.History.NextCursor == "" {
		t.Fatalf("history: %+v", snap.History)
	}

	// The runs a page at a time, each once.
	var listed []string
	after := ""
	for page := 0; page < 5; page++ {
		var s sessionSnapshot
		r := call(t, "GET", path+"?limit=1&history_limit=0&after="+url.QueryEscape(after), tokAll, nil)
		if r.status != 200 || json.Unmarshal(r.body, &s) != nil || len(s.Runs) != 1 || s.History != nil {
			t.Fatalf("page %d: %d %.300s", page, r.status, r.body)
		}
		listed = append(listed, s.Runs[0].RunID)
		if after = s.NextCursor; after == "" {
			break
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, slices.Sorted(mapsKeys(runs))) {
		t.Errorf("paged through %v, want %v", listed, slices.Sorted(mapsKeys(runs)))
	}

	// The history, every event of the three runs once, newest first
	// (each run's window keeps all of them).
	total := 0
	for _, n := range runs {
		total += n
	}
	seen := map[string]bool{}
	var last topics.Time
	cursor := ""
	for page := 0; ; page++ {
		if page > total {
			t.Fatal("the history does not end")
		}
		var h sessionHistoryAnswer
		r := call(t, "GET", path+"/history?limit=40&cursor="+url.QueryEscape(cursor), tokAll, nil)
		if r.status != 200 || json.Unmarshal(r.body, &h) != nil || !h.Complete || h.Truncated {
			t.Fatalf("history page %d: %d %.300s", page, r.status, r.body)
		}
		for _, en := range h.Entries {
			key := en.RunID + "/" + en.EventID
			if seen[key] || (!last.IsZero() && en.At.After(last)) {
				t.Errorf("history page %d: %s twice or out of order", page, key)
			}
			seen[key], last = true, en.At
		}
		if cursor = h.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != total {
		t.Errorf("the history gave %d entries, the runs have %d events", len(seen), total)
	}

	// Tokens: carol's covers the session, bob's run-1 only.
	var s sessionSnapshot
	if r := call(t, "GET", path, tokSession, nil); r.status != 200 || json.Unmarshal(r.body, &s) != nil || s.RunsTotal != 3 {
		t.Errorf("carol's snapshot: %d %.300s", r.status, r.body)
	}
	s = sessionSnapshot{}
	if r := call(t, "GET", path, tokRun1, nil); r.status != 200 || json.Unmarshal(r.body, &s) != nil || s.RunsTotal != 1 || s.Runs[0].RunID != "run-1" {
		t.Errorf("bob's snapshot: %d %.300s", r.status, r.body)
	}
	for _, en := range s.History.Entries {
		if en.RunID != "run-1" {
			t.Errorf("bob's history holds an entry of %s", en.RunID)
		}
	}
	for _, c := range []struct {
		path, token string
		status      int
		typ         string
	}{
		{"/v1/sessions/s2", tokSession, 403, problem.Forbidden},
		{"/v1/sessions/s2", tokRun1, 403, problem.Forbidden},
		{"/v1/sessions/nobody", tokRun1, 403, problem.Forbidden},
		{"/v1/sessions/nobody/history", tokSession, 403, problem.Forbidden},
		{"/v1/sessions/nobody", tokAll, 404, problem.UnknownSession},
		{"/v1/sessions/s1?limit=0", tokAll, 400, problem.BadRequest},
		{"/v1/sessions/s1?limit=101", tokAll, 400, problem.BadRequest},
		{"/v1/sessions/s1?history_limit=101", tokAll, 400, problem.BadRequest},
		{"/v1/sessions/s1?history_limit=-1", tokAll, 400, problem.BadRequest},
		{"/v1/sessions/s1?after=%21%21", tokAll, 400, problem.BadRequest},
		{"/v1/sessions/s1?after=" + strings.Repeat("A", 1389), tokAll, 400, problem.BadRequest},
		{"/v1/sessions/s1/history?limit=101", tokAll, 400, problem.BadRequest},
		{"/v1/sessions/s1/history?cursor=AAAA", tokAll, 400, problem.BadRequest}, // not one the projectors handed out
		{"/v1/sessions/a%07b", tokAll, 400, problem.BadRequest},
	} {
		if r := call(t, "GET", srv.URL+c.path, c.token, nil); r.status != c.status || r.problem(t).Type != c.typ {
			t.Errorf("GET %s: %d %s, want %d %s", c.path, r.status, r.body, c.status, c.typ)
		}
	}
	if r := call(t, "GET", srv.URL+"/v1/sessions/s2", tokAll, nil); r.status != 200 {
		t.Errorf("session s2: %d %s", r.status, r.body)
	}

	// The instance that owns the far partition cannot be reached.
	i = 0
	if !slices.Contains(o.ps[0].Owned(), far) {
		i = 1
	}
	o.srvs[i].Close()
	s = sessionSnapshot{}
	r := call(t, "GET", path, tokAll, nil)
	if r.status != 200 || json.Unmarshal(r.body, &s) != nil || s.Complete || !slices.Equal(s.UnavailablePartitions, []int32{far}) || s.RunsTotal != 2 {
		t.Fatalf("with partition %d unreachable: %d %.300s", far, r.status, r.body)
	}
	for _, run := range s.Runs {
		if topics.Partition([]byte(run.RunID), 2) != near {
			t.Errorf("run %s listed from the unreachable partition", run.RunID)
		}
	}
	var h sessionHistoryAnswer
	if r := call(t, "GET", path+"/history", tokAll, nil); r.status != 200 || json.Unmarshal(r.body, &h) != nil || h.Complete ||
		!slices.Equal(h.UnavailablePartitions, []int32{far}) {
		t.Errorf("history with partition %d unreachable: %d %.300s", far, r.status, r.body)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
