package projector

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestHandoffWithStandby: instance A owns every partition; B joins with
// standby replicas on, takes half, and keeps warm copies of A's half from
// the changelog; the group's assignment, read by a third party, names the
// owner of every run with the address it advertises; then A stops and B
// takes A's partitions over, restoring only what the standby had not seen.
// Throughout, the committed wakes, the dead-letter topic and the changelog's
// state must be exactly what a projection that never moved computes.
func TestHandoffWithStandby(t *testing.T) { brokertest.Run(t, testHandoffWithStandby) }

func testHandoffWithStandby(t *testing.T, broker *brokertest.Broker) {
	const partitions = 4
	e := newEnvOn(t, broker, partitions)
	ref := projectortest.NewReference(partitions)
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond) // no timer falls due
	var events []topics.Event
	for i := range 12 {
		events = append(events, workload.Generate(workload.Spec{RunID: fmt.Sprintf("handoff-%02d", i), Nodes: 30,
			Seed: uint64(i + 1), Start: start.Add(time.Duration(i) * time.Millisecond), Step: 10 * time.Millisecond})...)
	}
	// Each third of the events goes out at one stage; each run keeps its
	// order since the stages are cut from one slice.
	third := len(events) / 3
	stage := func(i int) {
		part := events[i*third : min((i+1)*third, len(events))]
		if i == 2 {
			part = events[2*third:]
		}
		for j := range part {
			ref.Apply(t, &part[j])
		}
		e.produce(e.names.AgentEvents(), part...)
	}
	applied := func(ps ...*Projector) int64 {
		var n int64
		for _, p := range ps {
			n += p.stats.Applied.Load()
		}
		return n
	}

	cfgA := e.config(t.TempDir())
	cfgA.AdvertiseAddr = "a.test:7001"
	a, stopA := e.start(cfgA)
	stage(0)
	testenv.WaitFor(t, 60*time.Second, until(a, "A applies the first third", func() bool { return applied(a) >= int64(third) }))

	cfgB := e.config(t.TempDir())
	cfgB.AdvertiseAddr, cfgB.Standby = "b.test:7002", true
	b, stopB := e.start(cfgB)
	testenv.WaitFor(t, 60*time.Second, until(b, "A and B share the partitions", func() bool {
		oa, ob := a.Owned(), b.Owned()
		return len(oa) > 0 && len(ob) > 0 && len(oa)+len(ob) == partitions
	}))
	ownedByA := a.Owned()

	// Anyone can read who owns what.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(e.client)
	var assign map[int32]cluster.Member
	testenv.WaitFor(t, 30*time.Second, until(nil, "the group's assignment lists every partition", func() bool {
		var err error
		assign, err = cluster.Assignment(ctx, adm, cfgA.Group, e.names)
		return err == nil && len(assign) == partitions
	}))
	for part, m := range assign {
		want := cfgB.AdvertiseAddr
		if slices.Contains(ownedByA, part) {
			want = cfgA.AdvertiseAddr
		}
		if m.Addr != want || m.ClientID != "canopy-projector" {
			t.Errorf("partition %d: owner %+v, want client id canopy-projector at %s", part, m, want)
		}
	}
	for _, run := range ref.Runs() {
		m, part, err := cluster.Owner(assign, run, partitions)
		if err != nil || part != topics.Partition([]byte(run), partitions) || m.Addr != assign[part].Addr {
			t.Errorf("Owner(%s) = %+v, %d, %v", run, m, part, err)
		}
	}
	if _, _, err := cluster.Owner(map[int32]cluster.Member{}, "x", partitions); err == nil {
		t.Error("Owner found an owner in an empty assignment")
	}

	stage(1)
	testenv.WaitFor(t, 60*time.Second, until(b, "the second third is applied and B's standby replicas follow A", func() bool {
		return applied(a, b) >= int64(2*third) && b.stats.StandbyRecords.Load() > 0
	}))

	// A leaves; B restores A's partitions from where its standby replicas
	// are, which is at most a few commits behind.
	changelogEnds, err := adm.ListEndOffsets(ctx, e.names.Changelog())
	if err != nil {
		t.Fatal(err)
	}
	var changelogOfA int64
	for _, part := range ownedByA {
		o, _ := changelogEnds.Lookup(e.names.Changelog(), part)
		changelogOfA += o.Offset
	}
	restoredBefore := b.stats.RestoredRecords.Load()
	stopA()
	testenv.WaitFor(t, 60*time.Second, until(b, "B owns every partition", func() bool { return len(b.Owned()) == partitions }))
	restored := b.stats.RestoredRecords.Load() - restoredBefore
	t.Logf("B restored %d changelog records to take over A's partitions, whose changelog holds %d", restored, changelogOfA)
	if restored*2 > changelogOfA {
		t.Errorf("B restored %d of the %d changelog records of A's partitions: the standby replicas did not keep them warm",
			restored, changelogOfA)
	}

	stage(2)
	total := int64(len(events))
	testenv.WaitFor(t, 60*time.Second, until(b, "every event is applied", func() bool { return applied(a, b) >= total }))
	stopB()
	if d := a.stats.Duplicates.Load() + b.stats.Duplicates.Load(); d != 0 {
		t.Errorf("%d events were applied as duplicates: the handoff lost track of offsets", d)
	}
	e.checkCommitted(ref, true)
}
