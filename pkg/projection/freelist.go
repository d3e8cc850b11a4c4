package projection

import "github.com/google/btree"

// The index trees of every run share two free lists of tree nodes, one per
// item type, rather than each tree keeping its own: a run has a dozen
// trees, and btree.NewG gives each a free list that holds up to 32 of its
// deleted nodes for ever, tens of MB across the runs in memory. A free list is safe for concurrent use, so
// the partitions' goroutines can share them; what they hold is bounded by
// sharedFreeNodes per type for the whole process.
const sharedFreeNodes = 1024

var (
	timedFree = btree.NewFreeListG[timed](sharedFreeNodes)
	corrFree  = btree.NewFreeListG[corrNode](sharedFreeNodes)
)

// newTimedTree returns an empty index of (time, id) entries ordered by less.
func newTimedTree(less btree.LessFunc[timed]) *btree.BTreeG[timed] {
	return btree.NewWithFreeListG(btreeDegree, less, timedFree)
}

// newCorrTree returns an empty correlation index.
func newCorrTree() *btree.BTreeG[corrNode] {
	return btree.NewWithFreeListG(btreeDegree, byCorrThenID, corrFree)
}
