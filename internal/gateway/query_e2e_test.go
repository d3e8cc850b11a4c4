package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestQueryRealProjectors: two projector instances, each with its
// projector.QueryServer; the gateway's reads of runs on both partitions come
// back from the instance that holds them, with the run's state.
func TestQueryRealProjectors(t *testing.T) { brokertest.Run(t, testQueryRealProjectors) }

func testQueryRealProjectors(t *testing.T, broker *brokertest.Broker) {
	e := newEnvOn(t, broker, 2)
	var qs [2]*projector.QueryServer
	var addrs [2]string
	var ps [2]*projector.Projector
	for i := range qs {
		qs[i] = projector.NewQueryServer()
		srv := httptest.NewServer(qs[i])
		t.Cleanup(srv.Close)
		addrs[i] = srv.Listener.Addr().String()
	}
	for i := range qs {
		ps[i], _ = e.projector(addrs[i])
		qs[i].Set(ps[i])
		t.Cleanup(func() { qs[i].Set(nil) })
	}
	waitFor(t, 30*time.Second, "each instance owns one partition", func() bool {
		return len(ps[0].Owned()) == 1 && len(ps[1].Owned()) == 1
	})
	runs := []string{runOn(0, 2, "-q"), runOn(1, 2, "-q")}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, run := range runs {
		ev := &topics.Event{ID: "01JM00000000000000000000A" + string(rune('0'+i)), Source: "/test", Type: topics.TypeNodeCreated,
			Time: topics.NewTime(e.clock.Now()), RunID: run, AgentID: "root", SchemaVersion: 1, SessionID: "s1",
			Data: &topics.NodeCreated{Role: topics.RoleConductor}}
		rec, err := topics.EventRecord(e.names.AgentEvents(), ev, "")
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = topics.Partition(rec.Key, 2)
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	_, srv := e.gateway(e.config())
	for _, run := range runs {
		var snap topics.AgentTreeSnapshot
		waitFor(t, 30*time.Second, run+" is projected", func() bool {
			r := call(t, "GET", srv.URL+"/v1/runs/"+run+"/snapshot", tokAll, nil)
			return r.status == 200 && json.Unmarshal(r.body, &snap) == nil
		})
		if snap.Scope.RunID != run || len(snap.Nodes) != 1 || snap.Nodes[0].AgentID != "root" {
			t.Errorf("snapshot of %s: %+v", run, snap)
		}
		for _, what := range []string{"read-model", "history?limit=10"} {
			if r := call(t, "GET", srv.URL+"/v1/runs/"+run+"/"+what, tokAll, nil); r.status != 200 {
				t.Errorf("%s of %s: %d %s", what, run, r.status, r.body)
			}
		}
		// carol's token covers session s1, the run's session.
		if r := call(t, "GET", srv.URL+"/v1/runs/"+run+"/snapshot", tokSession, nil); r.status != 200 {
			t.Errorf("session token: %d %s", r.status, r.body)
		}
	}
	r := call(t, "GET", srv.URL+"/v1/runs/never-seen/snapshot", tokAll, nil)
	if p := r.problem(t); r.status != 404 || p.Type != problem.UnknownRun {
		t.Errorf("unknown run: %d %+v", r.status, p)
	}
}
