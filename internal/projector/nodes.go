package projector

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Nodes returns a page of run's nodes by agent id (projection.NodesPage):
// every node of the run, paged, from the partition owner's committed
// state; stale as a snapshot's is. A bad cursor or limit is
// projection.ErrBadCursor or ErrBadLimit, found before the owner is asked.
func (p *Projector) Nodes(ctx context.Context, run, cursor string, limit int) (*projection.NodesPage, error) {
	if limit < 0 || limit > projection.MaxNodesLimit {
		return nil, fmt.Errorf("%w: %d, want 1 to %d", projection.ErrBadLimit, limit, projection.MaxNodesLimit)
	}
	if _, err := projection.DecodeNodesCursor(cursor); err != nil {
		return nil, err
	}
	var out *projection.NodesPage
	err := p.ask(ctx, run, func(w *worker) error {
		now := p.cfg.Now()
		stale := now.Sub(w.source(topics.NewTime(now)).Std()) > p.cfg.Projection.Limits.StaleAfter
		pg, err := w.proj.Nodes(run, cursor, limit, now, stale)
		out = pg
		return err
	})
	return out, err
}

// RunsPage is one page of the runs a projector instance owns, by run id.
type RunsPage struct {
	// Runs are at most the requested limit, by run id, of every partition
	// the instance owns and could answer for.
	Runs []projection.RunRef `json:"runs"`
	// More is true when runs after the last one here were left out.
	More bool `json:"more"`
	// Partitions are the partitions listed.
	Partitions []int32 `json:"partitions"`
	// Unavailable are partitions the instance owns but could not list
	// (restoring, or being revoked): their runs are missing here.
	Unavailable []int32 `json:"unavailable"`
}

// Runs lists the runs of every partition this instance owns, by run id,
// after after, at most limit (0: projection.DefaultRunsLimit).
func (p *Projector) Runs(ctx context.Context, after string, limit int) (*RunsPage, error) {
	if limit < 0 || limit > projection.MaxRunsLimit {
		return nil, fmt.Errorf("%w: %d, want 1 to %d", projection.ErrBadLimit, limit, projection.MaxRunsLimit)
	}
	if limit == 0 {
		limit = projection.DefaultRunsLimit
	}
	out := &RunsPage{Runs: []projection.RunRef{}, Partitions: []int32{}, Unavailable: []int32{}}
	for _, part := range p.Owned() {
		var refs []projection.RunRef
		var more bool
		err := p.askPart(ctx, part, "the run list", func(w *worker) error {
			var err error
			refs, more, err = w.proj.Runs(after, limit)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			out.Unavailable = append(out.Unavailable, part)
			continue
		}
		out.Partitions = append(out.Partitions, part)
		out.Runs = append(out.Runs, refs...)
		out.More = out.More || more
	}
	slices.SortFunc(out.Runs, func(a, b projection.RunRef) int { return strings.Compare(a.RunID, b.RunID) })
	if len(out.Runs) > limit {
		out.Runs, out.More = out.Runs[:limit], true
	}
	return out, nil
}
