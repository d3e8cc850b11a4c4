package projection

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Projection holds the runs of one partition (or, in replay, of a whole
// file). It is not safe for concurrent use.
type Projection struct {
	cfg  Config
	runs map[string]*Run
}

// New returns an empty projection.
func New(cfg Config) (*Projection, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Projection{cfg: cfg.WithDefaults(), runs: make(map[string]*Run)}, nil
}

// Config returns the projection's config, with defaults filled in.
func (p *Projection) Config() Config { return p.cfg }

// Run returns the run with id, if any event of it was applied.
func (p *Projection) Run(id string) (*Run, bool) {
	r, ok := p.runs[id]
	return r, ok
}

// Apply applies a decoded event to its run. It returns the triggers raised
// (timers of the run that fell due before the event first) and whether the
// event was a duplicate, already applied and so ignored.
func (p *Projection) Apply(ev *topics.Event) (trigs []topics.Trigger, dup bool) {
	r, ok := p.runs[ev.RunID]
	if !ok {
		r = newRun(ev.RunID)
		p.runs[ev.RunID] = r
	}
	return r.apply(ev, &p.cfg)
}

// Advance moves a run's clock to `to`, firing its timers due by then.
func (p *Projection) Advance(runID string, to topics.Time) []topics.Trigger {
	r, ok := p.runs[runID]
	if !ok || !to.After(r.clock) {
		return nil
	}
	return r.advance(to, &p.cfg, nil)
}

// RunIDs returns the ids of every run, in no particular order.
func (p *Projection) RunIDs() []string {
	ids := make([]string, 0, len(p.runs))
	for id := range p.runs {
		ids = append(ids, id)
	}
	return ids
}

// Pending gathers the triggers of one processing batch, per run, so that each
// run is woken once per batch (DESIGN.md "Wakes out").
type Pending struct {
	order []string
	trigs map[string][]topics.Trigger
}

// Add appends triggers of a run.
func (b *Pending) Add(runID string, trigs []topics.Trigger) {
	if len(trigs) == 0 {
		return
	}
	if b.trigs == nil {
		b.trigs = make(map[string][]topics.Trigger)
	}
	if _, ok := b.trigs[runID]; !ok {
		b.order = append(b.order, runID)
	}
	b.trigs[runID] = append(b.trigs[runID], trigs...)
}

// Len is the number of runs with pending triggers.
func (b *Pending) Len() int { return len(b.order) }

// Reset empties b for the next batch.
func (b *Pending) Reset() {
	b.order = b.order[:0]
	clear(b.trigs)
}

// Built is a wake ready to publish, with its snapshot's metadata.
type Built struct {
	Wake *topics.Wake
	Info snapshot.Info
}

// Wakes builds one wake per run of b: priority-lane wakes first, then normal
// ones, each in the order their runs were first triggered. source is the time
// up to which the projection reflects its input (zero: each run's clock);
// now is the wall clock for generated_at and staleness (zero: each run's
// clock, which makes the whole wake a pure function of the input, as replay
// wants).
func (p *Projection) Wakes(b *Pending, now time.Time, source topics.Time) ([]Built, error) {
	out := make([]Built, 0, len(b.order))
	for _, lane := range []topics.Lane{topics.LanePriority, topics.LaneNormal} {
		for _, id := range b.order {
			trigs := b.trigs[id]
			if laneOf(trigs) != lane {
				continue
			}
			w, info, err := p.wake(p.runs[id], lane, trigs, now, source)
			if err != nil {
				return out, err
			}
			out = append(out, Built{w, info})
		}
	}
	return out, nil
}

func laneOf(trigs []topics.Trigger) topics.Lane {
	for _, t := range trigs {
		if t.Kind == topics.TriggerHumanInput {
			return topics.LanePriority
		}
	}
	return topics.LaneNormal
}

func (p *Projection) wake(r *Run, lane topics.Lane, trigs []topics.Trigger, now time.Time, source topics.Time) (*topics.Wake, snapshot.Info, error) {
	id := WakeID(r.id, trigs)
	w := snapshot.Wake{
		SnapshotID: derivedULID(id.Time(), "snapshot", id.String()).String(),
		Seq:        r.seq,
		At:         r.clock,
		Source:     source,
	}
	for _, t := range trigs {
		w.AgentIDs = append(w.AgentIDs, t.AgentID)
		if t.CorrelationID != nil {
			w.CorrelationIDs = append(w.CorrelationIDs, *t.CorrelationID)
		}
	}
	if now.IsZero() {
		now = r.clock.Std()
	}
	s, info, err := snapshot.Build(r, w, p.cfg.Limits, now)
	if err != nil {
		return nil, info, fmt.Errorf("projection: run %q: %w", r.id, err)
	}
	return &topics.Wake{
		WakeID:            id.String(),
		SchemaVersion:     topics.WakeSchemaVersion,
		RunID:             r.id,
		Lane:              lane,
		Triggers:          trigs,
		AgentTreeSnapshot: *s,
	}, info, nil
}

// Snapshot builds the current snapshot of a run, for readers rather than for a
// wake: no node is referenced, and its id derives from the run and its seq.
func (p *Projection) Snapshot(runID string, now time.Time) (*topics.AgentTreeSnapshot, snapshot.Info, error) {
	r, ok := p.runs[runID]
	if !ok {
		return nil, snapshot.Info{}, fmt.Errorf("projection: run %q: no events applied", runID)
	}
	w := snapshot.Wake{
		SnapshotID: derivedULID(uint64(max(r.clock.UnixMilli(), 0)), "current", r.id, fmt.Sprint(r.seq)).String(),
		Seq:        r.seq,
		At:         r.clock,
	}
	return snapshot.Build(r, w, p.cfg.Limits, now)
}

// WakeID is the deterministic id of the wake for triggers of run: a ULID whose
// time is the newest trigger's and whose entropy is a hash of the run and the
// triggers. The same input log therefore gives the same wake ids on every
// instance and every replay, and a conductor can drop duplicates by id.
func WakeID(run string, trigs []topics.Trigger) ulid.ULID {
	var ms int64
	parts := make([]string, 0, 1+5*len(trigs))
	parts = append(parts, run)
	for _, t := range trigs {
		ms = max(ms, t.At.UnixMilli())
		ev, corr, detail := "", "", ""
		if t.EventID != nil {
			ev = *t.EventID
		}
		if t.CorrelationID != nil {
			corr = *t.CorrelationID
		}
		if t.Detail != nil {
			detail = *t.Detail
		}
		parts = append(parts, string(t.Kind)+"\x1f"+ev+"\x1f"+t.AgentID+"\x1f"+corr+"\x1f"+detail+"\x1f"+t.At.String())
	}
	return derivedULID(uint64(max(ms, 0)), parts...)
}

// derivedULID is a ULID with time ms and entropy from a hash of parts.
func derivedULID(ms uint64, parts ...string) ulid.ULID {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		// Length-prefixed, so that no two part lists hash alike.
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var id ulid.ULID
	if ms > ulid.MaxTime() {
		ms = ulid.MaxTime()
	}
	_ = id.SetTime(ms)
	_ = id.SetEntropy(sum[:10])
	return id
}
