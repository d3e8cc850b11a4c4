package brokertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.M(m)) }

// TestRebalanceDeadlineHolds: a classic group's rebalance ends at its
// deadline, the rebalance timeout after it began, even while members keep
// rejoining; members that did not rejoin by then are dropped. This is
// Kafka's (the coordinator's delayed join is not extended by later joins),
// and what keeps a group live when members die: the liveness issue's wedge
// was a coordinator that re-armed the deadline at every JoinGroup, so that
// survivors whose JoinGroup timed out and was sent again pushed it forward
// for ever while dead members held the rebalance open.
//
// Three members form a group; C dies (sends nothing more). A rejoins,
// which starts a rebalance with a deadline T later; B rejoins at T*3/4.
// A's JoinGroup must be answered by T plus a margin, without C.
func TestRebalanceDeadlineHolds(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		const rebalance = 4 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		group := b.Prefix(t, "deadline")
		m := map[string]*member{}
		for _, name := range []string{"a", "b", "c"} {
			cl, err := kgo.NewClient(b.Opts()...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			m[name] = &member{cl: cl, group: group, rebalance: rebalance, topics: []string{"t1"}}
		}
		// The first generation with all three, formed as members join a
		// live group: each newcomer's JoinGroup starts a rebalance, and
		// once the coordinator says so the members already in rejoin.
		// (A follower that rejoins a Stable group with unchanged metadata
		// is answered at once with the current generation, in Kafka.)
		adm := kadm.NewClient(m["a"].cl)
		var in []*member
		for _, name := range []string{"a", "b", "c"} {
			x := m[name]
			newcomer := make(chan error, 1)
			go func() { newcomer <- x.join(ctx) }()
			if len(in) > 0 {
				for state := ""; state != "PreparingRebalance"; {
					gs, err := adm.DescribeGroups(ctx, group)
					if err != nil {
						t.Fatal(err)
					}
					state = gs[group].State
					select {
					case <-ctx.Done():
						t.Fatalf("the group never began rebalancing for %s: %s", name, state)
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
			if err := all(in, func(x *member) error { return x.join(ctx) }); err != nil {
				t.Fatal(err)
			}
			if err := <-newcomer; err != nil {
				t.Fatal(err)
			}
			in = append(in, x)
			if err := all(in, func(x *member) error { return x.sync(ctx) }); err != nil {
				t.Fatal(err)
			}
		}
		gen := m["a"].generation

		errs := make(chan error, 1)
		// C is dead from here on. A rejoins with a new subscription (Kafka
		// answers a follower's rejoin with unchanged metadata at once): the
		// rebalance and its deadline begin.
		m["a"].topics = []string{"t1", "t2"}
		began := time.Now()
		joined := make(chan error, 1)
		go func() { joined <- m["a"].join(ctx) }()
		// B rejoins three quarters of the way to the deadline: a wait on
		// the clock, since the deadline is what is under test.
		time.Sleep(rebalance * 3 / 4)
		go func() { errs <- m["b"].join(ctx) }()
		if err := <-joined; err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: the rebalance of generation %d ended %v after it began (rebalance timeout %v), with %d members",
			b.Kind, gen, took.Round(10*time.Millisecond), rebalance, m["a"].members)
		if limit := rebalance + 1500*time.Millisecond; took > limit {
			t.Errorf("the rebalance ended %v after it began: the deadline (%v) was extended by B's rejoin", took, rebalance)
		}
		if m["a"].members != 0 && m["a"].members != 2 {
			t.Errorf("the leader was given %d members, want A and B only", m["a"].members)
		}
	})
}

// TestDeadJoinerExpires: a new member that dies while its JoinGroup waits
// is dropped from the group one session timeout after the join is
// answered, though the answer never reaches it. Kafka reschedules every
// member's heartbeat when a join completes; upstream kfake armed no timer
// for a member whose answer could not be sent, so such a member stayed for
// good, and every rebalance after it waited for it until its deadline: the
// dead members of the liveness issue's wedged group (cmd/projector's
// TestKillStorm reproduces it end to end).
//
// A forms the group; B, new, sends its JoinGroup (2 s session), which
// starts a rebalance, and dies; A rejoins, which completes it, and syncs
// as the leader. B must be gone from the group within its session and a
// margin.
func TestDeadJoinerExpires(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		const session = 2 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		group := b.Prefix(t, "deadjoiner")
		a, bm := newMember(t, b, group, 10*time.Second, 0), newMember(t, b, group, 10*time.Second, session)
		if err := a.join(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.sync(ctx); err != nil {
			t.Fatal(err)
		}
		adm := kadm.NewClient(a.cl)
		describe := func() kadm.DescribedGroup {
			gs, err := adm.DescribeGroups(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			return gs[group]
		}

		// B gets its member id, then joins with it and dies while the
		// coordinator holds its JoinGroup: its client closes once the
		// group is rebalancing for it.
		bctx, bcancel := context.WithCancel(ctx)
		bdone := make(chan error, 1)
		go func() { bdone <- bm.join(bctx) }()
		for describe().State != "PreparingRebalance" {
			select {
			case <-ctx.Done():
				t.Fatalf("the group never began rebalancing for B")
			case <-time.After(20 * time.Millisecond):
			}
		}
		bcancel()
		bm.cl.Close()
		<-bdone
		if err := a.join(ctx); err != nil {
			t.Fatal(err)
		}
		if a.members != 2 {
			t.Fatalf("the leader was given %d members, want A and the dead B", a.members)
		}
		if err := a.sync(ctx); err != nil {
			t.Fatal(err)
		}
		answered := time.Now()

		// B must go within its session (and a margin for the broker's
		// expiry check); A's own session is 30 s.
		limit := session + 3*time.Second
		for {
			g := describe()
			if len(g.Members) == 1 {
				t.Logf("%s: the dead joiner was dropped %v after its join was answered (session %v); group %s",
					b.Kind, time.Since(answered).Round(10*time.Millisecond), session, g.State)
				return
			}
			if time.Since(answered) > limit {
				t.Fatalf("the dead joiner is still in the group %v after its join was answered (session %v): %d members, %s",
					time.Since(answered).Round(10*time.Millisecond), session, len(g.Members), g.State)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// TestJoinWaitOutlivesSession: a live member waiting in JoinGroup longer
// than its session is kept, and answered when the rebalance completes, as
// Kafka keeps a member awaiting join alive. Upstream kfake expired it from
// its last heartbeat without answering its JoinGroup, which then hung until
// the client's timeout (a minute at the default rebalance timeout) while
// the group went on without it: the last 60 s stall of cmd/projector's
// TestKillStorm.
//
// A and B form a group (2 s sessions); A rejoins, which begins a
// rebalance; B heartbeats through it (REBALANCE_IN_PROGRESS) and rejoins
// 3 s later. A's JoinGroup must then be answered, with both members.
func TestJoinWaitOutlivesSession(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		const session, late = 2 * time.Second, 3 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		group := b.Prefix(t, "joinwait")
		a, bm := newMember(t, b, group, 20*time.Second, session), newMember(t, b, group, 20*time.Second, session)
		joinPair(ctx, t, a, bm)
		if err := all([]*member{a, bm}, func(x *member) error { return x.sync(ctx) }); err != nil {
			t.Fatal(err)
		}

		// A rejoins with a new subscription: a rebalance begins, and A
		// waits in it. B heartbeats, then rejoins late.
		a.topics = []string{"t1", "t2"}
		began := time.Now()
		joined := make(chan error, 1)
		go func() { joined <- a.join(ctx) }()
		waitState(ctx, t, kadm.NewClient(bm.cl), group, "PreparingRebalance")
		for time.Since(began) < late {
			if err := bm.heartbeat(ctx); err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
				t.Fatalf("B's heartbeat: %v", err)
			}
			time.Sleep(session / 6) // B's heartbeat interval: the test is about time
		}
		if err := bm.join(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-joined:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("A's JoinGroup, waiting %v (its session is %v), was not answered within 5 s of B's join", late, session)
		}
		t.Logf("%s: A's JoinGroup was answered %v after it was sent (session %v); the leader saw %d members",
			b.Kind, time.Since(began).Round(10*time.Millisecond), session, max(a.members, bm.members))
		if n := max(a.members, bm.members); n != 2 {
			t.Errorf("the new generation has %d members, want A and B", n)
		}
	})
}

// TestLeaveWhileSyncing: a member that leaves while its SyncGroup waits
// does not skew the coordinator's count of joined members: the rebalance
// it causes completes as soon as the members left have rejoined. Upstream
// kfake counted the leaver out of the joined members (0 after the join
// phase ended, so -1), and the next rebalance waited for its deadline (a
// minute by default) though every member had rejoined.
//
// A and B are in a generation; B sends SyncGroup before the leader A, so
// it waits, and leaves from another connection. A rejoins: it must be
// answered at once, not at the 10 s rebalance deadline.
func TestLeaveWhileSyncing(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		const rebalance = 10 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		group := b.Prefix(t, "leavesync")
		a, bm := newMember(t, b, group, rebalance, 0), newMember(t, b, group, rebalance, 0)
		joinPair(ctx, t, a, bm)
		// B syncs first: it waits for the leader's assignment.
		bsync := make(chan error, 1)
		go func() { bsync <- bm.sync(ctx) }()
		waitSyncing(ctx, t)
		other, err := kgo.NewClient(b.Opts()...)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		leave := kmsg.NewPtrLeaveGroupRequest()
		leave.Group = group
		mi := kmsg.NewLeaveGroupRequestMember()
		mi.MemberID = bm.id
		leave.Members = append(leave.Members, mi)
		if _, err := leave.RequestWith(ctx, other); err != nil {
			t.Fatal(err)
		}

		began := time.Now()
		if err := a.join(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		// B's SyncGroup is answered with an error, or only when its client
		// gives up: B is gone either way.
		select {
		case <-bsync:
		case <-time.After(15 * time.Second):
		}
		t.Logf("%s: A alone rejoined in %v (rebalance timeout %v)", b.Kind, took.Round(10*time.Millisecond), rebalance)
		if took > 3*time.Second {
			t.Errorf("A's JoinGroup took %v: the rebalance waited for its deadline though A was the only member", took)
		}
	})
}

// newMember is a member of group on a client of its own (closed when the
// test ends), subscribed to t1; session 0 is 30 s.
func newMember(t *testing.T, b *brokertest.Broker, group string, rebalance, session time.Duration) *member {
	t.Helper()
	cl, err := kgo.NewClient(b.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &member{cl: cl, group: group, rebalance: rebalance, topics: []string{"t1"}, session: session}
}

// joinPair forms a generation of a (the leader) and bm: a alone first, then
// bm joins and a rejoins when the group rebalances for it (it would learn
// of it from its heartbeat; here from the group's state). Neither has sent
// SyncGroup for the new generation.
func joinPair(ctx context.Context, t *testing.T, a, bm *member) {
	t.Helper()
	if err := a.join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.sync(ctx); err != nil {
		t.Fatal(err)
	}
	bdone := make(chan error, 1)
	go func() { bdone <- bm.join(ctx) }()
	waitState(ctx, t, kadm.NewClient(a.cl), a.group, "PreparingRebalance")
	if err := a.join(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bdone; err != nil {
		t.Fatal(err)
	}
}

// waitSyncing gives a SyncGroup sent in another goroutine time to reach
// the broker: it has nothing to wait on (the group's state does not change).
func waitSyncing(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(300 * time.Millisecond):
	}
}

// waitState polls the group's state until it is want.
func waitState(ctx context.Context, t *testing.T, adm *kadm.Client, group, want string) {
	t.Helper()
	for {
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if gs[group].State == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the group never reached %s (at %s)", want, gs[group].State)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// all runs f for every member at once and returns the first error.
func all(m []*member, f func(*member) error) error {
	errs := make(chan error, len(m))
	for _, x := range m {
		go func() { errs <- f(x) }()
	}
	var first error
	for range m {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// member speaks the classic group protocol with raw requests.
type member struct {
	cl         *kgo.Client
	group      string
	rebalance  time.Duration
	id         string
	generation int32
	leader     string
	members    int // as the leader was told; 0 if not the leader
	protocol   string
	topics     []string      // subscribed: a change makes a rejoin rebalance
	session    time.Duration // 0: 30 s, so that no session expires during a test
}

// join sends JoinGroup until it is answered: the first one only gets the
// member id (MEMBER_ID_REQUIRED).
func (m *member) join(ctx context.Context) error {
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = m.group, m.id, "consumer"
		req.SessionTimeoutMillis = 30_000
		if m.session > 0 {
			req.SessionTimeoutMillis = int32(m.session.Milliseconds())
		}
		req.RebalanceTimeoutMillis = int32(m.rebalance.Milliseconds())
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Version: 0, Topics: m.topics}).AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
		resp, err := req.RequestWith(ctx, m.cl)
		if err != nil {
			return fmt.Errorf("JoinGroup: %w", err)
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		if errors.Is(err, kerr.MemberIDRequired) {
			m.id = resp.MemberID
			continue
		}
		if errors.Is(err, kerr.UnknownMemberID) {
			m.id = "" // dropped from the group: join as a new member
			continue
		}
		if err != nil {
			return fmt.Errorf("JoinGroup: %w", err)
		}
		m.generation, m.leader, m.members = resp.Generation, resp.LeaderID, len(resp.Members)
		if resp.Protocol != nil {
			m.protocol = *resp.Protocol
		}
		return nil
	}
}

// heartbeat sends a Heartbeat for the current generation.
func (m *member) heartbeat(ctx context.Context) error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = m.group, m.generation, m.id
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil {
		return fmt.Errorf("Heartbeat: %w", err)
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

// sync sends SyncGroup for the current generation, with empty assignments.
func (m *member) sync(ctx context.Context) error {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID = m.group, m.generation, m.id
	pt, proto := "consumer", m.protocol
	req.ProtocolType, req.Protocol = &pt, &proto
	resp, err := req.RequestWith(ctx, m.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("SyncGroup: %w", err)
	}
	return nil
}
