package projection

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

var benchSizes = []int{100, 1_000, 10_000, 100_000}

// projectedRun projects a generated run of size nodes and returns it with
// the wake a build is for (referring to one node and one handle) and its time.
func projectedRun(size int) (*Run, snapshot.Wake, time.Time) {
	p, _ := New(Config{})
	events := workload.Generate(workload.Spec{Nodes: size, Seed: 1})
	for i := range events {
		p.Apply(&events[i])
	}
	r, _ := p.Run("run-1")
	w := snapshot.Wake{SnapshotID: "01JM0000000000000000000000", Seq: r.Seq(), At: r.Clock(),
		AgentIDs: []string{"agent-00042"}, CorrelationIDs: []string{"corr-00042"}}
	return r, w, r.Clock().Std()
}

// BenchmarkBuild measures building one snapshot from a run of each size, the
// run projected from generated traffic (blocked, failed and leased nodes,
// requests, correlation handles). The cost must stay flat as the run grows:
// the builder reads the tops of the indexes, never the tree.
func BenchmarkBuild(b *testing.B) {
	for _, size := range benchSizes {
		r, w, now := projectedRun(size)
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			var bytes int
			for b.Loop() {
				_, info, err := snapshot.Build(r, w, snapshot.Limits{}, now)
				if err != nil {
					b.Fatal(err)
				}
				bytes = info.Bytes
			}
			b.ReportMetric(float64(bytes), "snapshot-bytes")
		})
	}
}

// BenchmarkBuildAndEncode is a wake's cost as the projector pays it:
// building the snapshot, with room before its encoding for the wake's
// envelope, and writing the envelope there, the wake's bytes its own (a
// record's value outlives the build) (the throughput issue's target: 20 µs
// at 64 nodes and 24,000 bytes, whatever the run's size).
func BenchmarkBuildAndEncode(b *testing.B) {
	for _, size := range benchSizes {
		r, w, now := projectedRun(size)
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				wake := &topics.Wake{WakeID: w.SnapshotID, SchemaVersion: topics.WakeSchemaVersion, RunID: r.ID(), Lane: topics.LaneNormal}
				w.Room = wake.EnvelopeJSONLen()
				s, info, err := snapshot.Build(r, w, snapshot.Limits{}, now)
				if err != nil {
					b.Fatal(err)
				}
				wake.AgentTreeSnapshot = *s
				var ok bool
				if buf, ok = topics.WakeJSONAround(info.Framed, w.Room, wake); !ok {
					b.Fatal("the envelope did not fit the room")
				}
			}
			b.ReportMetric(float64(len(buf)), "wake-bytes")
		})
	}
}

// BenchmarkBuildNaive is the baseline canopy's indexes avoid: collect every
// node of the run and sort it by the inclusion order at every wake.
func BenchmarkBuildNaive(b *testing.B) {
	for _, size := range benchSizes {
		r, w, now := projectedRun(size)
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				naive := newNaiveTree(r)
				if _, _, err := snapshot.Build(naive, w, snapshot.Limits{}, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApply measures applying events to the in-memory projection.
func BenchmarkApply(b *testing.B) {
	events := workload.Generate(workload.Spec{Nodes: 10_000, Seed: 1})
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		b.StopTimer()
		p, _ := New(Config{})
		b.StartTimer()
		for i := range events {
			p.Apply(&events[i])
		}
		n += len(events)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// naiveTree answers the builder from slices it sorts at construction: what a
// projection without indexes would do at every wake.
type naiveTree struct {
	*Run
	urgent, leases, signals []snapshot.Node
}

func newNaiveTree(r *Run) *naiveTree {
	t := &naiveTree{Run: r}
	for _, n := range r.nodes {
		if isUrgent(n.Status) {
			t.urgent = append(t.urgent, n.Node)
		}
		if !n.LeaseExpiresAt.IsZero() {
			t.leases = append(t.leases, n.Node)
		}
		t.signals = append(t.signals, n.Node)
	}
	byID := func(a, b snapshot.Node) int { return strings.Compare(a.AgentID, b.AgentID) }
	slices.SortFunc(t.urgent, func(a, b snapshot.Node) int {
		return cmp.Or(-cmp.Compare(a.StatusUpdatedAt.UnixMilli(), b.StatusUpdatedAt.UnixMilli()), byID(a, b))
	})
	slices.SortFunc(t.leases, func(a, b snapshot.Node) int {
		return cmp.Or(cmp.Compare(a.LeaseExpiresAt.UnixMilli(), b.LeaseExpiresAt.UnixMilli()), byID(a, b))
	})
	slices.SortFunc(t.signals, func(a, b snapshot.Node) int {
		return cmp.Or(-cmp.Compare(a.LastSignalAt.UnixMilli(), b.LastSignalAt.UnixMilli()), byID(a, b))
	})
	return t
}

func (t *naiveTree) Urgent() iter.Seq[snapshot.Node]        { return slices.Values(t.urgent) }
func (t *naiveTree) ByLeaseExpiry() iter.Seq[snapshot.Node] { return slices.Values(t.leases) }
func (t *naiveTree) ByLastSignal() iter.Seq[snapshot.Node]  { return slices.Values(t.signals) }
