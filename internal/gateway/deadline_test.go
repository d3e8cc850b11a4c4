package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/testenv"
)

// stall makes the kfake cluster hold every DescribeGroups request (how the
// gateway reads the projector group's assignment) while on is set, until the
// returned release is called: a group coordinator that does not answer.
type stall struct {
	on      atomic.Bool
	held    atomic.Int32
	mu      sync.Mutex
	release chan struct{}
}

func newStall(t *testing.T, b *brokertest.Broker) *stall {
	s := &stall{release: make(chan struct{})}
	b.Cluster.ControlKey(int16(kmsg.DescribeGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster.KeepControl()
		if !s.on.Load() {
			return nil, nil, false
		}
		s.mu.Lock()
		release := s.release
		s.mu.Unlock()
		s.held.Add(1)
		b.Cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	t.Cleanup(s.free)
	return s
}

// free lets every held request through and holds no more.
func (s *stall) free() {
	s.on.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// hold starts holding requests again.
func (s *stall) hold() {
	s.mu.Lock()
	s.release = make(chan struct{})
	s.mu.Unlock()
	s.on.Store(true)
}

// TestSlowBrokerFastAnswer: with the group coordinator not answering, a read
// is answered 503 with Retry-After once KafkaTimeout passes, while the broker
// still holds the request, and no lock is held meanwhile; for RetryAfter
// after that, reads fail at once without asking again; once the gateway has
// read an assignment, a read while the coordinator is silent is routed by the
// stale one (the projector refuses a run it does not own, so stale routing is
// safe) and answered 200.
func TestSlowBrokerFastAnswer(t *testing.T) {
	broker := brokertest.NewKfake(t)
	e := newEnvOn(t, broker, 2)
	e.twoOwners(t)
	run := runOn(0, 2, "-slow")
	e.produceRoot(t, "01JM00000000000000000000S0", run)
	s := newStall(t, broker)
	cfg := e.config()
	cfg.KafkaTimeout = 300 * time.Millisecond
	cfg.AssignmentTTL = time.Minute
	cfg.RetryAfter = 2 * time.Second
	g, srv := e.gateway(cfg)
	url := srv.URL + "/v1/runs/" + run + "/snapshot"

	s.hold()
	got := make(chan reply, 1)
	go func() { got <- call(t, "GET", url, tokAll, nil) }()
	testenv.WaitFor(t, 10*time.Second, testenv.Until("the broker holds the gateway's DescribeGroups", func() bool { return s.held.Load() > 0 }))
	// The request is waiting on Kafka; the owner cache is not locked.
	if !g.owners.mu.TryLock() {
		t.Fatal("the owner cache's lock is held across the admin call")
	}
	g.owners.mu.Unlock()
	var r reply
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer while the broker holds the request")
	}
	if p := r.problem(t); r.status != 503 || p.Type != problem.Unavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("read with a silent coordinator: %d %+v Retry-After %q; want 503 with Retry-After", r.status, p, r.header.Get("Retry-After"))
	}
	select {
	case <-s.release:
		t.Fatal("the broker let the request go before the answer: the test proves nothing")
	default:
	}

	// For RetryAfter the gateway does not ask again: a read fails at once,
	// with no second request held.
	held := s.held.Load()
	if r := call(t, "GET", url, tokAll, nil); r.status != 503 || s.held.Load() != held {
		t.Fatalf("a read right after a failed one: %d, %d requests held (was %d); want 503 without asking Kafka", r.status, s.held.Load(), held)
	}
	s.free()
	e.clock.Advance(cfg.RetryAfter + time.Second)
	testenv.WaitFor(t, 30*time.Second, testenv.Until(run+" is read once the coordinator answers", func() bool {
		return call(t, "GET", url, tokAll, nil).status == 200
	}))

	// The cached assignment expires; the coordinator goes silent again.
	e.clock.Advance(2 * time.Minute)
	held = s.held.Load()
	s.hold()
	if r := call(t, "GET", url, tokAll, nil); r.status != 200 {
		t.Fatalf("read by the stale assignment: %d %s; want 200", r.status, r.body)
	}
	if s.held.Load() == held {
		t.Fatal("the gateway did not try to read the assignment again once it expired")
	}
}

// TestSlowBodyIsCutOff: a client that sends its headers and then trickles
// (here: stops sending) its body is answered 400 once BodyTimeout passes,
// instead of holding the connection.
func TestSlowBodyIsCutOff(t *testing.T) {
	e := newEnv(t, 2)
	cfg := e.config()
	cfg.BodyTimeout = 200 * time.Millisecond
	_, srv := e.gateway(cfg)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/runs/run-1/input HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input_kind\":", tokAll)
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body that never arrives: %v", err)
	}
	defer resp.Body.Close()
	var p problem.Problem
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || !strings.Contains(p.Detail, "read timeout") {
		t.Fatalf("slow body: %d %+v; want 400 naming the read timeout", resp.StatusCode, p)
	}
}
