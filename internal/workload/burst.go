package workload

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Burst describes a run whose one event raises a trigger for every node:
// the most triggers one record can raise, which a wake must hold (split
// over several when they do not fit one). Zero fields take their defaults.
type Burst struct {
	// RunID of the run; default "run-1".
	RunID string
	// Nodes is how many nodes the run has besides its root conductor;
	// default 20,000.
	Nodes int
	// Start is the time of the first event; default 2026-02-14T10:00:00Z.
	Start time.Time
	// Step is the time between consecutive events; default 1ms.
	Step time.Duration
	// Owner is every lease's owner (LeasesDueTogether): the detail of each
	// lease_expired trigger, so its length sets how large they are;
	// default "worker-pool".
	Owner string
	// Seed drives the event ids.
	Seed uint64
}

func (b Burst) withDefaults() Burst {
	if b.RunID == "" {
		b.RunID = "run-1"
	}
	if b.Nodes <= 0 {
		b.Nodes = 20_000
	}
	if b.Start.IsZero() {
		b.Start = time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	}
	if b.Step <= 0 {
		b.Step = time.Millisecond
	}
	if b.Owner == "" {
		b.Owner = "worker-pool"
	}
	return b
}

// burstGen makes a Burst's events one tick apart.
type burstGen struct {
	b       Burst
	now     time.Time
	entropy *ulid.MonotonicEntropy
	out     []topics.Event
}

func newBurstGen(b Burst, events int) *burstGen {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], b.Seed)
	return &burstGen{b: b, now: b.Start, entropy: ulid.Monotonic(rand.NewChaCha8(seed), 0), out: make([]topics.Event, 0, events)}
}

func (g *burstGen) emit(agentID string, data topics.Payload) {
	g.out = append(g.out, newEvent(g.b.RunID, "", "", agentID, "", data, topics.NewTime(g.now), g.entropy))
	g.now = g.now.Add(g.b.Step)
}

func burstNode(i int) string { return fmt.Sprintf("agent-%05d", i) }

// LeafFirstChain returns the events of a run whose tree is one chain,
// conductor, agent-00001, agent-00002 ..., created from its leaf up, the
// root conductor last. Until the root arrives no node's depth is known;
// its creation settles them all at once, and every node deeper than the
// depth budget (projection.Config.MaxDepth, 4 by default) raises a
// guard:maxDepth trigger in that one event: Nodes-MaxDepth of them.
func (b Burst) LeafFirstChain() []topics.Event {
	b = b.withDefaults()
	g := newBurstGen(b, b.Nodes+1)
	for i := b.Nodes; i >= 1; i-- {
		parent := "conductor"
		if i > 1 {
			parent = burstNode(i - 1)
		}
		g.emit(burstNode(i), &topics.NodeCreated{ParentAgentID: parent, Role: topics.RoleWorker})
	}
	g.emit("conductor", &topics.NodeCreated{Role: topics.RoleConductor})
	return g.out
}

// LeasesDueTogether returns the events of a run whose conductor has Nodes
// children, each holding a lease (owned by Owner) that expires at one
// instant, a minute after the last is taken, and then the conductor's
// heartbeat a second after that instant: applying the heartbeat fires
// every lease at once, Nodes lease_expired triggers in one event (a
// projector firing timers by its clock raises them at the instant itself).
// It returns the instant too.
func (b Burst) LeasesDueTogether() ([]topics.Event, time.Time) {
	b = b.withDefaults()
	g := newBurstGen(b, 2*b.Nodes+2)
	due := topics.NewTime(b.Start.Add(time.Duration(2*b.Nodes+1)*b.Step + time.Minute))
	g.emit("conductor", &topics.NodeCreated{Role: topics.RoleConductor})
	for i := 1; i <= b.Nodes; i++ {
		g.emit(burstNode(i), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker})
		g.emit(burstNode(i), topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: b.Owner, ExpiresAt: due}))
	}
	g.now = due.Std().Add(time.Second)
	g.emit("conductor", &topics.Heartbeat{})
	return g.out, due.Std()
}

// Results returns the events of a run whose conductor has Nodes children
// that are created and then each send a result: applied in one batch (a
// projector's commit under a backlog), Nodes result triggers for one run,
// each naming another agent.
func (b Burst) Results() []topics.Event {
	b = b.withDefaults()
	g := newBurstGen(b, 2*b.Nodes+1)
	g.emit("conductor", &topics.NodeCreated{Role: topics.RoleConductor})
	for i := 1; i <= b.Nodes; i++ {
		g.emit(burstNode(i), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker})
	}
	ok := true
	for i := 1; i <= b.Nodes; i++ {
		g.emit(burstNode(i), topics.NewResult(topics.TypeResult, topics.Result{ResultKind: "json", Success: &ok}))
	}
	return g.out
}
