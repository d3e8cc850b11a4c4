package projector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// batch is a run of fetched records of one partition of one topic.
type batch struct {
	records       []*kgo.Record
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

// worker owns one partition: its projection, its offsets, its timers and,
// with transactions, its transactional producer. Only its own goroutine
// touches them.
type worker struct {
	p    *Projector
	part int32
	// prod produces the partition's output: its own transactional producer,
	// or the projector's shared one at least once.
	prod  *kgo.Client
	txn   bool
	store *store.Store
	proj  *projection.Projection
	// offsets is the next offset to consume per input topic.
	offsets map[string]int64
	// start is offsets as restored: read by the group's callbacks once ready
	// is closed.
	start map[string]int64

	human, agent chan batch
	// humanWaiting is set when human input is handed to the worker and
	// cleared when the worker takes it up: the worker looks at it between
	// every two agent records it applies (one atomic load), and stops
	// applying agent records at once to commit the human input first.
	// humanSignal wakes the worker from a pause at the gate.
	humanWaiting atomic.Bool
	humanSignal  chan struct{}
	// prio is the partition's second producer, for the priority path:
	// human input's wakes go out in transactions of their own, never
	// behind the agent lane's commit in flight (priority.go). Its own
	// transactional id, fenced like the first; at least once, the
	// projector's shared producer.
	prio *kgo.Client
	// woken is the priority path's watermark: the first human input
	// offset whose wake is not yet published (projection.WokenKey).
	// Human input below it, applied again after a restore, changes the
	// state and wakes nobody: its wake is out already.
	woken int64
	// prioPending are the human input triggers applied and not yet
	// published, prioOrigins their earliest records, prioInflight the
	// priority commit in flight (at most one: one transaction at a time
	// per producer).
	prioPending  projection.Pending
	prioOrigins  map[string]origin
	prioInflight *commitJob
	// late are triggers of human input applied again below the watermark
	// (its timers), for the agent lane's next commit; stopping is set when
	// human input taken up between two wakes of a commit (between) failed.
	late     projection.Pending
	stopping bool
	// reapPrio is set by the priority committer when its commit is done,
	// so that the worker reaps it (and releases the gate) at its next
	// record.
	reapPrio atomic.Bool
	// pebbleMu orders the two committers' Pebble writes: a priority
	// commit holds it from before it produces until its watermark is in
	// Pebble, and an agent commit takes it to write its batch and its
	// checkpoint. So a checkpoint never passes a watermark record that
	// Pebble does not have, and a restore from that checkpoint cannot miss
	// it.
	pebbleMu sync.Mutex
	// gateMu guards holding (the partition holds the instance's gate:
	// human input on its way) and exited (the worker is gone: it must
	// not hold the gate again); gateHeld mirrors holding for the record
	// loop.
	gateMu          sync.Mutex
	holding, exited bool
	gateHeld        atomic.Bool
	// ignoreGen is the gate's generation this worker gave up waiting for
	// (gate.wait): it applies on until the gate opens and closes again.
	ignoreGen uint64
	// queries are reads of the state (query.go), answered between commits.
	queries chan *query
	// lastAt is, per input topic (agent events, human input), the append
	// time of the last record applied: how far the state reflects a lane
	// that is behind (see source).
	lastAt [2]time.Time
	// ready is closed once the partition is restored and consuming; done
	// when the worker's goroutine has returned; quit asks it to stop.
	ready, quit, done chan struct{}
	// ctx is canceled by quit: it interrupts a restore, not a commit.
	ctx    context.Context
	cancel context.CancelFunc

	pendingAgent atomic.Int64 // agent records queued, for pause/resume
	paused       atomic.Bool
	// behind is, per input topic, whether the last batch of it ended short of
	// the high watermark. A topic not yet seen counts as caught up.
	behind map[string]bool

	// pending are the triggers of what was applied since the last commit,
	// and consumed how many records that was; out is what the commit
	// produces besides the wakes (dead letters, reroutes, the changelog).
	pending  projection.Pending
	consumed int
	out      []*kgo.Record
	// inflight is the commit the committer goroutine is carrying out, if
	// any: at most one, so that the worker applies the next records while
	// it runs (see publish); spare is the record slice of the last one
	// reaped, for reuse. prepared is w.offsets as of the last commit
	// prepared.
	inflight *commitJob
	spare    []*kgo.Record
	prepared map[string]int64

	// lag is, per input topic (agent events, human input), the high
	// watermark minus the next offset, as of the last batch; -1 before the
	// first. Read by Projector.Lag from other goroutines.
	lag [2]atomic.Int64
	// origins is, per run triggered since the last commit, its earliest
	// triggering record: for the wake's lag and its trace's parent.
	origins map[string]origin
	tracer  trace.Tracer
	// marks time the human input applied since the last priority commit.
	marks []humanMark
	// poison is what rewinds need (poison.go).
	poison poisonState
}

// origin is the earliest record that triggered a run's wake in a commit.
type origin struct {
	appended time.Time
	// span is the trace context the record carried, batch the span of the
	// batch that applied it.
	span, batch trace.SpanContext
}

func newWorker(p *Projector, part int32) (*worker, error) {
	// A partition paused by an earlier owner in this process must flow again.
	p.group.ResumeFetchPartitions(map[string][]int32{p.cfg.Names.AgentEvents(): {part}})
	w := &worker{
		p: p, part: part, prod: p.prod, txn: !p.cfg.AtLeastOnce, store: store.New(p.db, part),
		human: make(chan batch, 1024), agent: make(chan batch, 1024), behind: make(map[string]bool), queries: make(chan *query),
		humanSignal: make(chan struct{}, 1), prioOrigins: make(map[string]origin),
		ready: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
		origins: make(map[string]origin), tracer: p.cfg.TracerProvider.Tracer(tracerName),
		poison: poisonState{attempts: make(map[recordKey]int), last: make(map[recordKey]error),
			wakeAttempts: make(map[string]int), dropWakes: make(map[string]error)},
	}
	w.lag[0].Store(-1)
	w.lag[1].Store(-1)
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if w.txn {
		var err error
		if w.prod, err = p.txnProducer(part, ""); err != nil {
			w.cancel()
			return nil, err
		}
		// The priority path's producer: a transactional id of its own
		// per partition, so that the next owner fences it too.
		if w.prio, err = p.txnProducer(part, "-priority"); err != nil {
			w.prod.Close()
			w.cancel()
			return nil, err
		}
	} else {
		w.prio = p.prod
	}
	return w, nil
}

// txnProducer is one of a partition's transactional producers: its id is
// the prefix, the partition and suffix, the same on every instance, so that
// the partition's next owner fences it.
func (p *Projector) txnProducer(part int32, suffix string) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(slices.Clip(p.common),
		kgo.ClientID(fmt.Sprintf("%s-p%d%s", p.cfg.ClientID, part, suffix)),
		kgo.WithHooks(p.cfg.KafkaHooks(fmt.Sprintf("txn-%d%s", part, suffix))...),
		kgo.TransactionalID(fmt.Sprintf("%s-%d%s", p.cfg.TransactionalIDPrefix, part, suffix)),
		kgo.TransactionTimeout(p.cfg.TransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytesFn(p.batchLimit),
		kgo.ProducerLinger(0))...)
	if err != nil {
		return nil, fmt.Errorf("projector: partition %d: transactional producer%s: %w", part, suffix, err)
	}
	return cl, nil
}

// init fences the partition's previous writer, restores the partition from
// the changelog, undoes a torn commit if the restore found one, and starts
// consuming the partition's human input where the state ends.
func (w *worker) init() error {
	p := w.p
	fail := func(err error) error { return fmt.Errorf("projector: partition %d: %w", w.part, err) }
	began := time.Now() // for the log only: how long taking a partition over takes
	if w.txn {
		// Initialising the partition's transactional id bumps its epoch:
		// the previous owner, alive or not, can commit nothing more, and
		// its open transaction is aborted, so the restore below reads
		// everything that will ever be committed before this point.
		if _, _, err := w.prod.ProducerID(w.ctx); err != nil {
			return fail(fmt.Errorf("fencing the previous writer: %w", err))
		}
		if _, _, err := w.prio.ProducerID(w.ctx); err != nil {
			return fail(fmt.Errorf("fencing the previous writer's priority path: %w", err))
		}
	}
	restored, err := w.restore()
	if err != nil {
		return fail(err)
	}
	w.start = maps.Clone(w.offsets)
	off := kgo.NewOffset().AtStart()
	if next, ok := w.start[p.cfg.Names.HumanInput()]; ok {
		off = kgo.NewOffset().At(next)
	}
	p.human.AddConsumePartitions(map[string]map[int32]kgo.Offset{p.cfg.Names.HumanInput(): {w.part: off}})
	// Operators (and the kill-storm test's recovery bound) read how long
	// fencing and restoring took.
	p.log.Info("partition restored", "partition", w.part, "records", restored,
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// restore brings the partition's state in Pebble to what the changelog
// holds as committed (from Pebble's checkpoint on, when it can be
// trusted), undoes a torn commit the restore found, and opens the
// projection, its offsets and the priority watermark on it. It returns the
// changelog records it read.
func (w *worker) restore() (int64, error) {
	p := w.p
	p.Stats.Restoring.Add(1)
	var counted int64 // of this restore, in RestoredRecords already
	res, err := changelog.Restore(w.ctx, changelog.Config{
		ClientOpts: p.common, Topic: p.cfg.Names.Changelog(), Logger: p.log, Now: p.cfg.Now, MaxCheckpointAge: p.trust,
		Progress: func(_ int32, done, _ int64) { p.Stats.RestoredRecords.Add(done - counted); counted = done },
	}, w.part, w.store)
	p.Stats.RestoredRecords.Add(res.Records - counted)
	p.Stats.Restoring.Add(-1)
	p.hooks.Restored(w.part, res, err)
	if err != nil {
		return 0, err
	}
	if w.proj, err = projection.Open(p.cfg.Projection, w.store); err != nil {
		return 0, err
	}
	if w.offsets, err = w.store.Offsets(); err != nil {
		return 0, err
	}
	w.prepared = maps.Clone(w.offsets)
	w.woken = w.offsets[p.cfg.Names.HumanInput()]
	if next, ok, err := w.store.Woken(); err != nil {
		return 0, err
	} else if ok {
		w.woken = max(w.woken, next)
	}
	if len(res.Tail) > 0 {
		undo, err := changelog.Rollback(w.store, res.Tail)
		if err != nil {
			return 0, err
		}
		p.log.Warn("undoing a torn commit", "partition", w.part, "keys", len(undo)-1)
		// Committed here and now, before anything is applied.
		j := &commitJob{out: changelog.Records(p.cfg.Names.Changelog(), w.part, undo), changes: undo, done: make(chan struct{})}
		w.commit(j)
		if err := w.proj.Committed(j.err); err != nil {
			return 0, err
		}
	}
	return res.Records, nil
}

// enqueue hands a fetched batch to the worker, pausing the partition's agent
// fetching when too much waits. It never blocks once the worker is stopping.
func (w *worker) enqueue(b batch, human bool) {
	ch := w.agent
	if human {
		ch = w.human
	} else if n := w.pendingAgent.Add(int64(len(b.records))); n > int64(w.p.cfg.MaxPending) && !w.paused.Swap(true) {
		w.p.group.PauseFetchPartitions(map[string][]int32{w.p.cfg.Names.AgentEvents(): {w.part}})
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
		w.humanWaiting.Store(true)
		select {
		case w.humanSignal <- struct{}{}:
		default:
		}
	}
}

// holdGate makes the partition hold the instance's gate, unless it does
// or its worker is gone.
func (w *worker) holdGate() {
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	if !w.holding && !w.exited {
		w.holding = true
		w.gateHeld.Store(true)
		w.p.gate.hold()
	}
}

// releaseGate lets go of the gate once the partition has no human input on
// its way: none waiting, none applied and not yet in a commit, none in the
// commit in flight. With exit, for good: the worker is going.
func (w *worker) releaseGate(exit bool) {
	w.gateMu.Lock()
	defer w.gateMu.Unlock()
	if exit {
		w.exited = true
	} else if len(w.human) > 0 || len(w.marks) > 0 || w.prioPending.Len() > 0 || w.prioInflight != nil {
		return
	}
	if w.holding {
		w.holding = false
		w.gateHeld.Store(false)
		w.p.gate.release()
	}
}

// preempted reports whether the worker must stop applying agent records:
// its own human input waits, or its priority commit is in flight (the
// worker waits for it: it is short, and the machine is its meanwhile) or
// done, or another partition holds the gate.
func (w *worker) preempted() bool {
	return w.humanWaiting.Load() || w.prioInflight != nil || w.reapPrio.Load() ||
		w.p.gate.closed(w.ignoreGen) && !w.gateHeld.Load()
}

// stop asks the worker to finish its current chunk and commit, and waits.
func (w *worker) stop() {
	close(w.quit)
	w.cancel()
	<-w.done
}

func (w *worker) run() {
	defer close(w.done)
	defer w.cancel()
	if w.txn {
		defer w.prod.Close()
	}
	// Last: the runs' bytes go back to the budget the instance's partitions
	// share, which would otherwise count them for ever; and the gate, if
	// the partition held it, opens for the others.
	defer func() {
		if w.proj != nil {
			w.proj.Release()
		}
		w.releaseGate(true)
	}()
	if w.txn {
		defer w.prio.Close()
	}
	// Before the producers close (defers run last first): the commits in
	// flight end, and their wakes are counted, whichever way the worker
	// stops.
	defer w.settle()
	defer w.settlePriority()
	if err := w.init(); err != nil {
		if w.ctx.Err() == nil { // not a stop interrupting the restore
			w.p.fail(err)
		}
		return
	}
	close(w.ready)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// The loop returns when the worker must stop, or rewind (poison.go):
	// then it goes on from the state as committed.
	for {
		w.loop(timer)
		if !w.rewinding() || !w.rewind() {
			return
		}
	}
}

// loop processes the partition until the worker must stop or rewind. Every
// path in it commits what it applied before it comes back to the top: what
// is applied but not committed lives only inside processAgent (and the
// suspects of a rewind, which careful applies first).
func (w *worker) loop(timer *time.Timer) {
	for {
		if len(w.poison.suspects) > 0 && !w.careful() {
			return
		}
		// Human input first, always.
		select {
		case b := <-w.human:
			if !w.processHuman(b) {
				return
			}
			continue
		default:
		}
		w.armTimer(timer)
		select {
		case <-w.quit:
			return
		case b := <-w.human:
			if !w.processHuman(b) {
				return
			}
		case b := <-w.agent:
			if !w.processAgent(b) {
				return
			}
		case <-timer.C:
			if !w.fireTimers() {
				return
			}
		case <-w.inflightDone():
			if !w.settle() {
				return
			}
		case <-w.prioDone():
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
	w.humanWaiting.Store(false)
	w.applyHumanBatch(b)
	w.applyHuman()
	return !w.rewinding() && w.publishPriority()
}

// applyHuman applies the human input waiting, without blocking, and
// reports whether there was any.
func (w *worker) applyHuman() bool {
	// Cleared first: input handed over after this sets it again.
	w.humanWaiting.Store(false)
	applied := false
	for !w.rewinding() {
		select {
		case b := <-w.human:
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
	done := w.apply(b, true)
	applied := time.Now()
	w.keep(b.records[done:], true) // what a rewind interrupted
	for _, r := range b.records[:done] {
		w.marks = append(w.marks, humanMark{appended: r.Timestamp, fetched: b.fetched, taken: taken, applied: applied})
	}
}

// processAgent applies agent records, chunk by chunk, and commits them. While
// more fetched batches wait it goes on applying them into the same commit, up
// to Config.MaxBatch records: under a backlog each run's triggers coalesce
// into one wake per commit and the commit's fixed costs are shared, while
// without one every batch is committed as soon as it is applied.
//
// Human input preempts it between any two records (issue 19): the worker
// stops where it stands, takes the input into the commit and commits at
// once, so that a backlog delays human input by one record, not a chunk.
// When another partition of the instance has human input on its way, the
// worker pauses at its next record until that input's commit is done
// (gate.go), and when its own commit carrying human input is done, it reaps
// it at once, so that the gate opens as soon as it can. It returns false
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
			n := min(len(rs), w.p.cfg.Chunk)
			chunk := batch{records: rs[:n], highWatermark: b.highWatermark}
			// Counted out before applying, so that the chunk reaching the
			// high watermark is seen as caught up; what preemption leaves
			// unapplied is counted back in.
			if left := w.pendingAgent.Add(-int64(n)); left <= int64(w.p.cfg.MaxPending/2) && w.paused.Swap(false) {
				w.p.group.ResumeFetchPartitions(map[string][]int32{w.p.cfg.Names.AgentEvents(): {w.part}})
			}
			done := w.apply(chunk, false)
			w.pendingAgent.Add(int64(n - done))
			rs = rs[done:]
			if w.rewinding() {
				return false
			}
			if (w.prioInflight != nil || w.reapPrio.Load()) && !w.settlePriority() {
				return false
			}
			human := w.applyHuman()
			if !human && w.p.gate.closed(w.ignoreGen) && !w.gateHeld.Load() {
				// Another partition's human input is on its way: pause
				// until its commit is done (or this partition's own
				// input arrives), then go on where this one stopped.
				w.ignoreGen = w.p.gate.wait(w.ignoreGen, w.humanSignal, w.quit)
				select {
				case <-w.humanSignal: // consumed: the flag says it too
				default:
				}
				human = w.applyHuman()
			}
			if human && !w.publishPriority() {
				return false
			}
			// A commit ends early once one run has gathered a wake's worth
			// of triggers (a chunk can add up to Config.Chunk more, which
			// the projection splits over more wakes).
			if w.consumed >= w.p.cfg.MaxBatch || w.pending.Most() >= w.p.cfg.Projection.MaxWakeTriggers {
				if !w.flush() {
					return false
				}
				// Right after a commit the state is what was committed:
				// reads need not wait for the whole backlog.
				if !w.serveQueries() {
					return false
				}
			}
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
		case b = <-w.agent:
			continue
		default:
		}
		return w.flush() && w.serveQueries()
	}
}

// flush publishes the wakes of what was applied since the last commit and
// commits it. It returns false after a failure the worker cannot go past.
func (w *worker) flush() bool {
	if w.consumed == 0 {
		return true
	}
	w.consumed = 0
	now := w.p.cfg.Now()
	return w.publish(now, w.source(topics.NewTime(now)))
}

// apply projects a batch's records into the state and gathers their
// triggers; flush commits them. human says the batch is of the human input
// topic (the worker's two channels keep the lanes apart). An agent batch is
// preemptible: it stops before any record but the first once the worker is
// preempted (see preempted). It returns how many records it took.
func (w *worker) apply(b batch, human bool) (done int) {
	_, span := w.batchSpan(b)
	defer span.End()
	var last *kgo.Record
	for i, r := range b.records {
		if !human && i > 0 && w.preempted() || w.rewinding() {
			break
		}
		done++
		if next, ok := w.offsets[r.Topic]; ok && r.Offset < next {
			continue // already in the state: fetched again around a rebalance
		}
		w.offsets[r.Topic] = r.Offset + 1
		w.consumed++
		// Kept until a commit carries it: a rewind applies it again.
		w.poison.applied = append(w.poison.applied, applied{r: r, human: human, counted: true})
		w.applyRecord(r, human, span)
		last = r
	}
	if last == nil || b.highWatermark < 0 {
		return done
	}
	i := w.topicIndex(last.Topic)
	w.lag[i].Store(max(b.highWatermark-(last.Offset+1), 0))
	w.lastAt[i] = last.Timestamp
	w.behind[last.Topic] = last.Offset+1 < b.highWatermark
	return done
}

// applyRecord decodes one record and projects it, or dead-letters or
// reroutes it, and gathers its triggers. A panic (a bug that this record
// brings out) asks for a rewind: the state may be half changed.
func (w *worker) applyRecord(r *kgo.Record, human bool, span trace.Span) {
	var ev *topics.Event
	defer func() {
		if v := recover(); v != nil {
			run := ""
			if ev != nil {
				run = ev.RunID
			}
			w.failed(w.recovered(fmt.Sprintf("applying %s/%d@%d", r.Topic, r.Partition, r.Offset), v, run))
		}
	}()
	ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
	if f := w.p.cfg.faults; f != nil && f.apply != nil && err == nil {
		f.apply(ev)
	}
	switch {
	case errors.Is(err, topics.ErrUnknownType):
		// A newer producer's type, or a typo: dead-lettered like any
		// record this build cannot project, so that an operator sees
		// it (the reason's code first), and counted apart.
		w.deadLetter(r, DeadLetterUnknownType+": "+err.Error())
		w.count(r.Topic, "", OutcomeUnknownType)
		return
	case errors.Is(err, topics.ErrInvalidUTF8):
		// Text that is not UTF-8: the reason's code first, as for an
		// unknown type, so that a producer's encoding bug is told from
		// its other mistakes at a glance.
		w.deadLetter(r, DeadLetterInvalidUTF8+": "+err.Error())
		w.count(r.Topic, "", OutcomeDeadLettered)
		return
	case err != nil:
		w.deadLetter(r, err.Error())
		w.count(r.Topic, "", OutcomeDeadLettered)
		return
	}
	if want := topics.Partition([]byte(ev.RunID), w.p.partitions); want != r.Partition {
		w.reroute(r, ev.RunID, want)
		w.count(r.Topic, ev.Type, OutcomeRerouted)
		return
	}
	trigs, dup, err := w.proj.ApplyEvent(ev)
	if errors.Is(err, projection.ErrRunExpired) {
		// Late for a run whose state retention deleted: refused, not
		// the start of a run from nothing (docs/CONTRACT.md).
		w.deadLetter(r, DeadLetterRunExpired+": "+err.Error())
		w.count(r.Topic, ev.Type, OutcomeRunExpired)
		return
	}
	if errors.Is(err, projection.ErrDuplicateConflict) {
		// An id that names another content than the one applied:
		// refused, and the first content stays (docs/CONTRACT.md).
		w.p.log.Warn("an event id was sent again with other content; the first content stays",
			"run", ev.RunID, "event_id", ev.ID, "type", ev.Type, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		w.deadLetter(r, DeadLetterDuplicateConflict+": "+err.Error())
		w.count(r.Topic, ev.Type, OutcomeDuplicateConflict)
		return
	}
	if dup {
		w.count(r.Topic, ev.Type, OutcomeDuplicate)
	} else {
		w.count(r.Topic, ev.Type, OutcomeApplied)
	}
	if human {
		// A human input record's triggers (its own, and the timers of
		// its run that fell due before it) go out at once on the
		// priority path (priority.go), never into the agent lane's
		// pending commit, which may be being built meanwhile. Below
		// the watermark (applied again after a restore) its own are
		// out already, and the timers go with the agent lane's next
		// commit (late).
		if r.Offset >= w.woken {
			if len(trigs) > 0 {
				if _, ok := w.prioOrigins[ev.RunID]; !ok {
					w.prioOrigins[ev.RunID] = w.origin(r, span)
				}
				w.prioPending.Add(ev.RunID, trigs)
			}
		} else if _, rest := splitHuman(trigs); len(rest) > 0 {
			w.late.Add(ev.RunID, rest)
		}
		return
	}
	if len(trigs) > 0 {
		if _, ok := w.origins[ev.RunID]; !ok {
			w.origins[ev.RunID] = w.origin(r, span)
		}
	}
	w.pending.Add(ev.RunID, trigs)
}

// count reports a record's outcome to the hooks, but for a record a
// rewind applies again (poison.go), whose outcome they have.
func (w *worker) count(topic string, typ topics.EventType, outcome Outcome) {
	if !w.poison.again {
		w.p.hooks.Consumed(topic, typ, outcome)
	}
}

// caughtUp reports whether the partition has applied everything fetched and
// reached the high watermark of each input topic.
func (w *worker) caughtUp() bool {
	if w.pendingAgent.Load() > 0 || len(w.agent) > 0 || len(w.human) > 0 || len(w.poison.suspects) > 0 {
		return false
	}
	for _, behind := range w.behind {
		if behind {
			return false
		}
	}
	return true
}

// source is the time up to which the state reflects its input, which a
// snapshot's age and staleness are measured from: now when the partition is
// caught up; else the append time of the last record applied of the lane
// furthest behind, so that a human input's wake under an agent backlog says
// how far behind the agent lane is rather than how fresh the input is.
func (w *worker) source(now topics.Time) topics.Time {
	if w.caughtUp() {
		return now
	}
	agentQueued := w.pendingAgent.Load() > 0 || len(w.agent) > 0
	var src, newest time.Time
	for i, topic := range [2]string{w.p.cfg.Names.AgentEvents(), w.p.cfg.Names.HumanInput()} {
		at := w.lastAt[i]
		if at.IsZero() {
			continue
		}
		newest = later(newest, at)
		queued := agentQueued
		if i == 1 {
			queued = len(w.human) > 0
		}
		if (w.behind[topic] || queued) && (src.IsZero() || at.Before(src)) {
			src = at
		}
	}
	switch {
	case !src.IsZero():
		return topics.NewTime(src)
	case !newest.IsZero():
		// Behind on a lane none of whose records was applied here yet.
		return topics.NewTime(newest)
	default:
		return now
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// fireTimers raises the wakes of timers due by now. Only a caught-up
// partition fires: with a backlog, the events that renew a lease may still be
// unread.
func (w *worker) fireTimers() bool {
	now := w.p.cfg.Now()
	before := w.proj.Expiries()
	w.proj.FireDue(topics.NewTime(now), &w.pending)
	w.p.Stats.Expired.Add(w.proj.Expiries() - before)
	return w.publish(now, topics.NewTime(now))
}

func (w *worker) armTimer(t *time.Timer) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	due, ok := w.proj.NextDue()
	if !ok || !w.caughtUp() {
		return
	}
	t.Reset(max(due.Std().Sub(w.p.cfg.Now()), 0))
}

// commitJob is one commit: built and prepared by the worker, carried out by
// its committer goroutine (produce, end the transaction, write Pebble), and
// reaped by the worker, which then counts its wakes and evicts.
type commitJob struct {
	out     []*kgo.Record
	changes projection.Changes
	built   []projection.Built
	spans   []trace.Span
	origins map[string]origin
	// marks are the human input records a priority commit carries;
	// builtAt is when its wakes were built and waitedAt when the commit
	// before it was reaped (telemetry: PriorityStages). woken is the
	// priority path's watermark a priority commit sets.
	marks             []humanMark
	builtAt, waitedAt time.Time
	woken             int64
	// records are the input records the commit carries the offsets of,
	// applied again if it fails (poison.go).
	records []applied
	// Set by the committer before done closes: the error, the commit's
	// time on the projector's clock (Config.Now), and when the produce
	// and the whole commit ended (for the priority path's stages).
	err                 error
	committedAt         time.Time
	produced, committed time.Time
	done                chan struct{}
}

// publish builds the wakes of the pending triggers and hands them, with the
// state changes and offsets since the last commit, to the committer (see
// commit) without waiting for it: the worker goes on applying while the
// transaction commits. One commit at most is in flight; the next publish
// waits for it. So a commit in flight delays the worker by at most one
// commit's worth of applied records (Config.MaxBatch) and never blocks an
// apply: a record is applied while the commit before it runs, and its wake
// goes out in the next. The state the worker applies to is ahead of what
// is committed meanwhile; if the commit fails the worker stops and the
// next owner restores what was committed, replays the rest and gets the
// same state (the projection is deterministic). Reads of the state settle
// first (serveQueries), so a reader never sees uncommitted state.
func (w *worker) publish(now time.Time, source topics.Time) bool {
	if w.rewinding() {
		return false
	}
	w.pending.Merge(&w.late)
	w.late.Reset()
	w.dropPoisonWakes(&w.pending)
	// Human input that arrives while a large commit's wakes are built is
	// taken up between two of them, and its wake goes out at once.
	built, err := w.proj.WakesBetween(&w.pending, now, source, w.between)
	w.pending.Reset()
	if err == nil && w.late.Len() > 0 {
		// Timers of human input taken up meanwhile below the watermark:
		// this commit carries its offset, so it carries their wakes.
		var more []projection.Built
		more, err = w.proj.Wakes(&w.late, now, source)
		built = append(built, more...)
		w.late.Reset()
	}
	if err != nil {
		w.failed(w.wakeFailure(err))
		return false
	}
	if w.stopping || w.rewinding() {
		return false
	}
	j := &commitJob{built: built, spans: make([]trace.Span, len(built)), origins: w.origins, done: make(chan struct{}), builtAt: time.Now()}
	w.origins = make(map[string]origin)
	if w.out, err = w.wakeRecords(j, w.out); err != nil {
		j.end()
		w.failed(err)
		return false
	}
	// The commit before must be written before this one is prepared: a
	// Kafka producer has one transaction at a time, the changelog's order
	// is the commits' order, and reaping it evicts only runs whose every
	// change is in Pebble, which holds only after their Write. And the
	// wakes of the human input this commit carries the offsets of must be
	// out first (priority.go): its commit closes their way.
	if w.prioPending.Len() > 0 && !w.publishPriority() || !w.awaitInflight() || !w.settlePriority() {
		j.end()
		return false
	}
	j.waitedAt = time.Now()
	changes, err := w.proj.Prepare(w.offsets)
	if err != nil {
		j.end()
		w.p.fail(err)
		return false
	}
	if len(w.out) == 0 && len(changes) == 1 && maps.Equal(w.offsets, w.prepared) {
		j.end()
		return true // nothing happened: no commit
	}
	w.out = append(w.out, changelog.Records(w.p.cfg.Names.Changelog(), w.part, changes)...)
	j.out, j.changes = w.out, changes
	w.out, w.spare = w.spare[:0], nil
	j.records, w.poison.applied = w.poison.applied, nil
	w.prepared = maps.Clone(w.offsets)
	w.inflight = j
	// While another partition's human input is on its way, this commit
	// waits to start: its records would queue at the broker ahead of the
	// input's.
	if w.p.gate.closed(w.ignoreGen) && !w.gateHeld.Load() {
		w.ignoreGen = w.p.gate.wait(w.ignoreGen, w.humanSignal, w.quit)
	}
	go w.commit(j)
	return true
}

// wakeRecords appends the records of a commit's wakes to out, each with
// its publish span (in j.spans), and returns it.
func (w *worker) wakeRecords(j *commitJob, out []*kgo.Record) ([]*kgo.Record, error) {
	for i, b := range j.built {
		// The snapshot as the builder encoded it, spliced in: one encoding
		// of its 24 KB fewer per wake.
		if f := w.p.cfg.faults; f != nil && f.build != nil {
			if err := f.build(b.Wake); err != nil {
				return out, w.wakeFailure(&projection.WakeError{Run: b.Wake.RunID, Err: err})
			}
		}
		enc, err := topics.AppendWakeJSON(nil, b.Wake, b.Info.Encoded)
		if f := w.p.cfg.faults; f != nil && f.encode != nil && err == nil {
			err = f.encode(b.Wake)
		}
		j.built[i].Info.Encoded = nil // the wake's own bytes outlive it
		if err != nil {
			return out, &poisonError{err: fmt.Errorf("projector: encoding wake %s of run %q: %w", b.Wake.WakeID, b.Wake.RunID, err), run: b.Wake.RunID}
		}
		rec := &kgo.Record{
			Topic: w.p.cfg.Names.WakeTopic(b.Wake.Lane), Partition: w.part, Key: []byte(b.Wake.RunID), Value: enc,
			Headers: []kgo.RecordHeader{
				{Key: topics.HeaderContentType, Value: []byte(topics.ContentTypeJSON)},
				{Key: topics.HeaderSchemaVersion, Value: []byte(strconv.Itoa(topics.WakeSchemaVersion))},
			},
		}
		o := j.origins[b.Wake.RunID]
		var sctx context.Context
		sctx, j.spans[i] = w.wakeSpan(trace.ContextWithSpanContext(context.Background(), o.batch), rec, b.Wake, o.span)
		if j.spans[i].SpanContext().IsValid() {
			// Also when this process does not record: a no-op span
			// carries the triggering record's context on.
			propagation.TraceContext{}.Inject(sctx, topics.HeaderCarrier{Headers: &rec.Headers})
		}
		out = append(out, rec)
	}
	return out, nil
}

// origin is r's origin as the earliest record triggering its run's wake.
// The record's trace context is read whether or not this process records
// spans: the wake carries it on, so that the conductor's spans join the
// agent's trace.
func (w *worker) origin(r *kgo.Record, batch trace.Span) origin {
	o := origin{appended: r.Timestamp, batch: batch.SpanContext(),
		span: trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), topics.HeaderCarrier{Headers: &r.Headers}))}
	if o.span.IsValid() && len(w.origins)+len(w.prioOrigins) < maxLinks {
		batch.AddLink(trace.Link{SpanContext: o.span})
	}
	return o
}

// inflightDone is closed when the commit in flight is done; nil (never
// ready) when none is.
func (w *worker) inflightDone() <-chan struct{} {
	if w.inflight == nil {
		return nil
	}
	return w.inflight.done
}

// settle waits for the commit in flight, if any, and reaps it: its wakes
// are counted and handed to the hooks, and runs beyond the memory bound
// are evicted. It returns false when the commit failed: the worker stops.
func (w *worker) settle() bool {
	j := w.inflight
	if j == nil {
		return true
	}
	w.inflight = nil
	<-j.done
	defer j.end()
	clear(j.out)
	w.spare = j.out[:0]
	if j.err != nil {
		for _, s := range j.spans {
			s.SetStatus(codes.Error, "commit failed")
		}
		// Put back for the rewind, which applies them again.
		w.inflight = j
		w.failed(fmt.Errorf("projector: partition %d: %w", w.part, j.err))
		return false
	}
	if err := w.proj.Committed(nil); err != nil {
		w.p.fail(fmt.Errorf("projector: partition %d: %w", w.part, err))
		return false
	}
	w.poison.committed(j.records)
	w.p.progressed(w.part, w.prepared) // w.prepared is j's offsets until the next publish
	w.reported(j)
	return true
}

// reported counts a successful commit's wakes and hands them to the hooks,
// with the priority path's stages of the human input it carries.
func (w *worker) reported(j *commitJob) {
	for i, b := range j.built {
		cw := CommittedWake{Wake: b.Wake, Info: b.Info, Partition: w.part, Build: b.Build}
		if o, ok := j.origins[b.Wake.RunID]; ok && !o.appended.IsZero() {
			cw.FromRecord, cw.Lag = true, j.committedAt.Sub(o.appended)
		}
		w.p.hooks.WakeCommitted(trace.ContextWithSpan(context.Background(), j.spans[i]), cw)
	}
	for _, m := range j.marks {
		w.p.hooks.PriorityCommitted(w.part, PriorityStages{
			StageFetch:     max(m.fetched.Sub(m.appended), 0), // the gateway's clock against ours
			StageQueued:    m.taken.Sub(m.fetched),
			StageApplied:   m.applied.Sub(m.taken),
			StageBuilt:     j.builtAt.Sub(m.applied),
			StageWaited:    j.waitedAt.Sub(j.builtAt),
			StageProduced:  j.produced.Sub(j.waitedAt),
			StageCommitted: j.committed.Sub(j.produced),
		})
	}
}

// end ends the spans of a commit's wakes.
func (j *commitJob) end() {
	for _, s := range j.spans {
		if s != nil {
			s.End()
		}
	}
}

// commit runs on the committer goroutine that publish starts, while the
// worker applies on: it produces j.out, whose last record closes the commit
// in the changelog, in one transaction (or, at least once, waits for all of
// it to be acknowledged), and then writes j.changes to Pebble with the
// changelog checkpoint the commit reached. It touches only the producer,
// which no one else uses meanwhile, the store, and the job. On error the
// projection no longer matches what Kafka has: settle stops the worker, and
// the next owner restores.
func (w *worker) commit(j *commitJob) {
	defer close(j.done)
	ctx, cancel := context.WithTimeout(context.Background(), w.p.cfg.TransactionTimeout)
	defer cancel()
	began := time.Now()
	defer func() { w.p.hooks.Committed(w.part, time.Since(began), j.err) }()
	j.err = func() error {
		if w.txn {
			if err := w.prod.BeginTransaction(); err != nil {
				return fmt.Errorf("beginning a transaction: %w", err)
			}
		}
		err := w.prod.ProduceSync(ctx, j.out...).FirstErr()
		j.produced = time.Now()
		if w.txn {
			how := kgo.TryCommit
			if err != nil {
				how = kgo.TryAbort
			}
			if eerr := w.prod.EndTransaction(ctx, how); eerr != nil {
				if err == nil {
					err = fmt.Errorf("committing the transaction: %w", eerr)
				} else {
					// Not abortable: the producer cannot go on.
					err = &fatalError{fmt.Errorf("%w; aborting the transaction: %w", err, eerr)}
				}
			}
			if err != nil {
				w.p.Stats.Aborts.Add(1)
				return err
			}
			w.p.Stats.Commits.Add(1)
		}
		if err != nil {
			return fmt.Errorf("producing: %w", err)
		}
		end := j.out[len(j.out)-1]
		// Not while a priority commit is between its produce and its
		// watermark's Pebble write: see pebbleMu.
		w.pebbleMu.Lock()
		defer w.pebbleMu.Unlock()
		return w.proj.Write(j.changes, &projection.Checkpoint{Next: end.Offset + 1, At: w.p.cfg.Now().UnixMilli()})
	}()
	j.committedAt, j.committed = w.p.cfg.Now(), time.Now()
}

// DeadLetterUnknownType starts the dead-letter reason of a record whose
// event type this build does not know.
const DeadLetterUnknownType = "unknown_type"

// DeadLetterInvalidUTF8 starts the dead-letter reason of a record with
// text that is not valid UTF-8 (topics.ErrInvalidUTF8); the rest names
// each field.
const DeadLetterInvalidUTF8 = topics.CodeInvalidUTF8

// DeadLetterRunExpired starts the dead-letter reason of an event for a run
// that expired (projection.Config.Retention): its state is gone.
const DeadLetterRunExpired = "run_expired"

// deadLetter sends a record that cannot be projected to the dead-letter
// topic, with why and whence in its headers.
func (w *worker) deadLetter(r *kgo.Record, reason string) {
	w.out = append(w.out, w.deadLetterRecord(r.Key, r.Value, r.Headers, reason, r.Topic, r.Partition, r.Offset))
	w.p.log.Warn("dead-lettered a record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
}

// deadLetterRecord is a dead letter of key, value and headers for reason;
// whence (topic, partition, offset) is left out when topic is "". A value
// that would make the record larger than the dead-letter topic takes is
// left out too, and its size said in a header: the original is still at
// its offset, and a dead letter the broker refuses would be poison itself.
func (w *worker) deadLetterRecord(key, value []byte, headers []kgo.RecordHeader, reason, topic string, partition int32, offset int64) *kgo.Record {
	if len(reason) > 1024 {
		// At a character's start: a header of half a character would be
		// the invalid UTF-8 canopy refuses in what it reads.
		n := 1024
		for n > 0 && !utf8.RuneStart(reason[n]) {
			n--
		}
		reason = reason[:n]
	}
	h := append([]kgo.RecordHeader(nil), headers...)
	h = append(h, kgo.RecordHeader{Key: topics.HeaderDeadLetterReason, Value: []byte(reason)})
	if topic != "" {
		h = append(h,
			kgo.RecordHeader{Key: topics.HeaderDeadLetterTopic, Value: []byte(topic)},
			kgo.RecordHeader{Key: topics.HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(partition)))},
			kgo.RecordHeader{Key: topics.HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(offset, 10))},
		)
	}
	dlq := w.p.cfg.Names.DeadLetter()
	if size := recordSize(key, value, h); size > w.p.recordLimit(dlq) {
		h = append(h, kgo.RecordHeader{Key: topics.HeaderDeadLetterValueOmitted, Value: []byte(strconv.Itoa(len(value)))})
		value = nil
	}
	return &kgo.Record{Topic: dlq, Partition: 0, Key: key, Value: value, Headers: h}
}

// reroute sends a record that sits in the wrong partition for its run (a
// producer with another partitioner) to the right one, keyed by run id.
func (w *worker) reroute(r *kgo.Record, runID string, want int32) {
	w.out = append(w.out, &kgo.Record{Topic: r.Topic, Partition: want, Key: []byte(runID), Value: r.Value, Headers: r.Headers})
}
