package projector

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestStandbyIgnoresAPollFromBeforeItsTrack: records of a poll that
// returned before a partition was released and tracked again are not the
// new replica's. Applied, they would start in the middle of a commit, after
// the replica's checkpoint: the commit's first part would be missing from
// the store, and the checkpoint would move past it, so a restore trusting
// it would never read that part again.
//
// The standby's client fetches one batch per poll here, and the second
// commit is two batches: the poll that returns its second batch is
// followed, before it is applied, by a release and a track, as a partition
// assigned here and revoked again would be.
func TestStandbyIgnoresAPollFromBeforeItsTrack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.NewKfake(t)
	names := topics.Names{Prefix: b.Prefix(t, "standby"), Version: 1}
	prod, err := kgo.NewClient(append(b.Opts(), kgo.TransactionalID(names.Prefix+"-txn"), kgo.DefaultProduceTopic(names.Changelog()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 1, 1, nil, names.Changelog()); err != nil {
		t.Fatal(err)
	}
	rec := func(k, v string) *kgo.Record { return &kgo.Record{Key: []byte(k), Value: []byte(v)} }
	offsets := func() *kgo.Record { return &kgo.Record{Key: projection.OffsetsKey, Value: []byte("{}")} }
	commit := func(batches ...[]*kgo.Record) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, rs := range batches {
			if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	commit([]*kgo.Record{rec("k1", "a"), offsets()})
	commit([]*kgo.Record{rec("k2", "b")}, []*kgo.Record{rec("k3", "c"), offsets()})
	ends, err := kadm.NewClient(prod).ListEndOffsets(ctx, names.Changelog())
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(names.Changelog(), 0)

	db, err := pebble.Open(t.TempDir(), quietPebble())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := Config{Names: names, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.withDefaults()
	p := &Projector{cfg: cfg, log: cfg.Logger, db: db, partitions: 1, trust: time.Hour,
		common: append(b.Opts(), kgo.FetchMaxPartitionBytes(1))} // one batch per fetch
	s, err := newStandby(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var once sync.Once
	s.polled = func(fs kgo.Fetches) {
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == "k3" {
				once.Do(func() { s.release(0); s.track([]int32{0}) })
			}
		})
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.run(runCtx) }()
	defer func() { stop(); <-done }()

	st := store.New(db, 0)
	testenv.WaitFor(t, 20*time.Second, func() error {
		cp, ok, err := st.Checkpoint()
		if err != nil {
			return err
		}
		if !ok || cp.Next < end.Offset-1 { // the last record is the commit's marker
			return fmt.Errorf("checkpoint %d (present %v), want %d", cp.Next, ok, end.Offset-1)
		}
		return nil
	})
	for k, want := range map[string]string{"k1": "a", "k2": "b", "k3": "c"} {
		v, ok, err := st.Get([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if !ok || string(v) != want {
			t.Errorf("%s in the standby's store: %q (present %v), want %q", k, v, ok, want)
		}
	}
}
