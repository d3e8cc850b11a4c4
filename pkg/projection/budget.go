package projection

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/canopy-dev/canopy/pkg/snapshot"
)

// Budget bounds the memory of hot runs, the runs kept in memory, in bytes,
// across every projection that shares it: a process's partitions share one,
// sized from its memory limit, so that an operator sizes the process rather
// than each partition. Each projection accounts its runs' estimated
// footprints (Run.Footprint) in it; when the total is over the limit after
// a commit, the projection evicts its least recently used runs down to its
// share (see Projection.Committed). Colder runs are read back from the Storage on
// their next event. A Budget is safe for concurrent use.
type Budget struct {
	limit int64
	// squeezed, when positive, is the limit in force while the process
	// is short of memory (Squeeze).
	squeezed atomic.Int64
	// lean is set while the process's memory is not plentiful (SetLean):
	// commits keep no room for the next.
	lean                    atomic.Bool
	used                    atomic.Int64
	hits, misses, evictions atomic.Int64
	nodeReads, nodeDrops    atomic.Int64
}

// NewBudget returns a budget of limit bytes of hot runs.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Squeeze sets the limit in force to share (0 to 1) of the budget's limit,
// or back to all of it with 1: a process short of memory evicts runs at
// its partitions' next commits, down to the squeezed limit.
func (b *Budget) Squeeze(share float64) {
	if b == nil {
		return
	}
	if share >= 1 {
		b.squeezed.Store(0)
		return
	}
	b.squeezed.Store(max(1, int64(float64(b.limit)*share)))
}

// SetLean says whether the process's memory is short of plentiful: then
// the projections sharing the budget keep no room from one commit for the
// next (their emptied journals), which saves allocating it again only
// where memory is to spare.
func (b *Budget) SetLean(lean bool) {
	if b != nil {
		b.lean.Store(lean)
	}
}

// Lean reports what SetLean set last; false for a nil budget.
func (b *Budget) Lean() bool { return b != nil && b.lean.Load() }

// inForce is the limit in force: squeezed, or the budget's own.
func (b *Budget) inForce() int64 {
	if s := b.squeezed.Load(); s > 0 {
		return s
	}
	return b.limit
}

// BudgetStats are a budget's figures at one moment, for metrics.
type BudgetStats struct {
	// Limit and Used are bytes: the bound, and the estimated footprint of
	// the runs in memory now; InForce is the bound in force, below Limit
	// while the process is short of memory (Squeeze).
	Limit, Used, InForce int64
	// Hits count runs found in memory when an event or a read needed them,
	// Misses runs read back from the Storage, Evictions runs dropped from memory
	// to keep the budget.
	Hits, Misses, Evictions int64
	// NodeReads count nodes of runs larger than Config.MaxHotNodesPerRun
	// read back from the Storage, NodeEvictions such nodes dropped from memory.
	NodeReads, NodeEvictions int64
}

// Stats returns the budget's figures.
func (b *Budget) Stats() BudgetStats {
	return BudgetStats{Limit: b.limit, Used: b.used.Load(), InForce: b.inForce(), Hits: b.hits.Load(), Misses: b.misses.Load(), Evictions: b.evictions.Load(),
		NodeReads: b.nodeReads.Load(), NodeEvictions: b.nodeDrops.Load()}
}

// The footprint model of a run in memory: constants fitted (non-negative
// least squares) to the heap in use after a GC over seven shapes of run,
// from 2,000 runs of 2 nodes to one of 20,000 (amd64, Go 1.26), by
// TestFootprintEstimate, which fails when the estimate strays from the
// measurement by more than a factor of 1.5 (the fit is within 15%). Refit
// them when a run's structures change. A node's
// share includes its index entries and what plans and correlation handles
// cost, which grow with the nodes in every shape measured.
const (
	footprintRun     = 2800 // a run's struct, its maps and index trees, empty
	footprintNode    = 940  // a node: its struct, map entry, index entries
	footprintID      = 24   // an event id in the dedupe window: its hash and content hash in the ring, its index slots
	footprintHistory = 76   // a history entry
	footprintRequest = 160  // an open request, its map entry and timer
	// A node of a run larger than Config.MaxHotNodesPerRun that is not in
	// memory: its entries in the run's indexes and timers, its share of
	// plans and active correlation handles (fitted by
	// TestFootprintEstimateTrimmed: 20,000 nodes, 500 in memory).
	footprintIndexed = 400
	// A node's digest cached for wakes (snapshot.Cache: the digest, its
	// encoding, its slot), at most 1.5 max_nodes + 1 per run.
	footprintDigest = 1000
	// A run's activity (activity.go): its maps and totals, and each entry
	// listed (a call, a process, an artifact... with its ids and text).
	footprintActivity      = 2048
	footprintActivityEntry = 512
)

// Footprint estimates the bytes r holds in memory (see the constants above).
// It costs O(1): counts only.
func (r *Run) Footprint() int64 {
	return footprintRun +
		footprintNode*int64(r.resident) +
		footprintIndexed*int64(len(r.nodes)-r.resident) +
		footprintID*int64(len(r.ids.ring)) +
		footprintHistory*int64(r.hist.len()) +
		footprintRequest*int64(len(r.requests)) +
		footprintDigest*int64(r.digests.Len()) +
		r.act.footprint()
}

// account brings r's share of the projection's bytes up to date. The
// budget, which the partitions share, learns of it at the next commit
// (publish): an atomic add per event on a cache line every partition's
// goroutine writes would be paid on the hot path for nothing, since only
// eviction, after a commit, reads the total.
func (p *Projection) account(r *Run) {
	f := r.Footprint()
	p.hotBytes += f - r.footprint
	r.footprint = f
	p.hotNodes += r.resident - r.hot
	r.hot = r.resident
	p.nodeReads += r.reads
	r.reads = 0
	if r.hot > p.cfg.MaxHotNodesPerRun && p.store != nil {
		if p.large == nil {
			p.large = make(map[string]*Run)
		}
		p.large[r.id] = r
	}
}

// trimRuns brings every run over Config.MaxHotNodesPerRun nodes in memory
// back under it (Run.trim). Called after a commit's Write, as evict is.
func (p *Projection) trimRuns() {
	for id, r := range p.large {
		if p.runs[id] == r {
			p.nodeDrops += int64(r.trim(p.cfg.MaxHotNodesPerRun))
			p.account(r)
		}
		if p.runs[id] != r || r.hot <= p.cfg.MaxHotNodesPerRun {
			delete(p.large, id)
		}
	}
}

// trim drops the least recently used nodes of a run with more than most in
// memory, down to 80% of most (so that it trims again only after that many
// more were used), keeping the root, which every snapshot includes, and
// every node changed since the commit in flight was prepared, which the
// store does not hold yet. A dropped node keeps its entries in the run's
// indexes and is read back from the store when it is needed (Run.get).
func (r *Run) trim(most int) (dropped int) {
	if r.resident <= most || r.store == nil || r.dirty == nil {
		return 0
	}
	target := most * 8 / 10
	old := make([]*node, 0, r.resident)
	for id, n := range r.nodes {
		if n == nil {
			continue
		}
		if _, changed := r.dirty.nodes[id]; !changed && id != r.root {
			old = append(old, n)
		}
	}
	slices.SortFunc(old, func(a, b *node) int {
		if c := cmp.Compare(a.used, b.used); c != 0 {
			return c
		}
		return cmp.Compare(a.AgentID, b.AgentID)
	})
	for _, n := range old {
		if r.resident <= target {
			break
		}
		r.nodes[n.AgentID] = nil
		r.resident--
		dropped++
	}
	return dropped
}

// settle accounts r after something that may have read nodes of it back
// from the store (timers, snapshots), and makes a failure of such a read the
// projection's sticky error.
func (p *Projection) settle(r *Run) error {
	p.account(r)
	if r.nodeErr != nil && p.err == nil {
		p.err = fmt.Errorf("projection: %w", r.nodeErr)
	}
	return p.err
}

// drop removes r from memory, and its bytes from the account.
func (p *Projection) drop(r *Run) {
	delete(p.runs, r.id)
	p.hotNodes -= r.hot
	p.hotBytes -= r.footprint
	r.footprint, r.hot = 0, 0
}

// publish adds to the shared budget what changed in this projection's
// account and counters since the last publish.
func (p *Projection) publish() {
	b := p.cfg.Memory
	if b == nil {
		return
	}
	b.used.Add(p.hotBytes - p.published)
	p.published = p.hotBytes
	b.hits.Add(p.hits)
	b.misses.Add(p.misses)
	b.evictions.Add(p.evictions)
	b.nodeReads.Add(p.nodeReads)
	b.nodeDrops.Add(p.nodeDrops)
	p.hits, p.misses, p.evictions, p.nodeReads, p.nodeDrops = 0, 0, 0, 0, 0
}

// HotBytes returns the estimated footprint of the runs this projection holds
// in memory.
func (p *Projection) HotBytes() int64 { return p.hotBytes }

// Release drops every run from memory and returns their bytes to the
// budget: for a projection no longer used (its partition revoked), whose
// runs would otherwise count against the budget for ever.
func (p *Projection) Release() {
	for _, r := range p.runs {
		p.drop(r)
	}
	p.publish()
}

// evict drops the least recently used runs from memory while too many are
// held: more than MaxHotNodes nodes (down to 80% of it), or, with a Budget,
// more bytes than the budget allows across its projections (down to this
// projection's share of 80% of the limit: its own bytes scaled by the
// factor that brings the total there, so that every partition shrinks alike
// at its next commit). Called right after a commit's Write. A run changed
// since the commit was prepared (applied meanwhile) stays, and so does the
// one used last, however large, so that a run bigger than the budget is not
// read back from the Storage for every event.
func (p *Projection) evict() {
	p.publish()
	defer p.publish()
	p.trimRuns()
	nodeTarget, byteTarget := p.hotNodes, p.hotBytes
	if p.hotNodes > p.cfg.MaxHotNodes {
		nodeTarget = p.cfg.MaxHotNodes * 8 / 10
	}
	if b := p.cfg.Memory; b != nil {
		if used, limit := b.used.Load(), b.inForce(); used > limit && used > 0 {
			byteTarget = int64(float64(p.hotBytes) * float64(limit) * 0.8 / float64(used))
		}
	}
	if b := p.cfg.Memory; b == nil || float64(b.used.Load()) < cacheAgainShare*float64(b.inForce()) {
		p.cacheAgain()
	}
	if nodeTarget == p.hotNodes && byteTarget == p.hotBytes {
		return
	}
	byAge := make([]*Run, 0, len(p.runs))
	for _, r := range p.runs {
		byAge = append(byAge, r)
	}
	slices.SortFunc(byAge, func(a, b *Run) int { return cmp.Compare(a.lastUsed, b.lastUsed) })
	for _, r := range byAge {
		if p.hotNodes <= nodeTarget && p.hotBytes <= byteTarget {
			break
		}
		if r.dirty != nil && !r.dirty.empty() || r.lastUsed == p.tick {
			continue
		}
		p.drop(r)
		p.evictions++
	}
	p.shedDigests(byteTarget, byAge)
}

// shedDigests empties the digest caches of runs, least recently used
// first, while the projection holds more than target bytes after eviction,
// and stops them caching until it is well under its budget again
// (cacheAgain). Under a backlog every run changes in every commit, so none
// can be evicted, and their caches were the largest part of them that is
// not state: a tenth of the heap in the bench's priority scenario, about
// 1 KB per node of the last snapshot, made again at each run's next wake.
// A cache only saves digesting and encoding nodes at the next build, a few
// microseconds a node.
func (p *Projection) shedDigests(target int64, byAge []*Run) {
	for _, r := range byAge {
		if p.hotBytes <= target {
			return
		}
		if p.runs[r.id] != r || r.uncached {
			continue
		}
		r.digests, r.uncached = snapshot.Cache{}, true
		p.shedding = true
		p.account(r)
	}
}

// idleDigestCommits is how many commits a run's digest cache outlives the
// run's last wake by. A cache saves encoding, at the run's next wake, the
// nodes that did not change since its last; a run not woken for this long
// has finished or gone quiet, and its cache, some 100 KB at the default
// limits, is memory the collector marks at every cycle for nothing: in the
// bench's steady state the caches of such runs were a third of the live
// heap, and the live heap paces the collector near the memory limit. A
// projector caught up with its input commits tens of times a second, so
// this is about a second of quiet; one with a backlog wakes its busy runs
// at every commit, and keeps their caches.
const idleDigestCommits = 16

// dropIdleDigests counts a commit and, every idleDigestCommits commits,
// empties the digest caches of the runs not woken in the last
// idleDigestCommits. Which caches it drops changes no wake's bytes, only
// how much of it the next build encodes again.
func (p *Projection) dropIdleDigests() {
	p.commits++
	if p.commits%idleDigestCommits != 0 {
		return
	}
	for _, r := range p.runs {
		if r.digests.Len() > 0 && p.commits-r.woken > idleDigestCommits {
			r.digests = snapshot.Cache{}
			p.account(r)
		}
	}
}

// cacheAgainShare is the share of the budget in force under which runs
// cache their digests again: below eviction's 80%, so that caching does
// not start and stop at every other commit.
const cacheAgainShare = 0.6

// cacheAgain lets the runs shedDigests stopped cache their digests again.
func (p *Projection) cacheAgain() {
	if !p.shedding {
		return
	}
	for _, r := range p.runs {
		r.uncached = false
	}
	p.shedding = false
}
