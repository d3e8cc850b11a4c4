package projector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Errors of the query API (Snapshot, ReadModel, History). A router that gets
// ErrNotOwner or ErrRestoring asks the group's assignment again
// (cluster.Assignment) or retries a little later; projection.ErrUnknownRun
// means the owner has applied no event of the run.
var (
	// ErrNotOwner: the run's partition is not assigned to this instance.
	ErrNotOwner = errors.New("projector: the run's partition is not owned by this instance")
	// ErrRestoring: the run's partition is assigned to this instance, which
	// is still restoring it from the changelog.
	ErrRestoring = errors.New("projector: the run's partition is still being restored")
	// ErrStopped: the instance is shutting down or has stopped.
	ErrStopped = errors.New("projector: instance stopped")
)

// query is a read of a partition's state, answered on its worker's
// goroutine, the only one that may touch that state.
type query struct {
	ctx  context.Context
	fn   func(w *worker) error
	done chan error // buffered: the worker never waits for the asker
}

// answer runs q on the worker's goroutine, unless its asker gave up.
func (w *worker) answer(q *query) {
	if err := q.ctx.Err(); err != nil {
		q.done <- err
		return
	}
	if err := w.proj.Err(); err != nil {
		q.done <- err // the state is not trustworthy: the worker is going down
		return
	}
	q.done <- q.fn(w)
}

// unanswerable is the answer to a query the worker cannot answer: it is
// stopping on a failure, or rewinding (poison.go) and will answer again
// once it has reopened its state.
func (w *worker) unanswerable() error {
	if w.proj != nil && w.proj.Err() != nil {
		return w.proj.Err()
	}
	return fmt.Errorf("%w: partition %d is reopening its state after a failure", ErrRestoring, w.part)
}

// serveQueries answers the queries waiting, without blocking. The worker
// calls it between batches only, and settles the commit in flight first, so
// that the state a query reads is what was committed. It returns false when
// that commit failed: the worker stops.
func (w *worker) serveQueries() bool {
	for {
		select {
		case q := <-w.queries:
			if !w.settle() {
				q.done <- w.unanswerable()
				return false
			}
			w.answer(q)
		default:
			return true
		}
	}
}

// ask runs fn on the goroutine of the worker that owns run's partition and
// returns its error: ErrNotOwner, ErrRestoring or ErrStopped when no worker
// here can answer, ctx's error when ctx ends first.
func (p *Projector) ask(ctx context.Context, run string, fn func(w *worker) error) error {
	return p.askPart(ctx, topics.Partition([]byte(run), p.partitions), "run "+strconv.Quote(run), fn)
}

// askPart is ask for the worker of partition part; of names what is asked
// about in errors ("run \"x\"").
func (p *Projector) askPart(ctx context.Context, part int32, of string, fn func(w *worker) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	<-p.ready
	p.mu.Lock()
	w, closing := p.workers[part], p.closing
	p.mu.Unlock()
	switch {
	case closing:
		return ErrStopped
	case w == nil:
		return fmt.Errorf("%w: partition %d of %s", ErrNotOwner, part, of)
	case p.sessionUncertain(time.Now()):
		return fmt.Errorf("%w (partition %d of %s)", ErrSessionUncertain, part, of)
	}
	notOwner := func() error {
		return fmt.Errorf("%w: partition %d of %s was revoked", ErrNotOwner, part, of)
	}
	select {
	case <-w.done:
		return notOwner()
	default:
	}
	select {
	case <-w.ready:
	default:
		return fmt.Errorf("%w: partition %d of %s", ErrRestoring, part, of)
	}
	q := &query{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case w.queries <- q:
	case <-w.done:
		return notOwner()
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-q.done:
		return err
	case <-w.done:
		select {
		case err := <-q.done: // answered just before it stopped
			return err
		default:
			return notOwner()
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Snapshot returns the current agent_tree_snapshot of run, built by the
// partition's owner from its committed state (no wake references it: its
// id derives from the run and its seq). generated_at, snapshot_age_ms and
// stale are measured with Config.Now, as a wake's are.
func (p *Projector) Snapshot(ctx context.Context, run string) (*topics.AgentTreeSnapshot, error) {
	var out *topics.AgentTreeSnapshot
	err := p.ask(ctx, run, func(w *worker) error {
		now := p.cfg.Now()
		s, _, err := w.proj.CurrentSnapshot(run, now, w.source(topics.NewTime(now)))
		out = s
		return err
	})
	return out, err
}

// ReadModel returns seed 003's read model of run (projection.ReadModel),
// from the partition owner's committed state; stale as a snapshot's is.
func (p *Projector) ReadModel(ctx context.Context, run string) (*projection.ReadModel, error) {
	var out *projection.ReadModel
	err := p.ask(ctx, run, func(w *worker) error {
		now := p.cfg.Now()
		stale := now.Sub(w.source(topics.NewTime(now)).Std()) > p.cfg.Projection.Limits.StaleAfter
		m, err := w.proj.ReadModel(run, now, stale)
		out = m
		return err
	})
	return out, err
}

// History returns a page of run's history window, newest first: up to
// limit entries (0: projection.DefaultHistoryLimit, at most the window,
// -history-size: projection.MaxPage) older than cursor ("" for the newest).
// A bad cursor or limit is projection.ErrBadCursor or ErrBadLimit, found
// before the owner is asked.
func (p *Projector) History(ctx context.Context, run, cursor string, limit int) (*projection.HistoryPage, error) {
	if most := projection.MaxPage(p.cfg.Projection.HistorySize); limit < 0 || limit > most {
		return nil, fmt.Errorf("%w: %d, want 1 to %d", projection.ErrBadLimit, limit, most)
	}
	if _, err := projection.DecodeCursor(cursor); err != nil {
		return nil, err
	}
	var out *projection.HistoryPage
	err := p.ask(ctx, run, func(w *worker) error {
		pg, err := w.proj.History(run, cursor, limit)
		out = pg
		return err
	})
	return out, err
}

// Ready reports whether the instance is ready (the readiness probe): it
// runs, is a member of the group, has restored every partition assigned to
// it, none is stalled (Stalled: records waiting longer than
// Config.StalledAfter without progress), and each is within Config.ReadyLag
// records of its input; an instance with none assigned is ready to take
// some over. why says what it is doing, or which partitions are stalled and
// for how long.
func (p *Projector) Ready() (ok bool, why string) {
	select {
	case <-p.ready:
	default:
		return false, "starting"
	}
	if !p.running.Load() {
		return false, "not running"
	}
	p.mu.Lock()
	closing, assigned := p.closing, len(p.workers)
	p.mu.Unlock()
	if closing {
		return false, "stopping"
	}
	if p.joining() {
		return false, "joining the group"
	}
	owned := len(p.Owned())
	if owned < assigned {
		return false, fmt.Sprintf("restoring %d of its %d partitions", assigned-owned, assigned)
	}
	if stalls := p.stalledNow(); len(stalls) > 0 {
		return false, fmt.Sprintf("stalled: %s without progress while records wait (stalled after %v)", stallText(stalls), p.cfg.StalledAfter)
	}
	for _, l := range p.lag() {
		if l.Records > p.cfg.ReadyLag {
			return false, fmt.Sprintf("catching up: partition %d of %s is %d records behind (ready at %d)", l.Partition, l.Topic, l.Records, p.cfg.ReadyLag)
		}
	}
	return true, fmt.Sprintf("owns %d restored partitions, each within %d records of its input", owned, p.cfg.ReadyLag)
}
