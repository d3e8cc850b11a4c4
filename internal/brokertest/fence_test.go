package brokertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestFencedZombieCannotUndoItsSuccessor: a transactional producer fenced
// by a successor with its transactional id (a projector instance frozen
// past its session, whose partition moved) must not, by aborting and
// recovering, abort the successor's transaction behind its back: whatever
// the successor's commit reports must be what read_committed readers see.
func TestFencedZombieCannotUndoItsSuccessor(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		topic := b.Prefix(t, "fence")
		adm, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...))
		if err != nil {
			t.Fatal(err)
		}
		defer adm.Close()
		if _, err := kadm.NewClient(adm).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		txid := topic + "-txn"
		newProducer := func() *kgo.Client {
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.TransactionalID(txid), kgo.DefaultProduceTopic(topic),
				kgo.TransactionTimeout(10*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			return cl
		}
		rec := func(v string) *kgo.Record { return &kgo.Record{Value: []byte(v), Partition: 0} }
		a := newProducer()
		defer a.Close()
		if err := a.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := a.ProduceSync(ctx, rec("a1")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		if err := a.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := a.ProduceSync(ctx, rec("a2")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// The successor: its init fences a (and aborts a2).
		s := newProducer()
		defer s.Close()
		if err := s.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := s.ProduceSync(ctx, rec("s1")).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// The zombie wakes: its produce fails, it aborts (and may try to
		// recover its producer id).
		perr := a.ProduceSync(ctx, rec("a3")).FirstErr()
		aerr := a.EndTransaction(ctx, kgo.TryAbort)
		t.Logf("zombie: produce %v, abort %v", perr, aerr)
		if err := a.BeginTransaction(); err == nil {
			perr2 := a.ProduceSync(ctx, rec("a4")).FirstErr()
			cerr2 := a.EndTransaction(ctx, kgo.TryCommit)
			t.Logf("zombie again: produce %v, commit %v", perr2, cerr2)
		}
		serr := s.EndTransaction(ctx, kgo.TryCommit)
		t.Logf("successor commit: %v", serr)

		r, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		end, err := kadm.NewClient(r).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		last, _ := end.Lookup(topic, 0)
		var got []string
		for seen := int64(0); seen < last.Offset-1; {
			fs := r.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			fs.EachRecord(func(rr *kgo.Record) { got = append(got, string(rr.Value)); seen = rr.Offset })
			if len(got) > 0 && got[len(got)-1] == "s1" || ctx.Err() != nil {
				break
			}
		}
		t.Logf("read_committed: %v (end offset %d)", got, last.Offset)
		hasS1 := false
		for _, v := range got {
			if v == "s1" {
				hasS1 = true
			}
		}
		if (serr == nil) != hasS1 {
			t.Errorf("the successor's commit returned %v, and read_committed readers see s1: %v", serr, hasS1)
		}
	})
}
