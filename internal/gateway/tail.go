package gateway

// Wake streams share their Kafka reads. A gateway instance reads each wake
// partition it serves once, whatever the number of streams:
//
//   - The hub owns one franz-go client for all tailing (read_committed,
//     control records kept so that a position advances past transaction
//     markers to exactly the last stable offset). Its partitions come and go
//     with AddConsumePartitions and RemoveConsumePartitions, applied only by
//     the hub's poll goroutine between polls, so that no fetch of a removed
//     partition is ever handed to the tail that replaced it.
//   - A tail is one partition of both wake topics: its position (the next
//     offsets), a replay buffer of its latest wakes (every run's, at most
//     Config.ReplayBytes), and its subscribers by run. A tail starts with
//     its first stream, at the committed end of both topics, and stops
//     Config.TailIdle after its last stream ended.
//   - Each poll's records are handed out under the tail's lock: appended to
//     the replay buffer and to the queues of the subscribers of the wake's
//     run, without ever waiting for a subscriber. A queue is bounded: a
//     subscriber that still has more than Config.StreamQueue wakes waiting
//     when a later poll brings it another is dropped (its stream ends with
//     a "dropped" event naming the position to resume from), so a slow
//     client never stalls the tail or the other streams. The bound is
//     checked once per poll, so that a burst one poll brings (a tail that
//     fell behind, a busy run) does not drop a stream that keeps up.
//   - A stream joins a tail at its start position: the wakes after it that
//     the replay buffer holds are written first, then its queue. A position
//     older than the buffer holds (a Last-Event-ID from long ago, or a tail
//     that started after it) is read by a short-lived catch-up client of
//     the stream's own (at most maxCatchUps at once per instance) until it
//     reaches the buffer, and then joins. Joining and handing out are under
//     the same lock, so each wake after the start is delivered exactly once.
//
// A stream thus costs a goroutine, its queue and its HTTP connection; the
// broker connections of an instance are those of its producer and its one
// tail client (one per broker it fetches from), plus a catch-up client's
// while it runs.

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// maxCatchUps bounds the catch-up clients an instance runs at once; a
// stream that needs one waits for a turn.
const maxCatchUps = 4

// itemOverhead is what a replay buffer entry costs beyond its data, for
// Config.ReplayBytes.
const itemOverhead = 96

// item is one wake record of a partition, as every stream of its run writes
// it. It is shared, never modified.
type item struct {
	prio   bool      // on the priority wake topic
	offset int64     // its offset there
	run    string    // the record key
	data   []byte    // the value as SSE "data:" lines
	after  streamPos // the tail's position just after it
}

// renderData is v as the data lines of a Server-Sent Event.
func renderData(v []byte) []byte {
	out := make([]byte, 0, len(v)+8)
	for {
		line, rest, more := cutLine(v)
		out = append(out, "data: "...)
		out = append(out, line...)
		out = append(out, '\n')
		if !more {
			return out
		}
		v = rest
	}
}

func cutLine(v []byte) (line, rest []byte, more bool) {
	for i, c := range v {
		if c == '\n' {
			return v[:i], v[i+1:], true
		}
	}
	return v, nil, false
}

// subscriber is a stream's place in a tail.
type subscriber struct {
	run     string
	notify  chan struct{} // capacity 1: q has something
	dropped chan struct{} // closed when the tail dropped it for a full queue

	mu   sync.Mutex
	q    []*item // its queue: the wakes handed to it, not yet taken
	poll uint64  // the tail's poll that last handed it a wake
}

func newSubscriber(run string) *subscriber {
	return &subscriber{run: run, notify: make(chan struct{}, 1), dropped: make(chan struct{})}
}

// take returns the queue, leaving spare (emptied) in its place.
func (s *subscriber) take(spare []*item) []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	s.q = spare[:0]
	return q
}

// tail is one partition of both wake topics, read for every stream of this
// instance whose run is in it.
type tail struct {
	part int32

	mu        sync.Mutex
	pos       streamPos // the next offsets it reads
	ringStart streamPos // the ring holds every wake from here up to pos
	ring      []*item   // the replay buffer, oldest first, from head
	head      int
	bytes     int
	subs      map[string]map[*subscriber]struct{} // by run

	polls uint64 // deliver calls, for the queue bound

	// Guarded by the hub's mu.
	refs int         // streams using it, joined or catching up
	idle *time.Timer // stops it; set while refs is 0
}

// deliver takes a poll's records of one topic of the tail's partition, in
// offset order, and hands them to the subscribers of their runs, dropping
// those that still had more than queue wakes waiting from earlier polls.
func (t *tail) deliver(prio bool, recs []*kgo.Record, replayBytes, queue int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.polls++
	for _, r := range recs {
		next := t.pos.at(prio)
		if r.Offset < *next {
			continue // already had it
		}
		*next = r.Offset + 1
		if r.Attrs.IsControl() {
			continue // a transaction marker: only the position moves
		}
		it := &item{prio: prio, offset: r.Offset, run: string(r.Key), data: renderData(r.Value), after: t.pos}
		t.push(it, replayBytes)
		for s := range t.subs[it.run] {
			s.mu.Lock()
			full := s.poll != t.polls && len(s.q) > queue
			if !full {
				s.poll = t.polls
				s.q = append(s.q, it)
			}
			s.mu.Unlock()
			if full {
				t.drop(s)
				continue
			}
			select {
			case s.notify <- struct{}{}:
			default:
			}
		}
	}
}

// push appends it to the replay buffer, forgetting the oldest wakes beyond
// replayBytes.
func (t *tail) push(it *item, replayBytes int) {
	t.ring = append(t.ring, it)
	t.bytes += len(it.data) + len(it.run) + itemOverhead
	for t.bytes > replayBytes && t.head < len(t.ring) {
		old := t.ring[t.head]
		t.ring[t.head] = nil
		t.head++
		t.bytes -= len(old.data) + len(old.run) + itemOverhead
		if p := t.ringStart.at(old.prio); *p < old.offset+1 {
			*p = old.offset + 1
		}
	}
	if t.head > 64 && t.head*2 > len(t.ring) {
		n := copy(t.ring, t.ring[t.head:])
		clear(t.ring[n:])
		t.ring, t.head = t.ring[:n], 0
	}
}

// drop ends s's membership because its queue is full. t.mu is held.
func (t *tail) drop(s *subscriber) {
	t.remove(s)
	close(s.dropped)
}

func (t *tail) remove(s *subscriber) {
	if m := t.subs[s.run]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(t.subs, s.run)
		}
	}
}

// join makes s a subscriber from pos on: it returns the wakes of s's run
// from pos that the replay buffer holds, to be written before s's queue.
// It returns false, and does not join, when pos is older than the buffer
// holds: the stream must read up to it elsewhere first.
func (t *tail) join(s *subscriber, pos streamPos) ([]*item, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pos.normal < t.ringStart.normal || pos.priority < t.ringStart.priority {
		return nil, false
	}
	var replay []*item
	for _, it := range t.ring[t.head:] {
		if it.run == s.run && it.offset >= *pos.at(it.prio) {
			replay = append(replay, it)
		}
	}
	if t.subs[s.run] == nil {
		t.subs[s.run] = map[*subscriber]struct{}{}
	}
	t.subs[s.run][s] = struct{}{}
	return replay, true
}

// leave ends s's membership, if the tail did not drop it already.
func (t *tail) leave(s *subscriber) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.remove(s)
}

// tailOp is a change to the tail client's partitions, applied by the poll
// goroutine.
type tailOp struct {
	add bool
	t   *tail
}

// hub is a gateway instance's tails and stream caps.
type hub struct {
	cfg    *Config
	cl     *kgo.Client // the tail client
	normal string
	prio   string
	stats  *kafkaStats

	mu        sync.Mutex
	tails     map[int32]*tail
	ops       []tailOp
	kick      context.CancelFunc // wakes the poll goroutine
	streams   int
	bySubject map[string]int

	catchUps chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
}

// newHub starts the tail client and its poll goroutine.
func newHub(cfg *Config, stats *kafkaStats) (*hub, error) {
	h := &hub{cfg: cfg, normal: cfg.Names.Wakes(), prio: cfg.Names.PriorityWakes(), stats: stats,
		tails: map[int32]*tail{}, bySubject: map[string]int{}, catchUps: make(chan struct{}, maxCatchUps), done: make(chan struct{})}
	var err error
	h.cl, err = kgo.NewClient(h.consumerOpts()...)
	if err != nil {
		return nil, err
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.run()
	return h, nil
}

// consumerOpts are the options of the tail client and the catch-up clients.
func (h *hub) consumerOpts(more ...kgo.Opt) []kgo.Opt {
	return append(append(h.cfg.kafkaOpts(),
		kgo.WithHooks(h.stats),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500*time.Millisecond),
	), more...)
}

// close stops the poll goroutine and the tail client. The streams must have
// ended.
func (h *hub) close() {
	h.cancel()
	<-h.done
	h.mu.Lock()
	for _, t := range h.tails {
		if t.idle != nil {
			t.idle.Stop()
		}
	}
	h.mu.Unlock()
	h.cl.Close()
}

// acquire returns the partition's tail, starting it at start if it is not
// running, and counts the caller among its users until release.
func (h *hub) acquire(part int32, start streamPos) *tail {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tails[part]
	if t == nil {
		t = &tail{part: part, pos: start, ringStart: start, subs: map[string]map[*subscriber]struct{}{}}
		h.tails[part] = t
		h.ops = append(h.ops, tailOp{add: true, t: t})
		h.wake()
	}
	t.refs++
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	return t
}

// release ends a use of t; the last one arms its idle stop.
func (h *hub) release(t *tail) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t.refs--
	if t.refs > 0 {
		return
	}
	var timer *time.Timer
	timer = time.AfterFunc(h.cfg.TailIdle, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if t.idle != timer || t.refs > 0 {
			return
		}
		t.idle = nil
		delete(h.tails, t.part)
		h.ops = append(h.ops, tailOp{t: t})
		h.wake()
	})
	t.idle = timer
}

// running reports how many tails run (for tests).
func (h *hub) running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.tails)
}

// wake interrupts the poll goroutine's wait so that it applies h.ops.
// h.mu is held.
func (h *hub) wake() {
	if h.kick != nil {
		h.kick()
	}
}

// run is the poll goroutine: it applies the partition changes between
// polls and hands each poll's records to their tails.
func (h *hub) run() {
	defer close(h.done)
	active := map[int32]*tail{} // what the client consumes, by partition
	for {
		h.mu.Lock()
		ops := h.ops
		h.ops = nil
		pctx, cancel := context.WithCancel(h.ctx)
		h.kick = cancel
		h.mu.Unlock()
		h.apply(ops, active)

		fs := h.cl.PollFetches(pctx)
		cancel()
		if h.ctx.Err() != nil {
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
				t.deliver(p.Topic == h.prio, p.Records, h.cfg.ReplayBytes, h.cfg.StreamQueue)
			}
		})
		if ferr != nil {
			h.cfg.Logger.Warn("gateway: wake tail fetch", "err", ferr)
			if n == 0 {
				// A broker in trouble can fail every fetch at once.
				t := time.NewTimer(fetchErrorPause)
				select {
				case <-t.C:
				case <-h.ctx.Done():
					t.Stop()
					return
				}
			}
		}
	}
}

// apply makes the tail client consume what ops say, in order.
func (h *hub) apply(ops []tailOp, active map[int32]*tail) {
	for _, op := range ops {
		p := op.t.part
		if !op.add {
			if active[p] == op.t {
				h.cl.RemoveConsumePartitions(map[string][]int32{h.normal: {p}, h.prio: {p}})
				delete(active, p)
			}
			continue
		}
		if old := active[p]; old != nil {
			// Cannot happen (a tail is removed before its partition gets
			// another), but a client must never read for two.
			h.cl.RemoveConsumePartitions(map[string][]int32{h.normal: {p}, h.prio: {p}})
		}
		op.t.mu.Lock()
		pos := op.t.pos
		op.t.mu.Unlock()
		h.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{
			h.normal: {p: kgo.NewOffset().At(pos.normal)},
			h.prio:   {p: kgo.NewOffset().At(pos.priority)},
		})
		active[p] = op.t
	}
}

// kafkaStats counts a gateway's franz-go clients and open broker
// connections (tests and the benchmark read it).
type kafkaStats struct {
	clients, conns, dials atomic.Int64
}

func (s *kafkaStats) OnNewClient(*kgo.Client)    { s.clients.Add(1) }
func (s *kafkaStats) OnClientClosed(*kgo.Client) { s.clients.Add(-1) }
func (s *kafkaStats) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		s.conns.Add(1)
		s.dials.Add(1)
	}
}
func (s *kafkaStats) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { s.conns.Add(-1) }
