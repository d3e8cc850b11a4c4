package projector

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// loop processes the partition until the worker must stop or rewind. Every
// path in it commits what it applied before it comes back to the top, but
// human input, whose state and offset the agent lane's next commit carries
// once the input's wake is out: what is applied but not committed lives
// only inside processAgent, in that human input (committed at
// <-w.prio.done, or before a stop), and in the suspects of a rewind, which
// careful applies first.
func (w *worker) loop(timer *time.Timer) {
	for {
		if len(w.poison.suspects) > 0 && !w.careful() {
			return
		}
		// Human input first, always.
		select {
		case b := <-w.in.human:
			if !w.processHuman(b) {
				return
			}
			continue
		default:
		}
		w.armTimer(timer)
		select {
		case <-w.quit:
			// Human input's state and offset wait here for the agent
			// lane's next commit (<-w.prio.done below): a stop commits
			// them first, so that it leaves nothing applied uncommitted
			// and the next owner does not apply the input again.
			w.flush()
			return
		case b := <-w.in.human:
			if !w.processHuman(b) {
				return
			}
		case b := <-w.in.agent:
			if !w.processAgent(b) {
				return
			}
		case <-timer.C:
			if !w.fireTimers() {
				return
			}
		case <-w.agent.done():
			if !w.settle() {
				return
			}
		case <-w.prio.done():
			// The input's wake is out; its state change and offset are
			// committed with the agent lane, at once when that is idle.
			if !w.settlePriority() || !w.flush() {
				return
			}
		case q := <-w.queries:
			// Human input that came meanwhile goes first, even before a
			// read; then everything applied is committed, so that the
			// read sees committed state.
			if w.applyHuman() && !w.publishPriority() || !w.flush() || !w.settlePriority() || !w.settle() {
				q.done <- w.unanswerable()
				return
			}
			w.answer(q)
		}
	}
}

// processHuman applies a batch of human input, and any more waiting, and
// publishes their wakes at once on the priority path. It returns false
// when the worker must stop.
func (w *worker) processHuman(b batch) bool {
	w.in.humanWaiting.Store(false)
	w.applyHumanBatch(b)
	w.applyHuman()
	return !w.rewinding() && w.publishPriority()
}

// applyHuman applies the human input waiting, without blocking, and
// reports whether there was any.
func (w *worker) applyHuman() bool {
	// Cleared first: input handed over after this sets it again.
	w.in.humanWaiting.Store(false)
	applied := false
	for !w.rewinding() {
		select {
		case b := <-w.in.human:
			w.applyHumanBatch(b)
			applied = true
		default:
			return applied
		}
	}
	return applied
}

// applyHumanBatch applies a batch of human input and marks the time of each
// of its records for the priority path's stages.
func (w *worker) applyHumanBatch(b batch) {
	if w.rewinding() {
		w.keep(b.records, true)
		return
	}
	taken := time.Now()
	tlog(w.part, "h.taken")
	done := w.apply(b, true)
	applied := time.Now()
	w.keep(b.records[done:], true) // what a rewind interrupted
	for _, r := range b.records[:done] {
		w.prio.marks = append(w.prio.marks, humanMark{appended: r.Timestamp, fetched: b.fetched, taken: taken, applied: applied})
	}
}

// processAgent applies agent records, chunk by chunk, and commits them. While
// more fetched batches wait it goes on applying them into the same commit, up
// to Config.MaxBatch records: under a backlog each run's triggers coalesce
// into one wake per commit and the commit's fixed costs are shared, while
// without one every batch is committed as soon as it is applied. Human
// input preempts it between any two records (applyChunk). It returns false
// when the worker must stop.
func (w *worker) processAgent(b batch) (ok bool) {
	var rs []*kgo.Record
	// A rewind interrupts a batch: what it did not apply, the rewind does.
	defer func() {
		if !ok {
			w.keep(rs, false)
		}
	}()
	for {
		for rs = b.records; len(rs) > 0; {
			var done int
			if done, ok = w.applyChunk(rs, b.highWatermark); !ok {
				rs = rs[done:]
				return false
			}
			rs = rs[done:]
			select {
			case <-w.quit:
				// Revoked or stopping: commit what was applied, so the
				// next owner starts after it.
				w.flush()
				rs = nil
				return false
			default:
			}
		}
		select {
		case b = <-w.in.agent:
			continue
		default:
		}
		return w.flush() && w.serveQueries()
	}
}

// applyChunk applies up to Config.Chunk agent records of rs, and says how
// many it took. The worker stops where it stands when human input waits,
// takes the input and publishes its wake at once, so that a backlog delays
// human input by one record, not a chunk; when another partition of the
// instance has human input on its way, it pauses until that input's
// commit is done (gate.go); when its own commit carrying human input is
// done, it reaps it at once, so that the gate opens as soon as it can. It
// commits once the commit is full. ok is false when the worker must stop.
func (w *worker) applyChunk(rs []*kgo.Record, highWatermark int64) (done int, ok bool) {
	n := min(len(rs), w.p.cfg.Chunk)
	// Counted out before applying, so that the chunk reaching the high
	// watermark is seen as caught up; what preemption leaves unapplied is
	// counted back in.
	w.dequeued(rs[:n])
	done = w.apply(batch{records: rs[:n], highWatermark: highWatermark}, false)
	w.requeued(rs[done:n])
	if w.rewinding() {
		return done, false
	}
	if (w.prio.inflight != nil || w.prio.finished.Load()) && !w.settlePriority() {
		return done, false
	}
	human := w.applyHuman()
	if !human && w.othersFirst() {
		// Another partition's human input is on its way: pause until its
		// commit is done (or this partition's own input arrives), then go
		// on where this one stopped.
		w.pauseForOthers()
		select {
		case <-w.in.humanSignal: // consumed: the flag says it too
		default:
		}
		human = w.applyHuman()
	}
	if human && !w.publishPriority() {
		return done, false
	}
	// A commit ends early once one run has gathered a wake's worth of
	// triggers (a chunk can add up to Config.Chunk more, which the
	// projection splits over more wakes).
	if w.at.consumed >= w.p.cfg.MaxBatch || w.agent.pending.Most() >= w.p.cfg.Projection.MaxWakeTriggers {
		// Right after a commit the state is what was committed: reads
		// need not wait for the whole backlog.
		if !w.flush() || !w.serveQueries() {
			return done, false
		}
	}
	return done, true
}

// flush publishes the wakes of what was applied since the last commit and
// commits it. It returns false after a failure the worker cannot go past.
func (w *worker) flush() bool {
	if w.at.consumed == 0 {
		return true
	}
	w.at.consumed = 0
	now := w.p.cfg.Now()
	return w.publish(now, w.source(topics.NewTime(now)))
}
