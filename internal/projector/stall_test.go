package projector

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestStalledGroupRejoinsFresh: an instance whose group gives it no
// generation while the broker answers (here the coordinator never answers
// its JoinGroup, as in the liveness issue's wedge, where restarted
// instances said "joining the group" for minutes) stops after
// StallTimeout with ErrGroupStalled, counted and logged, and the Supervisor's next
// instance, a fresh member, joins and owns the partitions once the
// coordinator answers again.
func TestStalledGroupRejoinsFresh(t *testing.T) {
	e := newEnv(t, 2)
	var blocking atomic.Bool
	blocking.Store(true)
	c := e.broker.Cluster
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !blocking.Load() {
			return nil, nil, false // the coordinator answers again
		}
		c.KeepControl()
		return nil, nil, true // no answer: the JoinGroup hangs
	})
	var logs testenv.Buffer
	cfg := e.config(t.TempDir())
	cfg.StallTimeout = 2 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	stalls := &stallHooks{}
	cfg.Hooks = stalls
	served := serveInstances(t, cfg, func(n int) {
		if n == 2 {
			blocking.Store(false) // the fresh member may join
		}
	})
	testenv.WaitFor(t, 60*time.Second, until(nil, "a fresh instance to own both partitions", func() bool {
		p, _ := served.latest()
		return p != nil && len(p.Owned()) == 2
	}))
	first, n := served.first(), served.count()
	if n < 2 || first.stats.GroupStalls.Load() != 1 || stalls.n.Load() < 1 {
		t.Errorf("%d instances, the first counted %d stalls, the hook %d; want a stalled first instance replaced",
			n, first.stats.GroupStalls.Load(), stalls.n.Load())
	}
	if !strings.Contains(logs.String(), "rejoining as a fresh member") {
		t.Errorf("no log line says the group stalled:\n%s", logs.String())
	}
}

type stallHooks struct {
	NopHooks
	n atomic.Int64
}

func (h *stallHooks) GroupStalled(time.Duration) { h.n.Add(1) }

// TestLostSessionRejoinsFresh: a member that lost its session and whose
// JoinGroup is never answered again keeps its old generation (franz-go
// stores one only from an answer), so a missing generation alone does not
// show it. Another member joins, the coordinator rebalances, the
// instance's JoinGroup goes unanswered, times out (the rebalance timeout
// plus franz-go's overhead), and the instance rejoins, unanswered again:
// it must stop after StallTimeout, and a fresh instance take the
// partitions back.
func TestLostSessionRejoinsFresh(t *testing.T) {
	e := newEnv(t, 2)
	var blocking atomic.Bool
	c := e.broker.Cluster
	c.ControlKey(int16(kmsg.JoinGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if !blocking.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		if j := r.(*kmsg.JoinGroupRequest); j.InstanceID != nil && *j.InstanceID == "intruder" {
			return nil, nil, false // the other member joins
		}
		return nil, nil, true // the instance's JoinGroup goes unanswered
	})
	var logs testenv.Buffer
	cfg := e.config(t.TempDir())
	cfg.RebalanceTimeout, cfg.StallTimeout = 2*time.Second, 2*time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	served := serveInstances(t, cfg, func(n int) {
		if n == 2 {
			blocking.Store(false)
		}
	})
	testenv.WaitFor(t, 60*time.Second, until(nil, "the first instance to own both partitions", func() bool {
		p, _ := served.latest()
		return p != nil && len(p.Owned()) == 2
	}))
	blocking.Store(true)
	// The other member: a raw JoinGroup of the group's protocol.
	join := kmsg.NewPtrJoinGroupRequest()
	intruder := "intruder"
	join.Group, join.InstanceID, join.ProtocolType = e.group, &intruder, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 2000, 2000
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name = "cooperative-sticky"
	proto.Metadata = (&kmsg.ConsumerMemberMetadata{Version: 0, Topics: []string{e.names.AgentEvents()}}).AppendTo(nil)
	join.Protocols = append(join.Protocols, proto)
	jctx, jcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer jcancel()
	go func() { _, _ = join.RequestWith(jctx, e.client) }() // its answer does not matter
	testenv.WaitFor(t, 90*time.Second, until(nil, "a fresh instance to own both partitions", func() bool {
		p, n := served.latest()
		return n >= 2 && len(p.Owned()) == 2
	}))
	first := served.first()
	if first.stats.GroupStalls.Load() != 1 {
		t.Errorf("the first instance counted %d stalls, want 1", first.stats.GroupStalls.Load())
	}
	// Its group client leaves in the background once its unanswered
	// JoinGroup times out (closeClients): wait for it, so that no
	// goroutine outlives the test.
	first.mu.Lock()
	closed := first.groupClosed
	first.mu.Unlock()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Error("the stalled instance's group client did not close within 60s")
	}
	if !strings.Contains(logs.String(), "rejoining as a fresh member") {
		t.Errorf("no log line says the group stalled:\n%s", logs.String())
	}
}

// served is what a Supervisor started in a test.
type served struct {
	mu        sync.Mutex
	instances []*Projector
}

// serveInstances runs a Supervisor with cfg until the test ends (it must then
// return nil), noting each instance it starts; started is told how many
// there have been.
func serveInstances(t *testing.T, cfg Config, started func(n int)) *served {
	t.Helper()
	s := &served{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv, err := NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.started = func(p *Projector) {
		s.mu.Lock()
		s.instances = append(s.instances, p)
		n := len(s.instances)
		s.mu.Unlock()
		started(n)
	}
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Supervisor.Run: %v", err)
		}
	})
	return s
}

// latest is the newest instance (nil if none yet) and how many there were.
func (s *served) latest() (*Projector, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.instances) == 0 {
		return nil, 0
	}
	return s.instances[len(s.instances)-1], len(s.instances)
}

func (s *served) first() *Projector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.instances[0]
}

func (s *served) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.instances)
}
