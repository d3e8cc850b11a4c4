package workload

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// MixSpec describes the traffic of many runs at once, as the load harness
// sends it. Zero fields take the
// default their comment names.
type MixSpec struct {
	// Prefix starts every run id; default "run".
	Prefix string
	// Runs is how many runs are under way at once; default 50.
	Runs int
	// Nodes per ordinary run; default 200.
	Nodes int
	// HugeShare is the share of runs that are huge instead; default 0.
	HugeShare float64
	// HugeNodes is the size of a huge run; default 100,000.
	HugeNodes int
	// MaxDepth is the depth budget of every tree; default 4.
	MaxDepth int
	// Total, when positive, ends the traffic after that many runs have been
	// started and finished (closed-loop scenarios, whose end is awaited);
	// zero starts a new run in the place of each finished one, without end
	// (open-loop scenarios, which run for a time).
	Total int
	// Seed drives the choices; default 1.
	Seed uint64
	// Finish makes every run end finished (TreeSpec.Finish), so that a
	// projector's retention expires it; default false.
	Finish bool
	// FinishTimers bounds finishing runs' timers (TreeSpec.FinishTimers);
	// default DefaultFinishTimers.
	FinishTimers time.Duration
}

func (s MixSpec) withDefaults() MixSpec {
	if s.Prefix == "" {
		s.Prefix = "run"
	}
	if s.Runs <= 0 {
		s.Runs = 50
	}
	if s.Nodes <= 0 {
		s.Nodes = 200
	}
	if s.HugeNodes <= 0 {
		s.HugeNodes = 100_000
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	return s
}

// Mix interleaves the events of many Trees: each event comes from a run
// chosen at random among those under way, so every run advances at about
// the same pace. A finished run is followed by its marker, an event that
// wakes the run once everything before it is projected.
type Mix struct {
	spec    MixSpec
	rng     *rand.Rand
	mu      sync.Mutex // guards slots and the counts, for ActiveRun, Started and Ended from another goroutine
	slots   []*Tree
	started int
	ended   int
}

// NewMix returns the traffic of spec.
func NewMix(spec MixSpec) *Mix {
	s := spec.withDefaults()
	m := &Mix{spec: s, rng: rand.New(rand.NewPCG(s.Seed, 0x6d6978))}
	for range s.Runs {
		if s.Total > 0 && m.started >= s.Total {
			break
		}
		m.slots = append(m.slots, m.newTree())
	}
	return m
}

// huge reports whether run n is a huge one: runs are huge at even spacing,
// HugeShare of them, the first one as early as the share allows.
func (m *Mix) huge(n int) bool {
	h := m.spec.HugeShare
	return h > 0 && int(float64(n+1)*h) > int(float64(n)*h)
}

func (m *Mix) newTree() *Tree {
	n := m.started
	m.started++
	nodes := m.spec.Nodes
	if m.huge(n) {
		nodes = m.spec.HugeNodes
	}
	return NewTree(TreeSpec{RunID: fmt.Sprintf("%s-%05d", m.spec.Prefix, n), SessionID: "bench", Nodes: nodes,
		MaxDepth: m.spec.MaxDepth, Seed: m.spec.Seed*1_000_003 + uint64(n), Finish: m.spec.Finish, FinishTimers: m.spec.FinishTimers})
}

// Next returns the next event, occurring at at, and false when a Total is
// set and every run and marker has been returned.
func (m *Mix) Next(at time.Time) (topics.Event, bool) {
	m.mu.Lock()
	if len(m.slots) == 0 {
		m.mu.Unlock()
		return topics.Event{}, false
	}
	k := m.rng.IntN(len(m.slots))
	t := m.slots[k]
	m.mu.Unlock()
	if ev, ok := t.Next(at); ok {
		return ev, true
	}
	// The run is over: its marker next, and another run in its place.
	m.mu.Lock()
	m.ended++
	if m.spec.Total == 0 || m.started < m.spec.Total {
		m.slots[k] = m.newTree()
	} else {
		m.slots[k] = m.slots[len(m.slots)-1]
		m.slots = m.slots[:len(m.slots)-1]
	}
	m.mu.Unlock()
	return Marker(t.RunID(), at), true
}

// ActiveRun returns the id of a run under way, chosen with rng, for a human
// to type into; "" when none is.
func (m *Mix) ActiveRun(rng *rand.Rand) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.slots) == 0 {
		return ""
	}
	return m.slots[rng.IntN(len(m.slots))].RunID()
}

// Started is how many runs have been started. It may be called while
// another goroutine calls Next.
func (m *Mix) Started() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started
}

// Ended is how many runs' traffic is over (their marker was returned or is
// the next event). It may be called while another goroutine calls Next.
func (m *Mix) Ended() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ended
}

// MarkerAgent is the agent id of the marker events.
const MarkerAgent = "bench-marker"

// Marker is the event that closes a run's traffic: a failure of an agent of
// its own, which wakes the run. Once its wake is read, every event of the
// run before it has been projected.
func Marker(run string, at time.Time) topics.Event {
	return topics.Event{ID: "marker-" + run, Source: "/agents/" + MarkerAgent, Type: (&topics.Failed{}).EventType(),
		Time: topics.NewTime(at), RunID: run, AgentID: MarkerAgent, SchemaVersion: topics.CurrentSchemaVersion,
		SessionID: "bench", Data: &topics.Failed{ErrorCode: "bench_end"}}
}
