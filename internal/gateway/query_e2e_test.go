package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectorhttp"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestQueryRealProjectors: two projector instances, each with its
// projectorhttp.Handler, which requires the projectors' shared secret; the
// gateway's reads of runs on both partitions, with the secret, come back
// from the instance that holds them, with the run's state. A gateway
// without the secret, or with another, is refused by the projectors, and
// tells its client 503, not the 401 that would blame the client's token.
func TestQueryRealProjectors(t *testing.T) { brokertest.Run(t, testQueryRealProjectors) }

func testQueryRealProjectors(t *testing.T, broker *brokertest.Broker) {
	e := newEnvOn(t, broker, 2)
	e.twoOwnersWith(t, projectorSecret)
	runs := []string{runOn(0, 2, "-q"), runOn(1, 2, "-q")}
	for i, run := range runs {
		e.produceRoot(t, "01JM00000000000000000000A"+string(rune('0'+i)), run)
	}
	cfg := e.config()
	cfg.ProjectorSecret = projectorSecret
	_, srv := e.gateway(cfg)
	for _, run := range runs {
		var snap topics.AgentTreeSnapshot
		testenv.WaitFor(t, 30*time.Second, testenv.Until(run+" is projected", func() bool {
			r := call(t, "GET", srv.URL+"/v1/runs/"+run+"/snapshot", tokAll, nil)
			return r.status == 200 && json.Unmarshal(r.body, &snap) == nil
		}))
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

	for name, secret := range map[string][]byte{"no secret": nil, "another secret": []byte("another-secret-0123456789abcdef-0123456789")} {
		cfg := e.config()
		cfg.ProjectorSecret = secret
		_, other := e.gateway(cfg)
		for _, path := range []string{"/snapshot", "/read-model", "/history"} {
			r := call(t, "GET", other.URL+"/v1/runs/"+runs[0]+path, tokAll, nil)
			if p := r.problem(t); r.status != 503 || p.Type != problem.Unavailable || r.header.Get("Retry-After") == "" {
				t.Errorf("gateway with %s: GET %s: %d %+v, want 503 %s with Retry-After", name, path, r.status, p, problem.Unavailable)
			}
		}
		// A session-scoped token needs the run's session, from the
		// projector: refused alike.
		if r := call(t, "GET", other.URL+"/v1/runs/"+runs[1]+"/snapshot", tokSession, nil); r.status != 503 {
			t.Errorf("gateway with %s, session token: %d %s, want 503", name, r.status, r.body)
		}
	}
}

// projectorSecret is the projectors' shared secret in the tests that set
// one.
var projectorSecret = []byte("the-projectors-shared-secret-0123456789abcdef")

// TestQueryRetriesNewOwner: when the owner the gateway has cached cannot
// answer (503: here its process runs no projector instance any more, as
// after a stop, or while a paused instance is unsure of its session), the
// gateway asks the group again and reads from the new owner, instead of
// passing the 503 on until its cached assignment expires.
func TestQueryRetriesNewOwner(t *testing.T) { brokertest.Run(t, testQueryRetriesNewOwner) }

func testQueryRetriesNewOwner(t *testing.T, broker *brokertest.Broker) {
	e := newEnvOn(t, broker, 2)
	two := e.twoOwners(t)
	ps, stops := two.ps, two.stops
	run := runOn(0, 2, "-moved")
	e.produceRoot(t, "01JM00000000000000000000B0", run)
	// The assignment is cached for a minute: only the retry can find the
	// new owner within the test.
	cfg := e.config()
	cfg.AssignmentTTL = time.Minute
	_, srv := e.gateway(cfg)
	testenv.WaitFor(t, 30*time.Second, testenv.Until(run+" is projected", func() bool {
		return call(t, "GET", srv.URL+"/v1/runs/"+run+"/snapshot", tokAll, nil).status == 200
	}))

	// The owner of partition 0 stops (leaving the group); its process's
	// query server stays up, answering 503 for the stopped instance.
	old := 0
	if slices.Contains(ps[1].Owned(), 0) {
		old = 1
	}
	stops[old]()
	other := ps[1-old]
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the other instance owns both partitions", func() bool { return len(other.Owned()) == 2 }))
	r := call(t, "GET", srv.URL+"/v1/runs/"+run+"/snapshot", tokAll, nil)
	var snap topics.AgentTreeSnapshot
	if r.status != 200 || json.Unmarshal(r.body, &snap) != nil || snap.Scope.RunID != run {
		t.Fatalf("snapshot of %s after its owner stopped: %d %s; want 200 from the new owner", run, r.status, r.body)
	}
}

// owners are two projector instances of the env's group (two partitions),
// each behind its own query server, as two projector processes are.
type owners struct {
	qs    [2]*projectorhttp.Handler
	ps    [2]*projector.Projector
	stops [2]func()
	// srvs serve qs: closing one, the gateway cannot reach its instance,
	// which still owns its partitions.
	srvs [2]*httptest.Server
}

// twoOwners starts two instances and waits until each owns one partition.
func (e *env) twoOwners(t *testing.T) *owners {
	t.Helper()
	return e.twoOwnersWith(t, nil)
}

// twoOwnersWith is twoOwners with query servers that require secret (none
// when nil).
func (e *env) twoOwnersWith(t *testing.T, secret []byte) *owners {
	t.Helper()
	o := &owners{}
	var addrs [2]string
	// Each endpoint listens first: its instance advertises the address.
	srvs := &o.srvs
	for i := range o.qs {
		srvs[i] = httptest.NewUnstartedServer(nil)
		t.Cleanup(srvs[i].Close)
		addrs[i] = srvs[i].Listener.Addr().String()
	}
	for i := range o.qs {
		o.ps[i], o.stops[i] = e.projector(addrs[i])
		o.qs[i] = projectorhttp.New(projectorhttp.Config{Source: o.ps[i], Secret: secret})
		srvs[i].Config.Handler = o.qs[i]
		srvs[i].Start()
	}
	testenv.WaitFor(t, 30*time.Second, testenv.Until("each instance owns one partition", func() bool {
		return len(o.ps[0].Owned()) == 1 && len(o.ps[1].Owned()) == 1
	}))
	return o
}

// produceRoot produces run's conductor (a node.created of agent root, event
// id id) to the run's partition of the agent events.
func (e *env) produceRoot(t *testing.T, id, run string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev := &topics.Event{ID: id, Source: "/test", Type: topics.TypeNodeCreated,
		Time: topics.NewTime(e.clock.Now()), RunID: run, AgentID: "root", SchemaVersion: 1, SessionID: "s1",
		Data: &topics.NodeCreated{Role: topics.RoleConductor}}
	rec, err := topics.EventRecord(e.names.AgentEvents(), ev, "")
	if err != nil {
		t.Fatal(err)
	}
	rec.Partition = topics.Partition(rec.Key, e.parts)
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestProjectorSecretValidated: a ProjectorSecret the projectors could not
// hold (short, or unfit for a header) is a configuration error.
func TestProjectorSecretValidated(t *testing.T) {
	cfg := Config{Kafka: kafkaconn.Conn{Brokers: []string{"k:9092"}}, JWTKey: jwtKey}
	for _, bad := range []string{"short", "a secret with spaces, long enough for the length"} {
		cfg.ProjectorSecret = []byte(bad)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ProjectorSecret") {
			t.Errorf("ProjectorSecret %q: %v, want a refusal naming it", bad, err)
		}
	}
	cfg.ProjectorSecret = projectorSecret
	if err := cfg.Validate(); err != nil {
		t.Errorf("a good ProjectorSecret: %v", err)
	}
}
