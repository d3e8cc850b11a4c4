package projector

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// The priority path: the human always gets through. A human input's wake
// must not wait for the agent lane: not for the chunk the worker is
// applying (it is preempted between two records: preempted), not for the
// other partitions' bulk work (they pause: gate.go), and not for the agent
// lane's commit in flight, which under a backlog carries thousands of
// records and takes a large share of a second. So a partition has two
// committers, each with its own transactional producer: the agent lane's,
// whose commits carry state changes, offsets and normal wakes, one at a
// time; and the priority path's, whose small transactions carry only human
// input's wakes and the priority watermark (projection.WokenKey), the
// offset of the first human input whose wake is not yet published. Which
// triggers take this path is decided here, where a record's triggers are
// gathered (gather); which lane a wake goes on, by the projection
// (pkg/projection, laneOf): any human input trigger makes it priority.
//
// A human input's state change and offset still go with the agent lane's
// next commit. Exactly once holds because:
//
//   - a priority transaction publishes the wakes of the human input
//     records below its watermark and sets the watermark, atomically;
//   - the agent lane's commit whose offsets pass a human input record is
//     prepared only once the priority transaction publishing its wake has
//     committed (publish settles the priority path first), so the
//     changelog's committed human offset never passes the watermark;
//   - a new owner fences both producers (aborting what either left open),
//     restores the state and offsets of the last complete commit and the
//     latest watermark (internal/changelog applies it wherever it is), and
//     applies again the human input between the two: its state changes,
//     its wakes not (gather drops the triggers of records below the
//     watermark), because they are out;
//   - Pebble never holds a checkpoint past a watermark record it does not
//     have (newCommitters: an agent commit leaves its checkpoint where it
//     was while a priority commit may have produced its watermark and not
//     yet written it), so a restore that resumes from Pebble's checkpoint
//     cannot miss one.
//
// So a read_committed conductor sees each human input's wake exactly once,
// across crashes and failovers, and the state is still replay's: every
// record applied once, in each lane's order.

// gather adds a record's triggers to the lane that publishes them. This is
// where a human input's wake takes the priority path: a human input
// record's triggers (its own, and the timers of its run that fell due
// before it) go to the priority committer (priority.go), never into the
// agent lane's pending commit, which may be being built meanwhile; the
// projection then puts a wake with human input on the priority lane
// (pkg/projection, laneOf). Below the watermark (applied again after a
// restore) the input's own triggers are out already, and the timers go
// with the agent lane's next commit (late).
func (w *worker) gather(r *kgo.Record, run string, trigs []topics.Trigger, human bool, span trace.Span) {
	c := w.agent
	switch {
	case human && r.Offset < w.at.woken:
		if _, rest := splitHuman(trigs); len(rest) > 0 {
			w.agent.late.Add(run, rest)
		}
		return
	case human:
		c = w.prio
	}
	if len(trigs) == 0 {
		return
	}
	if _, ok := c.origins[run]; !ok {
		c.origins[run] = w.origin(r, span)
	}
	c.pending.Add(run, trigs)
}

// splitHuman splits a human input record's triggers: its own (human_input)
// and the rest (timers that fell due before it).
func splitHuman(trigs []topics.Trigger) (human, rest []topics.Trigger) {
	for _, t := range trigs {
		if t.Kind == topics.TriggerHumanInput {
			human = append(human, t)
		} else {
			rest = append(rest, t)
		}
	}
	return human, rest
}

// publishPriority builds the wakes of the human input applied since the
// last priority commit and hands them, with the new watermark, to the
// priority committer, without waiting for it (the worker waits for it at
// its next record: preempted). It returns false when the worker must stop.
func (w *worker) publishPriority() bool {
	if w.rewinding() {
		return false
	}
	c := w.prio
	if c.pending.Len() == 0 {
		// Only human input below the watermark (its wake is out): its
		// state goes with the agent lane.
		c.marks = nil
		w.releaseGate(false)
		return true
	}
	now := w.p.cfg.Now()
	w.dropPoisonWakes(&c.pending)
	built, err := w.proj.Wakes(&c.pending, now, w.source(topics.NewTime(now)))
	c.pending.Reset()
	tlog(w.part, "h.built")
	if err != nil {
		w.failed(w.wakeFailure(err))
		return false
	}
	j := &commitJob{built: built, spans: make([]trace.Span, len(built)), origins: c.origins, done: make(chan struct{}),
		marks: c.marks, builtAt: time.Now(), woken: w.at.offsets[w.p.humanTopic]}
	c.origins = make(map[string]origin)
	if j.out, err = w.wakeRecords(j, nil); err != nil {
		j.end()
		w.failed(err)
		return false
	}
	j.changes = projection.Changes{projection.WokenChange(j.woken)}
	j.logAt = len(j.out)
	j.out = append(j.out, changelog.Records(w.p.changelogTopic, w.part, j.changes)...)
	// One priority transaction at a time.
	if !w.settlePriority() {
		j.end()
		return false
	}
	j.waitedAt = time.Now()
	tlog(w.part, "h.waited")
	c.marks = nil
	c.start(j)
	return true
}

// between takes human input up between two wakes of an agent commit
// (Projection.WakesBetween), or two runs of its changes
// (Projection.PrepareBetween): applied, and its wake published on the
// priority path. Then it waits for that commit, as the record loop does
// (preempted): the commit's goroutine and its client's need the machine
// more than the agent lane's work, and reaped it lets go of the gate
// that pauses the other partitions. A failure to publish stops the worker
// once the wakes are built; a failed commit asks for a rewind (reap),
// which the caller sees.
func (w *worker) between() {
	if w.in.humanWaiting.Load() && !w.poison.stopping {
		w.applyHuman()
		if !w.publishPriority() {
			w.poison.stopping = true
			return
		}
		w.settlePriority()
	}
}

// awaitInflight waits for the agent lane's commit in flight and reaps it
// (settle), taking human input up meanwhile on the priority path, whose
// transactions do not wait for that commit. It returns false when the
// worker must stop.
func (w *worker) awaitInflight() bool {
	for w.agent.inflight != nil {
		select {
		case <-w.agent.done():
			return w.settle()
		case b := <-w.in.human:
			if !w.processHuman(b) {
				return false
			}
		case <-w.prio.done():
			if !w.settlePriority() {
				return false
			}
		}
	}
	return true
}

// settlePriority waits for the priority commit in flight, if any, and reaps
// it: the watermark moves on, its wakes are counted and handed to the
// hooks, and the partition lets go of the gate if no more human input is
// on its way. It returns false when the commit failed.
func (w *worker) settlePriority() bool {
	j, ok := w.reap(w.prio)
	if j == nil {
		return ok
	}
	defer j.end()
	tlog(w.part, "h.reaped")
	w.at.woken = max(w.at.woken, j.woken)
	w.reported(j)
	w.releaseGate(false)
	return true
}
