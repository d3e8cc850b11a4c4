package gateway

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestIdempotencyAcrossInstancesAndRestart: two gateway
// instances and one projector. The same input with the same
// Idempotency-Key, sent to both instances and again after one restarts, is
// one event id: three records on the human input topic, one human input
// applied, one priority wake. The same key with another body is 422 on each
// instance that remembers the key (the restarted one once it has seen it
// again).
func TestIdempotencyAcrossInstancesAndRestart(t *testing.T) {
	brokertest.Run(t, testIdempotencyAcrossInstancesAndRestart)
}

func testIdempotencyAcrossInstancesAndRestart(t *testing.T, broker *brokertest.Broker) {
	e := newEnvOn(t, broker, 2)
	p, _ := e.projector("")
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the projector owns both partitions", func() bool { return len(p.Owned()) == 2 }))
	srv1, stop1 := e.restartable(e.config())
	_, srv2 := e.gateway(e.config())

	const body, other = `{"input_kind":"interrupt","text":"stop now"}`, `{"input_kind":"interrupt","text":"carry on"}`
	first := decodeAccepted(t, post(t, srv1, "run-1", tokRun1, body, "Idempotency-Key", "k-1"))
	second := decodeAccepted(t, post(t, srv2, "run-1", tokRun1, body, "Idempotency-Key", "k-1"))
	stop1()
	srv1, _ = e.restartable(e.config())
	third := decodeAccepted(t, post(t, srv1, "run-1", tokRun1, body, "Idempotency-Key", "k-1"))
	for _, a := range []accepted{second, third} {
		if a.EventID != first.EventID || a.RunID != "run-1" || a.Topic != first.Topic || a.Partition != first.Partition {
			t.Fatalf("a repeat answered %+v; want the first answer's event id, run, topic and partition %+v", a, first)
		}
	}
	for i, srv := range []*httptest.Server{srv1, srv2} {
		r := call(t, "POST", srv.URL+"/v1/runs/run-1/input", tokRun1, []byte(other), "Idempotency-Key", "k-1")
		if p := r.problem(t); r.status != 422 || p.Type != problem.Conflict {
			t.Errorf("instance %d, key k-1 with another body: %d %+v; want 422", i+1, r.status, p)
		}
	}
	// A later input of the run: once its wake is out, the projector has
	// read every record before it on the run's partition.
	marker := decodeAccepted(t, post(t, srv2, "run-1", tokRun1, msg, "Idempotency-Key", "k-2"))

	records := 0
	for _, rec := range e.records(e.names.HumanInput()) {
		if ev, err := topics.DecodeRecord(rec.Key, rec.Value, rec.Headers); err == nil && ev.ID == first.EventID {
			records++
		}
	}
	if records != 3 {
		t.Errorf("%d records of event %s on the human input topic, want 3 (one per accepted request)", records, first.EventID)
	}
	triggers := e.priorityTriggers(t, marker.EventID)
	if triggers[first.EventID] != 1 {
		t.Errorf("%d human_input triggers of event %s on the priority wakes, want 1: %v", triggers[first.EventID], first.EventID, triggers)
	}
}

// restartable starts a gateway on its own server; stop ends both (as a
// process exit would), so that the test can start another in its place.
func (e *env) restartable(cfg Config) (srv *httptest.Server, stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := New(ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	srv = httptest.NewUnstartedServer(g)
	srv.Config.RegisterOnShutdown(g.Drain)
	srv.Start()
	var once sync.Once
	stop = func() { once.Do(func() { g.Drain(); srv.Close(); g.Close() }) }
	e.t.Cleanup(stop)
	return srv, stop
}

// priorityTriggers reads the priority wakes (read_committed) until one has
// a human_input trigger of until, and counts every human_input trigger per
// event id.
func (e *env) priorityTriggers(t *testing.T, until string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(e.names.PriorityWakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	counts := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for counts[until] == 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("priority wakes: no wake of %s: %v (seen %v)", until, ctx.Err(), counts)
		}
		fs.EachRecord(func(r *kgo.Record) {
			w, err := topics.DecodeWake(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			humanTriggers(w, counts)
		})
	}
	return counts
}
