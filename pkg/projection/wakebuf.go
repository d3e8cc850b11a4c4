package projection

import "github.com/canopy-dev/canopy/pkg/topics"

// A wake is mostly its snapshot, up to Limits.MaxBytes (24 KB by default),
// encoded into a buffer of its own that becomes the wake record's value. A
// projector caught up with its input publishes hundreds of wakes a second,
// and allocating their buffers was the largest share of its allocation,
// which paces the garbage collector near the memory limit. So a caller
// that knows when a wake's bytes are no longer referred to (its produce
// finished) gives the buffer back, and a later wake is encoded in it.

// maxRecycledWakeBytes bounds the capacity of the buffers a projection
// (a partition's) keeps for reuse: the wakes of two commits of a partition
// caught up with its input, at the default limits.
const maxRecycledWakeBytes = 2 << 20

// wakeBufferSize is the capacity of a new wake buffer: a snapshot at its
// budget and room for the envelope of a wake with a few dozen triggers, so
// that a recycled buffer holds nearly any wake.
func (p *Projection) wakeBufferSize() int { return p.cfg.Limits.MaxBytes + 8<<10 }

// wakeBuffer returns an empty buffer of capacity at least n for a wake's
// snapshot (snapshot.Wake.Buffer): a recycled one when the one on top is
// large enough, else a new one.
func (p *Projection) wakeBuffer(n int) []byte {
	if b, ok := takeLast(&p.wakeBufs, n); ok {
		p.wakeBufBytes -= cap(b)
		return b
	}
	return make([]byte, 0, max(n, p.wakeBufferSize()))
}

// takeLast takes the last of the slices kept in *list, emptied, when its
// capacity holds n: the pop of the projection's free lists.
func takeLast[T any](list *[][]T, n int) ([]T, bool) {
	k := len(*list)
	if k == 0 || cap((*list)[k-1]) < n {
		return nil, false
	}
	s := (*list)[k-1]
	(*list)[k-1] = nil
	*list = (*list)[:k-1]
	return s[:0], true
}

// lean reports whether memory is short of plentiful (the projection sheds
// its digest caches, or its budget says so): then no memory is kept for
// later commits, since near the limit it is heap the collector works
// around.
func (p *Projection) lean() bool { return p.shedding || p.cfg.Memory.Lean() }

// RecycleWakeBuffers gives back the buffers of wakes this projection built
// (each wake's snapshot.Info.Framed, the whole of it), once nothing refers
// to their bytes any more: the records carrying them were produced and
// their produce finished, and no reader kept them. Later wakes may be
// encoded in them, so a buffer given back while something still reads it
// would see that change under it. Only buffers of the usual size are kept
// (a wake of many triggers takes a larger one), up to a bound, and none
// while memory is short (then those kept are let go too).
func (p *Projection) RecycleWakeBuffers(bufs [][]byte) {
	if p.lean() {
		p.dropWakeMemory()
		return
	}
	size := p.wakeBufferSize()
	for _, b := range bufs {
		if c := cap(b); c >= size && c <= 2*size && p.wakeBufBytes+c <= maxRecycledWakeBytes {
			p.wakeBufs = append(p.wakeBufs, b)
			p.wakeBufBytes += c
		}
	}
}

// dropWakeMemory lets go of the wake buffers and node slices kept for
// reuse: while memory is short they are better garbage.
func (p *Projection) dropWakeMemory() {
	clear(p.wakeBufs)
	p.wakeBufs, p.wakeBufBytes = p.wakeBufs[:0], 0
	clear(p.wakeNodeSlices)
	p.wakeNodeSlices = p.wakeNodeSlices[:0]
}

// maxRecycledWakeNodes bounds the node slices a projection keeps for reuse:
// one for each wake of a commit of a partition caught up with its input
// (each some 12 KB at the default max_nodes).
const maxRecycledWakeNodes = 64

// wakeNodes returns a slice of length n for a wake's snapshot's nodes
// (snapshot.Wake.Nodes): a recycled one when the one on top is large
// enough, else a new one with room for max_nodes.
func (p *Projection) wakeNodes(n int) []topics.NodeDigest {
	if s, ok := takeLast(&p.wakeNodeSlices, n); ok {
		return s[:n]
	}
	return make([]topics.NodeDigest, n, max(n, p.cfg.Limits.MaxNodes))
}

// RecycleWakeNodes gives back the nodes of a wake's snapshot this
// projection built (its AgentTreeSnapshot.Nodes), once nothing reads them
// any more: the wake was encoded, and its snapshot's nodes dropped from it.
// Later wakes' nodes may be written in them. They are cleared here, so
// that a slice kept does not keep the digests it pointed to. None is kept
// while memory is short.
func (p *Projection) RecycleWakeNodes(nodes []topics.NodeDigest) {
	if cap(nodes) == 0 || p.lean() || cap(nodes) > p.cfg.Limits.MaxNodes || len(p.wakeNodeSlices) == maxRecycledWakeNodes {
		return
	}
	nodes = nodes[:cap(nodes)]
	clear(nodes)
	p.wakeNodeSlices = append(p.wakeNodeSlices, nodes)
}
