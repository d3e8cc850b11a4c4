package projector

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// A partition's worker, in rooms:
//   - worker.go: the worker, its start (fence, restore) and its stop;
//   - inbox.go: what the pollers hand it, and the priority gate's hold;
//   - loop.go: its loop, taking human input first and applying agent
//     records chunk by chunk;
//   - apply.go: one record projected, dead-lettered or rerouted;
//   - publish.go: a commit's wakes built and handed to the agent lane's
//     committer, and reaped;
//   - committer.go: a commit carried out (begin, produce, end or abort,
//     Pebble), for either lane;
//   - priority.go: the priority path, human input's own commits;
//   - timers.go: timers and retention fired by the wall clock;
//   - poison.go: rewinds, and what a record that fails every time becomes.

// worker owns one partition: its projection, its offsets, its timers and
// its two committers. Its goroutine (run) owns everything below in but the
// lifecycle channels; other goroutines touch only in (the pollers, the
// committers), hold (the pollers) and queries (readers).
type worker struct {
	p    *Projector
	part int32

	// in is what the pollers hand the worker (inbox.go); hold is the
	// partition's hold on the instance's priority gate.
	in   inbox
	hold gateHold
	// queries are reads of the state (query.go), answered between commits.
	queries chan *query

	// ready is closed once the partition is restored and consuming; done
	// when the worker's goroutine has returned; quit asks it to stop. ctx
	// is canceled by quit: it interrupts a restore, not a commit.
	ready, quit, done chan struct{}
	ctx               context.Context
	cancel            context.CancelFunc
	// start is the offsets as restored: read by the group's callbacks once
	// ready is closed.
	start map[string]int64

	// unwritten is shared by the partition's committers (newCommitters).
	unwritten atomic.Int64

	// The partition's state and where it stands in its input (apply.go).
	store *store.Store
	proj  *projection.Projection
	at    position
	// agent commits the agent lane, prio the priority path (committer.go).
	agent, prio *committer
	// poison is what the worker knows of its failures (poison.go).
	poison poisonState
	tracer trace.Tracer
	// ev is the event of the record being applied, decoded into the same
	// memory for every record (topics.DecodeRecordInto): nothing keeps an
	// event once its record is applied, and an Event per record was 4.6%
	// of what steady's projector allocated.
	ev topics.Event
	// tracing is false when the tracer is OpenTelemetry's no-op, which
	// records nothing: batchSpan and wakeSpan then build no names or
	// attributes for it.
	tracing bool
}

// position is where a worker stands in its input, and how far its state
// reflects it. The worker's goroutine owns it.
type position struct {
	// offsets is the next offset to apply per input topic; prepared is
	// offsets as of the last commit prepared.
	offsets, prepared map[string]int64
	// consumed counts the records applied since the last commit.
	consumed int
	// woken is the priority path's watermark: the first human input
	// offset whose wake is not yet published (projection.WokenKey).
	// Human input below it, applied again after a restore, changes the
	// state and wakes nobody: its wake is out already.
	woken int64
	// lastAt is, per input topic (agent events, human input), the append
	// time of the last record applied: how far the state reflects a lane
	// that is behind (see source); behind says, per input topic, whether
	// the last batch of it ended short of the high watermark (a topic not
	// yet seen counts as caught up).
	lastAt [2]time.Time
	behind map[string]bool
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
		p: p, part: part, queries: make(chan *query),
		ready: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
		store: store.New(p.db, part), at: position{behind: make(map[string]bool)},
		poison: newPoisonState(), tracer: p.cfg.TracerProvider.Tracer(tracerName),
	}
	_, off := p.cfg.TracerProvider.(noop.TracerProvider)
	w.tracing = !off
	w.in.init()
	w.ctx, w.cancel = context.WithCancel(context.Background())
	agent, prio := p.prod, p.prod
	if !p.cfg.AtLeastOnce {
		var err error
		if agent, err = p.txnProducer(part, ""); err != nil {
			w.cancel()
			return nil, err
		}
		// The priority path's producer: a transactional id of its own
		// per partition, so that the next owner fences it too.
		if prio, err = p.txnProducer(part, "-priority"); err != nil {
			agent.Close()
			w.cancel()
			return nil, err
		}
	}
	w.agent, w.prio = newCommitters(p, part, agent, prio, w)
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

// stop asks the worker to finish its current chunk and commit, and waits.
func (w *worker) stop() {
	close(w.quit)
	w.cancel()
	<-w.done
}

// run is the worker's goroutine: it restores the partition, then processes
// it until it is stopped or fails, rewinding after a failure its input may
// cause (poison.go).
func (w *worker) run() {
	defer close(w.done)
	defer w.cancel()
	if w.agent.txn {
		defer w.agent.prod.Close()
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
	if w.prio.txn {
		defer w.prio.prod.Close()
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
	for {
		w.loop(timer)
		if !w.rewinding() || !w.rewind() {
			return
		}
	}
}

// init fences the partition's previous writer, restores the partition from
// the changelog, undoes a torn commit if the restore found one, and starts
// consuming the partition's human input where the state ends.
func (w *worker) init() error {
	p := w.p
	fail := func(err error) error { return fmt.Errorf("projector: partition %d: %w", w.part, err) }
	began := time.Now() // for the log only: how long taking a partition over takes
	if w.agent.txn {
		// Initialising the partition's transactional ids bumps their
		// epochs: the previous owner, alive or not, can commit nothing
		// more, and its open transactions are aborted, so the restore
		// below reads everything that will ever be committed before this
		// point.
		if _, _, err := w.agent.prod.ProducerID(w.ctx); err != nil {
			return fail(fmt.Errorf("fencing the previous writer: %w", err))
		}
		if _, _, err := w.prio.prod.ProducerID(w.ctx); err != nil {
			return fail(fmt.Errorf("fencing the previous writer's priority path: %w", err))
		}
	}
	restored, err := w.restore()
	if err != nil {
		return fail(err)
	}
	w.start = maps.Clone(w.at.offsets)
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
	p.stats.Restoring.Add(1)
	var counted int64 // of this restore, in RestoredRecords already
	res, err := changelog.Restore(w.ctx, changelog.Config{
		ClientOpts: p.common, Topic: p.cfg.Names.Changelog(), Logger: p.log, Now: p.cfg.Now, MaxCheckpointAge: p.trust,
		Progress: func(_ int32, done, _ int64) { p.stats.RestoredRecords.Add(done - counted); counted = done },
	}, w.part, w.store)
	p.stats.RestoredRecords.Add(res.Records - counted)
	p.stats.Restoring.Add(-1)
	p.hooks.Restored(w.part, res, err)
	if err != nil {
		return 0, err
	}
	if w.proj, err = projection.Open(p.cfg.Projection, w.store); err != nil {
		return 0, err
	}
	at := &w.at
	if at.offsets, err = w.store.Offsets(); err != nil {
		return 0, err
	}
	at.prepared = maps.Clone(at.offsets)
	at.woken = at.offsets[p.cfg.Names.HumanInput()]
	if next, ok, err := w.store.Woken(); err != nil {
		return 0, err
	} else if ok {
		at.woken = max(at.woken, next)
	}
	if len(res.Tail) > 0 {
		undo, err := changelog.Rollback(w.store, res.Tail)
		if err != nil {
			return 0, err
		}
		p.log.Warn("undoing a torn commit", "partition", w.part, "keys", len(undo)-1)
		// Committed here and now, before anything is applied.
		j := &commitJob{out: changelog.Records(p.cfg.Names.Changelog(), w.part, undo), changes: undo}
		w.agent.commit(j)
		if err := w.proj.Committed(j.err); err != nil {
			return 0, err
		}
	}
	return res.Records, nil
}
