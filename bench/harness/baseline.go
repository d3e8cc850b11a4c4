package harness

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// rawConsume is baseline (a): the rate at which the same broker delivers
// the stage's agent events (everything on the topic now) to a plain franz-go
// consumer that does nothing with them, timed from the client's creation to
// the last record. It is the ceiling the projector is measured against.
func (s *stage) rawConsume(ctx context.Context) (float64, error) {
	topic := s.names.AgentEvents()
	ends, err := s.h.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	starts, err := s.h.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) {
		if st, ok := starts.Lookup(topic, o.Partition); ok {
			total += o.Offset - st.Offset
		}
	})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	began := time.Now()
	cl, err := kgo.NewClient(s.h.kafka.Opts(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var n int64
	for n < total {
		fs := cl.PollRecords(ctx, 10_000)
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("raw consume: %d of %d records: %w", n, total, err)
		}
		if err := fs.Err0(); err != nil {
			return 0, fmt.Errorf("raw consume: %w", err)
		}
		n += int64(fs.NumRecords())
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// naiveTree is baseline (b): what a projection without indexes does at
// every wake. It loads every node of the run and sorts them in the
// inclusion orders the builder reads (blocked and failed newest first,
// leases soonest first, all nodes by newest signal), then answers the same
// builder from those slices.
type naiveTree struct {
	*projection.Run
	urgent, leases, signals []snapshot.Node
}

func newNaiveTree(r *projection.Run) *naiveTree {
	t := &naiveTree{Run: r}
	// The run's full node list: its by-signal index yields every node
	// (the naive projection would read them from its table instead).
	for n := range r.ByLastSignal() {
		if n.Status == topics.StatusBlocked || n.Status == topics.StatusFailed {
			t.urgent = append(t.urgent, n)
		}
		if !n.LeaseExpiresAt.IsZero() {
			t.leases = append(t.leases, n)
		}
		t.signals = append(t.signals, n)
	}
	byID := func(a, b snapshot.Node) int { return strings.Compare(a.AgentID, b.AgentID) }
	slices.SortFunc(t.urgent, func(a, b snapshot.Node) int {
		return cmp.Or(-cmp.Compare(a.StatusUpdatedAt.UnixMilli(), b.StatusUpdatedAt.UnixMilli()), byID(a, b))
	})
	slices.SortFunc(t.leases, func(a, b snapshot.Node) int {
		return cmp.Or(cmp.Compare(a.LeaseExpiresAt.UnixMilli(), b.LeaseExpiresAt.UnixMilli()), byID(a, b))
	})
	// Signal order: newest first; nodes that never signalled last, by id.
	slices.SortFunc(t.signals, func(a, b snapshot.Node) int {
		if a.LastSignalAt.IsZero() != b.LastSignalAt.IsZero() {
			if a.LastSignalAt.IsZero() {
				return 1
			}
			return -1
		}
		return cmp.Or(-cmp.Compare(a.LastSignalAt.UnixMilli(), b.LastSignalAt.UnixMilli()), byID(a, b))
	})
	return t
}

func (t *naiveTree) Urgent() iter.Seq[snapshot.Node]        { return slices.Values(t.urgent) }
func (t *naiveTree) ByLeaseExpiry() iter.Seq[snapshot.Node] { return slices.Values(t.leases) }
func (t *naiveTree) ByLastSignal() iter.Seq[snapshot.Node]  { return slices.Values(t.signals) }

// buildCost times snapshot builds of run r: canopy's (the indexes) and the
// naive baseline's, each the median of reps builds, interleaved so that a
// noisy moment hits both. The naive builds stop after 3 once they have
// taken 2 s (at 100,000 nodes each takes about half a second).
func buildCost(r *projection.Run, now time.Time, reps int) (indexed, naive time.Duration, bytes int, err error) {
	w := snapshot.Wake{SnapshotID: "01JM0000000000000000000000", Seq: r.Seq(), At: r.Clock()}
	var ti, tn []time.Duration
	var naiveTotal time.Duration
	for i := range reps {
		began := time.Now()
		_, info, err := snapshot.Build(r, w, snapshot.Limits{}, now)
		if err != nil {
			return 0, 0, 0, err
		}
		ti = append(ti, time.Since(began))
		bytes = info.Bytes
		if i >= 3 && naiveTotal > 2*time.Second {
			continue
		}
		began = time.Now()
		if _, _, err := snapshot.Build(newNaiveTree(r), w, snapshot.Limits{}, now); err != nil {
			return 0, 0, 0, err
		}
		tn = append(tn, time.Since(began))
		naiveTotal += tn[len(tn)-1]
	}
	slices.Sort(ti)
	slices.Sort(tn)
	return ti[len(ti)/2], tn[len(tn)/2], bytes, nil
}
