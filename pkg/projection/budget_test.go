package projection

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestFootprintEstimate: Run.Footprint, which the memory budget evicts by,
// stays within a factor of 1.5 of the heap the runs really hold, for many
// small runs, some middling ones and one large one. The heap is measured
// after a GC, before and after applying the events (the events themselves
// are allocated before the first measurement and kept alive past the
// second).
func TestFootprintEstimate(t *testing.T) {
	for _, shape := range []struct{ runs, nodes int }{{400, 5}, {40, 200}, {1, 20_000}, {100, 50}, {10, 1000}, {4, 5000}, {2000, 2}} {
		t.Run(fmt.Sprintf("%dx%d", shape.runs, shape.nodes), func(t *testing.T) {
			var events [][]topics.Event
			for i := range shape.runs {
				events = append(events, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%04d", i), Nodes: shape.nodes, Seed: uint64(i + 1)}))
			}
			p, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			before := heapInUse()
			for _, evs := range events {
				for i := range evs {
					p.Apply(&evs[i])
				}
			}
			measured := heapInUse() - before
			var estimated int64
			var nodes, ids, hist, reqs, handles int
			for _, r := range p.runs {
				estimated += r.Footprint()
				nodes, ids, hist, reqs, handles = nodes+len(r.nodes), ids+len(r.ids.ring), hist+r.hist.len(), reqs+len(r.requests), handles+len(r.corrAt)
			}
			plans := 0
			for _, r := range p.runs {
				plans += len(r.plans)
			}
			t.Logf("nodes %d ids %d history %d requests %d handles %d plans %d", nodes, ids, hist, reqs, handles, plans)
			if estimated != p.HotBytes() {
				t.Errorf("HotBytes %d, the runs' footprints sum to %d", p.HotBytes(), estimated)
			}
			ratio := float64(estimated) / float64(measured)
			t.Logf("%d runs of %d nodes: measured %d bytes, estimated %d (%.2fx)", shape.runs, shape.nodes, measured, estimated, ratio)
			if ratio < 1/1.5 || ratio > 1.5 {
				t.Errorf("estimated %d bytes for %d measured (%.2fx): recalibrate the footprint constants (budget.go)", estimated, measured, ratio)
			}
			runtime.KeepAlive(events)
			runtime.KeepAlive(p)
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
