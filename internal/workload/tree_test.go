package workload

import "testing"

// TestTreeFits: a Tree's plans are wide enough for its nodes to fit the
// depth budget, a huge tree's too.
func TestTreeFits(t *testing.T) {
	for _, size := range []int{200, 100_000} {
		tr := NewTree(TreeSpec{RunID: "r", Nodes: size})
		if got := fits(tr.perPlan, 4); got < size-1 {
			t.Fatalf("%d nodes: plans of %d fit only %d under depth 4", size, tr.perPlan, got)
		}
	}
}
