package projector

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// intakeProjector is a Projector with just what the intake's bounds use: a
// config, a group client (never connected: pausing is the client's own
// state) and a budget of runs.
func intakeProjector(t *testing.T, cfg Config) *Projector {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	cfg.Names = topics.Names{Prefix: "intake", Version: 1}
	cfg = cfg.withDefaults()
	cfg.Projection.Memory = projection.NewBudget(100 << 20)
	return &Projector{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), group: cl, workers: map[int32]*worker{}}
}

func records(n, size int) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Key: []byte("run"), Value: []byte(strings.Repeat("x", size))}
	}
	return rs
}

// TestQueueBoundedByBytes: a partition's fetching pauses once its queued
// records hold more than its share of MaxQueuedBytes, however few they
// are, and resumes once at most half of it is left; the share is the
// bound divided among the partitions owned.
func TestQueueBoundedByBytes(t *testing.T) {
	p := intakeProjector(t, Config{MaxQueuedBytes: 4 << 20, MaxPending: 20000})
	p.owning.Store(2) // a share of 2 MiB each
	w := &worker{p: p, part: 3, quit: make(chan struct{})}
	w.in.init()
	paused := func() bool {
		return slices.Contains(p.group.PauseFetchPartitions(nil)[p.cfg.Names.AgentEvents()], 3)
	}
	big := records(30, 64<<10) // about 1.9 MiB: under the share
	w.enqueue(batch{records: big}, false)
	if paused() {
		t.Fatalf("paused with %d bytes queued, under the share of %d", w.in.pendingBytes.Load(), p.queueShare())
	}
	more := records(4, 64<<10) // past 2 MiB, 34 records: far under MaxPending
	w.enqueue(batch{records: more}, false)
	if !paused() || !w.in.paused.Load() {
		t.Fatalf("not paused with %d bytes queued, over the share of %d", w.in.pendingBytes.Load(), p.queueShare())
	}
	w.dequeued(big[:10])
	if !paused() {
		t.Fatalf("resumed with %d bytes left, over half the share", w.in.pendingBytes.Load())
	}
	w.dequeued(big[10:])
	if paused() || w.in.paused.Load() {
		t.Fatalf("still paused with %d bytes left, under half the share", w.in.pendingBytes.Load())
	}
	w.requeued(big[:5])
	w.dequeued(big[:5])
	w.dequeued(more)
	if n, b := w.in.pendingAgent.Load(), w.in.pendingBytes.Load(); n != 0 || b != 0 {
		t.Errorf("after every record is out: %d records, %d bytes queued, want none", n, b)
	}
}

// TestFetchWithinAShare: one partition's part of a fetch, decompressed at
// eight times its size (JSON events compress to about a fifth), stays
// within half of that partition's share of MaxQueuedBytes on six
// partitions, so that a partition's queue passes its share by at most
// half of it; and it stays within franz-go's bounds.
func TestFetchWithinAShare(t *testing.T) {
	for _, limit := range []int64{128 << 20, 512 << 20, 2 << 30, 16 << 30} {
		cfg := Config{MemoryLimit: limit}.withDefaults()
		got := int64(fetchPartitionBytes(cfg.MaxQueuedBytes))
		share := cfg.MaxQueuedBytes / 6
		if got < 64<<10 || got > 1<<20 {
			t.Errorf("memory limit %d MiB: a partition's fetch of %d bytes, want 64 KiB to 1 MiB", limit>>20, got)
		}
		if 8*got > share/2 && got > 64<<10 {
			t.Errorf("memory limit %d MiB: a partition's fetch of %d bytes decompresses to about %d, more than half its share of %d",
				limit>>20, got, 8*got, share)
		}
	}
	if got := fetchPartitionBytes(1 << 20); got != 64<<10 {
		t.Errorf("at the least MaxQueuedBytes (1 MiB): %d bytes a partition, want 64 KiB", got)
	}
}

// TestGovernor: the intake pauses when the live heap passes 70% of the
// memory limit, squeezing the runs' budget, and resumes below 55%; a pause
// that does not bring the heap down ends after maxThrottle, and no pause
// follows for as long again.
func TestGovernor(t *testing.T) {
	p := intakeProjector(t, Config{})
	g := &governor{p: p, limit: 1000}
	p.gov = g
	topic := p.cfg.Names.AgentEvents()
	paused := func() bool { return slices.Contains(p.group.PauseFetchTopics(), topic) }
	budget := p.cfg.Projection.Memory
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	g.observe(690, at(0))
	if paused() {
		t.Fatalf("paused at 69%% of the limit")
	}
	g.observe(710, at(25*time.Millisecond))
	if !paused() || !g.throttling.Load() || budget.Stats().InForce != budget.Stats().Limit*5/10 {
		t.Fatalf("at 71%%: paused %v, budget in force %d of %d: want paused, squeezed to 50%%", paused(), budget.Stats().InForce, budget.Stats().Limit)
	}
	// Above pressureLow a reaped commit's changelog records keep no
	// room, nor the projections' journals.
	if !g.lean.Load() || !budget.Lean() {
		t.Fatalf("at 71%%: lean %v, the budget's %v; want both", g.lean.Load(), budget.Lean())
	}
	c := &committer{p: p}
	out := c.slab.Append(nil, "changelog", 0, projection.Changes{{Key: []byte("k"), Value: []byte("v")}})
	first := out[0]
	c.recycle(&commitJob{out: out})
	if again := c.slab.Append(nil, "changelog", 0, projection.Changes{{Key: []byte("k2")}}); again[0] == first {
		t.Errorf("under memory pressure a reaped commit's record room was kept for the next")
	}
	g.observe(600, at(50*time.Millisecond))
	if !paused() {
		t.Fatalf("resumed at 60%%, above the low mark")
	}
	g.observe(540, at(75*time.Millisecond))
	if paused() || budget.Stats().InForce != budget.Stats().Limit {
		t.Fatalf("at 54%%: paused %v, budget in force %d: want resumed, the whole budget", paused(), budget.Stats().InForce)
	}
	if g.lean.Load() || budget.Lean() {
		t.Fatalf("at 54%%: lean %v, the budget's %v; want neither: memory to spare", g.lean.Load(), budget.Lean())
	}
	if g.throttles.Load() != 1 || time.Duration(g.throttledNanos.Load()) != 50*time.Millisecond {
		t.Errorf("counted %d pauses, %v paused; want 1, 50ms", g.throttles.Load(), time.Duration(g.throttledNanos.Load()))
	}

	// A heap that stays high: the pause ends after maxThrottle, and the
	// intake then runs for as long again.
	g.observe(900, at(time.Second))
	g.observe(900, at(time.Second+maxThrottle-time.Millisecond))
	if !paused() {
		t.Fatalf("resumed before maxThrottle")
	}
	g.observe(900, at(time.Second+maxThrottle))
	if paused() {
		t.Fatalf("still paused after maxThrottle with the heap high: the projector would stall")
	}
	g.observe(900, at(time.Second+2*maxThrottle-time.Millisecond))
	if paused() {
		t.Fatalf("paused again within the grace after a forced resume")
	}
	g.observe(900, at(time.Second+2*maxThrottle))
	if !paused() {
		t.Fatalf("not paused again once the grace passed, the heap still high")
	}
}
