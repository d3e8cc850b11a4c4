package projector

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// BenchmarkEventPath is the projector's per-event work without a broker, as
// a worker does it for a backlog: records of the bench's max scenario (runs
// of 200 nodes, interleaved) are decoded and redacted, applied and gathered
// in commits of Config.MaxBatch (5,000) records; each commit encodes the
// dirty state (Prepare) and its changelog records. Sub-benchmarks:
//
//   - path: decode and redact → apply → state encoding → changelog records
//     (what the throughput issue's 6 µs/event target names);
//
//   - commit: path, plus each commit's wakes (snapshots built and encoded)
//     and its Pebble batch, i.e. everything a worker does but produce,
//     the commit's memory given back when it is done, as a worker does.
//
//   - path-activity: path, for runs that also report their activity
//     (workload.Spec.Activity: turns, calls, usage, artifacts...), about
//     a third more events per node.
//
// It reports ns/event and allocs/event (the standard ns/op and allocs/op
// are per commit of 5,000 events).
func BenchmarkEventPath(b *testing.B) {
	b.Run("path", func(b *testing.B) { benchEventPath(b, false, false) })
	b.Run("commit", func(b *testing.B) { benchEventPath(b, true, false) })
	b.Run("path-activity", func(b *testing.B) { benchEventPath(b, false, true) })
}

func benchEventPath(b *testing.B, full, activity bool) {
	const runs, nodes, batch = 24, 200, 5000
	var events []topics.Event
	start := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	for i := range runs {
		events = append(events, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%03d", i), SessionID: "bench",
			Nodes: nodes, Seed: uint64(i + 1), Start: start.Add(time.Duration(i) * time.Millisecond), Step: 10 * time.Millisecond,
			Activity: activity})...)
	}
	// Interleaved by time, as a partition of many runs has them.
	slices.SortStableFunc(events, func(a, b topics.Event) int { return cmp.Compare(a.Time.UnixMilli(), b.Time.UnixMilli()) })
	recs := make([]*kgo.Record, len(events))
	for i := range events {
		r, err := topics.EventRecord("agent-events", &events[i], "")
		if err != nil {
			b.Fatal(err)
		}
		r.Offset = int64(i)
		recs[i] = r
	}
	// Redaction as a worker has it: the built-in rules, and a count.
	policy, redactions := redact.Default(), 0
	redacted := func(string) { redactions++ }
	// Every record decoded into the same event, as the worker does.
	var scratch topics.Event
	{
		{
			db, err := pebble.Open(b.TempDir(), pebbleOptions(slog.New(slog.NewTextHandler(io.Discard, nil)), 64<<20))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			st := store.New(db, 0)
			proj, err := projection.Open(projection.Config{}, st)
			if err != nil {
				b.Fatal(err)
			}
			offsets := map[string]int64{}
			var pending projection.Pending
			var out []*kgo.Record
			var slab changelog.Slab
			var bufs [][]byte
			next, n, records := 0, 0, 0
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			now := start.Add(time.Hour)
			b.ReportAllocs()
			for b.Loop() {
				if next == len(recs) {
					// The records are used again as a new partition's: a
					// fresh store, so that nothing is a duplicate.
					b.StopTimer()
					if err := st.Wipe(); err != nil {
						b.Fatal(err)
					}
					if proj, err = projection.Open(projection.Config{}, st); err != nil {
						b.Fatal(err)
					}
					next = 0
					b.StartTimer()
				}
				end := min(next+batch, len(recs))
				for _, r := range recs[next:end] {
					ev, err := decodeRecord(r, policy, redacted, &scratch)
					if err != nil {
						b.Fatal(err)
					}
					trigs, _ := proj.Apply(ev)
					pending.Add(ev.RunID, trigs)
					offsets[r.Topic] = r.Offset + 1
				}
				n += end - next
				next = end
				if full {
					built, err := proj.Wakes(&pending, now, topics.Time{})
					if err != nil {
						b.Fatal(err)
					}
					for _, w := range built {
						// Written around its snapshot, its nodes then given
						// back, as wakeRecords does.
						v, ok := topics.WakeJSONAround(w.Info.Framed, len(w.Info.Framed)-len(w.Info.Encoded), w.Wake)
						if !ok {
							b.Fatal("a wake's envelope does not fit its room")
						}
						proj.RecycleWakeNodes(w.Wake.AgentTreeSnapshot.Nodes)
						w.Wake.AgentTreeSnapshot.Nodes = nil
						out = append(out, &kgo.Record{Topic: "wakes", Key: []byte(w.Wake.RunID), Value: v})
						bufs = append(bufs, w.Info.Framed)
					}
				}
				pending.Reset()
				changes, err := proj.Prepare(offsets)
				if err != nil {
					b.Fatal(err)
				}
				mem := proj.TakeChangeMemory()
				out = slab.Append(out, "changelog", 0, changes)
				records += len(changes)
				if full {
					if err := proj.Finish(changes, &projection.Checkpoint{Next: int64(n), At: 1}); err != nil {
						b.Fatal(err)
					}
				} else {
					// The path without the store: the state is marked clean
					// by Prepare, and nothing is read back.
					_ = changes
				}
				// The commit is done with its records and its memory, as a
				// worker's is when it reaps it (committer.recycle, settle).
				clear(out)
				out = out[:0]
				slab.Reset()
				proj.RecycleChangeMemory(mem)
				proj.RecycleWakeBuffers(bufs)
				clear(bufs)
				bufs = bufs[:0]
			}
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(n), "allocs/event")
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n), "B/event")
			b.ReportMetric(float64(records)/float64(n), "changelog-records/event")
			if redactions > 0 {
				b.Fatalf("%d redactions in a workload without secrets", redactions)
			}
		}
	}
}
