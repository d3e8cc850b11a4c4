package projector

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The projector's intake under memory pressure. What an instance holds
// besides its runs is mostly what it fetched and has not applied yet: the
// records queued for the workers, and the decompressed batches they point
// into. Under a backlog that was the largest share of the heap after the
// runs (a fifth of it, measured in the bench's priority scenario), and it
// grew with the partition count, since each partition queued up to
// MaxPending records of any size. So the intake is bounded twice:
//
//   - by bytes: the records queued, across the instance's partitions, are
//     bounded by MaxQueuedBytes, each partition to its share of it; past
//     its share a partition's fetching pauses, and resumes at half (as it
//     does past MaxPending records);
//   - by the heap: a governor reads the Go heap's live bytes after each
//     collection (runtime/metrics) and, above pressureHigh of the runtime's
//     memory limit, pauses every partition's agent fetching and squeezes
//     the budget of runs in memory (projection.Budget.Squeeze), so that the
//     next commits evict runs to Pebble; below pressureLow it lets go.
//     Near its limit the collector runs back to back and takes the CPU
//     from everything else, human input included: slowing the intake
//     costs throughput for a while, collapsing costs it for good.
//
// Human input is never paused: its topic is fetched by a client of its own.

// The governor's thresholds, as shares of the Go runtime's memory limit.
const (
	pressureHigh = 0.70
	pressureLow  = 0.55
	// pressureSqueeze is the share of the runs' budget kept while the
	// heap is under pressure.
	pressureSqueeze = 0.5
	// governEvery is how often the governor reads the heap: the live
	// bytes change at each collection, every few tens of milliseconds
	// under load.
	governEvery = 25 * time.Millisecond
	// maxThrottle bounds a pause of the intake: a heap whose live bytes
	// do not fall (its runs are not what holds it) must not stop the
	// projector. Past it, the intake resumes for as long again before
	// the governor may pause it anew.
	maxThrottle = 2 * time.Second
)

// recordBytes estimates what queued records hold: their keys, values and
// headers, and a kgo.Record's own size.
func recordBytes(rs []*kgo.Record) int64 {
	const perRecord = 256 // kgo.Record's struct and slice headers
	var n int64
	for _, r := range rs {
		n += perRecord + int64(len(r.Key)+len(r.Value))
		for _, h := range r.Headers {
			n += int64(len(h.Key) + len(h.Value))
		}
	}
	return n
}

// fetchPartitionBytes is what one partition's part of a fetch may hold
// (kgo.FetchMaxPartitionBytes): a 128th of MaxQueuedBytes, between 64 KiB
// and franz-go's default of 1 MiB; 256 KiB at the default memory limit.
// The queues' bound is checked as a fetch's records join them, so each
// partition may pass its share by one fetch; and the bytes fetched are
// compressed, while the queues hold them decompressed. A batch of JSON
// events decompresses to several times its size: at franz-go's default a
// partition of six took two to three times its share (the heap profile of
// the bench's priority scenario at its end: 64-97 MB of fetched records
// against a bound of 32 MiB; 30-41 MB at a 128th).
func fetchPartitionBytes(maxQueued int64) int32 {
	return int32(min(max(maxQueued/128, 64<<10), 1<<20))
}

// queueShare is a partition's share of Config.MaxQueuedBytes: the bound
// divided among the partitions the instance owns now.
func (p *Projector) queueShare() int64 {
	return p.cfg.MaxQueuedBytes / max(1, p.owning.Load())
}

// governor pauses and resumes the instance's agent intake by the heap's
// live bytes (see above). Projector.Run starts its run and waits for it.
type governor struct {
	p *Projector
	// limit is the Go runtime's memory limit; the governor does nothing
	// without one (a test's process, which holds its brokers' data too).
	limit int64

	mu        sync.Mutex
	throttled bool
	since     time.Time // when the current pause, or the grace after a forced resume, began
	grace     bool      // resumed by maxThrottle: no pause until it passes
	// throttles and throttledNanos count the pauses and their time
	// (Counts.Throttles, Counts.Throttled); throttling mirrors throttled.
	throttles, throttledNanos atomic.Int64
	throttling                atomic.Bool
	// lean is set while the live heap is above pressureLow of the limit:
	// commits keep no room for the next (committer.recycle, and the
	// projections through Budget.SetLean). Room kept saves allocating it
	// again; near the limit it is heap the collector must work around.
	lean atomic.Bool
}

func newGovernor(p *Projector) *governor {
	return &governor{p: p, limit: debug.SetMemoryLimit(-1)}
}

// setLean notes whether the live heap leaves memory to spare.
func (g *governor) setLean(lean bool) {
	if g.lean.Swap(lean) != lean {
		g.p.cfg.Projection.Memory.SetLean(lean)
	}
}

// run reads the heap every governEvery until ctx ends, then lets go of the
// intake.
func (g *governor) run(ctx context.Context) {
	if g.limit <= 0 || g.limit == math.MaxInt64 {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(governEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.set(false, time.Now())
			return
		case now := <-t.C:
			metrics.Read(sample)
			if sample[0].Value.Kind() != metrics.KindUint64 {
				return // not this runtime's metric: nothing to govern by
			}
			g.observe(int64(sample[0].Value.Uint64()), now)
		}
	}
}

// observe decides on one reading of the live heap.
func (g *governor) observe(live int64, now time.Time) {
	g.mu.Lock()
	throttled, since, grace := g.throttled, g.since, g.grace
	g.mu.Unlock()
	high, low := int64(pressureHigh*float64(g.limit)), int64(pressureLow*float64(g.limit))
	g.setLean(live >= low)
	switch {
	case throttled && (live < low || now.Sub(since) >= maxThrottle):
		forced := live >= low
		g.set(false, now)
		if forced {
			g.mu.Lock()
			g.grace, g.since = true, now
			g.mu.Unlock()
			g.p.log.Warn("memory pressure: the intake resumes although the live heap is still high (what holds it is not runs)",
				"live_bytes", live, "memory_limit", g.limit)
		}
	case !throttled && live > high && (!grace || now.Sub(since) >= maxThrottle):
		g.set(true, now)
	}
}

// set pauses (on) or resumes the agent intake, and squeezes or restores
// the runs' budget.
func (g *governor) set(on bool, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.throttled == on {
		return
	}
	topic := g.p.cfg.Names.AgentEvents()
	if on {
		g.throttled, g.since, g.grace = true, now, false
		g.throttles.Add(1)
		g.p.group.PauseFetchTopics(topic)
		g.p.cfg.Projection.Memory.Squeeze(pressureSqueeze)
	} else {
		g.throttled = false
		g.throttledNanos.Add(int64(now.Sub(g.since)))
		g.p.cfg.Projection.Memory.Squeeze(1)
		g.p.group.ResumeFetchTopics(topic)
	}
	g.throttling.Store(on)
}
