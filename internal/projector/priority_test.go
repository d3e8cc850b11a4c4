package projector

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestPriorityLaneOvertakesBacklog: with 100,000 agent events already waiting
// when the projector starts, a human input produced afterwards is projected
// and its wake published on the priority lane long before the agent backlog
// is drained (the design card, "Wakes out": human input preempts). Then the backlog
// drains completely, every event applied once.
//
// Under the race detector the backlog is 25,000 events rather than 100,000:
// Pebble's race-mode invariant checks make the projector about ten times
// slower (100,000 events take two minutes to drain), and the priority wake
// comes out after one or two chunks of 500 either way, so 25,000 still leaves
// a margin of more than ten times.
//
// The backlog was appended an hour before the wall clock and the input at
// it: the priority wake's snapshot must say it is an hour old and stale, for
// the state behind it is that far behind the agent lane, however fresh the
// input itself is (the design card: stale is honest).
func TestPriorityLaneOvertakesBacklog(t *testing.T) {
	brokertest.Run(t, testPriorityLaneOvertakesBacklog)
}

// stageHooks keeps the priority path's stages of every human input record.
type stageHooks struct {
	NopHooks
	mu     sync.Mutex
	stages []PriorityStages
}

func (h *stageHooks) PriorityCommitted(_ int32, s PriorityStages) {
	h.mu.Lock()
	h.stages = append(h.stages, s)
	h.mu.Unlock()
}

func (h *stageHooks) got() []PriorityStages {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.stages)
}

func testPriorityLaneOvertakesBacklog(t *testing.T, b *brokertest.Broker) {
	backlog := 100_000
	if raceDetectorOn {
		backlog = 25_000
	}
	const partitions = 2
	e := newEnvOn(t, b, partitions)
	t0 := time.Now()

	// About eight runs of workload traffic (some ten events per node), cut to
	// exactly `backlog` events.
	var events []topics.Event
	perRun := map[string]int{}
	var runs []string
	for i := 0; len(events) < backlog; i++ {
		run := fmt.Sprintf("backlog-%d", i)
		evs := workload.Generate(workload.Spec{RunID: run, Nodes: backlog / 80, Seed: uint64(i + 1)})
		evs = evs[:min(len(evs), backlog-len(events))]
		events = append(events, evs...)
		perRun[run] = len(evs)
		runs = append(runs, run)
	}
	if len(runs) < 3 {
		t.Fatalf("want several runs, got %d", len(runs))
	}
	// The backlog is on the broker before the projector starts, appended
	// an hour before the wall clock (below).
	start := events[0].Time.Std()
	const behind = time.Hour
	recs := make([]*kgo.Record, 0, 10_000)
	for i := range events {
		r := rawRecord(t, e.names.AgentEvents(), &events[i], partitions)
		r.Timestamp = start.Add(-behind)
		recs = append(recs, r)
		if len(recs) == cap(recs) || i == len(events)-1 {
			e.produceRecords(recs...)
			recs = recs[:0]
		}
	}

	t.Logf("generated and produced in %v", time.Since(t0))
	t0 = time.Now()

	// The human input is for the run produced last: its agent events are at
	// the end of its partition, behind everything else there.
	target := runs[len(runs)-1]
	cfg := e.config(t.TempDir())
	// A wall clock at the start of the traffic: no timer falls due, so the
	// only wakes are the events' own.
	cfg.Now = func() time.Time { return start }
	stages := &stageHooks{}
	cfg.Hooks = stages
	p, stop := e.start(cfg)

	testenv.WaitFor(t, 60*time.Second, until(p, "the projector starts on the backlog", func() bool { return p.stats.Applied.Load() > 0 }))
	input := testEvent("human-input-1", target, "human", start, &topics.Input{InputID: "in-1", InputKind: "interrupt", Text: "stop and summarise"})
	inputRec := rawRecord(t, e.names.HumanInput(), &input, partitions)
	inputRec.Timestamp = start
	produced := time.Now()
	e.produceRecords(inputRec)

	var prioTS time.Time
	appliedAtWake := int64(-1)
	e.reader(e.names.PriorityWakes()).until(30*time.Second, "the priority wake", func(rec *kgo.Record) bool {
		appliedAtWake = p.stats.Applied.Load()
		prioTS = rec.Timestamp
		w := decodeWake(t, rec)
		if w.Lane != topics.LanePriority || w.RunID != target {
			t.Fatalf("priority wake: lane %q run %q, want priority %q", w.Lane, w.RunID, target)
		}
		if want := topics.Partition([]byte(target), partitions); rec.Partition != want {
			t.Errorf("priority wake in partition %d, want the run's %d", rec.Partition, want)
		}
		if len(w.Triggers) != 1 {
			t.Fatalf("priority wake has %d triggers, want the human input alone: %+v", len(w.Triggers), w.Triggers)
		}
		tr := w.Triggers[0]
		if tr.Kind != topics.TriggerHumanInput || tr.EventID == nil || *tr.EventID != input.ID ||
			tr.Input == nil || tr.Input.Text != "stop and summarise" || tr.Input.InputKind != "interrupt" {
			t.Fatalf("priority wake trigger = %+v (input %+v), want human_input of %s", tr, tr.Input, input.ID)
		}
		// The run's own backlog was not yet projected when the input was.
		if seq := w.AgentTreeSnapshot.AsOfEventSeq; seq > int64(perRun[target]) {
			t.Errorf("priority wake snapshot is as of event %d: the run's whole backlog of %d came first", seq, perRun[target])
		}
		if s := &w.AgentTreeSnapshot; !s.Stale || s.SnapshotAgeMs != behind.Milliseconds() {
			t.Errorf("priority wake snapshot: stale %v, age %d ms; want stale, %d ms: the agent lane it reflects is an hour behind",
				s.Stale, s.SnapshotAgeMs, behind.Milliseconds())
		}
		return true
	})
	read := time.Since(produced)
	// The priority path's stages were timed, once, and add up to no more
	// than the time from produce to their report (the fetch stage starts at
	// the record's timestamp, an hour back here, so it is left out). Not
	// to the read: the committed stage ends once the watermark is in
	// Pebble, which a read_committed reader does not wait for.
	testenv.WaitFor(t, 10*time.Second, until(p, "the priority path's stages", func() bool { return len(stages.got()) > 0 }))
	reported := time.Since(produced)
	if got := stages.got(); len(got) != 1 {
		t.Errorf("%d records' priority stages reported, want the one human input's", len(got))
	} else {
		var sum time.Duration
		for s := StageQueued; s < NumPriorityStages; s++ {
			if got[0][s] < 0 {
				t.Errorf("priority stage %s: %v", s, got[0][s])
			}
			sum += got[0][s]
		}
		t.Logf("priority stages %v (produce to read %v, to the stages' report %v)", got[0], read, reported)
		if sum > reported {
			t.Errorf("priority stages after the fetch add up to %v, more than the %v from produce to their report: %v", sum, reported, got[0])
		}
	}
	// Applied counts the human input too.
	agentAtWake := appliedAtWake - 1
	t.Logf("priority wake published with %d of %d backlog events applied", agentAtWake, backlog)
	if agentAtWake >= int64(backlog)/2 {
		t.Fatalf("priority wake came only after %d of %d backlog events were applied", agentAtWake, backlog)
	}

	// The backlog drains fully, each event applied once.
	testenv.WaitFor(t, 150*time.Second, until(p, "the backlog drains", func() bool { return p.stats.Applied.Load() >= int64(backlog)+1 }))
	t.Logf("drained in %v", time.Since(t0))
	stop()
	st := &p.stats
	if st.Records.Load() != int64(backlog)+1 || st.Duplicates.Load() != 0 || st.DeadLettered.Load() != 0 ||
		st.UnknownType.Load() != 0 || st.Rerouted.Load() != 0 || st.PriorityWakes.Load() != 1 {
		t.Fatalf("after the drain: %s; want %d records all applied once, one priority wake", statsString(st), backlog+1)
	}

	// Normal-lane wakes went on being published after the priority wake.
	normal := st.Wakes.Load() - st.PriorityWakes.Load()
	var got int64
	var lastNormal time.Time
	e.reader(e.names.Wakes()).until(60*time.Second, "the normal wakes", func(rec *kgo.Record) bool {
		got++
		if rec.Timestamp.After(lastNormal) {
			lastNormal = rec.Timestamp
		}
		return got == normal
	})
	if !prioTS.Before(lastNormal) {
		t.Fatalf("priority wake at %v is not before the last normal wake at %v", prioTS, lastNormal)
	}
}
