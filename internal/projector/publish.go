package projector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// publish builds the wakes of the agent lane's pending triggers and hands
// them, with the state changes and offsets since the last commit, to the
// agent lane's committer without waiting for it: the worker goes on
// applying while the transaction commits. One commit at most is in flight;
// the next publish waits for it. So a commit in flight delays the worker by
// at most one commit's worth of applied records (Config.MaxBatch) and never
// blocks an apply: a record is applied while the commit before it runs, and
// its wake goes out in the next. The state the worker applies to is ahead
// of what is committed meanwhile; if the commit fails the worker rewinds
// (or stops, and the next owner restores what was committed), applies the
// rest again and gets the same state (the projection is deterministic).
// Reads of the state settle first (serveQueries), so a reader never sees
// uncommitted state.
func (w *worker) publish(now time.Time, source topics.Time) bool {
	if w.rewinding() {
		return false
	}
	tlog(w.part, "a.publish")
	j, ok := w.buildAgentWakes(now, source)
	if !ok {
		return false
	}
	tlog(w.part, "a.built")
	// The commit before must be written before this one is prepared: a
	// Kafka producer has one transaction at a time, the changelog's order
	// is the commits' order, and reaping it evicts only runs whose every
	// change is in Pebble, which holds only after their Write. And the
	// wakes of the human input this commit carries the offsets of must be
	// out first (priority.go): its commit closes their way.
	if w.prio.pending.Len() > 0 && !w.publishPriority() || !w.awaitInflight() || !w.settlePriority() {
		j.end()
		return false
	}
	j.waitedAt = time.Now()
	tlog(w.part, "a.waited")
	at, c := &w.at, w.agent
	// A large commit's changes take a while to gather, and human input
	// does not wait for them: it is taken up between two runs (between),
	// and goes with the next commit. So this commit is what was applied
	// before it began: its offsets, the input records it carries (for a
	// rewind) and the records it produces, taken now.
	offsets, records, nout := maps.Clone(at.offsets), w.poison.applied, len(c.out)
	w.poison.applied, w.poison.spare = w.poison.spare, nil
	changes, err := w.proj.PrepareBetween(offsets, w.between)
	if err == nil && (w.poison.stopping || w.rewinding()) {
		err = errStopped
	}
	if err != nil {
		w.poison.applied = append(records, w.poison.applied...)
		j.end()
		if !errors.Is(err, errStopped) {
			w.failed(err)
		}
		return false
	}
	// What human input taken up meanwhile produces (dead letters,
	// reroutes) goes with the next commit, which carries its offset.
	next := slices.Clone(c.out[nout:])
	c.out = c.out[:nout]
	// The memory the changes are encoded in goes with the commit, and
	// back to the projection once it succeeded (settle).
	mem := w.proj.TakeChangeMemory()
	if len(c.out) == 0 && len(changes) == 1 && maps.Equal(offsets, at.prepared) {
		w.proj.RecycleChangeMemory(mem) // nothing refers to the changes
		c.out = append(c.out, next...)
		w.poison.applied = append(records, w.poison.applied...)
		j.end()
		return true // nothing happened: no commit
	}
	j.logAt = len(c.out)
	c.out = c.slab.Append(c.out, w.p.changelogTopic, w.part, changes)
	j.out, j.changes, j.mem = c.out, changes, mem
	c.out, c.spare = append(c.spare[:0], next...), nil
	j.records = records
	at.prepared = offsets
	// While another partition's human input is on its way, this commit
	// waits to start: its records would queue at the broker ahead of the
	// input's.
	tlog(w.part, "a.prepared")
	if w.othersFirst() {
		w.pauseForOthers()
	}
	c.start(j)
	return true
}

// errStopped says a commit was not prepared because the worker must stop
// or rewind: human input taken up meanwhile asked for it.
var errStopped = errors.New("projector: stopped while preparing a commit")

// buildAgentWakes builds the wakes of the agent lane's pending triggers
// into a job, their records in the lane's out. Human input that arrives
// while a large commit's wakes are built is taken up between two of them,
// and its wake goes out at once (between).
func (w *worker) buildAgentWakes(now time.Time, source topics.Time) (*commitJob, bool) {
	c := w.agent
	c.pending.Merge(&c.late)
	c.late.Reset()
	w.dropPoisonWakes(&c.pending)
	built, err := w.proj.WakesBetween(&c.pending, now, source, w.between)
	c.pending.Reset()
	if err == nil && c.late.Len() > 0 {
		// Timers of human input taken up meanwhile below the watermark:
		// this commit carries its offset, so it carries their wakes.
		var more []projection.Built
		more, err = w.proj.Wakes(&c.late, now, source)
		built = append(built, more...)
		c.late.Reset()
	}
	if err != nil {
		w.failed(w.wakeFailure(err))
		return nil, false
	}
	if w.poison.stopping || w.rewinding() {
		return nil, false
	}
	j := &commitJob{built: built, spans: make([]trace.Span, len(built)), origins: c.origins, done: make(chan struct{}), builtAt: time.Now()}
	c.origins = make(map[string]origin)
	if c.out, err = w.wakeRecords(j, c.out); err != nil {
		j.end()
		w.failed(err)
		return nil, false
	}
	return j, true
}

// wakeRecords appends the records of a commit's wakes to out, each with
// its publish span (in j.spans), and returns it.
func (w *worker) wakeRecords(j *commitJob, out []*kgo.Record) ([]*kgo.Record, error) {
	for i, b := range j.built {
		if err := w.faultBuild(b.Wake); err != nil {
			return out, w.wakeFailure(&projection.WakeError{Run: b.Wake.RunID, Err: err})
		}
		// The snapshot as the builder encoded it, with the envelope written
		// in the room it left before it: neither encoded nor copied again
		// (a wake is mostly its snapshot, up to 24 KB). Spliced into a new
		// buffer when the envelope does not fit.
		enc, ok := topics.WakeJSONAround(b.Info.Framed, len(b.Info.Framed)-len(b.Info.Encoded), b.Wake)
		var err error
		if !ok {
			enc, err = topics.AppendWakeJSON(nil, b.Wake, b.Info.Encoded)
		}
		if err == nil {
			err = w.faultEncode(b.Wake)
		}
		// The wake's own bytes outlive the builder's, and its snapshot's
		// nodes are in them: what reported hands the hooks is the wake's
		// envelope and summary, and Info counts the nodes (CommittedWake).
		j.bufs = append(j.bufs, b.Info.Framed)
		j.built[i].Info.Encoded, j.built[i].Info.Framed = nil, nil
		w.proj.RecycleWakeNodes(b.Wake.AgentTreeSnapshot.Nodes)
		b.Wake.AgentTreeSnapshot.Nodes = nil
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
	if o.span.IsValid() && len(w.agent.origins)+len(w.prio.origins) < maxLinks {
		batch.AddLink(trace.Link{SpanContext: o.span})
	}
	return o
}

// reap waits for c's commit in flight, if any, and returns it; nil when
// there was none. A failed commit's wakes are marked on their spans and
// its failure handed to failed (a rewind, or the worker stops): reap then
// returns nil and false.
func (w *worker) reap(c *committer) (*commitJob, bool) {
	j := c.take()
	if j == nil {
		return nil, true
	}
	if j.err == nil {
		return j, true
	}
	for _, s := range j.spans {
		s.SetStatus(codes.Error, "commit failed")
	}
	j.end()
	if c == w.agent {
		w.poison.lost = j.records // the rewind applies them again
	}
	w.failed(fmt.Errorf("projector: partition %d: %s%w", w.part, c.what, j.err))
	return nil, false
}

// settle waits for the agent lane's commit in flight, if any, and reaps
// it: its wakes are counted and handed to the hooks, and runs beyond the
// memory bound are evicted. It returns false when the commit failed.
func (w *worker) settle() bool {
	j, ok := w.reap(w.agent)
	if j == nil {
		return ok
	}
	defer j.end()
	tlog(w.part, "a.reaped")
	w.agent.recycle(j)
	// The commit succeeded, so the client is done with its wakes' bytes
	// and its changelog records, the store with its changes, and nothing
	// else kept them (reported hands the hooks no encoding). The
	// projection keeps none of it while memory is short.
	w.proj.RecycleWakeBuffers(j.bufs)
	w.proj.RecycleChangeMemory(j.mem)
	j.bufs, j.mem = nil, nil
	if err := w.proj.Committed(nil); err != nil {
		w.failed(fmt.Errorf("projector: partition %d: %w", w.part, err))
		return false
	}
	w.poison.committed(j.records)
	w.poison.recycle(j.records)
	j.records = nil
	w.p.progressed(w.part, w.at.prepared) // j's offsets until the next publish
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
