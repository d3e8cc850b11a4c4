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

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/store"
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

// benchBroker starts a broker on loopback; it is closed when the benchmark
// function returns. load creates canopy's topics under a new prefix, with the
// workload on the agent events topic: a projector's changelog outlives it, so
// each fresh projector needs topics of its own.
func benchBroker(b *testing.B) (brokers []string, load func() topics.Names, events int, end time.Time) {
	b.Helper()
	return benchLoad(b, brokertest.NewKfake(b).Addrs)
}

// benchLoad is benchBroker's topics and workload on the given brokers.
func benchLoad(b *testing.B, brokers []string) ([]string, func() topics.Names, int, time.Time) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	recs, end := benchData()
	n := 0
	load := func() topics.Names {
		n++
		names := topics.Names{Prefix: fmt.Sprintf("bench%d-%d", n, time.Now().UnixNano()), Version: 1}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, benchPartitions, 1); err != nil {
			b.Fatal(err)
		}
		out := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			cp := *r
			cp.Topic = names.AgentEvents()
			out[i] = &cp
		}
		if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		return names
	}
	return brokers, load, len(recs), end
}

// BenchmarkProjector: per iteration a fresh data directory and group, a
// projector started on the backlog, and the time until it has applied every
// event; with transactions (the default) and at least once.
func BenchmarkProjector(b *testing.B) {
	for _, atLeastOnce := range []bool{false, true} {
		b.Run(fmt.Sprintf("transactions=%v", !atLeastOnce), func(b *testing.B) { benchProjector(b, atLeastOnce) })
	}
}

func benchProjector(b *testing.B, atLeastOnce bool) {
	brokers, load, events, end := benchBroker(b)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var elapsed time.Duration
	var wakes int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		names := load()
		cfg := Config{Kafka: kafkaconn.Conn{Brokers: brokers}, Names: names, DataDir: filepath.Join(b.TempDir(), "data"),
			Group: fmt.Sprintf("bench-projector-%d-%d", b.N, i), Logger: quiet, AtLeastOnce: atLeastOnce,
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
		for p.stats.Applied.Load() < int64(events) {
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
		wakes += p.stats.Wakes.Load()
		cancel()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		if n := p.stats.Records.Load(); n != int64(events) {
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
	brokers, load, events, _ := benchBroker(b)
	names := load()
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

// BenchmarkRestore: how fast a partition's state comes back from the
// changelog into an empty store, against reading the same changelog
// partition with a plain consumer (BenchmarkRestore/read). The changelog is
// what a projector wrote for the benchmark workload.
//
// It runs on both brokers of the matrix (CANOPY_TEST_BROKERS), each with its
// own read baseline: BenchmarkRestore/kafka/restore against
// BenchmarkRestore/kafka/read.
func BenchmarkRestore(b *testing.B) {
	for _, kind := range brokertest.Kinds() {
		b.Run(kind, func(b *testing.B) { benchRestore(b, brokertest.New(b, kind).Addrs) })
	}
}

func benchRestore(b *testing.B, addrs []string) {
	brokers, load, events, end := benchLoad(b, addrs)
	names := load()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{Kafka: kafkaconn.Conn{Brokers: brokers}, Names: names, DataDir: filepath.Join(b.TempDir(), "data"), Group: "g-" + names.Prefix,
		Logger: quiet, Now: func() time.Time { return end }}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	for tick := time.NewTicker(time.Millisecond); p.stats.Applied.Load() < int64(events); <-tick.C {
	}
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	const part = 0
	b.Run("restore", func(b *testing.B) {
		var records int64
		var elapsed time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			db, err := pebble.Open(b.TempDir(), pebbleOptions(quiet, defaultMemTableSize))
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			res, err := changelog.Restore(context.Background(), changelog.Config{ClientOpts: opts, Topic: names.Changelog()},
				part, store.New(db, part))
			if err != nil {
				b.Fatal(err)
			}
			elapsed += time.Since(start)
			records += res.Records
			b.StopTimer()
			db.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
	})
	b.Run("read", func(b *testing.B) {
		var records int64
		var elapsed time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{names.Changelog(): {part: kgo.NewOffset().AtStart()}}))...)
			if err != nil {
				b.Fatal(err)
			}
			adm := kadm.NewClient(cl)
			ends, err := adm.ListCommittedOffsets(context.Background(), names.Changelog())
			if err != nil {
				b.Fatal(err)
			}
			o, _ := ends.Lookup(names.Changelog(), part)
			for done := false; !done; {
				fs := cl.PollFetches(context.Background())
				fs.EachRecord(func(r *kgo.Record) {
					records++
					done = done || r.Offset+2 >= o.Offset // the last record, then the commit marker
				})
			}
			elapsed += time.Since(start)
			cl.Close()
		}
		b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
	})
}
