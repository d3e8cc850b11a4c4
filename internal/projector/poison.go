package projector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Poison records. A record is poison when processing it fails the same way
// every time: a wake or another record of its commit that the broker (or
// the producer's own limit) refuses, a snapshot that cannot be built or
// encoded, a panic while applying it or building its wake. Stopping the
// instance for such a failure would not help: the partition would move to
// another instance, which would fail the same way, and one record would
// stop the whole group.
//
// So a worker that meets a failure its input may cause (poisonable) does not
// stop. It rewinds: it waits for its commits in flight, drops its state in
// memory, reopens it from Pebble (which holds exactly what was committed:
// Pebble is written after each commit), and applies again the records that
// were not committed, carefully: a few at a time, each group committed
// before the next is applied, halving the group after each failure, so
// that a failure that comes back is narrowed down to one record. A record
// that fails alone Config.PoisonAttempts times is dead-lettered with the
// reason (DeadLetterPoison), not applied, and counted (OutcomePoison); the
// records after it are applied as usual. A failure that does not come back
// (a commit too large only together) costs a rewind and nothing more.
//
// What was not committed is never published and what is published is
// committed, so exactly once holds: the state is replay's of every record
// but the dead-lettered ones, each applied once. Wakes raised by timers
// alone have no record to blame: after PoisonAttempts failures of one
// run's timer wake, the run's triggers of that commit go to the
// dead-letter topic in place of its wake (DeadLetterPoisonWake), and the
// timers' state changes are committed.

// DeadLetterPoison starts the dead-letter reason of a poison record.
const DeadLetterPoison = "poison"

// DeadLetterPoisonWake starts the dead-letter reason of the triggers of a
// run whose timer wake could not be published.
const DeadLetterPoisonWake = "poison_wake"

// DefaultPoisonAttempts is Config.PoisonAttempts' default.
const DefaultPoisonAttempts = 3

// poisonError marks a failure that the input may cause (see poisonable),
// with the run whose wake failed when that is known.
type poisonError struct {
	err error
	run string
}

func (e *poisonError) Error() string { return e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// fatalError marks a failure after which the worker must not go on even if
// its cause is poisonable: a transaction that could not be aborted leaves
// its producer unusable.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// poisonable reports whether err is a failure that the records being
// processed may cause, and that may therefore come back for the same
// records: worth a rewind rather than an instance restart. Broker
// refusals of a record's size or form are; a panic or a failed build of a
// wake is (poisonError). Connections, timeouts, fencing and storage are
// not: a restart (or another instance) may get past them.
func poisonable(err error) bool {
	if err == nil {
		return false
	}
	var fe *fatalError
	if errors.As(err, &fe) {
		return false
	}
	var pe *poisonError
	return errors.As(err, &pe) ||
		errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.CorruptMessage)
}

// recovered turns a panic's value into a poisonError naming where it
// happened, and logs the stack: the bug to fix.
func (w *worker) recovered(where string, v any, run string) error {
	err := fmt.Errorf("panic while %s: %v", where, v)
	w.p.log.Error("recovered from a panic: a bug that this input brings out; the record is retried alone, then dead-lettered",
		"partition", w.part, "err", err, "stack", string(debug.Stack()))
	return &poisonError{err: err, run: run}
}

// applied is a record the worker applied (or tried to) and has not yet
// seen committed: its topic and offset in the worker's partition; human
// says which input lane it came from, counted that its outcome was
// reported to the hooks (a rewind applies it again without reporting it
// twice).
//
// r is the record itself only where the worker holds it anyway (taken off
// a channel and not applied: keep) or once a rewind has read it again from
// the broker (refetch). The records of the commit being built and of the
// one in flight are not held: a record points into its fetch's
// decompressed batch, and under a backlog those were up to two commits of
// fetched data per partition kept alive, a seventh of the heap (the bench's
// priority scenario), for the rare rewind.
type applied struct {
	topic          string
	offset         int64
	r              *kgo.Record
	human, counted bool
}

// appliedOf is r as applied, held (a rewind needs it and cannot fetch it
// again: it was not applied) or not.
func appliedOf(r *kgo.Record, human, counted, hold bool) applied {
	a := applied{topic: r.Topic, offset: r.Offset, human: human, counted: counted}
	if hold {
		a.r = r
	}
	return a
}

// recordKey identifies a record for the attempt counts.
type recordKey struct {
	topic  string
	offset int64
}

func keyOf(a applied) recordKey { return recordKey{a.topic, a.offset} }

// poisonState is what the worker knows of its failures: the one that asks
// for a rewind, or stops it; what to apply again, and how often each record
// failed alone. The worker's goroutine owns it.
type poisonState struct {
	// applied are the records applied since the last commit was prepared,
	// in the order they were applied; a prepared commit takes them
	// (commitJob.records). rest are records taken off a channel but not
	// applied when a rewind was asked for; lost are the records of a commit
	// that failed.
	applied, rest, lost []applied
	// spare is the records slice of the last commit that succeeded,
	// emptied, for the next commit's (recycle): growing each commit's
	// slice again from nothing was 3% of what steady's projector
	// allocated.
	spare []applied
	// cause is the failure that asks for a rewind, nil otherwise; stopping
	// is set once a failure that no rewind mends stopped the instance.
	cause    error
	stopping bool
	// suspects are the records to apply again, carefully, before any
	// other; chunk is how many the next careful commit takes, and taken
	// what the careful commit being made took.
	suspects, taken []applied
	chunk           int
	// attempts counts the failures of a record applied alone, last the
	// failure it last caused; wakeAttempts the failures of a run's wake
	// raised by timers alone, dropWakes the runs whose timer wakes go to
	// the dead-letter topic at the next publish, with why.
	attempts     map[recordKey]int
	last         map[recordKey]error
	wakeAttempts map[string]int
	dropWakes    map[string]error
	// blind counts the rewinds in a row that had nothing to blame.
	blind int
	// again is set while a record whose outcome the hooks have is
	// applied again.
	again bool
}

func newPoisonState() poisonState {
	return poisonState{attempts: make(map[recordKey]int), last: make(map[recordKey]error),
		wakeAttempts: make(map[string]int), dropWakes: make(map[string]error)}
}

// committed forgets what a rewind kept of records a commit carried: they
// will not be applied again.
func (ps *poisonState) committed(records []applied) {
	ps.blind = 0
	if len(ps.attempts) == 0 {
		return
	}
	for _, a := range records {
		delete(ps.attempts, keyOf(a))
		delete(ps.last, keyOf(a))
	}
}

// maxSpareApplied bounds the slice recycle keeps: a commit of the default
// -max-batch (5,000 records) fits, a rare larger one is let go.
const maxSpareApplied = 8192

// recycle keeps the records slice of a commit that succeeded for the next
// commit's records; nothing reads it once the commit is reaped.
func (ps *poisonState) recycle(records []applied) {
	if cap(records) > maxSpareApplied {
		return
	}
	clear(records) // the records some of them hold
	ps.spare = records[:0]
}

// failed handles a failure of the worker's processing: a poisonable one
// asks for a rewind (the worker's loop unwinds, and run rewinds), any
// other stops the instance (its Supervisor starts a new one), as does a
// failure while stopping.
func (w *worker) failed(err error) {
	if poisonable(err) {
		select {
		case <-w.quit:
		default:
			if w.poison.cause == nil { // the first failure is the one to blame
				w.poison.cause = err
			}
			return
		}
	}
	w.poison.stopping = true
	w.p.fail(err)
}

// rewinding reports whether a rewind has been asked for: processing stops
// where it stands.
func (w *worker) rewinding() bool { return w.poison.cause != nil }

// keep records records taken off a channel and not applied, from a batch
// a rewind interrupted, for the rewind to apply.
func (w *worker) keep(rs []*kgo.Record, human bool) {
	if !w.rewinding() || len(rs) == 0 {
		return
	}
	for _, r := range rs {
		w.poison.rest = append(w.poison.rest, appliedOf(r, human, false, true))
	}
	if !human {
		w.dequeued(rs) // no longer queued: the rewind has them
	}
}

// rewind carries out the rewind asked for: it waits for the commits in
// flight, reopens the partition's state from Pebble as last committed,
// and queues every record not committed to be applied again carefully,
// blaming the record (or the run's timer wake) that failed alone. It
// returns false when the worker must stop.
func (w *worker) rewind() bool {
	ps := &w.poison
	// The commits in flight end first: what they committed stays, what
	// failed is applied again (reap keeps it in lost). A failure that is
	// not poisonable stops the worker as ever.
	w.settlePriority()
	w.settle()
	if ps.stopping {
		return false
	}
	cause := ps.cause
	ps.cause = nil
	w.p.hooks.Rewound(w.part, cause)
	again, taken := ps.takeUncommitted()
	if err := w.refetch(again); err != nil {
		ps.stopping = true
		w.p.fail(fmt.Errorf("projector: partition %d: rewinding after %v: %w", w.part, cause, err))
		return false
	}

	// Blame: a record that failed alone, or a run's wake raised by timers
	// alone. Anything else is narrowed down by the careful commits.
	var pe *poisonError
	errors.As(cause, &pe)
	attempt := 0
	switch {
	case len(taken) == 1:
		k := keyOf(taken[0])
		ps.attempts[k]++
		ps.last[k] = cause
		attempt = ps.attempts[k]
		ps.blind = 0
	case len(again) == 0 && pe != nil && pe.run != "":
		ps.wakeAttempts[pe.run]++
		attempt = ps.wakeAttempts[pe.run]
		if attempt >= w.p.cfg.PoisonAttempts {
			ps.dropWakes[pe.run] = cause
		}
		ps.blind = 0
	case len(again) == 0:
		// Nothing applied to blame, no run named: after as many rewinds
		// in a row as a record gets, stop as any other failure would.
		ps.blind++
		if ps.blind >= w.p.cfg.PoisonAttempts {
			ps.stopping = true
			w.p.fail(fmt.Errorf("projector: partition %d: %w", w.part, cause))
			return false
		}
		attempt = ps.blind
	}
	switch {
	case len(taken) > 0:
		ps.chunk = max(1, len(taken)/2)
	default:
		ps.chunk = max(1, (len(again)+1)/2)
	}
	ps.suspects = append(again, ps.suspects...)

	w.p.log.Warn("rewinding a partition after a failure its input may cause: applying again what was not committed, a few records at a time",
		"partition", w.part, "records", len(ps.suspects), "next", ps.chunk, "attempt", attempt, "err", cause)
	if !w.reopen() {
		return false
	}
	if attempt > 0 {
		// A little time between attempts: a failure that is the broker's
		// (a topic's limit being changed) may pass.
		t := time.NewTimer(min(100*time.Millisecond<<(attempt-1), 2*time.Second))
		defer t.Stop()
		select {
		case <-t.C:
		case <-w.quit:
			return false
		}
	}
	return true
}

// takeUncommitted takes what a rewind applies again, in the order it was
// applied (a failed commit's records, those applied since, those taken
// off a channel and not applied), and the careful commit's records being
// applied when it failed.
func (ps *poisonState) takeUncommitted() (again, taken []applied) {
	again = append(ps.lost, ps.applied...)
	again = append(again, ps.rest...)
	taken = ps.taken
	ps.lost, ps.applied, ps.rest, ps.taken = nil, nil, nil, nil
	return again, taken
}

// refetchTimeout bounds refetch: past it the rewind gives up, and the
// instance fails as for any failure a rewind does not mend (its
// replacement consumes from the last commit).
const refetchTimeout = 30 * time.Second

// refetch reads again from the broker, into again, the records a rewind
// applies again that the worker does not hold (applied): those of the
// worker's partition from the first one's offset on, as the group's
// consumer read them (the same isolation level).
func (w *worker) refetch(again []applied) error {
	need := map[recordKey]bool{}
	from := map[string]int64{} // topic → the first offset to read
	for _, a := range again {
		if a.r != nil {
			continue
		}
		need[keyOf(a)] = true
		if o, ok := from[a.topic]; !ok || a.offset < o {
			from[a.topic] = a.offset
		}
	}
	if len(need) == 0 {
		return nil
	}
	parts := map[string]map[int32]kgo.Offset{}
	for topic, o := range from {
		parts[topic] = map[int32]kgo.Offset{w.part: kgo.NewOffset().At(o)}
	}
	cl, err := kgo.NewClient(append(slices.Clip(w.p.common), kgo.ConsumePartitions(parts))...)
	if err != nil {
		return fmt.Errorf("fetching again the records not committed: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(w.ctx, refetchTimeout)
	defer cancel()
	got := make(map[recordKey]*kgo.Record, len(need))
	for len(got) < len(need) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fetching again the records not committed: %d of %d not found: %w", len(need)-len(got), len(need), err)
		}
		for _, fe := range fs.Errors() {
			return fmt.Errorf("fetching again the records not committed: %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if k := (recordKey{r.Topic, r.Offset}); need[k] {
				got[k] = r
			}
		})
	}
	for i := range again {
		if again[i].r == nil {
			again[i].r = got[keyOf(again[i])]
		}
	}
	w.p.log.Info("rewind: fetched the records not committed again", "partition", w.part, "records", len(got))
	return nil
}

// reopen drops the partition's state in memory and everything applied and
// not committed, and restores the state as committed, as a new owner
// would (without fencing: the producers are the worker's own). Pebble has
// every commit that succeeded; the restore finds nothing more in the
// changelog with transactions (a failed commit was aborted), and at least
// once undoes the part of a failed commit that reached it. It returns
// false when the worker must stop.
func (w *worker) reopen() bool {
	w.proj.Release()
	w.proj = nil
	if _, err := w.restore(); err != nil {
		w.failed(fmt.Errorf("projector: partition %d: restoring after a rewind: %w", w.part, err))
		return false
	}
	// The restore replayed the changelog to its end, watermarks included:
	// a failed priority commit's count is moot.
	w.unwritten.Store(0)
	for _, c := range []*committer{w.agent, w.prio} {
		c.pending.Reset()
		c.late.Reset()
		clear(c.origins)
		clear(c.out)
		c.out = c.out[:0]
		c.marks = nil
	}
	w.at.consumed = 0
	w.releaseGate(false)
	return true
}

// careful applies the suspects of a rewind a group at a time, committing
// each group before it applies the next, and dead-letters a record that
// failed alone PoisonAttempts times. It returns false when the worker must
// stop or rewind again.
func (w *worker) careful() bool {
	ps := &w.poison
	for len(ps.suspects) > 0 {
		select {
		case <-w.quit:
			return false
		default:
		}
		if first := ps.suspects[0]; ps.attempts[keyOf(first)] >= w.p.cfg.PoisonAttempts {
			ps.suspects = ps.suspects[1:]
			w.deadLetterPoison(first)
			if !w.commitNow() {
				return false
			}
			ps.chunk = len(ps.suspects) // the rest, most likely sound, together
			continue
		}
		k := min(max(ps.chunk, 1), len(ps.suspects))
		ps.taken = append(ps.taken[:0], ps.suspects[:k]...)
		ps.suspects = ps.suspects[k:]
		for i, a := range ps.taken {
			if !w.applyAgain(a) {
				// What the failure left unapplied, the rewind applies.
				ps.rest = append(ps.rest, ps.taken[i+1:]...)
				return false
			}
		}
		if !w.commitNow() {
			return false
		}
		ps.taken = ps.taken[:0]
	}
	ps.taken = nil
	return true
}

// applyAgain applies one record of a rewind as it was applied the first
// time: human input through the priority path.
func (w *worker) applyAgain(a applied) bool {
	w.poison.again = a.counted
	defer func() { w.poison.again = false }()
	// No high watermark: a record applied again says nothing of the lag.
	b := batch{records: []*kgo.Record{a.r}, highWatermark: -1, fetched: time.Now()}
	if a.human {
		w.applyHumanBatch(b)
		return !w.rewinding() && w.publishPriority()
	}
	w.apply(b, false)
	return !w.rewinding()
}

// commitNow commits what was applied and waits for the commit (and the
// priority path's) to be done, so that a failure is the records'.
func (w *worker) commitNow() bool {
	return w.flush() && w.awaitInflight() && w.settlePriority()
}

// deadLetterPoison sends a record that failed alone PoisonAttempts times
// to the dead-letter topic, unapplied, with the failure, and moves the
// offsets past it.
func (w *worker) deadLetterPoison(a applied) {
	r, k := a.r, keyOf(a)
	w.at.offsets[r.Topic] = r.Offset + 1
	w.at.consumed++
	why := "its processing failed"
	if err := w.poison.last[k]; err != nil {
		why = firstLine(err.Error())
	}
	typ := topics.EventType("")
	if ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers); err == nil {
		typ = ev.Type
	}
	w.deadLetter(r, fmt.Sprintf("%s: failed %d times alone: %s", DeadLetterPoison, w.poison.attempts[k], why))
	w.count(r.Topic, typ, OutcomePoison)
	delete(w.poison.attempts, k)
	delete(w.poison.last, k)
}

// dropPoisonWakes takes out of pending the triggers of the runs whose
// timer wakes failed PoisonAttempts times, and sends each run's triggers to
// the dead-letter topic instead, keyed by run.
func (w *worker) dropPoisonWakes(pending *projection.Pending) {
	for _, run := range slices.Sorted(maps.Keys(w.poison.dropWakes)) {
		cause := w.poison.dropWakes[run]
		trigs := pending.Take(run)
		delete(w.poison.dropWakes, run)
		delete(w.poison.wakeAttempts, run)
		if len(trigs) == 0 {
			continue
		}
		v, err := topics.Marshal(trigs)
		if err != nil {
			v = nil // the reason and the headers still say what happened
		}
		reason := fmt.Sprintf("%s: the wake of run %s for %d triggers failed %d times: %s",
			DeadLetterPoisonWake, strconv.Quote(run), len(trigs), w.p.cfg.PoisonAttempts, firstLine(cause.Error()))
		w.agent.out = append(w.agent.out, w.deadLetterRecord([]byte(run), v, nil, reason, "", -1, -1))
		w.p.log.Warn("dead-lettered the triggers of a wake that could not be published", "partition", w.part, "run", run, "reason", reason)
	}
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

// wakeFailure classifies a failure to build wakes: the projection's
// sticky error (its store failed) stops the instance as ever; anything
// else (a snapshot that cannot be built) is the input's doing, blamed on
// the run the projection names.
func (w *worker) wakeFailure(err error) error {
	if perr := w.proj.Err(); perr != nil {
		return perr
	}
	pe := &poisonError{err: err}
	var we *projection.WakeError
	if errors.As(err, &we) {
		pe.run = we.Run
		if we.Stack != nil {
			w.p.log.Error("recovered from a panic while building a wake: a bug that this input brings out",
				"partition", w.part, "run", we.Run, "err", we.Err, "stack", string(we.Stack))
		}
	}
	return pe
}
