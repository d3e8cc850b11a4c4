package projector

import (
	"context"
	"strconv"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// SessionPage is what a projector instance holds of a session: the parts
// of every partition it owns, merged (projection.MergeSessionParts), and
// which partitions those are.
type SessionPage struct {
	projection.SessionPart
	// Partitions are the partitions read.
	Partitions []int32 `json:"partitions"`
	// Unavailable are partitions the instance owns but could not read
	// (restoring, or being revoked): their runs are missing here.
	Unavailable []int32 `json:"unavailable"`
}

// SessionHistoryPage is a page of a session's history from the partitions
// a projector instance owns.
type SessionHistoryPage struct {
	projection.SessionHistory
	Partitions  []int32 `json:"partitions"`
	Unavailable []int32 `json:"unavailable"`
}

// Session reads q.SessionID in every partition this instance owns, each
// on its worker (projection.Session), and merges what they hold; stale as
// a read model's. With q.Only, a partition is asked only for the runs
// that hash to it. A bad limit or cursor is projection.ErrBadLimit or
// ErrBadCursor, found before any worker is asked.
func (p *Projector) Session(ctx context.Context, q projection.SessionQuery) (*SessionPage, error) {
	if err := projection.CheckSessionQuery(q); err != nil {
		return nil, err
	}
	out := &SessionPage{Partitions: []int32{}, Unavailable: []int32{}}
	var parts []*projection.SessionPart
	err := p.eachSessionPart(ctx, q, &out.Partitions, &out.Unavailable, func(w *worker, pq projection.SessionQuery) error {
		now := p.cfg.Now()
		stale := now.Sub(w.source(topics.NewTime(now)).Std()) > p.cfg.Projection.Limits.StaleAfter
		part, err := w.proj.Session(pq, stale)
		if err == nil {
			parts = append(parts, part)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out.SessionPart = *projection.MergeSessionParts(q.SessionID, parts, q.Limit, q.HistoryLimit)
	return out, nil
}

// SessionHistory returns a page of q.SessionID's history from every
// partition this instance owns (projection.SessionHistory), merged.
func (p *Projector) SessionHistory(ctx context.Context, q projection.SessionQuery) (*SessionHistoryPage, error) {
	if err := projection.CheckSessionQuery(q); err != nil {
		return nil, err
	}
	out := &SessionHistoryPage{Partitions: []int32{}, Unavailable: []int32{}}
	var hs []*projection.SessionHistory
	err := p.eachSessionPart(ctx, q, &out.Partitions, &out.Unavailable, func(w *worker, pq projection.SessionQuery) error {
		h, err := w.proj.SessionHistory(pq)
		if err == nil {
			hs = append(hs, h)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out.SessionHistory = *projection.MergeSessionHistories(hs, q.HistoryLimit)
	return out, nil
}

// eachSessionPart asks the worker of every partition this instance owns
// to read fn, one after the other, with q limited to the partition's runs
// when q names runs; it appends each partition to read or unavailable.
// Only ctx ending is an error.
func (p *Projector) eachSessionPart(ctx context.Context, q projection.SessionQuery, read, unavailable *[]int32, fn func(w *worker, q projection.SessionQuery) error) error {
	of := "session " + strconv.Quote(q.SessionID)
	for _, part := range p.Owned() {
		pq := q
		if q.Only != nil {
			pq.Only = []string{}
			for _, run := range q.Only {
				if topics.Partition([]byte(run), p.partitions) == part {
					pq.Only = append(pq.Only, run)
				}
			}
		}
		if err := p.askPart(ctx, part, of, func(w *worker) error { return fn(w, pq) }); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			*unavailable = append(*unavailable, part)
			continue
		}
		*read = append(*read, part)
	}
	return nil
}
