package apachekafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/apachekafka"
	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestBroker starts a real node, commits one transaction and aborts
// another, reads the topic read_committed, compacts it, kills the node
// with SIGKILL and restarts it on the same ports and log directory: the
// committed records must all be there and nothing of the aborted one.
func TestBroker(t *testing.T) {
	if lib, ok := apachekafka.Installed(); !ok {
		testenv.Missing(t, "Apache Kafka's jars (in "+lib+")")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	b, err := apachekafka.Start(ctx, apachekafka.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Stop()
		if t.Failed() {
			t.Logf("broker log:\n%s", b.Log(80))
		}
	})
	t.Logf("started in %v on %s", time.Since(began).Round(time.Millisecond), b.Addr())

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.TransactionalID("apachekafka-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const topic = "compacted"
	adm := kadm.NewClient(cl)
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, topic); err != nil {
		t.Fatal(err)
	}
	txn := func(commit bool, from, n int) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := from; i < from+n; i++ {
			// Keys repeat every 10 records: compaction keeps the last.
			r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%10), Value: fmt.Appendf(nil, "v%d", i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn(true, 0, 100)
	txn(false, 100, 5)

	read := func() map[string]string {
		t.Helper()
		got, err := readCommitted(ctx, b.Addr(), topic)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	check := func(what string) {
		t.Helper()
		got := read()
		if len(got) != 10 {
			t.Fatalf("%s: %d keys, want 10: %v", what, len(got), got)
		}
		for k := range 10 {
			if want := fmt.Sprintf("v%d", 90+k); got[fmt.Sprintf("k%d", k)] != want {
				t.Fatalf("%s: k%d = %q, want %q (aborted records must not be read)", what, k, got[fmt.Sprintf("k%d", k)], want)
			}
		}
	}
	check("before the restart")

	b.Kill()
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	check("after SIGKILL and a restart")
	cs, err := b.Cleaned(topic)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cs[0]; !ok || c.Segments == 0 {
		t.Fatalf("Cleaned(%s) = %+v: want partition 0 with its segments", topic, cs)
	}
}

func readCommitted(ctx context.Context, addr, topic string) (map[string]string, error) {
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	adm := kadm.NewClient(rd)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	end, _ := ends.Lookup(topic, 0)
	got := map[string]string{}
	for next := int64(0); next < end.Offset; {
		fs := rd.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return nil, err
		}
		// Transaction markers take offsets too: they are read (and
		// skipped) so that the end is seen.
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				got[string(r.Key)] = string(r.Value)
			}
			next = r.Offset + 1
		})
	}
	return got, nil
}

// TestClusterIDs: no cluster id starts with '-', which the storage tool's
// command line takes for an option (seen: "argument --cluster-id/-t:
// expected one argument", once in 64 starts).
func TestClusterIDs(t *testing.T) {
	for range 10_000 {
		if id := apachekafka.ClusterID(); id[0] == '-' || len(id) != 22 {
			t.Fatalf("cluster id %q", id)
		}
	}
}
