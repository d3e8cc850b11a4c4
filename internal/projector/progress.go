package projector

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// PartitionStall is an owned partition whose records have waited longer
// than Config.StalledAfter without a commit moving its offsets past them.
type PartitionStall struct {
	Partition int32
	// For is how long its oldest waiting record has waited since the
	// partition last made progress (or since it was fetched, if later).
	For time.Duration
}

// progress tracks, per partition, the records this process fetched and
// has not committed: the oldest of them on each input topic and since when
// it waits without progress. A Supervisor shares one among its instances
// (Config.progress), so that the clock goes on when a failed instance is
// replaced: the next one fetches the same records again, which wait on.
//
// It learns from the instance's own paths only: dispatch (a batch handed
// to a worker), the worker's reaping of a successful commit (the offsets
// it committed) and a partition's takeover (the offsets its restore found,
// which say whether another process committed past what waited here).
type progress struct {
	mu    sync.Mutex
	parts map[int32]*partProgress
}

// partProgress is one partition's records, per input topic (agent events,
// human input: worker.topicIndex).
type partProgress struct {
	topics [2]topicProgress
	// owner is the ready channel of the worker whose takeover was
	// checked last: it names the worker without keeping it (and its
	// state) reachable.
	owner chan struct{}
}

// topicProgress is one input topic's partition as this process saw it.
type topicProgress struct {
	// hw is the high watermark as of this process's last fetch, next the
	// offset after the last record fetched; both -1 before a fetch.
	hw, next int64
	// from is the oldest record fetched and not committed, and since
	// when it has waited without progress; since is zero when none waits.
	from  int64
	since time.Time
}

func (t *topicProgress) waiting() bool { return !t.since.IsZero() }

// committedTo notes that the partition's offset on this topic is now at
// (or past) c: the records below it are committed. The rest still wait,
// from now: the partition progressed.
func (t *topicProgress) committedTo(c int64, now time.Time) {
	if t.waiting() && c > t.from {
		if c >= t.next {
			t.since = time.Time{}
		} else {
			t.from, t.since = c, now
		}
	}
	t.next = max(t.next, c)
}

func newProgress() *progress { return &progress{parts: make(map[int32]*partProgress)} }

// part is the entry of partition part, created empty. mu is held.
func (g *progress) part(part int32) *partProgress {
	e := g.parts[part]
	if e == nil {
		e = &partProgress{topics: [2]topicProgress{{hw: -1, next: -1}, {hw: -1, next: -1}}}
		g.parts[part] = e
	}
	return e
}

// takeover notes that w owns part now, resuming from start (per topic, -1
// when no offset was ever committed): a commit past what waited here, by
// another process while the partition was away, is progress. Once per
// worker.
func (g *progress) takeover(part int32, w *worker, start [2]int64, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.part(part)
	if e.owner == w.ready {
		return
	}
	e.owner = w.ready
	for i := range e.topics {
		if start[i] >= 0 {
			e.topics[i].committedTo(start[i], now)
		}
	}
}

// fetched notes a batch of topic i, offsets [first, next), handed to the
// partition's worker at fetched, with the partition's high watermark.
// Records fetched again (a new instance resuming where the failed one
// committed) keep the clock of their first fetch.
func (g *progress) fetched(part int32, i int, first, next, hw int64, fetched time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := &g.part(part).topics[i]
	t.hw = hw
	t.next = max(t.next, next)
	switch {
	case !t.waiting():
		t.from, t.since = first, fetched
	case first < t.from:
		t.from = first
	}
}

// committed notes a successful commit of part's offsets (per topic, -1
// when the commit has none).
func (g *progress) committed(part int32, offsets [2]int64, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.part(part)
	for i := range e.topics {
		if offsets[i] >= 0 {
			e.topics[i].committedTo(offsets[i], now)
		}
	}
}

// released notes that parts left this process in a rebalance: what it
// last knew of their lag is forgotten (kept answers -1) until it fetches
// them again. What waits stays, for a takeover to compare.
func (g *progress) released(parts []int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, part := range parts {
		if e := g.parts[part]; e != nil {
			e.topics[0].hw, e.topics[1].hw = -1, -1
		}
	}
}

// stalled returns the partitions of parts whose oldest waiting record has
// waited at least after, in partition order.
func (g *progress) stalled(parts []int32, now time.Time, after time.Duration) []PartitionStall {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []PartitionStall
	for _, part := range parts {
		e := g.parts[part]
		if e == nil {
			continue
		}
		var oldest time.Time
		for _, t := range e.topics {
			if t.waiting() && (oldest.IsZero() || t.since.Before(oldest)) {
				oldest = t.since
			}
		}
		if d := now.Sub(oldest); !oldest.IsZero() && d >= after {
			out = append(out, PartitionStall{Partition: part, For: d})
		}
	}
	return out
}

// kept is the lag of topic i's partition part as this process last knew
// it: the high watermark of its last fetch minus where the partition's
// next owner resumes (the oldest record waiting, else the next after those
// fetched); -1 when it never fetched the partition.
func (g *progress) kept(part int32, i int) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.parts[part]
	if e == nil || e.topics[i].hw < 0 {
		return -1
	}
	t := e.topics[i]
	resume := t.next
	if t.waiting() {
		resume = t.from
	}
	return max(t.hw-resume, 0)
}

// offsetsOf is a worker's offsets map (topic name to next offset) by topic
// index, -1 for a topic it has none of.
func (p *Projector) offsetsOf(offs map[string]int64) [2]int64 {
	out := [2]int64{-1, -1}
	for i, topic := range [2]string{p.agentTopic, p.humanTopic} {
		if n, ok := offs[topic]; ok {
			out[i] = n
		}
	}
	return out
}

// progressed is called by a partition's worker once a commit of its agent
// lane succeeded, with the offsets it committed.
func (p *Projector) progressed(part int32, offsets map[string]int64) {
	p.progress.committed(part, p.offsetsOf(offsets), p.cfg.Now())
}

// tookOver notes that w, restored, owns its partition now (w.start is set
// once w.ready is closed).
func (p *Projector) tookOver(w *worker) {
	p.progress.takeover(w.part, w, p.offsetsOf(w.start), p.cfg.Now())
}

// held is the partitions this instance is assigned (restored or not), or,
// once it has stopped, those it was assigned when it stopped.
func (p *Projector) held() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return p.stopped
	}
	return slices.Sorted(maps.Keys(p.workers))
}

// stalledNow returns the partitions this instance is assigned whose records
// have waited at least Config.StalledAfter without a commit moving past
// them, in partition order: none waits on a partition that keeps up. A
// stopped instance answers for the partitions it had.
func (p *Projector) stalledNow() []PartitionStall {
	return p.progress.stalled(p.held(), p.cfg.Now(), p.cfg.StalledAfter)
}

// stallText says which partitions are stalled and for how long, the first
// few of them.
func stallText(stalls []PartitionStall) string {
	const most = 4
	parts := make([]string, 0, min(len(stalls), most))
	for _, s := range stalls[:min(len(stalls), most)] {
		parts = append(parts, fmt.Sprintf("partition %d for %v", s.Partition, s.For.Round(time.Second)))
	}
	if len(stalls) > most {
		parts = append(parts, fmt.Sprintf("%d more", len(stalls)-most))
	}
	return strings.Join(parts, ", ")
}
