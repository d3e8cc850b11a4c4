package projector

import (
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

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
	c := &committer{p: p, prod: prod, pebble: new(sync.Mutex), write: func(j *commitJob) error { wrote = len(j.changes); return nil }}
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
