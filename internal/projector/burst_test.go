package projector

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestBurstsMakeBoundedWakes: one record that raises thousands of triggers
// (a chain of 7,004 nodes created from its leaf up, whose root settles
// 7,000 nodes past the depth guard at once: over 1 MB of triggers) and
// 8,000 leases falling due at one instant of the projector's clock, on
// both brokers with their default record limits. Every wake produced is
// within the bound (its parts each at most -max-wake-bytes and 256
// triggers), every trigger is in exactly one of them, a control run in
// the same partition and one in another get their wakes within seconds,
// and the exactly-once checks hold: no trigger lost, no wake id twice,
// the state is replay's.
func TestBurstsMakeBoundedWakes(t *testing.T) {
	brokertest.Run(t, testBurstsMakeBoundedWakes)
}

func testBurstsMakeBoundedWakes(t *testing.T, b *brokertest.Broker) {
	const partitions = 2
	e := newEnvOn(t, b, partitions)
	var same, other []string
	for i := 0; len(same) < 3 || len(other) < 1; i++ {
		run := fmt.Sprintf("run-burst-%d", i)
		if topics.Partition([]byte(run), partitions) == 0 {
			same = append(same, run)
		} else {
			other = append(other, run)
		}
	}
	chainRun, leaseRun, sameCtl, otherCtl := same[0], same[1], same[2], other[0]

	cfg := e.config(t.TempDir()) // the wall clock: the leases fall due by it
	p, stop := e.start(cfg)
	defer stop()
	ref := projectortest.NewReference(partitions)

	const chainNodes, leases = 7004, 8000
	guards := chainNodes - projection.DefaultMaxDepth
	chain := workload.Burst{RunID: chainRun, Nodes: chainNodes, Seed: 1}.LeafFirstChain()
	// The leases' events are stamped a little in the past, so that they
	// fall due some seconds from now on the projector's clock, all at once;
	// not the heartbeat after them, which would fire them by event time.
	stepped := time.Duration(2*leases+1) * time.Millisecond
	start := time.Now().Add(-time.Minute - stepped + 8*time.Second).UTC().Truncate(time.Millisecond)
	leaseEvs, due := workload.Burst{RunID: leaseRun, Nodes: leases, Start: start, Seed: 2}.LeasesDueTogether()
	leaseEvs = leaseEvs[:len(leaseEvs)-1]
	bursts := append(chain, leaseEvs...)
	for i := range bursts {
		ref.Apply(t, &bursts[i])
	}
	e.produce(e.names.AgentEvents(), bursts...)

	// Right behind them: a control run in the bursts' partition and one in
	// another, each a result that wakes its conductor.
	ctlAt := time.Now().UTC().Truncate(time.Millisecond)
	control := append(poisonEvents(sameCtl, ctlAt, 0), poisonEvents(otherCtl, ctlAt, 0)...)
	for i := range control {
		ref.Apply(t, &control[i])
	}
	produced := time.Now()
	e.produce(e.names.AgentEvents(), control...)
	arrived := map[string]time.Duration{}
	e.wakes().until(90*time.Second, func(w *topics.Wake) bool {
		if w.RunID == sameCtl || w.RunID == otherCtl {
			if _, ok := arrived[w.RunID]; !ok {
				arrived[w.RunID] = time.Since(produced)
			}
		}
		return len(arrived) == 2
	})
	t.Logf("control wakes arrived %v (same partition as the bursts) and %v (another) after their events were produced",
		arrived[sameCtl].Round(time.Millisecond), arrived[otherCtl].Round(time.Millisecond))
	for run, d := range arrived {
		if d > 30*time.Second {
			t.Errorf("control run %s's wake took %v: a burst held its partition up", run, d)
		}
	}

	// Every trigger of both bursts, each once, in wakes within the bound.
	wakeTopics := []string{e.names.Wakes(), e.names.PriorityWakes()}
	seen := map[string]map[string]int{chainRun: {}, leaseRun: {}}
	complete := func() bool {
		return len(seen[chainRun]) == guards && len(seen[leaseRun]) == leases
	}
	max := cfg.Projection.WithDefaults()
	var wakes, parts int
	e.reader(wakeTopics...).until(120*time.Second, "every trigger of both bursts", func(r *kgo.Record) bool {
		w := decodeWake(t, r)
		wakes++
		if w.Part != nil {
			parts++
		}
		if len(r.Value) > max.MaxWakeBytes {
			t.Errorf("wake %s of run %s: %d bytes, over the bound of %d", w.WakeID, w.RunID, len(r.Value), max.MaxWakeBytes)
		}
		if len(w.Triggers) > max.MaxWakeTriggers {
			t.Errorf("wake %s of run %s: %d triggers, over the bound of %d", w.WakeID, w.RunID, len(w.Triggers), max.MaxWakeTriggers)
		}
		for _, tr := range w.Triggers {
			switch {
			case w.RunID == chainRun && tr.Kind == topics.TriggerGuard,
				w.RunID == leaseRun && tr.Kind == topics.TriggerLeaseExpired:
				seen[w.RunID][tr.AgentID]++
			}
		}
		return complete()
	})
	for run, agents := range seen {
		for agent, n := range agents {
			if n != 1 {
				t.Errorf("run %s: agent %s's trigger is in %d wakes, want 1", run, agent, n)
			}
		}
	}
	t.Logf("%d wakes read, %d of them parts of a split", wakes, parts)
	testenv.WaitFor(t, 30*time.Second, until(p, "every record applied", func() bool {
		return p.stats.Applied.Load() >= int64(len(bursts)+len(control))
	}))
	stop()

	// The leases fell due on the projector's clock, at their instant: the
	// reference's run gets there by its clock too.
	if got := ref.Projection(leaseRun).Advance(leaseRun, topics.NewTime(due)); len(got) != leases {
		t.Fatalf("the reference fired %d leases at %v, want %d", len(got), due, leases)
	}
	e.checkCommitted(ref, true)
	if n := p.stats.Rewinds.Load(); n != 0 {
		t.Errorf("%d rewinds: a wake or a record was refused", n)
	}
}
