package gateway

// Wake streams share their Kafka reads. A gateway instance reads each wake
// partition it serves once, whatever the number of streams. The parts:
//
//   - wakeStreams (this file) is the subsystem the HTTP handler (sse.go)
//     uses: it admits a stream under the caps, resolves where it starts,
//     and owns every Kafka client of the streams and their lifecycle
//     (drain ends the streams, close stops the rest). It has one franz-go
//     client for all tailing (read_committed, control records kept so that
//     a position advances past transaction markers to exactly the last
//     stable offset). Its partitions come and go with
//     AddConsumePartitions and RemoveConsumePartitions, applied only by the
//     poll goroutine between polls, so that no fetch of a removed partition
//     is ever handed to the tail that replaced it.
//   - A tail (tail.go) is one partition of both wake topics: its position
//     (the next offsets), a replay buffer of its latest wakes (every run's,
//     at most Config.ReplayBytes), and its subscribers by run. A tail
//     starts with its first stream, at the committed end of both topics,
//     and stops Config.TailIdle after its last stream ended.
//   - Each poll's records are handed out under the tail's lock: appended to
//     the replay buffer and to the queues of the subscribers of the wake's
//     run, without ever waiting for a subscriber. A queue is bounded: a
//     subscriber that still has more than Config.StreamQueue wakes waiting
//     when a later poll brings it another is dropped (its stream ends with
//     a "dropped" event naming the position to resume from), so a slow
//     client never stalls the tail or the other streams. The bound is
//     checked once per poll, so that a burst one poll brings (a tail that
//     fell behind, a busy run) does not drop a stream that keeps up.
//   - A stream (sse.go) joins a tail at its start position: the wakes after
//     it that the replay buffer holds are written first, then its queue. A
//     position older than the buffer holds (a Last-Event-ID from long ago,
//     or a tail that started after it) is read by a short-lived catch-up
//     client of the stream's own (at most maxCatchUps at once per
//     instance) until it reaches the buffer, and then joins. Joining and
//     handing out are under the same lock, so each wake after the start is
//     delivered exactly once.
//
// A stream thus costs a goroutine, its queue and its HTTP connection; the
// broker connections of an instance are those of its producer and its one
// tail client (one per broker it fetches from), plus a catch-up client's
// while it runs.

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// maxCatchUps bounds the catch-up clients an instance runs at once; a
// stream that needs one waits for a turn.
const maxCatchUps = 4

// fetchErrorPause is how long a tail or a catch-up waits after a failed fetch.
const fetchErrorPause = 500 * time.Millisecond

// errTokenExpired is the cause of a stream's context when its token
// expired: the stream ends with an event that says so.
var errTokenExpired = errors.New("the token expired")

// wakeStreams is a gateway instance's wake streams: their caps, their
// tails and the Kafka clients that read for them.
type wakeStreams struct {
	cfg        *Config
	partitions int32
	cl         *kgo.Client // the tail client
	adm        *kadm.Client
	normal     string
	prio       string
	stats      *kafkaStats

	mu        sync.Mutex
	tails     map[int32]*tail
	ops       []tailOp
	kick      context.CancelFunc // wakes the poll goroutine
	streams   int
	bySubject map[string]int

	catchUps chan struct{}

	// streamsCtx ends every stream (drain); wg counts the streams.
	streamsCtx context.Context
	drain      context.CancelFunc
	wg         sync.WaitGroup

	// ctx ends the poll goroutine (close), which closes done.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// newWakeStreams starts the tail client and its poll goroutine, for
// topics of partitions partitions.
func newWakeStreams(cfg *Config, partitions int32, stats *kafkaStats) (*wakeStreams, error) {
	s := &wakeStreams{cfg: cfg, partitions: partitions, normal: cfg.Names.Wakes(), prio: cfg.Names.PriorityWakes(), stats: stats,
		tails: map[int32]*tail{}, bySubject: map[string]int{}, catchUps: make(chan struct{}, maxCatchUps), done: make(chan struct{})}
	var err error
	s.cl, err = kgo.NewClient(s.consumerOpts()...)
	if err != nil {
		return nil, err
	}
	s.adm = kadm.NewClient(s.cl)
	s.streamsCtx, s.drain = context.WithCancel(context.Background())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.poll()
	return s, nil
}

// consumerOpts are the options of the tail client and the catch-up clients.
func (s *wakeStreams) consumerOpts(more ...kgo.Opt) []kgo.Opt {
	return append(append(s.cfg.kafkaOpts(),
		kgo.WithHooks(s.stats),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500*time.Millisecond),
	), more...)
}

// close ends the streams, waits for them, and stops the poll goroutine and
// the tail client. The HTTP server must have stopped: no stream may start
// once close began.
func (s *wakeStreams) close() {
	s.drain()
	s.wg.Wait()
	s.cancel()
	<-s.done
	s.mu.Lock()
	for _, t := range s.tails {
		if t.idle != nil {
			t.idle.Stop()
		}
	}
	s.mu.Unlock()
	s.cl.Close()
}

// serve streams run's wakes to w, from the position from (nil: the
// committed end), until the stream ends (sse.go). It returns an error, for
// the handler to answer, only before it wrote anything: over a cap, the end
// offsets unknown, from past them.
func (s *wakeStreams) serve(w http.ResponseWriter, fl http.Flusher, r *http.Request, p *Principal, run string, from *streamPos) error {
	leave, err := s.admit(p.Subject)
	if err != nil {
		return err
	}
	defer leave()
	s.wg.Add(1)
	defer s.wg.Done()
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.streamsCtx, func() { cancel(nil) }) // drain ends every stream
	defer stop()

	part := topics.Partition([]byte(run), s.partitions)
	end, err := s.end(ctx, part)
	if err != nil {
		return err
	}
	pos := end
	if from != nil {
		if from.normal > end.normal || from.priority > end.priority {
			return problem.New(http.StatusBadRequest, problem.BadRequest,
				"Last-Event-ID %s is past the end of run %q's wakes (%s: partition %d of the normal and the priority wake topic end at offsets %d and %d); "+
					"an id this API sent is never past the end: reconnect without Last-Event-ID to start at the end",
				r.Header.Get("Last-Event-ID"), run, end, part, end.normal, end.priority)
		}
		pos = *from
	}
	if !p.Expires.IsZero() {
		// A timer, armed from the injected clock: a stream lasts no longer
		// than its token.
		left := p.Expires.Sub(s.cfg.Now())
		expire := time.AfterFunc(max(left, 0), func() { cancel(errTokenExpired) })
		defer expire.Stop()
	}
	t := s.acquire(part, end)
	defer s.release(t)
	st := &wakeStream{s: s, w: w, fl: fl, rc: http.NewResponseController(w), run: run, pos: pos, p: p}
	defer st.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	st.stream(ctx, cancel, t, part)
	return nil
}

// end resolves the committed end of partition part of both wake topics.
// It is resolved here, not left to a consumer, so that the open event can
// name it (a client that reconnects with it misses nothing sent after it
// connected), a new tail starts there, and a Last-Event-ID past it is
// refused.
func (s *wakeStreams) end(ctx context.Context, part int32) (streamPos, error) {
	octx, ocancel := context.WithTimeout(ctx, s.cfg.KafkaTimeout)
	ends, err := s.adm.ListCommittedOffsets(octx, s.normal, s.prio)
	ocancel()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		s.cfg.Logger.Warn("gateway: cannot read the wake topics' end offsets", "err", err)
		return streamPos{}, s.unavailable("cannot read the wake topics' end offsets from Kafka in time; retry later")
	}
	n, ok1 := ends.Lookup(s.normal, part)
	pr, ok2 := ends.Lookup(s.prio, part)
	if !ok1 || !ok2 {
		return streamPos{}, s.unavailable("the wake topics have no partition %d; check that they are co-partitioned", part)
	}
	return streamPos{n.Offset, pr.Offset}, nil
}

// unavailable is a 503 problem with the configured Retry-After.
func (s *wakeStreams) unavailable(format string, args ...any) *problem.Problem {
	p := problem.New(http.StatusServiceUnavailable, problem.Unavailable, format, args...)
	p.RetryAfter = s.cfg.RetryAfter
	return p
}

// admit counts a stream of subject against the caps, or says which cap it
// is over: the subject's (429) or the instance's (503).
func (s *wakeStreams) admit(subject string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bySubject[subject] >= s.cfg.MaxStreamsPerSubject {
		prob := problem.New(http.StatusTooManyRequests, problem.RateLimited,
			"token subject %q has its maximum of %d wake streams open on this gateway instance (MaxStreamsPerSubject); close one, or retry after the Retry-After seconds",
			subject, s.cfg.MaxStreamsPerSubject)
		prob.RetryAfter = s.cfg.RetryAfter
		return nil, prob
	}
	if s.streams >= s.cfg.MaxStreams {
		return nil, s.unavailable("the gateway serves its maximum of %d wake streams (MaxStreams); retry later", s.cfg.MaxStreams)
	}
	s.streams++
	s.bySubject[subject]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.streams--
		if s.bySubject[subject]--; s.bySubject[subject] == 0 {
			delete(s.bySubject, subject)
		}
	}, nil
}

// catchUpClient waits for a catch-up turn and returns a client of the
// stream's own reading partition part of both topics from pos; done gives
// the turn back and closes the client.
func (s *wakeStreams) catchUpClient(ctx context.Context, part int32, pos streamPos) (cl *kgo.Client, done func(), err error) {
	select {
	case s.catchUps <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	cl, err = kgo.NewClient(s.consumerOpts(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		s.normal: {part: kgo.NewOffset().At(pos.normal)},
		s.prio:   {part: kgo.NewOffset().At(pos.priority)},
	}))...)
	if err != nil {
		<-s.catchUps
		return nil, nil, err
	}
	return cl, func() { cl.Close(); <-s.catchUps }, nil
}

// tailOp is a change to the tail client's partitions, applied by the poll
// goroutine.
type tailOp struct {
	add bool
	t   *tail
}

// acquire returns the partition's tail, starting it at start if it is not
// running, and counts the caller among its users until release.
func (s *wakeStreams) acquire(part int32, start streamPos) *tail {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tails[part]
	if t == nil {
		t = newTail(part, start)
		s.tails[part] = t
		s.ops = append(s.ops, tailOp{add: true, t: t})
		s.wake()
	}
	t.refs++
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	return t
}

// release ends a use of t; the last one arms its idle stop.
func (s *wakeStreams) release(t *tail) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.refs--
	if t.refs > 0 {
		return
	}
	var timer *time.Timer
	timer = time.AfterFunc(s.cfg.TailIdle, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if t.idle != timer || t.refs > 0 {
			return
		}
		t.idle = nil
		delete(s.tails, t.part)
		s.ops = append(s.ops, tailOp{t: t})
		s.wake()
	})
	t.idle = timer
}

// running reports how many tails run (for tests).
func (s *wakeStreams) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tails)
}

// wake interrupts the poll goroutine's wait so that it applies s.ops.
// s.mu is held.
func (s *wakeStreams) wake() {
	if s.kick != nil {
		s.kick()
	}
}

// poll is the poll goroutine: it applies the partition changes between
// polls and hands each poll's records to their tails.
func (s *wakeStreams) poll() {
	defer close(s.done)
	active := map[int32]*tail{} // what the client consumes, by partition
	for {
		s.mu.Lock()
		ops := s.ops
		s.ops = nil
		pctx, cancel := context.WithCancel(s.ctx)
		s.kick = cancel
		s.mu.Unlock()
		s.apply(ops, active)

		fs := s.cl.PollFetches(pctx)
		cancel()
		if s.ctx.Err() != nil {
			return
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		n := 0
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if t := active[p.Partition]; t != nil && len(p.Records) > 0 {
				n += len(p.Records)
				t.deliver(p.Topic == s.prio, p.Records, s.cfg.ReplayBytes, s.cfg.StreamQueue)
			}
		})
		if ferr != nil {
			s.cfg.Logger.Warn("gateway: wake tail fetch", "err", ferr)
			// A broker in trouble can fail every fetch at once.
			if n == 0 && !pause(s.ctx) {
				return
			}
		}
	}
}

// pause waits fetchErrorPause, or less when ctx ends first (it then
// reports false).
func pause(ctx context.Context) bool {
	t := time.NewTimer(fetchErrorPause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// apply makes the tail client consume what ops say, in order.
func (s *wakeStreams) apply(ops []tailOp, active map[int32]*tail) {
	for _, op := range ops {
		p := op.t.part
		if !op.add {
			if active[p] == op.t {
				s.cl.RemoveConsumePartitions(map[string][]int32{s.normal: {p}, s.prio: {p}})
				delete(active, p)
			}
			continue
		}
		if old := active[p]; old != nil {
			// Cannot happen (a tail is removed before its partition gets
			// another), but a client must never read for two.
			s.cl.RemoveConsumePartitions(map[string][]int32{s.normal: {p}, s.prio: {p}})
		}
		pos := op.t.position()
		s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{
			s.normal: {p: kgo.NewOffset().At(pos.normal)},
			s.prio:   {p: kgo.NewOffset().At(pos.priority)},
		})
		active[p] = op.t
	}
}
