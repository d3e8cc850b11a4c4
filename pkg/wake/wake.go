// Package wake is the conductor's side of canopy: it consumes the priority
// and normal wake topics and hands each wake to the conductor's handler,
// without any canopy process beyond the projectors that publish them.
//
// For each wake it
//   - delivers priority wakes (human input) before normal ones: whatever
//     priority backlog exists when partitions are assigned, and every
//     priority wake fetched since, goes before the next normal wake;
//   - holds at most Config.MaxQueued normal wakes in memory: above that it
//     stops fetching the normal topic (the priority topic keeps flowing), so
//     a backlog stays in Kafka, not in the conductor;
//   - lets the group rebalance while the handler runs, so a slow handler
//     (an LLM call) does not hold a rebalance past its timeout; queued wakes
//     of partitions that move are dropped, for their new owner to deliver;
//   - reads with read_committed, so wakes of aborted projector transactions
//     are never seen, and drops duplicates by wake_id (from redelivery after
//     a restart, or a projector run at least once), remembering a bounded
//     number of recent ids;
//   - recomputes staleness at receipt: the snapshot's age is its age when
//     generated plus the time since (seed 000's rule, age > StaleAfter);
//   - starts a consumer "process" span continuing the W3C trace context of
//     the wake record's headers, logs one line, and tells the Observer
//     (conductor.wake.received), all with metadata only, never node content;
//   - after the handler returns, publishes a conductor.wake_received event
//     to the agent events topic, keyed by run, naming the nodes whose results
//     or completions the wake delivered, so the delivery watchdog (seed 004)
//     marks them forwarded; then marks the wake's offset for commit.
//
// Delivery to the handler is at least once across restarts (offsets are
// committed after the acknowledgement) and exactly once within a process.
package wake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/pkg/ids"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Received is what a conductor learns about a wake on receipt: metadata
// only, never node contents, so it may be logged and exported as the
// conductor.wake.received telemetry event.
type Received struct {
	WakeID, SnapshotID, RunID string
	Lane                      topics.Lane
	// Topic, Partition and Offset locate the wake record.
	Topic     string
	Partition int32
	Offset    int64
	// AsOfEventSeq is the number of the run's events the snapshot reflects.
	AsOfEventSeq int64
	// Part is the wake's part when it is one of several its run's
	// triggers were split over (docs/CONTRACT.md "Wake size"), nil when it
	// was not split. Each part is delivered, de-duplicated and
	// acknowledged as a wake of its own.
	Part          *topics.WakePart
	PolicyVersion string
	// NodesIncluded and NodesOmitted are the snapshot's node counts; Bytes
	// is the size of the wake record's value.
	NodesIncluded, NodesOmitted, Bytes int
	Truncated                          bool
	// Stale and AgeMs are recomputed at receipt: AgeMs is the snapshot's age
	// when generated plus the time since generated_at on Config.Now, and
	// Stale is AgeMs > Config.StaleAfter.
	Stale bool
	AgeMs int64
	// Triggers are the kinds of the wake's triggers, in order.
	Triggers []topics.TriggerKind
	// ReceivedAt is Config.Now at receipt.
	ReceivedAt time.Time
}

// Handler handles one wake. The context carries the wake's process span.
// An error stops Run (the wake is neither acknowledged nor committed, so it
// is delivered again after a restart); handle what can be handled.
type Handler func(ctx context.Context, w *topics.Wake, r Received) error

// Stats count what a Consumer did.
type Stats struct {
	// Delivered wakes went to the handler; Duplicates were dropped by
	// wake_id; Undecodable records were skipped (and logged); Acked wakes
	// were acknowledged with conductor.wake_received.
	Delivered, Duplicates, Undecodable, Acked atomic.Int64
}

// Consumer consumes a conductor's wakes. Make one with New, then Run it.
type Consumer struct {
	cfg    Config
	h      Handler
	cl     *kgo.Client
	tracer trace.Tracer
	seen   *seen
	// prio and normal are the fetched records waiting for the handler, by
	// lane; only Run's goroutine touches them. A transaction marker waits
	// in its lane behind the records of its partition that came before it,
	// so that its offset is not committed before theirs.
	prio   []*kgo.Record
	normal []*kgo.Record
	// paused says the normal topic's fetching is paused (Run's goroutine).
	paused bool
	// peakNormal is the most normal records ever queued at once, for the
	// package's tests.
	peakNormal int

	mu sync.Mutex
	// backlog maps each assigned priority partition whose committed backlog,
	// listed at assignment, has not been fetched yet to the offset it ends at.
	backlog      map[int32]int64
	backlogSince time.Time
	// owned are the partitions assigned to this member: a wake whose
	// partition moved while its handler ran is not marked for commit, so
	// that no offset is committed for a partition another member owns.
	owned map[topicPartition]bool
	// moved are partitions revoked or lost since Run last looked: their
	// queued records are dropped before anything else is queued.
	moved map[topicPartition]bool

	// Stats are live counters.
	Stats Stats
}

type topicPartition struct {
	topic     string
	partition int32
}

// ErrHandler wraps the error of a Handler that stopped Run.
var ErrHandler = errors.New("wake: handler failed")

// New validates cfg and creates the consumer's Kafka client. It consumes
// nothing until Run.
func New(cfg Config, h Handler) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: no handler", ErrConfig)
	}
	cfg = cfg.withDefaults()
	c := &Consumer{cfg: cfg, h: h, seen: newSeen(cfg.DedupeSize), backlog: map[int32]int64{},
		owned: map[topicPartition]bool{}, moved: map[topicPartition]bool{},
		tracer: cfg.TracerProvider.Tracer("github.com/canopy-dev/canopy/pkg/wake")}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Names.PriorityWakes(), cfg.Names.Wakes()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers come through so that the end of a priority
		// partition's backlog is seen even when a marker is its last record.
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// The normal topic, paused at MaxQueued and resumed, is fetched
		// again only when the fetch already out for the priority topic
		// returns: with franz-go's default of 5 s, a backlog would drain in
		// bursts of MaxQueued/2 separated by that wait. New wakes still
		// return at once; an idle conductor asks every 100 ms.
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.AutoCommitMarks(),
		// A rebalance waits from a poll until Run allows it again, just
		// before the handler runs: the queues are never changed by a
		// rebalance under Run's feet, and Run sees every revocation before
		// it queues what the next poll returns.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		// Acknowledgements are keyed by run and placed by murmur2, like
		// every canopy record.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}, cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("wake: kafka client: %w", err)
	}
	c.cl = cl
	return c, nil
}

// Run delivers wakes to the handler until ctx is done (then it returns nil),
// the handler fails (ErrHandler), or Kafka reports an error that retrying
// cannot fix. It commits what was handled and closes the client on return;
// a Consumer runs once.
func (c *Consumer) Run(ctx context.Context) (err error) {
	defer func() {
		c.cl.AllowRebalance()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if cerr := c.cl.CommitMarkedOffsets(cctx); cerr != nil && err == nil && ctx.Err() == nil {
			err = fmt.Errorf("wake: committing offsets: %w", cerr)
		}
		cancel()
		c.cl.Close()
	}()
	for {
		if len(c.prio) == 0 && len(c.normal) == 0 {
			// Nothing held: wait for wakes, letting a rebalance go ahead
			// meanwhile (polls that returned only transaction markers
			// still hold it back otherwise).
			c.cl.AllowRebalance()
			if err := c.fill(ctx); err != nil || ctx.Err() != nil {
				return err
			}
			continue
		}
		// Whatever else has arrived, priority wakes included, before the
		// next delivery.
		//lint:ignore SA1012 a nil context is franz-go's documented "return at once with what is buffered" (kgo.Client.PollRecords)
		if err := c.fill(nil); err != nil {
			return err
		}
		if len(c.prio) == 0 && c.waitingForPriority() {
			// A priority backlog listed at assignment is not here yet.
			// Waiting for it must not hold a rebalance either: the poll
			// drops what a rebalance took before it queues anything.
			c.cl.AllowRebalance()
			wctx, cancel := context.WithDeadline(ctx, c.backlogSince.Add(c.cfg.PriorityWait))
			err := c.fill(wctx)
			cancel()
			if err != nil || ctx.Err() != nil {
				return err
			}
			if wctx.Err() != nil && len(c.prio) == 0 {
				c.giveUpBacklog()
			}
			continue
		}
		var r *kgo.Record
		switch {
		case len(c.prio) > 0:
			r, c.prio = c.prio[0], c.prio[1:]
		case len(c.normal) > 0:
			r, c.normal = c.normal[0], c.normal[1:]
		default:
			continue // the queued records' partitions moved
		}
		if r.Attrs.IsControl() {
			c.mark(r) // the records of its partition before it are handled
			continue
		}
		// The handler may take minutes: a rebalance must not wait for it.
		// One that happens meanwhile revokes partitions under this wake;
		// the next poll waits for it to finish, and Run then drops what
		// it queued of the partitions that moved.
		c.cl.AllowRebalance()
		if err := c.deliver(ctx, r); err != nil {
			if ctx.Err() != nil {
				// Stopped mid-delivery (the acknowledgement's produce, or a
				// handler, saw ctx end): a shutdown, not a failure. The
				// wake is neither acknowledged nor committed, so it is
				// delivered again after a restart.
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// fill polls once, waiting on ctx for records when ctx is not nil, and
// queues what the poll returns. It keeps at most MaxQueued normal records
// queued: the normal topic's fetching is paused at that many and resumed
// at half (fetched records of a paused topic stay in Kafka), and a poll may
// take only as many as there is room for. The priority topic is never
// paused, so its wakes are fetched however many normal ones wait.
func (c *Consumer) fill(ctx context.Context) error {
	c.throttle()
	var fs kgo.Fetches
	room := c.cfg.MaxQueued - len(c.normal)
	if c.paused {
		fs = c.cl.PollFetches(ctx) // priority records only: the normal topic's are stripped
	} else {
		fs = c.cl.PollRecords(ctx, room)
	}
	// The poll waited for any rebalance in progress: what it revoked is
	// known now, and goes before what the poll returned is queued.
	c.dropMoved()
	err := c.take(fs)
	if !c.paused && fs.NumRecords() >= room {
		// The poll took all it was allowed to; more may be buffered,
		// priority records among them. With the normal topic paused, a
		// second poll returns only those.
		c.pause()
		//lint:ignore SA1012 a nil context is franz-go's documented "return at once with what is buffered" (kgo.Client.PollRecords)
		if err2 := c.take(c.cl.PollFetches(nil)); err == nil {
			err = err2
		}
		c.throttle()
	}
	return err
}

// throttle pauses the normal topic's fetching when MaxQueued normal records
// are queued and resumes it at half, so that a slow handler leaves the
// backlog in Kafka and a fast one does not pause and resume at every wake.
func (c *Consumer) throttle() {
	switch {
	case !c.paused && len(c.normal) >= c.cfg.MaxQueued:
		c.pause()
	case c.paused && len(c.normal) <= c.cfg.MaxQueued/2:
		c.cl.ResumeFetchTopics(c.cfg.Names.Wakes())
		c.paused = false
	}
}

func (c *Consumer) pause() {
	c.cl.PauseFetchTopics(c.cfg.Names.Wakes())
	c.paused = true
}

// take queues the records of fs by lane and notes how far each priority
// partition has been fetched. It returns an error Kafka will not recover from.
func (c *Consumer) take(fs kgo.Fetches) error {
	var ferr error
	fs.EachError(func(topic string, p int32, err error) {
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		case errors.Is(err, kgo.ErrClientClosed) || !kerr.IsRetriable(err):
			if ferr == nil {
				ferr = fmt.Errorf("wake: consuming %s/%d: %w", topic, p, err)
			}
		default:
			c.cfg.Logger.Warn("wake: fetch error, retrying", "topic", topic, "partition", p, "err", err)
		}
	})
	prio := c.cfg.Names.PriorityWakes()
	fs.EachRecord(func(r *kgo.Record) {
		if r.Topic == prio {
			c.fetched(r.Partition, r.Offset+1)
		}
		q := &c.normal
		if r.Topic == prio {
			q = &c.prio
		}
		if r.Attrs.IsControl() && !queued(*q, r) {
			// A transaction marker with nothing of its partition before
			// it: committing past it loses nothing.
			c.cl.MarkCommitRecords(r)
			return
		}
		*q = append(*q, r)
	})
	c.peakNormal = max(c.peakNormal, len(c.normal))
	return ferr
}

// queued reports whether q holds a record of r's partition.
func queued(q []*kgo.Record, r *kgo.Record) bool {
	for _, x := range q {
		if x.Partition == r.Partition && x.Topic == r.Topic {
			return true
		}
	}
	return false
}

// mark marks r for commit if its partition is still this member's.
func (c *Consumer) mark(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owned[topicPartition{r.Topic, r.Partition}] {
		c.cl.MarkCommitRecords(r)
	}
}

// dropMoved drops the queued records of partitions revoked or lost since it
// last ran: their new owner delivers them (and a conductor that gets them
// back reads them again from the committed offset).
func (c *Consumer) dropMoved() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.moved) == 0 {
		return
	}
	keep := func(q []*kgo.Record) []*kgo.Record {
		out := q[:0]
		for _, r := range q {
			if !c.moved[topicPartition{r.Topic, r.Partition}] {
				out = append(out, r)
			}
		}
		clear(q[len(out):]) // no references to dropped records
		return out
	}
	c.prio, c.normal = keep(c.prio), keep(c.normal)
	clear(c.moved)
}

// deliver handles one wake record: span, decode, dedupe, log, observe,
// handle, acknowledge, mark.
func (c *Consumer) deliver(ctx context.Context, r *kgo.Record) error {
	ctx = propagation.TraceContext{}.Extract(ctx, topics.HeaderCarrier{Headers: &r.Headers})
	ctx, span := c.tracer.Start(ctx, "process "+r.Topic, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		semconv.MessagingSystemKafka,
		semconv.MessagingDestinationName(r.Topic),
		semconv.MessagingDestinationPartitionID(fmt.Sprint(r.Partition)),
		semconv.MessagingKafkaOffset(int(r.Offset)),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingConsumerGroupName(c.cfg.Group),
		semconv.MessagingKafkaMessageKey(string(r.Key)),
		semconv.MessagingMessageBodySize(len(r.Value)),
	))
	defer span.End()

	w, err := topics.DecodeWake(r.Value)
	if err != nil {
		c.Stats.Undecodable.Add(1)
		span.SetStatus(codes.Error, "undecodable wake")
		span.RecordError(err)
		c.cfg.Logger.Warn("wake: skipped an undecodable wake", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		c.mark(r)
		return nil
	}
	span.SetAttributes(semconv.MessagingMessageID(w.WakeID), attribute.String("canopy.run_id", w.RunID))
	if c.seen.add(w.WakeID) {
		c.Stats.Duplicates.Add(1)
		span.SetAttributes(attribute.Bool("canopy.wake.duplicate", true))
		c.cfg.Logger.Debug("wake: dropped a duplicate", "wake_id", w.WakeID, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		c.mark(r)
		return nil
	}
	rec := c.received(w, r)
	c.Stats.Delivered.Add(1)
	attrs := []any{"wake_id", rec.WakeID, "run_id", rec.RunID, "lane", string(rec.Lane),
		"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "as_of_event_seq", rec.AsOfEventSeq,
		"nodes_included", rec.NodesIncluded, "nodes_omitted", rec.NodesOmitted, "truncated", rec.Truncated,
		"stale", rec.Stale, "age_ms", rec.AgeMs, "bytes", rec.Bytes}
	if rec.Part != nil {
		attrs = append(attrs, "part", rec.Part.Number, "parts", rec.Part.Count)
	}
	c.cfg.Logger.Info("wake received", attrs...)
	if c.cfg.Observer != nil {
		c.cfg.Observer.WakeReceived(ctx, rec)
	}
	if err := c.h(ctx, w, rec); err != nil {
		span.SetStatus(codes.Error, "handler failed")
		span.RecordError(err)
		return fmt.Errorf("%w: wake %s of run %s: %w", ErrHandler, w.WakeID, w.RunID, err)
	}
	if !c.cfg.NoAck {
		if err := c.ack(ctx, w, rec.ReceivedAt); err != nil {
			span.SetStatus(codes.Error, "acknowledgement failed")
			span.RecordError(err)
			return err
		}
	}
	c.mark(r)
	return nil
}

// received computes a wake's receipt metadata, staleness included.
func (c *Consumer) received(w *topics.Wake, r *kgo.Record) Received {
	s := &w.AgentTreeSnapshot
	now := c.cfg.Now()
	rec := Received{WakeID: w.WakeID, SnapshotID: s.SnapshotID, RunID: w.RunID, Lane: w.Lane,
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, AsOfEventSeq: s.AsOfEventSeq, Part: w.Part,
		PolicyVersion: s.TruncationMeta.PolicyVersion, NodesIncluded: len(s.Nodes),
		NodesOmitted: s.TruncationMeta.OmittedCountTotal, Bytes: len(r.Value), Truncated: s.Truncated,
		AgeMs: staleAge(s, now), ReceivedAt: now}
	rec.Stale = time.Duration(rec.AgeMs)*time.Millisecond > c.cfg.StaleAfter
	for _, t := range w.Triggers {
		rec.Triggers = append(rec.Triggers, t.Kind)
	}
	return rec
}

// staleAge is seed 000's snapshot age, measured at now: the age the
// projector measured when it generated the snapshot plus the time since.
// A conductor clock behind the projector's does not make it younger.
func staleAge(s *topics.AgentTreeSnapshot, now time.Time) int64 {
	since := now.Sub(s.GeneratedAt.Std()).Milliseconds()
	if since < 0 || s.GeneratedAt.IsZero() {
		since = 0
	}
	return s.SnapshotAgeMs + since
}

// AckEvent returns the conductor.wake_received event acknowledging w at
// time at. Its id is derived from the wake id and the source, so
// acknowledging a redelivered wake again is a duplicate the projector
// applies once. It names the agents of the wake's result and completion
// triggers: the nodes whose results it delivered (a part of a split wake
// names those of its own triggers, at most topics.MaxAckAgents: a
// projector splits triggers that would name more).
func AckEvent(w *topics.Wake, source, fallbackAgent string, at time.Time) *topics.Event {
	s := &w.AgentTreeSnapshot
	agent := fallbackAgent
	if s.RootAgentID != nil {
		agent = *s.RootAgentID
	}
	var agents []string
	for _, t := range w.Triggers {
		if t.Kind.Acknowledged() && !contains(agents, t.AgentID) {
			agents = append(agents, t.AgentID)
		}
	}
	ms := uint64(at.UnixMilli())
	if id, err := ulid.ParseStrict(w.WakeID); err == nil {
		ms = id.Time() // the wake's own time: the same id whenever it is acknowledged
	}
	ev := &topics.Event{ID: ids.Ack(ms, source, w.WakeID).String(), Source: source, Type: topics.TypeWakeReceived, Time: topics.NewTime(at),
		RunID: w.RunID, AgentID: agent, SchemaVersion: topics.CurrentSchemaVersion,
		Data: &topics.WakeReceived{WakeID: w.WakeID, SnapshotID: s.SnapshotID, AgentIDs: agents}}
	if s.Scope.SessionID != nil {
		ev.SessionID = *s.Scope.SessionID
	}
	if s.Scope.ThreadID != nil {
		ev.ThreadID = *s.Scope.ThreadID
	}
	return ev
}

// ack produces the acknowledgement of w and waits for Kafka to have it,
// carrying the process span's trace context in its headers.
func (c *Consumer) ack(ctx context.Context, w *topics.Wake, at time.Time) error {
	ev := AckEvent(w, c.cfg.Source, c.cfg.AgentID, at)
	rec, err := topics.EventRecord(c.cfg.Names.AgentEvents(), ev, "")
	if err != nil {
		return fmt.Errorf("wake: acknowledgement of wake %s: %w", w.WakeID, err)
	}
	propagation.TraceContext{}.Inject(ctx, topics.HeaderCarrier{Headers: &rec.Headers})
	if err := c.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("wake: producing the acknowledgement of wake %s to %s: %w", w.WakeID, rec.Topic, err)
	}
	c.Stats.Acked.Add(1)
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// assigned lists, for the newly assigned priority partitions, where their
// committed backlog ends, so that no normal wake is delivered before it.
func (c *Consumer) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	for t, ps := range assigned {
		for _, p := range ps {
			c.owned[topicPartition{t, p}] = true
		}
	}
	c.mu.Unlock()
	parts := assigned[c.cfg.Names.PriorityWakes()]
	if len(parts) == 0 {
		return
	}
	topic := c.cfg.Names.PriorityWakes()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topic) // last stable offsets
	if err == nil {
		err = ends.Error()
	}
	var starts kadm.ListedOffsets
	if err == nil {
		starts, err = adm.ListStartOffsets(ctx, topic)
	}
	var committed kadm.OffsetResponses
	if err == nil {
		committed, err = adm.FetchOffsets(ctx, c.cfg.Group)
	}
	if err != nil {
		c.cfg.Logger.Warn("wake: cannot list the priority backlog; priority wakes go first as they are fetched", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range parts {
		end, ok := ends.Lookup(topic, p)
		if !ok {
			continue
		}
		from := int64(0)
		if s, ok := starts.Lookup(topic, p); ok {
			from = s.Offset
		}
		if o, ok := committed.Lookup(topic, p); ok && o.Err == nil && o.At > from {
			from = o.At
		}
		if end.Offset > from {
			c.backlog[p] = end.Offset
			c.backlogSince = time.Now() // a timeout, not a fact of any wake
		}
	}
}

// revoked notes the partitions a rebalance takes away and commits what was
// handled of them, so that their new owner starts after it.
func (c *Consumer) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	c.lost(ctx, cl, revoked)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil && ctx.Err() == nil {
		c.cfg.Logger.Warn("wake: committing offsets of revoked partitions; their new owner delivers those wakes again", "err", err)
	}
}

// lost notes partitions this member no longer owns (revoked, or lost with
// its group session): nothing more of them is marked for commit, and their
// queued records are dropped before Run queues anything else.
func (c *Consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, ps := range lost {
		for _, p := range ps {
			delete(c.owned, topicPartition{t, p})
			c.moved[topicPartition{t, p}] = true
		}
	}
	for _, p := range lost[c.cfg.Names.PriorityWakes()] {
		delete(c.backlog, p)
	}
}

// fetched notes that priority partition p was fetched up to offset next.
func (c *Consumer) fetched(p int32, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if end, ok := c.backlog[p]; ok && next >= end {
		delete(c.backlog, p)
	}
}

func (c *Consumer) waitingForPriority() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.backlog) > 0
}

func (c *Consumer) giveUpBacklog() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg.Logger.Warn("wake: the priority backlog did not arrive within the priority wait; delivering normal wakes",
		"partitions", len(c.backlog), "priority_wait", c.cfg.PriorityWait)
	clear(c.backlog)
}
