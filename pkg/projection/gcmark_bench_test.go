package projection

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
)

// BenchmarkGCMark measures what runs in memory cost the garbage collector:
// the time of a full collection (runtime.GC, which marks every live
// object) over a projection holding runs of the bench's priority scenario
// (200 nodes each, their windows full), less the same collection over an
// empty heap, per run. Under a backlog the projector collects every second
// or so near its memory limit, and each collection marks every run: this
// is the work each run adds to each. "cached" also holds each run's digest
// cache, as its last wake left it.
func BenchmarkGCMark(b *testing.B) {
	const runs, nodes = 200, 200
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
			empty := gcTime(20)
			p, err := New(Config{})
			if err != nil {
				b.Fatal(err)
			}
			for i := range runs {
				id := fmt.Sprintf("run-%03d", i)
				for _, ev := range workload.Generate(workload.Spec{RunID: id, Nodes: nodes, Seed: uint64(i + 1)}) {
					p.Apply(&ev)
				}
				if cached {
					r, _ := p.Run(id)
					if _, _, err := snapshot.Build(r, snapshot.Wake{SnapshotID: "01JM0000000000000000000000", Seq: r.Seq(), At: r.Clock()}, snapshot.Limits{}, r.Clock().Std()); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			var total time.Duration
			for b.Loop() {
				total += gcTime(1)
			}
			b.StopTimer()
			per := (total/time.Duration(b.N) - empty)
			b.ReportMetric(float64(per.Microseconds())/runs, "µs-marked/run")
			runtime.KeepAlive(p)
		})
	}
}

// gcTime is the mean time of n full collections.
func gcTime(n int) time.Duration {
	start := time.Now()
	for range n {
		runtime.GC()
	}
	return time.Since(start) / time.Duration(n)
}
