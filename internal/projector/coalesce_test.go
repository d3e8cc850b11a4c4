package projector

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestBacklogCoalescesIntoBoundedWakes: with a backlog of requests on one
// run, the projector commits several chunks at once (Config.MaxBatch), so the
// run gets far fewer wakes (a commit's, split or not) than chunks; yet no
// wake holds more than the projection's MaxWakeTriggers, however many the
// backlog raises, and every request wakes the conductor exactly once.
func TestBacklogCoalescesIntoBoundedWakes(t *testing.T) {
	const partitions, requests, chunk = 1, 4000, 100
	e := newEnv(t, partitions)
	const run = "run-busy"
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	evs := []topics.Event{
		testEvent("ev-root", run, "conductor", t0, &topics.NodeCreated{Role: topics.RoleConductor}),
		testEvent("ev-worker", run, "agent-1", t0, &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}),
	}
	for i := range requests {
		evs = append(evs, testEvent(fmt.Sprintf("ev-req-%05d", i), run, "agent-1", t0.Add(time.Duration(i)*time.Millisecond),
			&topics.Request{RequestID: fmt.Sprintf("req-%05d", i), RequestKind: "clarification"}))
	}
	e.produce(e.names.AgentEvents(), evs...)

	cfg := e.config(t.TempDir())
	cfg.Chunk, cfg.MaxBatch = chunk, 5000
	cfg.Now = func() time.Time { return t0 } // no request's TTL falls due
	p, stop := e.start(cfg)
	testenv.WaitFor(t, 60*time.Second, until(p, "the backlog is applied", func() bool { return p.stats.Applied.Load() == int64(len(evs)) }))
	stop()

	wakes := p.stats.Wakes.Load()
	seen := map[string]int{}
	var got, commits int64
	e.reader(e.names.Wakes()).until(30*time.Second, "the wakes", func(rec *kgo.Record) bool {
		got++
		w := decodeWake(t, rec)
		if n := len(w.Triggers); n > projection.DefaultMaxWakeTriggers {
			t.Errorf("wake %s holds %d triggers, want at most %d", w.WakeID, n, projection.DefaultMaxWakeTriggers)
		}
		if w.Part == nil || w.Part.Number == 1 {
			commits++ // the run's wake of a commit, or the first part of it
		}
		for _, tr := range w.Triggers {
			if tr.Kind == topics.TriggerRequest && tr.EventID != nil {
				seen[*tr.EventID]++
			}
		}
		return got == wakes
	})
	for i := range requests {
		if id := fmt.Sprintf("ev-req-%05d", i); seen[id] != 1 {
			t.Fatalf("request %s woke the conductor %d times, want once", id, seen[id])
		}
	}
	// Committed chunk by chunk, the run would have had a wake per chunk.
	if perChunk := int64(requests / chunk); commits > perChunk/2 {
		t.Fatalf("%d commits woke the run for %d requests in chunks of %d: the backlog was not coalesced (%d without)", commits, requests, chunk, perChunk)
	}
	t.Logf("%d requests, %d wakes of %d commits", requests, wakes, commits)
}
