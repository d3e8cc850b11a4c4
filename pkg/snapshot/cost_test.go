package snapshot_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/snapshot"
)

// maxTree is a large run at the highest limits Validate accepts for nodes and
// handles: 10,000 nodes and 1,000 handles of 160 characters, far more than
// the default byte budget holds, so that the builder must drop most of both.
func maxTree() *refTree {
	t := flatTree(10000)
	for i := range 1000 {
		t.Handles = append(t.Handles, refHandle{ID: fmt.Sprintf("%04d", i) + strings.Repeat("h", 156), At: at(-i)})
	}
	return t
}

var maxLimits = snapshot.Limits{MaxNodes: 10000, MaxCorrelationHandles: 1000}

// TestBuildCostAtMaximumLimits guards the builder's cost: fitting the byte
// budget once re-encoded the envelope for every node count and every handle
// dropped, which at these limits took hours (30s with the default max_nodes).
func TestBuildCostAtMaximumLimits(t *testing.T) {
	tree := maxTree()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := snapshot.Build(tree, goldenWake(), maxLimits, fixedNow)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("built in %v", time.Since(start))
	case <-time.After(60 * time.Second):
		t.Fatalf("Build at maximum limits still running after 60s")
	}
	var reads int
	for _, n := range tree.reads {
		reads += n
	}
	if reads > 2*maxLimits.MaxNodes+maxLimits.MaxCorrelationHandles*12 {
		t.Errorf("read %d candidates: %v", reads, tree.reads)
	}
}
