package projection

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Run listing bounds: a page holds DefaultRunsLimit runs when the limit is
// 0, and at most MaxRunsLimit.
const (
	DefaultRunsLimit = 100
	MaxRunsLimit     = 1000
)

// RunRef is one run a projection holds, as a list of runs shows it.
type RunRef struct {
	RunID string `json:"run_id"`
	// SessionID is null when the run has none.
	SessionID *string `json:"session_id"`
	// RootAgentID is null until the run's root node is seen.
	RootAgentID *string `json:"root_agent_id"`
	// AsOfEventSeq is the number of the run's events applied.
	AsOfEventSeq int64 `json:"as_of_event_seq"`
	// AsOf is the run's clock; null when it has none.
	AsOf *topics.Time `json:"as_of"`
}

// Runs returns up to limit (0: DefaultRunsLimit, at most MaxRunsLimit) of
// the projection's runs by id, after the id after ("" for the first), and
// whether more follow. Runs in memory are given as they are now; the others
// as the store last committed them. Expired runs are left out.
func (p *Projection) Runs(after string, limit int) (refs []RunRef, more bool, err error) {
	if limit < 0 || limit > MaxRunsLimit {
		return nil, false, fmt.Errorf("%w: %d, want 1 to %d", ErrBadLimit, limit, MaxRunsLimit)
	}
	if limit == 0 {
		limit = DefaultRunsLimit
	}
	if p.err != nil {
		return nil, false, p.err
	}
	byID := make(map[string]RunRef)
	for id, r := range p.runs {
		if id > after && r.seq > 0 {
			byID[id] = r.ref()
		}
	}
	if p.store != nil {
		// limit+1 runs of the store after after, plus the ones in memory
		// that may shadow them, are enough for the page and its "more".
		stored, err := p.store.runs(after, limit+1+len(byID))
		if err != nil {
			return nil, false, err
		}
		for _, ref := range stored {
			if _, hot := byID[ref.RunID]; hot {
				continue
			}
			if _, gone := p.limbo[ref.RunID]; gone {
				continue // expired or forgotten, not yet written
			}
			if _, loaded := p.runs[ref.RunID]; loaded {
				continue // in memory with no event yet
			}
			byID[ref.RunID] = ref
		}
	}
	refs = make([]RunRef, 0, len(byID))
	for _, ref := range byID {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(a, b RunRef) int { return strings.Compare(a.RunID, b.RunID) })
	if len(refs) > limit {
		return refs[:limit], true, nil
	}
	return refs, false, nil
}

func (r *Run) ref() RunRef {
	ref := RunRef{RunID: r.id, SessionID: strPtr(r.sessionID), RootAgentID: strPtr(r.root), AsOfEventSeq: r.seq}
	if !r.clock.IsZero() {
		at := r.clock
		ref.AsOf = &at
	}
	return ref
}

// runs reads up to n runs with a meta key from the store, by id, after the
// id after: for each run it seeks its first key, reads its meta key, then
// seeks past the run's keys, so that the cost is per run, not per key.
func (s *store) runs(after string, n int) ([]RunRef, error) {
	from := []byte{'r'}
	if after != "" {
		from = rel([]byte{'r'}, []byte(after), []byte{1})
	}
	var out []RunRef
	for len(out) < n {
		k, ok, err := s.kv.SeekGE(from)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStore, err)
		}
		if !ok || len(k) == 0 || k[0] != 'r' {
			break
		}
		i := bytes.IndexByte(k[1:], 0)
		if i < 0 {
			// Not a run's key (the layout has none such): past it.
			from = append(k, 0)
			continue
		}
		run := string(k[1 : 1+i])
		v, ok, err := s.kv.Get(runKey(run, 'm', ""))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStore, err)
		}
		if ok {
			m, err := decodeMeta(v)
			if err != nil {
				return nil, fmt.Errorf("%w: run %q meta: %w", ErrStore, run, err)
			}
			ref := RunRef{RunID: run, SessionID: strPtr(m.SessionID), RootAgentID: strPtr(m.Root), AsOfEventSeq: m.Seq}
			if at := fromMs(m.Clock); !at.IsZero() {
				ref.AsOf = &at
			}
			out = append(out, ref)
		}
		from = rel([]byte{'r'}, []byte(run), []byte{1})
	}
	return out, nil
}
