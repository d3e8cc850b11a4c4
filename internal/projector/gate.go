package projector

import (
	"sync"
	"sync/atomic"
	"time"
)

// gate is an instance's priority gate (a human always gets
// through). While any of its partitions has human input on its way to a
// committed wake, the others pause their bulk work at their next record
// boundary, so that the priority path has the CPU, the Pebble and the
// broker to itself rather than sharing them with the agent backlog.
//
// A partition holds the gate from the moment its human input is handed to
// its worker until the commit carrying the input's wake is done (the
// transaction committed and Pebble written), or failed. Pauses are short:
// the priority path's commit is small (it carries only what was applied
// since the commit before), and a worker waits at most maxPause for one
// closing of the gate (a generation: from the first hold to the last
// release), then ignores it until the next, so that a partition whose
// commit hangs (a broker gone) cannot stop the others' work for longer
// than that.
type gate struct {
	mu   sync.Mutex
	held atomic.Int32 // partitions holding the gate
	gen  atomic.Uint64
	// open is closed when held drops to zero; replaced, and gen moved on,
	// when it rises from zero. Guarded by mu.
	open chan struct{}
	// pauses counts the times a worker paused at the gate, paused the
	// nanoseconds spent paused (telemetry: Status).
	pauses, paused *atomic.Int64
}

// maxPause bounds one pause at the gate.
const maxPause = 250 * time.Millisecond

// newGate returns an open gate that counts its pauses and the time paused
// in pauses and paused.
func newGate(pauses, paused *atomic.Int64) *gate {
	g := &gate{open: make(chan struct{}), pauses: pauses, paused: paused}
	close(g.open)
	return g
}

// hold is called by a partition that has human input on its way.
func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held.Add(1) == 1 {
		g.open = make(chan struct{})
		g.gen.Add(1)
	}
}

// release is called once per hold, when the input's commit is done.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held.Add(-1) == 0 {
		close(g.open)
	}
}

// closed reports whether a partition holds the gate in a generation other
// than ignored (see wait): two atomic loads, cheap enough for every record.
func (g *gate) closed(ignored uint64) bool { return g.held.Load() > 0 && g.gen.Load() != ignored }

// wait pauses until no partition holds the gate, or mine fires (the
// waiting worker's own human input arrived) or quit does, or maxPause has
// passed. It returns the generation to ignore from then on: the one it
// gave up on after maxPause, else ignored as it was.
func (g *gate) wait(ignored uint64, mine, quit <-chan struct{}) uint64 {
	g.mu.Lock()
	open, gen := g.open, g.gen.Load()
	g.mu.Unlock()
	if gen == ignored {
		return ignored
	}
	select {
	case <-open:
		return ignored
	default:
	}
	began := time.Now()
	g.pauses.Add(1)
	t := time.NewTimer(maxPause)
	defer t.Stop()
	defer func() { g.paused.Add(int64(time.Since(began))) }()
	select {
	case <-open:
	case <-mine:
	case <-quit:
	case <-t.C:
		return gen
	}
	return ignored
}
