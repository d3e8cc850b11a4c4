package projector

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// The priority path (issue 19: the human always gets through). A human
// input's wake must not wait for the agent lane: not for the chunk the
// worker is applying (it is preempted between two records: preempted), not
// for the other partitions' bulk work (they pause: gate.go), and not for
// the agent lane's commit in flight, which under a backlog carries
// thousands of records and takes a large share of a second. So a
// partition has two transactional producers: the agent lane's, whose
// commits carry state changes, offsets and normal wakes, one at a time;
// and the priority path's, whose small transactions carry only human
// input's wakes and the priority watermark (projection.WokenKey), the
// offset of the first human input whose wake is not yet published.
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
//     its wakes not (apply drops the triggers of records below the
//     watermark), because they are out;
//   - Pebble never holds a checkpoint past a watermark record it does not
//     have (pebbleMu), so a restore that resumes from Pebble's checkpoint
//     cannot miss one.
//
// So a read_committed conductor sees each human input's wake exactly once,
// across crashes and failovers, and the state is still replay's: every
// record applied once, in each lane's order.

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
	if w.prioPending.Len() == 0 {
		// Only human input below the watermark (its wake is out): its
		// state goes with the agent lane.
		w.marks = nil
		w.releaseGate(false)
		return true
	}
	now := w.p.cfg.Now()
	w.dropPoisonWakes(&w.prioPending)
	built, err := w.proj.Wakes(&w.prioPending, now, w.source(topics.NewTime(now)))
	w.prioPending.Reset()
	if err != nil {
		w.failed(w.wakeFailure(err))
		return false
	}
	j := &commitJob{built: built, spans: make([]trace.Span, len(built)), origins: w.prioOrigins, done: make(chan struct{}),
		marks: w.marks, builtAt: time.Now(), woken: w.offsets[w.p.cfg.Names.HumanInput()]}
	w.prioOrigins = make(map[string]origin)
	if j.out, err = w.wakeRecords(j, nil); err != nil {
		j.end()
		w.failed(err)
		return false
	}
	j.changes = projection.Changes{projection.WokenChange(j.woken)}
	if w.txn {
		j.out = append(j.out, changelog.Records(w.p.cfg.Names.Changelog(), w.part, j.changes)...)
	}
	// One priority transaction at a time.
	if !w.settlePriority() {
		j.end()
		return false
	}
	j.waitedAt = time.Now()
	w.prioInflight, w.marks = j, nil
	go w.commitPriority(j)
	return true
}

// commitPriority runs on a goroutine of its own, as commit does: it produces
// a priority commit's wakes and watermark in one transaction of the
// priority producer (at least once: the wakes, then, once they are
// acknowledged, the watermark), and writes the watermark to Pebble.
func (w *worker) commitPriority(j *commitJob) {
	defer close(j.done)
	ctx, cancel := context.WithTimeout(context.Background(), w.p.cfg.TransactionTimeout)
	defer cancel()
	began := time.Now()
	defer func() { w.p.hooks.Committed(w.part, time.Since(began), j.err) }()
	// Held until the watermark is in Pebble: no agent commit's checkpoint
	// may pass its record before (see pebbleMu).
	w.pebbleMu.Lock()
	defer w.pebbleMu.Unlock()
	j.err = func() error {
		if !w.txn {
			if err := w.prio.ProduceSync(ctx, j.out...).FirstErr(); err != nil {
				return fmt.Errorf("producing human input's wakes: %w", err)
			}
			j.produced = time.Now()
			if err := w.prio.ProduceSync(ctx, changelog.Records(w.p.cfg.Names.Changelog(), w.part, j.changes)...).FirstErr(); err != nil {
				return fmt.Errorf("producing the priority watermark: %w", err)
			}
			return w.store.Write(j.changes, nil, false)
		}
		if err := w.prio.BeginTransaction(); err != nil {
			return fmt.Errorf("beginning a priority transaction: %w", err)
		}
		err := w.prio.ProduceSync(ctx, j.out...).FirstErr()
		j.produced = time.Now()
		how := kgo.TryCommit
		if err != nil {
			how = kgo.TryAbort
		}
		if eerr := w.prio.EndTransaction(ctx, how); eerr != nil {
			if err == nil {
				err = fmt.Errorf("committing the priority transaction: %w", eerr)
			} else {
				// Not abortable: the producer cannot go on.
				err = &fatalError{fmt.Errorf("%w; aborting the priority transaction: %w", err, eerr)}
			}
		}
		if err != nil {
			w.p.Stats.Aborts.Add(1)
			return err
		}
		w.p.Stats.Commits.Add(1)
		// Not synced: the changelog has it (as commit's Write).
		return w.store.Write(j.changes, nil, false)
	}()
	j.committedAt, j.committed = w.p.cfg.Now(), time.Now()
	w.reapPrio.Store(true) // the worker reaps it at its next record (see preempted)
}

// between takes human input up between two wakes of an agent commit
// (Projection.WakesBetween): applied, and its wake published on the
// priority path. A failure stops the worker once the wakes are built.
func (w *worker) between() {
	if w.humanWaiting.Load() && !w.stopping {
		w.applyHuman()
		if !w.publishPriority() {
			w.stopping = true
		}
	}
}

// awaitInflight waits for the agent lane's commit in flight and reaps it
// (settle), taking human input up meanwhile on the priority path, whose
// transactions do not wait for that commit. It returns false when the
// worker must stop.
func (w *worker) awaitInflight() bool {
	for w.inflight != nil {
		select {
		case <-w.inflight.done:
			return w.settle()
		case b := <-w.human:
			if !w.processHuman(b) {
				return false
			}
		case <-w.prioDone():
			if !w.settlePriority() {
				return false
			}
		}
	}
	return true
}

// prioDone is closed when the priority commit in flight is done; nil (never
// ready) when none is.
func (w *worker) prioDone() <-chan struct{} {
	if w.prioInflight == nil {
		return nil
	}
	return w.prioInflight.done
}

// settlePriority waits for the priority commit in flight, if any, and reaps
// it: the watermark moves on, its wakes are counted and handed to the
// hooks, and the partition lets go of the gate if no more human input is
// on its way. It returns false when the commit failed: the worker stops.
func (w *worker) settlePriority() bool {
	j := w.prioInflight
	if j == nil {
		return true
	}
	w.prioInflight = nil
	<-j.done
	w.reapPrio.Store(false)
	defer j.end()
	if j.err != nil {
		for _, s := range j.spans {
			s.SetStatus(codes.Error, "commit failed")
		}
		w.prioInflight = j // for the rewind (poison.go)
		w.failed(fmt.Errorf("projector: partition %d: priority path: %w", w.part, j.err))
		return false
	}
	w.woken = max(w.woken, j.woken)
	w.reported(j)
	w.releaseGate(false)
	return true
}
