package projection

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// checkInvariants compares every index and total of r with what a full scan
// of its nodes says they must be.
func checkInvariants(r *Run) error {
	ids := make([]string, 0, len(r.nodes))
	for id := range r.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var byStatus topics.StatusCounts
	overdue := 0
	var urgent, leases, signals []string
	for _, id := range ids {
		n := r.nodes[id]
		byStatus.Add(n.Status, 1)
		if n.overdue {
			overdue++
			if n.LeaseExpiresAt.IsZero() || n.LeaseExpiresAt.After(r.clock) {
				return fmt.Errorf("%s: overdue but its lease is not due (%v, clock %v)", id, n.LeaseExpiresAt, r.clock)
			}
		} else if !n.LeaseExpiresAt.IsZero() && !n.LeaseExpiresAt.After(r.clock) {
			return fmt.Errorf("%s: lease due %v by clock %v but not overdue", id, n.LeaseExpiresAt, r.clock)
		}
		if isUrgent(n.Status) {
			urgent = append(urgent, id)
		}
		if !n.LeaseExpiresAt.IsZero() {
			leases = append(leases, id)
		}
		signals = append(signals, id)
		if n.OpenRequestCount != len(n.requests) {
			return fmt.Errorf("%s: open_request_count %d but %d requests", id, n.OpenRequestCount, len(n.requests))
		}
	}
	sortBy := func(s []string, less func(a, b *node) bool) {
		slices.SortStableFunc(s, func(a, b string) int {
			switch {
			case less(r.nodes[a], r.nodes[b]):
				return -1
			case less(r.nodes[b], r.nodes[a]):
				return 1
			}
			return strings.Compare(a, b)
		})
	}
	sortBy(urgent, func(a, b *node) bool { return a.StatusUpdatedAt.After(b.StatusUpdatedAt) })
	sortBy(leases, func(a, b *node) bool { return a.LeaseExpiresAt.Before(b.LeaseExpiresAt) })
	sortBy(signals, func(a, b *node) bool { return a.LastSignalAt.After(b.LastSignalAt) })
	collect := func(seq func(func(snapshot.Node) bool)) []string {
		var out []string
		seq(func(n snapshot.Node) bool { out = append(out, n.AgentID); return true })
		return out
	}
	for _, c := range []struct {
		name       string
		want, have []string
	}{
		{"urgent", urgent, collect(r.Urgent())},
		{"leases", leases, collect(r.ByLeaseExpiry())},
		{"signals", signals, collect(r.ByLastSignal())},
	} {
		if !slices.Equal(c.want, c.have) {
			return fmt.Errorf("index %s:\nwant %v\nhave %v", c.name, c.want, c.have)
		}
	}
	var wantCorr, haveCorr []corrNode
	for _, id := range ids {
		if c := r.nodes[id].LastCorrelationID; c != "" {
			wantCorr = append(wantCorr, corrNode{c, id})
		}
	}
	slices.SortFunc(wantCorr, func(a, b corrNode) int {
		if byCorrThenID(a, b) {
			return -1
		}
		return 1
	})
	r.byCorr.Ascend(func(k corrNode) bool { haveCorr = append(haveCorr, k); return true })
	if !slices.Equal(wantCorr, haveCorr) {
		return fmt.Errorf("correlation index: want %v have %v", wantCorr, haveCorr)
	}
	st := r.Stats()
	if st.ByStatus != byStatus || st.OverdueLeases != overdue || st.NodeCount != len(ids) {
		return fmt.Errorf("stats %+v, scan says %+v overdue %d nodes %d", st, byStatus, overdue, len(ids))
	}
	open := 0
	for _, id := range ids {
		open += r.nodes[id].OpenRequestCount
	}
	if open != st.OpenRequests {
		return fmt.Errorf("open requests: stats %d, nodes %d", st.OpenRequests, open)
	}
	if r.corrActive.Len() != len(r.corrAt) {
		return fmt.Errorf("active handles: index %d, map %d", r.corrActive.Len(), len(r.corrAt))
	}
	wd := make(map[topics.WatchdogStatus]int)
	for _, id := range ids {
		if w := r.nodes[id].watchdog; w.Dispatched && w.Status != "" {
			wd[w.Status]++
		}
	}
	for s, n := range r.wdCount {
		if n != wd[s] {
			return fmt.Errorf("watchdog %s: count %d, scan %d", s, n, wd[s])
		}
	}
	for s, n := range wd {
		if n != r.wdCount[s] {
			return fmt.Errorf("watchdog %s: count %d, scan %d", s, r.wdCount[s], n)
		}
	}
	// The history window holds consecutive seqs ending at the run's.
	for i := range r.hist.len() {
		if got := r.hist.at(i).Seq; got != r.seq-int64(i) {
			return fmt.Errorf("history entry %d has seq %d, want %d", i, got, r.seq-int64(i))
		}
	}
	return nil
}

// TestIndexesAgreeWithScan replays generated runs, shuffled a little, with
// duplicates and late events, and checks the indexes after every event.
func TestIndexesAgreeWithScan(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		events := workload.Generate(workload.Spec{Nodes: 60, Seed: seed, Step: 700 * time.Millisecond})
		rng := rand.New(rand.NewPCG(seed, 7))
		// Swap neighbours now and then: events arrive out of time order.
		for i := 1; i < len(events); i++ {
			if rng.IntN(10) == 0 {
				events[i], events[i-1] = events[i-1], events[i]
			}
		}
		p, _ := New(Config{ProgressInterval: time.Second})
		for i := range events {
			p.Apply(&events[i])
			if rng.IntN(20) == 0 {
				p.Apply(&events[rng.IntN(i+1)]) // a duplicate
			}
			r, _ := p.Run("run-1")
			if err := checkInvariants(r); err != nil {
				t.Fatalf("seed %d, after event %d (%s %s): %v", seed, i, events[i].Type, events[i].AgentID, err)
			}
		}
		p.Advance("run-1", topics.NewTime(time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC)))
		r, _ := p.Run("run-1")
		if err := checkInvariants(r); err != nil {
			t.Fatalf("seed %d, after advancing: %v", seed, err)
		}
	}
}

// TestReplayIsDeterministic: the same events give byte-identical wakes.
func TestReplayIsDeterministic(t *testing.T) {
	events := workload.Generate(workload.Spec{Nodes: 300, Seed: 9})
	run := func() []byte {
		p, _ := New(Config{})
		var out []byte
		var pending Pending
		for i := range events {
			trigs, _ := p.Apply(&events[i])
			pending.Add(events[i].RunID, trigs)
			if i%7 == 0 {
				built, err := p.Wakes(&pending, time.Time{}, topics.Time{})
				if err != nil {
					t.Fatal(err)
				}
				pending.Reset()
				for _, b := range built {
					enc, _ := topics.Marshal(b.Wake)
					out = append(append(out, enc...), '\n')
				}
			}
		}
		return out
	}
	a, b := run(), run()
	if len(a) == 0 || string(a) != string(b) {
		t.Fatalf("two replays differ (%d and %d bytes)", len(a), len(b))
	}
}

// TestEqualIDsMeanEqualContent: for random event logs (shuffled across runs,
// with duplicates and late events), batch sizes, wall clocks and sources,
// two wakes with one wake_id have byte-identical content but for the
// wall-clock fields generated_at, snapshot_age_ms and stale (a
// conductor may drop a wake by its id only if the id means the content).
// Inclusion, truncation and lease_remaining_ms are decided on the run's
// logical clock, never on the wall clock.
func TestEqualIDsMeanEqualContent(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 26))
	byID := map[string]string{}
	compared := 0
	for trial := range 6 {
		var events []topics.Event
		for i, n := range []int{30, 120, 400} {
			events = append(events, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%d-%d", trial, i), Nodes: n, Seed: uint64(trial*10 + i + 1)})...)
		}
		rng.Shuffle(len(events), func(i, j int) {
			if events[i].RunID != events[j].RunID || rng.IntN(20) == 0 { // now and then out of order within a run too
				events[i], events[j] = events[j], events[i]
			}
		})
		end := events[len(events)-1].Time.Std()
		for _, batch := range []int{1, 3, 64} {
			for _, clock := range []struct {
				now    time.Time
				source topics.Time
			}{
				{}, // the run's clock: replay
				{now: end.Add(time.Hour), source: topics.NewTime(end)},
				{now: end.Add(-time.Hour), source: topics.NewTime(end.Add(-2 * time.Hour))},
				{now: end.Add(400 * 24 * time.Hour), source: topics.NewTime(end.Add(time.Minute))},
			} {
				p, _ := New(Config{Limits: snapshot.Limits{MaxNodes: 24 + trial*8, MaxBytes: 6000 + trial*3000}})
				var pending Pending
				flush := func() {
					built, err := p.Wakes(&pending, clock.now, clock.source)
					if err != nil {
						t.Fatal(err)
					}
					pending.Reset()
					for _, b := range built {
						w := *b.Wake
						w.AgentTreeSnapshot.GeneratedAt, w.AgentTreeSnapshot.SnapshotAgeMs, w.AgentTreeSnapshot.Stale = topics.Time{}, 0, false
						enc, err := topics.Marshal(&w)
						if err != nil {
							t.Fatal(err)
						}
						if prev, ok := byID[w.WakeID]; ok {
							compared++
							if prev != string(enc) {
								t.Fatalf("trial %d, batch %d, now %v: wake %s has other content under the same id:\nbefore: %s\nnow:    %s",
									trial, batch, clock.now, w.WakeID, prev, enc)
							}
						} else {
							byID[w.WakeID] = string(enc)
						}
					}
				}
				for i := range events {
					trigs, _ := p.Apply(&events[i])
					pending.Add(events[i].RunID, trigs)
					if (i+1)%batch == 0 {
						flush()
					}
				}
				flush()
			}
		}
	}
	t.Logf("%d wakes compared with another of the same id", compared)
	if compared < 1000 {
		t.Fatalf("only %d wakes shared an id: the test no longer varies what it should", compared)
	}
}
