package projector

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/canopy-dev/canopy/internal/problem"
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

// nodes is GET /internal/v1/runs/{run_id}/nodes?cursor=&limit=.
func (s *QueryServer) nodes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > projection.MaxNodesLimit {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest,
				"limit %q: want a whole number from 1 to %d", v, projection.MaxNodesLimit))
			return
		}
		limit = n
	}
	p, ctx, cancel, ok := s.instance(w, r)
	if !ok {
		return
	}
	defer cancel()
	pg, err := p.Nodes(ctx, r.PathValue("run_id"), q.Get("cursor"), limit)
	s.reply(w, r, pg, err)
}
