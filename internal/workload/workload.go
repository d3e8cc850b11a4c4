// Package workload generates realistic, deterministic agent-tree traffic:
// trees shaped like seed 001's plans (a root conductor, nodes that plan in
// bands of parallel steps down to a depth budget), whose nodes lease,
// progress, request, block, fail and complete, and a conductor that
// acknowledges what it was woken for. The same Spec always yields the same
// events, ids and times, so examples, tests and benchmarks can be reproduced
// byte for byte.
//
// Generate lays out one run's whole tree and then its work, as a slice:
// what the examples, the tests and `make run`'s demo send. Tree makes the
// same kinds of events lazily, growing the tree while it works, for runs
// too large to hold, and Mix interleaves many Trees: the load harness's
// traffic (bench/harness). Both share the node lifecycle's shares, the
// capabilities and how an event is made.
package workload

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Spec describes one run's traffic. Zero fields take their defaults.
type Spec struct {
	// RunID of the run; default "run-1".
	RunID string
	// SessionID and ThreadID scope the run; default none.
	SessionID, ThreadID string
	// Nodes in the tree, root included; default 100.
	Nodes int
	// Fanout is the steps per band; default 4. Bands per plan is 2.
	Fanout int
	// Start is the time of the first event; default 2026-02-14T10:00:00Z.
	Start time.Time
	// Step is the time between consecutive events; default 50ms.
	Step time.Duration
	// Seed drives every random choice; the same seed, the same events.
	Seed uint64
	// Shares of non-root nodes that end blocked, failed or still running
	// (holding a lease); the rest complete. Defaults 0.05, 0.05, 0.10.
	BlockedShare, FailedShare, RunningShare float64
	// RequestShare of nodes raise a request; default 0.10.
	RequestShare float64
	// Activity adds what a runtime reports inside the nodes (activity.go):
	// turns, tool and command calls, processes, model usage and limits,
	// artifacts and evidence, incidents, approvals, the session and the
	// runtime's configuration. Off, the events are the tree's alone, the
	// mix the benchmarks compare across builds.
	Activity bool
}

func (s Spec) withDefaults() Spec {
	if s.RunID == "" {
		s.RunID = "run-1"
	}
	if s.Nodes <= 0 {
		s.Nodes = 100
	}
	if s.Fanout <= 0 {
		s.Fanout = 4
	}
	if s.Start.IsZero() {
		s.Start = time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	}
	if s.Step <= 0 {
		s.Step = 50 * time.Millisecond
	}
	if s.BlockedShare == 0 && s.FailedShare == 0 && s.RunningShare == 0 {
		s.BlockedShare, s.FailedShare, s.RunningShare = defaultBlockedShare, defaultFailedShare, defaultRunningShare
	}
	if s.RequestShare == 0 {
		s.RequestShare = defaultRequestShare
	}
	return s
}

// Shares of non-root nodes that end blocked, failed or still running
// (holding a lease), the rest completing, and of nodes that raise a
// request: Spec's defaults and a Tree's, so that the bench's traffic and the
// tests' look alike.
const (
	defaultBlockedShare = 0.05
	defaultFailedShare  = 0.05
	defaultRunningShare = 0.10
	defaultRequestShare = 0.10
)

// gen is the state of one generation.
type gen struct {
	spec    Spec
	rng     *rand.Rand
	entropy *ulid.MonotonicEntropy
	now     time.Time
	out     []topics.Event
}

// Generate returns the events of one run, in the order they are produced.
func Generate(spec Spec) []topics.Event {
	s := spec.withDefaults()
	rng := rand.New(rand.NewPCG(s.Seed, 0x63616e6f7079))
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], s.Seed)
	g := &gen{spec: s, rng: rng, entropy: ulid.Monotonic(rand.NewChaCha8(seed), 0), now: s.Start}

	ids := make([]string, s.Nodes)
	ids[0] = "conductor"
	for i := 1; i < s.Nodes; i++ {
		ids[i] = fmt.Sprintf("agent-%05d", i)
	}
	perPlan := 2 * s.Fanout
	parent := func(i int) int { return (i - 1) / perPlan }

	// Structure first, as seed 001's planner does: a node plans, then its
	// children are created and delegated, band by band.
	g.emit(ids[0], "", &topics.NodeCreated{Role: topics.RoleConductor, Capability: "orchestrate"})
	g.emit(ids[0], "", &topics.NodeStatus{Status: topics.StatusRunning, Reason: "planning"})
	if s.Activity {
		g.rootActivityStart(ids[0])
	}
	for p := 0; p*perPlan+1 < s.Nodes; p++ {
		first := p*perPlan + 1
		last := min(first+perPlan, s.Nodes)
		plan := fmt.Sprintf("plan-%s", ids[p])
		bands := (last - first + s.Fanout - 1) / s.Fanout
		g.emit(ids[p], "", &topics.PlanCreated{PlanID: plan, BandCount: bands})
		for b := 0; b < bands; b++ {
			lo, hi := first+b*s.Fanout, min(first+(b+1)*s.Fanout, last)
			g.emit(ids[p], "", &topics.PlanBandCreated{PlanID: plan, BandIndex: b, Parallelizable: true, StepCount: hi - lo})
			for c := lo; c < hi; c++ {
				step := fmt.Sprintf("step-%05d", c)
				g.emit(ids[p], "", &topics.StepCreated{PlanID: plan, BandIndex: b, StepID: step, StepIndex: c - lo, ChildAgentID: ids[c]})
				role := topics.RoleWorker
				if c%7 == 0 {
					role = topics.RoleAppAgent
				}
				g.emit(ids[c], "", &topics.NodeCreated{ParentAgentID: ids[parent(c)], Role: role, Capability: capabilities[c%len(capabilities)], TaskID: step})
				expected := topics.NewTime(g.now.Add(10 * time.Minute))
				g.emit(ids[c], corr(c), &topics.NodeDelegated{ExpectedBy: &expected, TaskID: step, ChildRunID: fmt.Sprintf("%s/%s", s.RunID, ids[c])})
			}
		}
	}

	// Then the work, the lifecycles of all nodes interleaved at random but
	// each in its own order.
	queues := make([][]func(), s.Nodes)
	for i := 1; i < s.Nodes; i++ {
		queues[i] = g.lifecycle(i, ids[i])
	}
	live := make([]int, 0, s.Nodes)
	for i := 1; i < s.Nodes; i++ {
		live = append(live, i)
	}
	for len(live) > 0 {
		k := rng.IntN(len(live))
		i := live[k]
		queues[i][0]()
		queues[i] = queues[i][1:]
		if len(queues[i]) == 0 {
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	if s.Activity {
		g.rootActivityEnd(ids[0])
	}
	return g.out
}

var capabilities = []string{"search", "summarize", "code", "browse", "analyze"}

func corr(i int) string { return fmt.Sprintf("corr-%05d", i) }

// lifecycle returns the steps of one node's work.
func (g *gen) lifecycle(i int, id string) []func() {
	s := g.spec
	c := corr(i)
	var steps []func()
	add := func(f func()) { steps = append(steps, f) }
	owner := fmt.Sprintf("worker-pool-%d", i%3)
	add(func() { g.emit(id, c, &topics.NodeStatus{Status: topics.StatusRunning}) })
	add(func() {
		g.emit(id, c, topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: owner, ExpiresAt: topics.NewTime(g.now.Add(30 * time.Second))}))
	})
	frac := 0.5
	add(func() { g.emit(id, c, &topics.Progress{Fraction: &frac}) })
	add(func() { g.emit(id, c, &topics.Heartbeat{}) })
	if s.Activity {
		for _, f := range g.nodeActivity(i, id, c) {
			add(f)
		}
	}
	if g.rng.Float64() < s.RequestShare {
		n := i
		kind := "clarification"
		if s.Activity && n%2 == 0 {
			kind = "approval"
		}
		add(func() {
			g.emit(id, c, &topics.Request{RequestID: fmt.Sprintf("req-%05d", n), RequestKind: kind,
				DedupeKey: fmt.Sprintf("ask-%d", n%11), TTLMs: 120000})
		})
	}
	switch r := g.rng.Float64(); {
	case r < s.BlockedShare:
		add(func() { g.emit(id, c, &topics.NodeStatus{Status: topics.StatusBlocked, Reason: "needs:credential"}) })
		if s.Activity {
			add(func() {
				g.emit(id, c, &topics.IncidentOpened{IncidentID: "incident-" + id, IncidentKind: "credential_missing", Severity: "warning",
					Title: "a credential the task needs is missing"})
			})
		}
	case r < s.BlockedShare+s.FailedShare:
		add(func() { g.emit(id, c, &topics.Failed{ErrorCode: "tool_error"}) })
		add(func() { g.emit(id, "", &topics.LeaseReleased{Owner: owner}) })
	case r < s.BlockedShare+s.FailedShare+s.RunningShare:
		add(func() {
			g.emit(id, c, topics.NewLease(topics.TypeLeaseRenewed, topics.Lease{Owner: owner, ExpiresAt: topics.NewTime(g.now.Add(time.Duration(20+i%40) * time.Second))}))
		})
	default:
		if s.Activity {
			add(func() {
				g.emit(id, c, &topics.ArtifactCreated{ArtifactID: fmt.Sprintf("artifact-%05d", i), ArtifactType: "json", Label: "findings", IsPrimary: true})
			})
			if i%4 == 0 {
				add(func() {
					g.emit(id, c, &topics.EvidenceRecorded{EvidenceID: fmt.Sprintf("evidence-%05d", i), EvidenceKind: "test_run",
						Verdict: []string{"passed", "passed", "failed"}[i%3], ArtifactID: fmt.Sprintf("artifact-%05d", i)})
				})
			}
		}
		add(func() {
			ok := true
			g.emit(id, c, topics.NewResult(topics.TypeNodeResult, topics.Result{ResultKind: "json", Success: &ok,
				ArtifactIDs: []string{fmt.Sprintf("artifact-%05d", i)}}))
		})
		add(func() { g.emit(id, "", &topics.LeaseReleased{Owner: owner}) })
		add(func() { g.emit(id, c, &topics.NodeCompleted{}) })
		if i%2 == 0 {
			// The conductor acknowledges the wake that delivered it.
			add(func() {
				g.emit("conductor", "", &topics.WakeReceived{WakeID: fmt.Sprintf("wake-for-%s", id), AgentIDs: []string{id}})
			})
		}
	}
	return steps
}

// emit appends one event at the next tick of the clock.
func (g *gen) emit(agentID, correlationID string, data topics.Payload) {
	g.out = append(g.out, newEvent(g.spec.RunID, g.spec.SessionID, g.spec.ThreadID, agentID, correlationID, data, topics.NewTime(g.now), g.entropy))
	g.now = g.now.Add(g.spec.Step)
}

// newEvent is one event of run at t by agentID, its id the next ULID of
// entropy at t: Generate's and a Tree's events are made alike.
func newEvent(run, session, thread, agentID, correlationID string, data topics.Payload, t topics.Time, entropy *ulid.MonotonicEntropy) topics.Event {
	return topics.Event{
		ID:            ulid.MustNew(uint64(t.UnixMilli()), entropy).String(),
		Source:        "/agents/" + agentID,
		Type:          data.EventType(),
		Time:          t,
		RunID:         run,
		AgentID:       agentID,
		SchemaVersion: topics.CurrentSchemaVersion,
		SessionID:     session,
		ThreadID:      thread,
		CorrelationID: correlationID,
		Data:          data,
	}
}
