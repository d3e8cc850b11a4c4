package gateway

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A tail is one partition of both wake topics, read for every stream of
// the instance whose run is in it; streams.go says how the parts fit.

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

	// Guarded by wakeStreams.mu.
	refs int         // streams using it, joined or catching up
	idle *time.Timer // stops it; set while refs is 0
}

// newTail is partition part's tail, starting at start.
func newTail(part int32, start streamPos) *tail {
	return &tail{part: part, pos: start, ringStart: start, subs: map[string]map[*subscriber]struct{}{}}
}

// position is where the tail reads next.
func (t *tail) position() streamPos {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pos
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
