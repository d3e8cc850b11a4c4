package workload

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TreeSpec describes one run's traffic for Tree. Zero fields take the
// default their comment names.
type TreeSpec struct {
	// RunID of the run. Required.
	RunID string
	// SessionID scopes the run; default none.
	SessionID string
	// Nodes in the tree, root included; default 200.
	Nodes int
	// MaxDepth is the depth budget the tree is shaped to (seed 001's
	// maxDepth; the projector's default is 4): each plan has two bands of
	// parallel steps, as wide as it takes for Nodes to fit the budget, and
	// at least 4 steps wide. Default 4.
	MaxDepth int
	// Seed drives every random choice: the same spec and the same times
	// give the same events.
	Seed uint64
	// Finish makes the run end finished, as pkg/projection's Run.Finished
	// means it, so that retention can expire it: every lease is released
	// (blocked nodes give theirs back, nodes that would stay running renew
	// once and then complete), every completion is acknowledged (no
	// forwarding grace is left pending), delegations expect a result
	// within FinishTimers and requests live half of it, and the root
	// completes once every other node's lifecycle is over. Once those
	// timers have fired (FinishTimers after the run's last event at most)
	// nothing is left that can happen to the run. Default false: the root
	// stays running and some nodes hold leases for good, as in the
	// standard scenarios, whose traffic (and so figures) this leaves
	// exactly as it was. A finishing tree's nodes draw their outcomes with
	// the same shares.
	Finish bool
	// FinishTimers bounds a finishing run's timers: each falls due within
	// it of the event that set it, so within it of the run's last event.
	// Default DefaultFinishTimers. Ignored without Finish.
	FinishTimers time.Duration
}

// DefaultFinishTimers is TreeSpec.FinishTimers's default: an expected_by 20
// s after each delegation, a request TTL of 10 s (an ordinary run's are 10
// minutes and 120 s), so that a finished run's last timer fires soon after
// its last event.
const DefaultFinishTimers = 20 * time.Second

// outcomes of a node's lifecycle.
const (
	outcomeComplete uint8 = iota
	outcomeBlocked
	outcomeFailed
	outcomeRunning
)

// steps of a node's lifecycle, in the order a node goes through them.
const (
	stepRunning uint8 = iota
	stepLease
	stepProgress
	stepHeartbeat
	stepRequest
	stepOutcome   // blocked, failed, renewed or result
	stepRelease   // after failed or result
	stepCompleted // after result
	stepAck       // the conductor acknowledges the completion (every other node)
	stepDone
)

// Tree generates one run's events lazily, one at a time, so that a run of
// 100,000 nodes costs a few bytes per node rather than its million events in
// memory: the load harness's traffic (bench/harness). Unlike Generate, which
// lays out the whole tree before any node works, a Tree grows while it works, as seed 001's planners do: a band
// of steps is created and delegated when few nodes are busy, and its nodes
// lease, progress, request, block, fail and complete while later bands are
// planned. So wakes come all along the run's growth, at every size.
type Tree struct {
	spec    TreeSpec
	rng     *rand.Rand
	entropy *ulid.MonotonicEntropy
	perPlan int // children per planner: two bands of fanout steps
	fanout  int

	created     int // nodes created, root included
	nextPlanner int // the node whose plan is created next
	nextBand    int // the band of nextPlanner created next
	queue       []pending
	live        []int32 // nodes whose lifecycle is not over
	pos         []uint8 // next lifecycle step per node
	outcome     []uint8
	request     []bool
	started     bool
	rootDone    bool // a finishing tree's root completion was emitted
	emitted     int
}

// pending is a structure event waiting to be stamped with its time.
type pending struct {
	agent, corr string
	data        func(at time.Time) topics.Payload
}

// NewTree returns the generator of spec's run.
func NewTree(spec TreeSpec) *Tree {
	if spec.Nodes <= 0 {
		spec.Nodes = 200
	}
	if spec.Nodes < 2 {
		spec.Nodes = 2
	}
	if spec.MaxDepth <= 0 {
		spec.MaxDepth = 4
	}
	if spec.FinishTimers <= 0 {
		spec.FinishTimers = DefaultFinishTimers
	}
	// The smallest even plan width that fits the nodes into the depth
	// budget: perPlan^1 + ... + perPlan^depth >= nodes-1.
	per := 8
	for fits(per, spec.MaxDepth) < spec.Nodes-1 {
		per += 2
	}
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], spec.Seed)
	return &Tree{spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, 0x62656e6368)), entropy: ulid.Monotonic(rand.NewChaCha8(seed), 0),
		perPlan: per, fanout: per / 2, pos: make([]uint8, spec.Nodes), outcome: make([]uint8, spec.Nodes), request: make([]bool, spec.Nodes)}
}

func fits(per, depth int) int {
	n, level := 0, 1
	for range depth {
		level *= per
		n += level
		if n > math.MaxInt32 {
			break
		}
	}
	return n
}

// RunID is the run's id.
func (t *Tree) RunID() string { return t.spec.RunID }

// Nodes is how many nodes the tree has created so far, root included.
func (t *Tree) Nodes() int { return t.created }

// Emitted is how many events Next has returned.
func (t *Tree) Emitted() int { return t.emitted }

func (t *Tree) id(i int) string {
	if i == 0 {
		return "conductor"
	}
	return fmt.Sprintf("agent-%06d", i)
}

// treeCorr is node i's correlation id: six digits, as a Tree's node ids
// have (Generate's have five).
func treeCorr(i int) string { return fmt.Sprintf("corr-%06d", i) }

// Next returns the run's next event, occurring at at, and false once the
// run is over.
func (t *Tree) Next(at time.Time) (topics.Event, bool) {
	if !t.started {
		t.started = true
		t.created = 1
		t.queue = append(t.queue,
			pending{agent: t.id(0), data: func(time.Time) topics.Payload {
				return &topics.NodeCreated{Role: topics.RoleConductor, Capability: "orchestrate"}
			}},
			pending{agent: t.id(0), data: func(time.Time) topics.Payload {
				return &topics.NodeStatus{Status: topics.StatusRunning, Reason: "planning"}
			}})
	}
	for len(t.queue) == 0 {
		// Plan the next band when few nodes are busy (or now and then
		// anyway), else move a busy node on.
		if t.created < t.spec.Nodes && (len(t.live) < 2*t.perPlan || t.rng.IntN(8) == 0) {
			t.planBand()
			continue
		}
		if len(t.live) == 0 {
			// Every node was created (else a band would have been
			// planned) and every lifecycle is over.
			if t.spec.Finish && !t.rootDone {
				t.rootDone = true
				t.emitted++
				return t.event(t.id(0), "", &topics.NodeCompleted{}, at), true
			}
			return topics.Event{}, false
		}
		k := t.rng.IntN(len(t.live))
		i := int(t.live[k])
		ev, over := t.lifecycle(i, at)
		if over {
			t.live[k] = t.live[len(t.live)-1]
			t.live = t.live[:len(t.live)-1]
		}
		if ev != nil {
			t.emitted++
			return *ev, true
		}
	}
	p := t.queue[0]
	t.queue = t.queue[1:]
	t.emitted++
	return t.event(p.agent, p.corr, p.data(at), at), true
}

// planBand queues the structure events of the next band of steps: the
// planner's plan first if this is its first band, then each step, its node's
// creation and delegation.
func (t *Tree) planBand() {
	p := t.nextPlanner
	first := p*t.perPlan + 1
	last := min(first+t.perPlan, t.spec.Nodes)
	plan := "plan-" + t.id(p)
	bands := (last - first + t.fanout - 1) / t.fanout
	agent := t.id(p)
	if t.nextBand == 0 {
		t.queue = append(t.queue, pending{agent: agent, data: func(time.Time) topics.Payload {
			return &topics.PlanCreated{PlanID: plan, BandCount: bands}
		}})
	}
	b := t.nextBand
	lo, hi := first+b*t.fanout, min(first+(b+1)*t.fanout, last)
	t.queue = append(t.queue, pending{agent: agent, data: func(time.Time) topics.Payload {
		return &topics.PlanBandCreated{PlanID: plan, BandIndex: b, Parallelizable: true, StepCount: hi - lo}
	}})
	for c := lo; c < hi; c++ {
		step := fmt.Sprintf("step-%06d", c)
		child := t.id(c)
		role := topics.RoleWorker
		if c%7 == 0 {
			role = topics.RoleAppAgent
		}
		capability := capabilities[c%len(capabilities)]
		parent := agent
		t.queue = append(t.queue,
			pending{agent: agent, data: func(time.Time) topics.Payload {
				return &topics.StepCreated{PlanID: plan, BandIndex: b, StepID: step, StepIndex: c - lo, ChildAgentID: child}
			}},
			pending{agent: child, data: func(time.Time) topics.Payload {
				return &topics.NodeCreated{ParentAgentID: parent, Role: role, Capability: capability, TaskID: step}
			}},
			pending{agent: child, corr: treeCorr(c), data: func(at time.Time) topics.Payload {
				expectedBy := 10 * time.Minute
				if t.spec.Finish {
					expectedBy = t.spec.FinishTimers
				}
				expected := topics.NewTime(at.Add(expectedBy))
				return &topics.NodeDelegated{ExpectedBy: &expected, TaskID: step, ChildRunID: t.spec.RunID + "/" + child}
			}})
		switch r := t.rng.Float64(); {
		case r < defaultBlockedShare:
			t.outcome[c] = outcomeBlocked
		case r < defaultBlockedShare+defaultFailedShare:
			t.outcome[c] = outcomeFailed
		case r < defaultBlockedShare+defaultFailedShare+defaultRunningShare:
			t.outcome[c] = outcomeRunning
		}
		t.request[c] = t.rng.Float64() < defaultRequestShare
		t.live = append(t.live, int32(c))
	}
	t.created += hi - lo
	t.nextBand++
	if t.nextBand == bands {
		t.nextPlanner, t.nextBand = p+1, 0
	}
}

// lifecycle returns node i's next event (nil if the step emits none) and
// whether its lifecycle is over.
func (t *Tree) lifecycle(i int, at time.Time) (*topics.Event, bool) {
	id, c := t.id(i), treeCorr(i)
	owner := fmt.Sprintf("worker-pool-%d", i%3)
	step := t.pos[i]
	t.pos[i]++
	var data topics.Payload
	agent, correlation := id, c
	switch step {
	case stepRunning:
		data = &topics.NodeStatus{Status: topics.StatusRunning}
	case stepLease:
		data = topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: owner, ExpiresAt: topics.NewTime(at.Add(30 * time.Second))})
	case stepProgress:
		frac := 0.5
		data = &topics.Progress{Fraction: &frac}
	case stepHeartbeat:
		data = &topics.Heartbeat{}
	case stepRequest:
		if !t.request[i] {
			return nil, false
		}
		ttl := int64(120000)
		if t.spec.Finish {
			ttl = max(t.spec.FinishTimers.Milliseconds()/2, 1)
		}
		data = &topics.Request{RequestID: fmt.Sprintf("req-%06d", i), RequestKind: "clarification",
			DedupeKey: fmt.Sprintf("ask-%d", i%11), TTLMs: ttl}
	case stepOutcome:
		switch t.outcome[i] {
		case outcomeBlocked:
			t.pos[i] = stepDone
			if t.spec.Finish {
				t.pos[i] = stepRelease // it gives its lease back while it waits
			}
			data = &topics.NodeStatus{Status: topics.StatusBlocked, Reason: "needs:credential"}
		case outcomeFailed:
			t.pos[i] = stepRelease
			data = &topics.Failed{ErrorCode: "tool_error"}
		case outcomeRunning:
			t.pos[i] = stepDone
			if t.spec.Finish {
				// Long work that ends: the renewal, then a result.
				t.pos[i], t.outcome[i] = stepOutcome, outcomeComplete
			}
			data = topics.NewLease(topics.TypeLeaseRenewed, topics.Lease{Owner: owner,
				ExpiresAt: topics.NewTime(at.Add(time.Duration(20+i%40) * time.Second))})
		default:
			ok := true
			data = topics.NewResult(topics.TypeNodeResult, topics.Result{ResultKind: "json", Success: &ok,
				ArtifactIDs: []string{fmt.Sprintf("artifact-%06d", i)}})
		}
	case stepRelease:
		correlation = ""
		data = &topics.LeaseReleased{Owner: owner}
		if t.outcome[i] == outcomeFailed || t.outcome[i] == outcomeBlocked {
			t.pos[i] = stepDone
		}
	case stepCompleted:
		data = &topics.NodeCompleted{}
		if i%2 != 0 && !t.spec.Finish {
			// Left unacknowledged: the forwarding grace runs out.
			t.pos[i] = stepDone
		}
	case stepAck:
		agent, correlation = "conductor", ""
		data = &topics.WakeReceived{WakeID: "wake-for-" + id, AgentIDs: []string{id}}
	default:
		return nil, true
	}
	ev := t.event(agent, correlation, data, at)
	return &ev, t.pos[i] >= stepDone
}

// event makes one event of the run at at.
func (t *Tree) event(agentID, correlationID string, data topics.Payload, at time.Time) topics.Event {
	return newEvent(t.spec.RunID, t.spec.SessionID, "", agentID, correlationID, data, topics.NewTime(at), t.entropy)
}
