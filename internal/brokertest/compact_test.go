package brokertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestCompactionStopsAtAnOpenTransaction: compaction must not let a record
// of a transaction still open supersede the committed record of its key.
// If the transaction then aborts, read_committed readers would find the key
// with no value at all: a restore from the changelog would lose state that
// was committed. Kafka's cleaner never cleans past a partition's first
// unstable offset (LogCleanerManager.cleanableOffsets); upstream kfake
// compacted up to its active batch, open transactions included (patch 5 in
// third_party/kfake/README.md).
//
// kfake only: the helper that waits for Apache Kafka's cleaner waits for it
// to reach the active segment, which an open transaction stops it short of,
// by the very rule tested here.
func TestCompactionStopsAtAnOpenTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.NewKfake(t)
	const topic = "compacted"
	plain, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	compact := "compact"
	if _, err := kadm.NewClient(plain).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, topic); err != nil {
		t.Fatal(err)
	}
	produce := func(cl *kgo.Client, k, v string) {
		t.Helper()
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(plain, "k", "committed")
	txn, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("compact-txn"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(txn, "k", "open, then aborted")
	// Batches after the open transaction's, so that its batch is not the
	// active one, which compaction always leaves alone.
	for range 3 {
		produce(plain, "other", "x")
	}
	b.Cluster.Compact()
	if err := txn.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	produce(plain, "other", "last") // after the abort marker: every record before it is decided
	b.Cluster.Compact()

	r, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := map[string]string{}
	for got["other"] != "last" {
		fs := r.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading back (have %v): %v", got, err)
		}
		fs.EachRecord(func(rec *kgo.Record) { got[string(rec.Key)] = string(rec.Value) })
	}
	if got["k"] != "committed" {
		t.Fatalf("key k after compaction and abort: %q (present: %v), want %q", got["k"], got["k"] != "", "committed")
	}
}
