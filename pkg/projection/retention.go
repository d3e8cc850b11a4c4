package projection

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Run lifecycle and retention. A run is finished when its root
// node is terminal (completed or failed) and it holds no open request, no
// lease and no timer: nothing more can happen to it unless an event comes.
// Config.Retention after its clock (its last event's time) passes on the
// wall clock, a finished run expires: every key of its state is deleted (a
// tombstone in the changelog, so that compaction drops it and a restore
// brings back live runs only), and an expiry marker takes its place for as
// long again, so that reads say the run expired and late events for it are
// refused (the projector dead-letters them) rather than starting a run from
// nothing. After that the marker goes too, and an event for the run id
// starts a new run. Expiry is kept like a timer: the projection's due index
// holds it, ExpireDue runs it (beside FireDue, which fires the timers),
// and the worker fires both only when caught up, so an event still in the
// backlog can keep a run alive.

// ErrRunExpired is wrapped by the error of a read of, or an event for, a
// run that expired: its state was deleted after Config.Retention.
var ErrRunExpired = errors.New("projection: run expired")

// ExpiredError is the error of a read of, or an event for, an expired run:
// which run, and when it expired. It wraps ErrRunExpired.
type ExpiredError struct {
	RunID string
	// At is when the run's state was deleted (the wall clock of its
	// expiry).
	At time.Time
	// Retention is how long finished runs are kept (Config.Retention).
	Retention time.Duration
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("projection: run %q expired at %s: it finished more than %v before and its state was deleted",
		e.RunID, e.At.UTC().Format(time.RFC3339), e.Retention)
}

func (e *ExpiredError) Unwrap() error { return ErrRunExpired }

// Finished reports whether nothing more can happen to the run without an
// event: its root is terminal and it holds no open request, no lease and no
// timer.
func (r *Run) Finished() bool {
	root := r.peek(r.root)
	if r.root == "" || root == nil || (root.Status != topics.StatusCompleted && root.Status != topics.StatusFailed) {
		return false
	}
	if len(r.requests) > 0 || r.leases.Len() > 0 {
		return false
	}
	for _, t := range r.timerTrees() {
		if t.Len() > 0 {
			return false
		}
	}
	return true
}

// expiryDue is when r expires: Retention after its clock, if it is
// finished and runs expire at all.
func (p *Projection) expiryDue(r *Run) (int64, bool) {
	if p.cfg.Retention <= 0 || p.store == nil || !r.Finished() {
		return 0, false
	}
	return r.clock.Add(p.cfg.Retention).UnixMilli(), true
}

// expiredKey holds a run's expiry marker: the Unix ms of its expiry.
func expiredKey(run string) []byte { return runKey(run, 'x', "") }

// expire deletes r's state at now: every key it may have in the store,
// which are the ones its parts in memory name (the commit in flight may
// still be writing them) and any other under its prefix, and puts the
// marker in its place, due to go after Retention.
func (p *Projection) expire(r *Run, now int64) error {
	keys := map[string]struct{}{}
	add := func(k []byte) { keys[string(k)] = struct{}{} }
	addAll := func(kind byte, ids iter.Seq[string]) {
		for id := range ids {
			add(runKey(r.id, kind, id))
		}
	}
	add(runKey(r.id, 'm', ""))
	addAll('n', maps.Keys(r.nodes))
	addAll('q', maps.Keys(r.requests))
	addAll('c', maps.Keys(r.corrAt))
	addAll('p', maps.Keys(r.plans))
	for id, pl := range r.plans {
		for i, b := range pl.Bands {
			for c := 0; c*stepsPerRecord < len(b.Steps); c++ {
				add(stepKey(r.id, stepRef{id, i, c}))
			}
		}
	}
	for _, c := range r.chunks {
		add(journalKey(r.id, c.first))
	}
	if d := r.dirty; d != nil { // parts deleted since the last commit too
		addAll('n', maps.Keys(d.nodes))
		addAll('q', maps.Keys(d.requests))
		addAll('c', maps.Keys(d.handles))
		addAll('p', maps.Keys(d.plans))
		for ref := range d.steps {
			add(stepKey(r.id, ref))
		}
		for _, k := range d.legacy {
			add(k)
		}
	}
	prefix := rel([]byte{'r'}, []byte(r.id), []byte{0})
	if err := p.store.scan(prefix, func(k, _ []byte) error {
		add(rel(prefix, k))
		return nil
	}); err != nil {
		return err
	}
	// In key order: the commit's changes must not depend on map order.
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	for _, k := range sorted {
		p.expired.del([]byte(k))
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(now))
	p.expired.set(expiredKey(r.id), v[:])
	p.limbo[r.id] = limbo{expiredAt: now}
	p.unindexSession(r.sessionID, r.id)
	p.drop(r)
	p.setDue(r.id, now+p.cfg.Retention.Milliseconds(), true)
	return nil
}

// forget deletes an expiry marker whose time is up: the run id is free.
func (p *Projection) forget(run string) {
	p.expired.del(expiredKey(run))
	p.limbo[run] = limbo{}
	p.setDue(run, 0, false)
}

// limbo is a run whose expiry (expiredAt set) or whose marker's removal
// (expiredAt zero) is not yet written to the store: until it is, the store
// still holds what was there before, and the run must be answered from
// here rather than read back. prepared: the commit that writes it is
// prepared (see Prepare and Committed).
type limbo struct {
	expiredAt int64
	prepared  bool
}

// inLimbo answers for a run in limbo: expired (an ExpiredError), or
// forgotten (fresh: start from nothing, whatever the store says).
func (p *Projection) inLimbo(id string) (fresh bool, err error) {
	l, ok := p.limbo[id]
	switch {
	case !ok:
		return false, nil
	case l.expiredAt != 0:
		return false, &ExpiredError{RunID: id, At: time.UnixMilli(l.expiredAt), Retention: p.cfg.Retention}
	default:
		return true, nil
	}
}

// prepareExpiries moves the expiries since the last commit into c and marks
// them prepared.
func (p *Projection) prepareExpiries(c *Changes) {
	*c = append(*c, p.expired...)
	p.expired = nil
	for id, l := range p.limbo {
		if !l.prepared {
			l.prepared = true
			p.limbo[id] = l
		}
	}
}

// expiriesWritten ends the limbo of what the commit just written held.
func (p *Projection) expiriesWritten() {
	for id, l := range p.limbo {
		if l.prepared {
			delete(p.limbo, id)
		}
	}
}

// Lookup returns the run with id, loading it from the store if needed:
// ErrUnknownRun when no event of it was applied, an ExpiredError when it
// expired, the store's error when that failed.
func (p *Projection) Lookup(id string) (*Run, error) {
	r, err := p.run(id, false)
	switch {
	case err != nil:
		return nil, err
	case r == nil:
		return nil, fmt.Errorf("%w: %q: no events applied", ErrUnknownRun, id)
	}
	return r, nil
}
