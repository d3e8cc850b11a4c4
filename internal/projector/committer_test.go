package projector

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestCommitReleasesItsRecords: once a commit is done, its records and
// state changes are let go at once, not when the worker reaps it a commit
// cycle later; what the reaping reads (the wakes, for the hooks) stays.
// The write sees the changes before they go.
func TestCommitReleasesItsRecords(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "commit-wakes", "commit-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	p := intakeProjector(t, Config{})
	p.hooks = NopHooks{}
	var wrote int
	c := &committer{p: p, prod: prod, pebble: new(sync.Mutex), unwritten: new(atomic.Int64), write: func(j *commitJob) error { wrote = len(j.changes); return nil }}
	wake := &topics.Wake{WakeID: "w-1", RunID: "run-1"}
	j := &commitJob{
		out: []*kgo.Record{
			{Topic: "commit-wakes", Key: []byte("run-1"), Value: []byte(`{"wake":1}`)},
			{Topic: "commit-changelog", Key: []byte("k"), Value: []byte("v")},
		},
		logAt:   1,
		changes: projection.Changes{{Key: []byte("k"), Value: []byte("v")}},
		built:   []projection.Built{{Wake: wake}},
		done:    make(chan struct{}),
	}
	c.commit(j) // at least once (txn false): no transactional id to set up
	if j.err != nil {
		t.Fatalf("commit: %v", j.err)
	}
	if wrote != 1 {
		t.Errorf("the write saw %d changes, want 1", wrote)
	}
	if len(j.out) != 2 {
		t.Fatalf("the record slice has %d entries, want its 2 kept for the next commit", len(j.out))
	}
	for i, r := range j.out {
		if r != nil {
			t.Errorf("record %d (%s) still held after the commit", i, r.Topic)
		}
	}
	if j.changes != nil {
		t.Errorf("%d state changes still held after the commit", len(j.changes))
	}
	if len(j.built) != 1 || j.built[0].Wake != wake {
		t.Errorf("the commit's wakes went with its records: %+v", j.built)
	}
}

// TestCheckpointWaitsForTheWatermark: while a priority commit's watermark
// record is in the changelog and not yet in Pebble (its transaction is
// held open at the broker), an agent commit that ends meanwhile writes its
// state changes and leaves Pebble's checkpoint where it was, since the
// checkpoint would pass the watermark record and a restore from it would
// miss it; the agent commit does not wait for the priority one. Once the
// watermark is in Pebble, the next agent commit moves the checkpoint.
func TestCheckpointWaitsForTheWatermark(t *testing.T) {
	p := intakeProjector(t, Config{Group: "cp"})
	p.hooks = NopHooks{}
	names := p.cfg.Names
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, names.Wakes(), names.PriorityWakes(), names.Changelog()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	p.common = []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}
	db, err := pebble.Open(t.TempDir(), quietPebble())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w := &worker{p: p, store: store.New(db, 0)}
	if w.proj, err = projection.Open(p.cfg.Projection, w.store); err != nil {
		t.Fatal(err)
	}
	agentProd, err := p.txnProducer(0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer agentProd.Close()
	prioProd, err := p.txnProducer(0, "-priority")
	if err != nil {
		t.Fatal(err)
	}
	defer prioProd.Close()
	agent, prio := newCommitters(p, 0, agentProd, prioProd, w)

	// The priority transaction's end is held until released.
	var held atomic.Bool
	release := make(chan struct{})
	kc.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if req.(*kmsg.EndTxnRequest).TransactionalID == "cp-0-priority" && !held.Swap(true) {
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	checkpoint := func() int64 {
		t.Helper()
		cp, ok, err := w.store.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return -1
		}
		return cp.Next
	}
	// The records a commit produced, which it lets go of when it ends.
	agentCommit := func(key string) []*kgo.Record {
		t.Helper()
		changes := projection.Changes{{Key: []byte(key), Value: []byte("v")}}
		j := &commitJob{changes: changes, out: changelog.Records(names.Changelog(), 0, changes), done: make(chan struct{})}
		recs := slices.Clone(j.out)
		agent.commit(j)
		if j.err != nil {
			t.Fatalf("agent commit: %v", j.err)
		}
		return recs
	}
	stateOf := func(key string) bool {
		t.Helper()
		_, ok, err := w.store.Get([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	agentCommit("a-1")
	before := checkpoint()
	if before < 1 {
		t.Fatalf("checkpoint after the first agent commit: %d, want past its record", before)
	}

	marks := projection.Changes{projection.WokenChange(7)}
	pj := &commitJob{changes: marks, out: changelog.Records(names.Changelog(), 0, marks), done: make(chan struct{})}
	watermark := pj.out[0]
	prio.start(pj)
	testenv.WaitFor(t, 30*time.Second, func() error {
		if !held.Load() {
			return errors.New("the priority transaction has not asked to end")
		}
		return nil
	})

	agentCommit("a-2")
	if !stateOf("a-2") {
		t.Errorf("the agent commit's state change is not in Pebble")
	}
	if got := checkpoint(); got != before {
		t.Errorf("checkpoint moved from %d to %d while the priority commit's watermark record (offset %d) was not in Pebble",
			before, got, watermark.Offset)
	}

	close(release)
	if j := prio.take(); j.err != nil {
		t.Fatalf("priority commit: %v", j.err)
	}
	if got := w.unwritten.Load(); got != 0 {
		t.Fatalf("%d priority commits still counted after the last one was written", got)
	}
	if next, ok, err := w.store.Woken(); err != nil || !ok || next != 7 {
		t.Fatalf("watermark in Pebble: %d, %v, %v; want 7", next, ok, err)
	}
	recs := agentCommit("a-3")
	if got, want := checkpoint(), recs[len(recs)-1].Offset+1; got != want {
		t.Errorf("checkpoint after the watermark is in Pebble: %d, want %d", got, want)
	}
}

// TestProduceSyncKeepsFailures: a commit's produce reports the records
// that failed, in the order they failed, and nothing of those that
// succeeded; every record is produced before it returns.
func TestProduceSyncKeepsFailures(t *testing.T) {
	cluster := brokertest.NewKfake(t, kfake.SeedTopics(1, "t")).Cluster
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ProducerBatchMaxBytes(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := &committer{prod: cl}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := &kgo.Record{Topic: "t", Value: make([]byte, 4<<10)} // over the batch limit: refused by the client
	rs := []*kgo.Record{{Topic: "t", Value: []byte("a")}, big, {Topic: "t", Value: []byte("b")}}
	failed := c.produceSync(ctx, rs)
	if len(failed) != 1 || failed[0].Record != big || !errors.Is(failed[0].Err, kerr.MessageTooLarge) {
		t.Fatalf("failed: %+v, want only the large record, too large", failed)
	}
	// Both small records are in the partition, in order, when it returns.
	if rs[0].Offset != 0 || rs[2].Offset != 1 {
		t.Errorf("offsets %d and %d, want the small records at 0 and 1", rs[0].Offset, rs[2].Offset)
	}
	if failed := c.produceSync(ctx, rs[:1]); failed != nil || failed.FirstErr() != nil {
		t.Errorf("a produce that succeeded reported %+v", failed)
	}
}
