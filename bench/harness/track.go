package harness

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Histograms are HdrHistograms (github.com/HdrHistogram/hdrhistogram-go):
// every recorded value counts, at 3 significant digits, so p99.9 and max
// are read off the whole distribution, never averaged over intervals. The
// values are microseconds (latencies) or bytes (sizes).
const (
	histMax     = int64(10 * time.Minute / time.Microsecond)
	histSigFigs = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, histSigFigs) }

func record(h *hdrhistogram.Histogram, v int64) {
	_ = h.RecordValue(min(max(v, 1), histMax)) // clamped: within range, so no error
}

// Lanes, as indexes.
const (
	laneNormal = iota
	lanePriority
)

func laneIndex(l topics.Lane) int {
	if l == topics.LanePriority {
		return lanePriority
	}
	return laneNormal
}

// flight is one waking event (or human input) between its send and its
// wake.
type flight struct {
	sched, ack, read time.Time
}

// tracker matches waking events to their wakes. An event is sent (its
// scheduled time noted), acknowledged by the broker (the append: its ack
// time noted) and read in a committed wake; either of the last two may come
// first, as they are seen by different goroutines. The latency is recorded
// once both are known.
type tracker struct {
	mu      sync.Mutex
	pending map[string]*flight
	// e2e is the latency from the append (the produce acknowledgement) to
	// the wake being read; fromSched from the time the event was scheduled
	// to be sent, which also counts any delay of the sender itself (what
	// coordinated omission would hide).
	e2e, fromSched [2]*hdrhistogram.Histogram
	readBeforeAck  int64
	matched        [2]int64
	// after, when set, is called for each matched event with its flight
	// and lane, under the tracker's lock.
	after func(key string, f *flight, lane int)
}

func newTracker() *tracker {
	t := &tracker{pending: map[string]*flight{}}
	for i := range t.e2e {
		t.e2e[i], t.fromSched[i] = newHist(), newHist()
	}
	return t
}

// key identifies an event across runs.
func key(run, eventID string) string { return run + "\x00" + eventID }

func (t *tracker) sent(k string, sched time.Time) {
	t.mu.Lock()
	t.pending[k] = &flight{sched: sched}
	t.mu.Unlock()
}

func (t *tracker) acked(k string, at time.Time) {
	t.mu.Lock()
	if f := t.pending[k]; f != nil {
		f.ack = at
	}
	t.mu.Unlock()
}

// failed forgets an event whose send failed.
func (t *tracker) failed(k string) {
	t.mu.Lock()
	delete(t.pending, k)
	t.mu.Unlock()
}

// read notes that the wake of the event k was read at at, in lane. A wake
// read before the harness has seen its event's acknowledgement (the ack
// travels back while the projector is already at work) counts as latency
// zero from the append, and is counted.
func (t *tracker) read(k string, at time.Time, lane int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.pending[k]
	if f == nil {
		return
	}
	delete(t.pending, k)
	f.read = at
	if f.ack.IsZero() {
		t.readBeforeAck++
		f.ack = at
	}
	record(t.e2e[lane], f.read.Sub(f.ack).Microseconds())
	record(t.fromSched[lane], f.read.Sub(f.sched).Microseconds())
	t.matched[lane]++
	if t.after != nil {
		t.after(k, f, lane)
	}
}

// unmatched is how many tracked events have no wake read yet.
func (t *tracker) unmatched() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
