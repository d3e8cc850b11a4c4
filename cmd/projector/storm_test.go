package main

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/canopy-dev/canopy/internal/brokertest"
)

// TestKillStorm is the liveness issue's kill storm, faster than real life:
// three projector processes in one group (no static membership, so every
// restart is a new member), with the default 60 s rebalance timeout and a
// 2 s session, one of them chosen at random SIGKILLed and restarted at once
// every 0.3-1.5 s, 40 times, under a steady load. Killing at random often
// kills an instance that was just restarted, while its first JoinGroup
// waits: the member it left behind is what wedged the group for good
// before (upstream kfake: such a member got no session timer once its
// join was answered to a dead connection, and only the rebalance deadline
// could drop it, a deadline every later JoinGroup pushed back).
//
// After the last kill every partition must produce a wake again within
// 2 × the session timeout + the longest restore after that kill, every
// run's last event must be woken, every instance must stop cleanly, and
// what was committed must be exactly once (as TestChaosKill checks), on
// both brokers.
//
// With upstream kfake (go.mod's replace removed) and the projector's own
// recovery off (-stall-timeout 1h), the group wedged in PreparingRebalance
// with a dozen members, nearly all long dead, and no wake came after the
// storm; see third_party/kfake/README.md.
func TestKillStorm(t *testing.T) { brokertest.Run(t, testKillStorm, kfake.NumBrokers(3)) }

func testKillStorm(t *testing.T, b *brokertest.Broker) {
	const session = 2 * time.Second // the harness's -session-timeout
	h := newHarnessWithin(t, b, "storm", 6, 4*time.Minute)
	h.generate(48, 30)
	h.startProducer(40*time.Second, 0.95)
	h.startReader()
	insts := make([]*child, 3)
	for i := range insts {
		insts[i] = h.start(fmt.Sprintf("i%d", i), fmt.Sprintf("data-%d", i))
	}
	h.waitFor("the first assignment", 30*time.Second, func() bool { return len(owned(insts[0])) > 0 })
	const kills = 40
	rng := rand.New(rand.NewPCG(16, 16)) // the same storm every run
	for k := range kills {
		// The storm's rhythm, not synchronisation.
		time.Sleep(300*time.Millisecond + time.Duration(rng.IntN(1200))*time.Millisecond)
		i := rng.IntN(len(insts))
		h.kill(insts[i])
		insts[i] = h.start(fmt.Sprintf("i%d-%d", i, k), fmt.Sprintf("data-%d", i))
	}
	last := time.Now()
	h.logf("storm over: %d kills; %d of %d records produced, %d committed wakes read",
		kills, h.produced.Load(), len(h.events), h.wakeCount())
	h.releaseTail()

	// Every partition wakes again: a committed wake produced after the last
	// kill, within the bound.
	first := func(p int32) (time.Time, bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, ts := range h.wakeTimes[p] {
			if ts.After(last) {
				return ts, true
			}
		}
		return time.Time{}, false
	}
	h.waitFor("a wake of every partition after the storm", 90*time.Second, func() bool {
		for p := range h.partitions {
			if _, ok := first(p); !ok {
				return false
			}
		}
		return true
	})
	restore := h.longestRestoreSince(last)
	bound := 2*session + restore
	for p := range h.partitions {
		ts, _ := first(p)
		gap := ts.Sub(last)
		h.logf("partition %d: first wake %v after the last kill (bound %v: 2 × %v session + %v restore)",
			p, gap.Round(time.Millisecond), bound, session, restore)
		if gap > bound {
			t.Errorf("partition %d woke again %v after the last kill, want within %v (2 × %v session + %v longest restore)",
				p, gap.Round(time.Millisecond), bound, session, restore)
		}
	}
	if t.Failed() {
		h.dump()
	}
	h.finish(insts...)
	h.check(false)
}

// restoredLine matches a projector's log line of a partition taken over.
var restoredLine = regexp.MustCompile(`time=(\S+) level=INFO msg="partition restored" partition=\d+ records=\d+ took=(\S+)`)

// longestRestoreSince returns the longest "partition restored" any child
// logged since t.
func (h *harness) longestRestoreSince(t time.Time) time.Duration {
	h.mu.Lock()
	cs := slices.Clone(h.children)
	h.mu.Unlock()
	var longest time.Duration
	for _, c := range cs {
		for _, m := range restoredLine.FindAllStringSubmatch(c.out.String(), -1) {
			at, err1 := time.Parse(time.RFC3339Nano, m[1])
			took, err2 := time.ParseDuration(m[2])
			if err1 != nil || err2 != nil {
				h.t.Fatalf("instance %s logged an unreadable restore line %q", c.name, m[0])
			}
			if at.After(t) {
				longest = max(longest, took)
			}
		}
	}
	return longest
}
