package projector

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// The throughput benchmarks: how fast the projector gets a backlog of agent
// events through (decode, project, build and publish wakes, commit to
// Pebble), against the ceiling of a group consumer that only counts the same
// records from the same kind of broker. Both measure from the client's
// creation (group join included) to the last record, with every record
// already on the broker. bench/RESULTS.md has the figures.

const (
	benchPartitions = 4
	benchRuns       = 50
	benchNodes      = 400 // about 4,000 events per run, 200,000 in all
)

// benchData is the workload, encoded once per process.
var benchData = sync.OnceValues(func() ([]*kgo.Record, time.Time) {
	var recs []*kgo.Record
	var end time.Time
	for i := 0; i < benchRuns; i++ {
		evs := workload.Generate(workload.Spec{RunID: fmt.Sprintf("bench-run-%02d", i), SessionID: "bench",
			Nodes: benchNodes, Seed: uint64(i + 1)})
		for j := range evs {
			r, err := topics.EventRecord("", &evs[j], "")
			if err != nil {
				panic(err)
			}
			r.Partition = topics.Partition(r.Key, benchPartitions)
			recs = append(recs, r)
			if t := evs[j].Time.Std(); t.After(end) {
				end = t
			}
		}
	}
	return recs, end
})

// benchBroker starts a broker on loopback with canopy's topics and the
// workload on the agent events topic; it is closed when the benchmark
// function returns.
func benchBroker(b *testing.B) (brokers []string, names topics.Names, events int, end time.Time) {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	brokers, names = c.ListenAddrs(), topics.Names{Prefix: "bench", Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := CreateTopics(ctx, kadm.NewClient(cl), names, benchPartitions, 1); err != nil {
		b.Fatal(err)
	}
	recs, end := benchData()
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		cp := *r
		cp.Topic = names.AgentEvents()
		out[i] = &cp
	}
	if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	return brokers, names, len(out), end
}

// BenchmarkProjector: per iteration a fresh data directory and group, a
// projector started on the backlog, and the time until it has applied every
// event.
func BenchmarkProjector(b *testing.B) {
	brokers, names, events, end := benchBroker(b)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var elapsed time.Duration
	var wakes int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cfg := Config{Brokers: brokers, Names: names, DataDir: filepath.Join(b.TempDir(), "data"),
			Group: fmt.Sprintf("bench-projector-%d-%d", b.N, i), Logger: quiet,
			// The wall clock stands at the end of the workload, as in a
			// live system keeping up: no timer of it falls due on a clock
			// months later.
			Now: func() time.Time { return end }}
		ctx, cancel := context.WithCancel(context.Background())
		b.StartTimer()
		start := time.Now()
		p, err := New(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- p.Run(ctx) }()
		tick := time.NewTicker(time.Millisecond)
		for p.Stats.Applied.Load() < int64(events) {
			select {
			case <-tick.C:
			case err := <-errc:
				b.Fatalf("projector stopped early: %v", err)
			}
		}
		took := time.Since(start)
		b.StopTimer()
		tick.Stop()
		elapsed += took
		wakes += p.Stats.Wakes.Load()
		cancel()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		if n := p.Stats.Records.Load(); n != int64(events) {
			b.Fatalf("%d records projected, want %d", n, events)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(events)*float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(wakes)/elapsed.Seconds(), "wakes/s")
}

// BenchmarkRawConsume: the ceiling, a group consumer of the same records that
// only counts them, per iteration in a fresh group.
func BenchmarkRawConsume(b *testing.B) {
	brokers, names, events, _ := benchBroker(b)
	var elapsed time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(fmt.Sprintf("bench-raw-%d-%d", b.N, i)),
			kgo.ConsumeTopics(names.AgentEvents()), kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for n < events {
			fs := cl.PollRecords(ctx, 10000)
			if err := ctx.Err(); err != nil {
				b.Fatalf("%d of %d records: %v", n, events, err)
			}
			n += fs.NumRecords()
		}
		elapsed += time.Since(start)
		b.StopTimer()
		cl.Close()
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(float64(events)*float64(b.N)/elapsed.Seconds(), "events/s")
}
