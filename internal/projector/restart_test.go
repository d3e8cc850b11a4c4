package projector

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestRestartResumesExactly: a projector stopped gracefully and started
// again on the same data directory and group resumes exactly where its state
// ends: nothing already applied is consumed again, event ids seen before are
// recognised as duplicates, and the state it leaves in Pebble gives, run by
// run, the same snapshot as an in-memory projection fed the same events in
// order (the design card, "State": a restart resumes exactly from there).
func TestRestartResumesExactly(t *testing.T) { brokertest.Run(t, testRestartResumesExactly) }

func testRestartResumesExactly(t *testing.T, b *brokertest.Broker) {
	const partitions = 3
	e := newEnvOn(t, b, partitions)

	// Runs of several sizes (one too big for a snapshot's node budget), each
	// cut in two: the first part before the restart, the rest after.
	var first, second []topics.Event
	var runs []string
	for i, nodes := range []int{20, 35, 120, 50} {
		run := fmt.Sprintf("restart-%d", i)
		evs := workload.Generate(workload.Spec{RunID: run, Nodes: nodes, Seed: uint64(100 + i)})
		cut := len(evs) * 3 / 5
		first = append(first, evs[:cut]...)
		second = append(second, evs[cut:]...)
		runs = append(runs, run)
	}
	start := first[0].Time.Std()
	// Human input on the priority lane, before and after the restart. Its
	// time is its run's first, so where it falls among the run's agent
	// events changes nothing in the state.
	input := func(id string) topics.Event {
		return testEvent(id, runs[1], "human", start, &topics.Input{InputKind: "message", Text: "hello " + id})
	}
	humanBefore, humanAfter := input("human-1"), input("human-2")
	// Duplicates of events applied before the restart, sent again after it.
	var dups []topics.Event
	for i := 0; i < len(first); i += len(first) / 6 {
		dups = append(dups, first[i])
	}
	second = append(append(dups[:3:3], second...), dups[3:]...)

	dir := t.TempDir()
	cfg := e.config(dir)
	// A wall clock before every event: no timer fires on it, so the state is
	// a function of the events alone, as in the reference below.
	cfg.Now = func() time.Time { return start }

	p1, stop1 := e.start(cfg)
	e.produce(e.names.AgentEvents(), first...)
	e.produce(e.names.HumanInput(), humanBefore)
	testenv.WaitFor(t, 60*time.Second, until(p1, "the first part applied", func() bool { return p1.stats.Applied.Load() >= int64(len(first)+1) }))
	stop1()
	if st := &p1.stats; st.Records.Load() != int64(len(first)+1) || st.Duplicates.Load() != 0 {
		t.Fatalf("first projector: %s; want %d records, all applied", statsString(st), len(first)+1)
	}

	e.produce(e.names.AgentEvents(), second...)
	e.produce(e.names.HumanInput(), humanAfter)
	p2, stop2 := e.start(cfg)
	fresh := int64(len(second) - len(dups) + 1)
	testenv.WaitFor(t, 60*time.Second, until(p2, "the second part consumed", func() bool {
		return p2.stats.Applied.Load()+p2.stats.Duplicates.Load() >= fresh+int64(len(dups))
	}))
	stop2()
	if st := &p2.stats; st.Records.Load() != fresh+int64(len(dups)) || st.Applied.Load() != fresh ||
		st.Duplicates.Load() != int64(len(dups)) || st.DeadLettered.Load() != 0 {
		t.Fatalf("second projector: %s; want %d records: %d applied and %d duplicates, nothing consumed twice",
			statsString(st), fresh+int64(len(dups)), fresh, len(dups))
	}

	// The reference: one in-memory projection fed every event in order.
	ref, err := projection.New(projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, evs := range [][]topics.Event{first, {humanBefore}, second, {humanAfter}} {
		for i := range evs {
			ref.Apply(&evs[i])
		}
	}

	db, err := pebble.Open(filepath.Join(dir, "pebble"), quietPebble())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n, err := e.partitions()
	if err != nil {
		t.Fatal(err)
	}
	fixedNow := second[len(second)-1].Time.Std().Add(time.Minute)
	for part := range n {
		st := store.New(db, part)
		live, err := projection.Open(projection.Config{}, st)
		if err != nil {
			t.Fatal(err)
		}
		// The offsets in Pebble are the ends of the partition's input.
		offs, err := st.Offsets()
		if err != nil {
			t.Fatal(err)
		}
		wantAgent := int64(0)
		for _, ev := range append(append([]topics.Event{}, first...), second...) {
			if topics.Partition([]byte(ev.RunID), n) == part {
				wantAgent++
			}
		}
		if got, ok := offs[e.names.AgentEvents()]; wantAgent > 0 && got != wantAgent || wantAgent == 0 && ok && got != 0 {
			t.Errorf("partition %d: agent events offset %d in Pebble, want %d", part, got, wantAgent)
		}
		if topics.Partition([]byte(runs[1]), n) == part && offs[e.names.HumanInput()] != 2 {
			t.Errorf("partition %d: human input offset %d in Pebble, want 2", part, offs[e.names.HumanInput()])
		}
		for _, run := range runs {
			if topics.Partition([]byte(run), n) != part {
				if _, ok := live.Run(run); ok {
					t.Errorf("partition %d holds run %s of partition %d", part, run, topics.Partition([]byte(run), n))
				}
				continue
			}
			got, want := snapshotBytes(t, live, run, fixedNow), snapshotBytes(t, ref, run, fixedNow)
			if !bytes.Equal(got, want) {
				t.Errorf("run %s: the restarted projector's state differs from the reference:\nlive: %s\nref:  %s", run, got, want)
			}
		}
	}
}

// snapshotBytes is a run's current snapshot without its wall-clock fields.
func snapshotBytes(t *testing.T, p *projection.Projection, run string, now time.Time) []byte {
	t.Helper()
	s, _, err := p.Snapshot(run, now)
	if err != nil {
		t.Fatalf("run %s: %v", run, err)
	}
	s.GeneratedAt, s.SnapshotAgeMs, s.Stale = topics.Time{}, 0, false
	b, err := topics.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
