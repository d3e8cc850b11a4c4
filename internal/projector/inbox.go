package projector

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// batch is a run of fetched records of one partition of one topic.
type batch struct {
	records []*kgo.Record
	// highWatermark is the partition's as the fetch saw it; -1 for records
	// applied again (poison.go), which say nothing of the lag.
	highWatermark int64
	// fetched is when the poll that returned the records came back:
	// where the priority path's stages after the broker begin (telemetry
	// only).
	fetched time.Time
}

// humanMark times a human input record through the priority path (see
// PriorityStage): its timestamp, its fetch, its worker taking it up and
// having applied it. The commit that carries its wake adds the rest.
type humanMark struct {
	appended, fetched, taken, applied time.Time
}

// inbox is what the pollers hand a worker, and the flags other goroutines
// set for it: channels and atomics only, the one part of a worker they
// touch.
type inbox struct {
	human, agent chan batch
	// humanWaiting is set when human input is handed to the worker and
	// cleared when the worker takes it up: the worker looks at it between
	// every two agent records it applies (one atomic load), and stops
	// applying agent records at once to commit the human input first.
	// humanSignal wakes the worker from a pause at the gate.
	humanWaiting atomic.Bool
	humanSignal  chan struct{}
	// pendingAgent counts the agent records queued, and pendingBytes what
	// they hold (recordBytes), for pausing and resuming the partition's
	// fetching (intake.go); paused says it is paused.
	pendingAgent, pendingBytes atomic.Int64
	paused                     atomic.Bool
	// lag is, per input topic (agent events, human input), the high
	// watermark minus the next offset, as of the last batch; -1 before the
	// first. Read by Projector.Lag.
	lag [2]atomic.Int64
}

func (in *inbox) init() {
	in.human, in.agent, in.humanSignal = make(chan batch, 1024), make(chan batch, 1024), make(chan struct{}, 1)
	in.lag[0].Store(-1)
	in.lag[1].Store(-1)
}

// queued reports whether agent records wait to be applied.
func (in *inbox) queued() bool { return in.pendingAgent.Load() > 0 || len(in.agent) > 0 }

// enqueue hands a fetched batch to the worker, pausing the partition's agent
// fetching when too much waits: more than MaxPending records, or more than
// its share of MaxQueuedBytes (intake.go). It never blocks once the worker
// is stopping.
func (w *worker) enqueue(b batch, human bool) {
	in := &w.in
	ch := in.agent
	if human {
		ch = in.human
	} else {
		n := in.pendingAgent.Add(int64(len(b.records)))
		by := in.pendingBytes.Add(recordBytes(b.records))
		if (n > int64(w.p.cfg.MaxPending) || by > w.p.queueShare()) && !in.paused.Swap(true) {
			w.p.group.PauseFetchPartitions(map[string][]int32{w.p.cfg.Names.AgentEvents(): {w.part}})
		}
	}
	select {
	case ch <- b:
	case <-w.quit:
		return
	}
	if human {
		// In this order: the batch is in the channel before the worker
		// can see the flag, and the other partitions pause only once it
		// is.
		w.holdGate()
		in.humanWaiting.Store(true)
		select {
		case in.humanSignal <- struct{}{}:
		default:
		}
	}
}

// dequeued counts agent records out of the queue, resuming the partition's
// fetching once at most half of both bounds is left.
func (w *worker) dequeued(rs []*kgo.Record) {
	left := w.in.pendingAgent.Add(-int64(len(rs)))
	bytes := w.in.pendingBytes.Add(-recordBytes(rs))
	if left <= int64(w.p.cfg.MaxPending/2) && bytes <= w.p.queueShare()/2 && w.in.paused.Swap(false) {
		w.p.group.ResumeFetchPartitions(map[string][]int32{w.p.cfg.Names.AgentEvents(): {w.part}})
	}
}

// requeued counts back in agent records dequeued and left unapplied.
func (w *worker) requeued(rs []*kgo.Record) {
	w.in.pendingAgent.Add(int64(len(rs)))
	w.in.pendingBytes.Add(recordBytes(rs))
}

// gateHold is a partition's hold on the instance's priority gate (gate.go).
type gateHold struct {
	// mu guards holding (the partition holds the gate: human input on its
	// way) and exited (the worker is gone: it must not hold the gate
	// again); held mirrors holding for the record loop.
	mu              sync.Mutex
	holding, exited bool
	held            atomic.Bool
	// ignoreGen is the gate's generation this worker gave up waiting for
	// (gate.wait): it applies on until the gate opens and closes again.
	// The worker's goroutine owns it.
	ignoreGen uint64
}

// holdGate makes the partition hold the instance's gate, unless it does
// or its worker is gone.
func (w *worker) holdGate() {
	h := &w.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.holding && !h.exited {
		h.holding = true
		h.held.Store(true)
		w.p.gate.hold()
	}
}

// releaseGate lets go of the gate once the partition has no human input on
// its way: none waiting, none applied and not yet in a commit, none in the
// commit in flight. With exit, for good: the worker is going.
func (w *worker) releaseGate(exit bool) {
	h := &w.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if exit {
		h.exited = true
	} else if len(w.in.human) > 0 || len(w.prio.marks) > 0 || w.prio.pending.Len() > 0 || w.prio.inflight != nil {
		return
	}
	if h.holding {
		h.holding = false
		h.held.Store(false)
		w.p.gate.release()
	}
}

// othersFirst reports whether another partition's human input is on its
// way: this one's bulk work pauses for it.
func (w *worker) othersFirst() bool {
	return w.p.gate.closed(w.hold.ignoreGen) && !w.hold.held.Load()
}

// pauseForOthers pauses until the human input of the other partitions is
// committed (or this partition's own arrives, or maxPause passes).
func (w *worker) pauseForOthers() {
	tlog(w.part, "g.pause")
	defer tlog(w.part, "g.resume")
	w.hold.ignoreGen = w.p.gate.wait(w.hold.ignoreGen, w.in.humanSignal, w.quit)
}

// preempted reports whether the worker must stop applying agent records:
// its own human input waits, or its priority commit is in flight (the
// worker waits for it: it is short, and the machine is its meanwhile) or
// done, or another partition holds the gate.
func (w *worker) preempted() bool {
	return w.in.humanWaiting.Load() || w.prio.inflight != nil || w.prio.finished.Load() || w.othersFirst()
}
