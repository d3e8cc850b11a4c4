package projector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// ErrNoInstance is returned by a Supervisor's reads while no instance
// runs: it has not started one yet, or it is replacing one that failed.
var ErrNoInstance = errors.New("projector: no projector instance is running in this process")

// Supervisor runs a process's projector instances, one at a time, and
// replaces one that fails. Run runs instances until its context ends: an
// instance that stops on a failure (a transaction that did not commit, a
// fenced producer, a broker gone for longer than a transaction may stay
// open, a storage error) is replaced by a new one after a backoff, which
// resumes from what was committed, so nothing is lost or published twice.
// Its reads (Snapshot, Ready, Owned, Counters, ...) answer for the instance
// running now, so that the query endpoint (internal/projectorhttp) and the
// metrics read through the Supervisor and never see an instance replaced.
//
// A restart loop is not hidden: each failure is reported to
// Hooks.Restarting; Ready says, until the next instance runs, when and why
// the last one failed, how many failed lately and when the next starts;
// and Lag and Stalled go on answering for the partitions the failed
// instance had, which the instances share the progress of (see
// Config.StalledAfter).
type Supervisor struct {
	cfg Config
	// started, when set (tests), is called with each instance before it
	// runs.
	started func(*Projector)

	// mu guards cur and restoredBefore together, so that Counters never
	// sees a replaced instance's restored records twice or not at all;
	// and the failures.
	mu  sync.Mutex
	cur *Projector
	// restoredBefore counts the changelog records restored by the
	// instances replaced, so that Counters' RestoredRecords never goes
	// back.
	restoredBefore int64
	// failures are when instances failed within failureWindow, oldest
	// first; last is the latest failure, and down says that no instance
	// has run since (set by a failure, cleared by the next swap). kept
	// are the partitions the failed instance had (Projector.held).
	failures []time.Time
	last     *failure
	down     bool
	kept     []int32
}

// failure is an instance's failure and when the next instance is due.
type failure struct {
	err      error
	at, next time.Time
}

// failureWindow is the window Ready counts failures in.
const failureWindow = 10 * time.Minute

// NewSupervisor validates cfg and returns a Supervisor that has started no
// instance yet: its reads answer ErrNoInstance until Run starts one.
func NewSupervisor(cfg Config) (*Supervisor, error) {
	cfg, err := cfg.prepare()
	if err != nil {
		return nil, err
	}
	return &Supervisor{cfg: cfg}, nil
}

// Run runs instances until ctx ends, and returns nil then. A configuration
// error, topics that are not co-partitioned, or a wake topic that takes
// records smaller than a wake (ErrRecordLimits), is returned at once: no
// restart can fix it; so is a data directory that another process still
// holds after Config.LockWait (ErrDataDirLocked).
func (s *Supervisor) Run(ctx context.Context) error {
	const minBackoff, maxBackoff = 500 * time.Millisecond, 30 * time.Second
	backoff := minBackoff
	var lockedSince time.Time // when the data directory was first found locked
	for {
		began := time.Now()
		err := s.runOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrConfig) || errors.Is(err, ErrNotCoPartitioned) || errors.Is(err, ErrRecordLimits) {
			return err
		}
		// A locked data directory is waited for briefly (the previous
		// process of a restart may still be closing it), then fatal: a
		// second process on the same directory must exit, so that what
		// runs it (Kubernetes, systemd) notices, not retry for ever.
		if errors.Is(err, ErrDataDirLocked) {
			if lockedSince.IsZero() {
				lockedSince = began
			}
			if time.Since(lockedSince) >= s.cfg.LockWait {
				return fmt.Errorf("%w (waited %v)", err, s.cfg.LockWait.Round(time.Second))
			}
		} else {
			lockedSince = time.Time{}
		}
		if time.Since(began) > time.Minute {
			backoff = minBackoff // it ran a while: this is a new trouble
		}
		n := s.failed(err, backoff)
		s.cfg.Hooks.Restarting(err, backoff)
		s.cfg.Logger.Error("projector failed; starting a new instance from the committed state", "err", err, "in", backoff,
			"failures_in_10m", n)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (s *Supervisor) runOnce(ctx context.Context) error {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := newInstance(startCtx, s.cfg)
	cancel()
	if err != nil {
		return err
	}
	cfg := s.cfg
	cfg.Logger.Info("projector started", "brokers", cfg.Kafka.Brokers, "group", cfg.Group, "partitions", p.Partitions(),
		"data_dir", cfg.DataDir, "transactions", !cfg.AtLeastOnce, "standby", cfg.Standby)
	if s.started != nil {
		s.started(p)
	}
	s.swap(p)
	return p.Run(ctx)
}

// swap makes p the instance the Supervisor answers for. The instance it
// replaces has stopped; its restored records stay counted.
func (s *Supervisor) swap(p *Projector) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && s.cur != p {
		s.restoredBefore += s.cur.stats.RestoredRecords.Load()
	}
	s.cur = p
	s.down = false
}

// failed records an instance's failure (or a start that failed), the next
// due after backoff, and returns how many there were within
// failureWindow.
func (s *Supervisor) failed(err error, backoff time.Duration) int {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(recent(s.failures, now), now)
	s.last, s.down = &failure{err: err, at: now, next: now.Add(backoff)}, true
	if s.cur != nil {
		s.kept = s.cur.held() // it has stopped: what it had when it did
	}
	return len(s.failures)
}

// recent is the failures within failureWindow before now.
func recent(failures []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(failures) && now.Sub(failures[i]) >= failureWindow {
		i++
	}
	return failures[i:]
}

// held is the instance that answers for the Supervisor's partitions and those
// partitions: the current instance's once the group has given it an
// assignment; before (nil), those the last instance had when it failed.
func (s *Supervisor) held() (*Projector, []int32) {
	s.mu.Lock()
	cur, down, kept := s.cur, s.down, s.kept
	s.mu.Unlock()
	if cur != nil && !down && cur.joined.Load() {
		return cur, cur.held()
	}
	return nil, kept
}

// current is the instance running now, nil if none.
func (s *Supervisor) current() *Projector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Ready says whether the current instance is ready (Projector.Ready).
// While none runs because the last one failed, it says when and why it
// failed, how many failed within the last 10 minutes, when the next starts,
// and which partitions are stalled; and an instance that is not ready yet
// after a failure says that it replaces one that failed.
func (s *Supervisor) Ready() (ok bool, why string) {
	now := s.cfg.Now()
	s.mu.Lock()
	cur, down, last := s.cur, s.down, s.last
	s.failures = recent(s.failures, now)
	n := len(s.failures)
	s.mu.Unlock()
	if down {
		var b strings.Builder
		at := last.at.UTC().Format(time.RFC3339)
		if wait := last.next.Sub(now); wait > 0 {
			fmt.Fprintf(&b, "not running: restarting after a failure at %s (%d in the last 10m, next start in %v", at, n, wait.Round(100*time.Millisecond))
		} else {
			fmt.Fprintf(&b, "not running: starting a new instance after a failure at %s (%d in the last 10m", at, n)
		}
		if stalls := s.stalled(); len(stalls) > 0 {
			fmt.Fprintf(&b, "; stalled: %s", stallText(stalls))
		}
		fmt.Fprintf(&b, "): %v", last.err)
		return false, b.String()
	}
	if cur == nil {
		return false, "starting: no projector instance has started yet"
	}
	ok, why = cur.Ready()
	if !ok && n > 0 {
		why += fmt.Sprintf(" (it replaces an instance that failed at %s, %d failures in the last 10m: %v)",
			last.at.UTC().Format(time.RFC3339), n, last.err)
	}
	return ok, why
}

// stalled returns the Supervisor's stalled partitions: the current
// instance's, or while none runs those the failed instance had.
func (s *Supervisor) stalled() []PartitionStall {
	_, parts := s.held()
	return s.cfg.progress.stalled(parts, s.cfg.Now(), s.cfg.StalledAfter)
}

// Snapshot returns run's snapshot from the current instance
// (Projector.Snapshot), ErrNoInstance without one.
func (s *Supervisor) Snapshot(ctx context.Context, run string) (*topics.AgentTreeSnapshot, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.Snapshot(ctx, run)
}

// ReadModel returns run's read model from the current instance
// (Projector.ReadModel), ErrNoInstance without one.
func (s *Supervisor) ReadModel(ctx context.Context, run string) (*projection.ReadModel, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.ReadModel(ctx, run)
}

// History returns a page of run's history from the current instance
// (Projector.History), ErrNoInstance without one.
func (s *Supervisor) History(ctx context.Context, run, cursor string, limit int) (*projection.HistoryPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.History(ctx, run, cursor, limit)
}

// Nodes returns a page of run's nodes from the current instance
// (Projector.Nodes), ErrNoInstance without one.
func (s *Supervisor) Nodes(ctx context.Context, run, cursor string, limit int) (*projection.NodesPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.Nodes(ctx, run, cursor, limit)
}

// Runs returns a page of the runs the current instance owns
// (Projector.Runs), ErrNoInstance without one.
func (s *Supervisor) Runs(ctx context.Context, after string, limit int) (*RunsPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.Runs(ctx, after, limit)
}

// Session reads a session in the partitions the current instance owns
// (Projector.Session), ErrNoInstance without one.
func (s *Supervisor) Session(ctx context.Context, q projection.SessionQuery) (*SessionPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.Session(ctx, q)
}

// SessionHistory reads a page of a session's history from the current
// instance (Projector.SessionHistory), ErrNoInstance without one.
func (s *Supervisor) SessionHistory(ctx context.Context, q projection.SessionQuery) (*SessionHistoryPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.SessionHistory(ctx, q)
}

// Owned returns the partitions the current instance owns (none without
// one).
func (s *Supervisor) Owned() []int32 {
	if p := s.current(); p != nil {
		return p.Owned()
	}
	return nil
}

// Status reads the current instance (Projector.Status), with what this
// process knows beyond it: the changelog records every instance before it
// restored, in Counts.RestoredRecords; and for Lag, a partition the
// instance has not fetched yet (it is restoring), and every partition the
// failed instance had while no instance runs, reports what this process
// last knew: the high watermark of its last fetch minus the offset the next
// owner resumes from (the oldest record fetched and not committed), so that
// the lag of a partition that a restart loop keeps from committing neither
// disappears nor reads 0 between instances. Stalled is the held
// partitions' likewise. Running is false while no instance runs.
func (s *Supervisor) Status() Status {
	s.mu.Lock()
	cur, before := s.cur, s.restoredBefore
	s.mu.Unlock()
	st := Status{Lag: s.lag(), Stalled: s.stalled(), Memory: s.cfg.Projection.Memory.Stats(), MemoryLimit: s.cfg.MemoryLimit}
	if cur != nil {
		st.Running, st.Owned, st.Pebble, st.Counts = true, cur.Owned(), cur.pebbleMetrics(), cur.stats.counts()
		cur.intakeStatus(&st)
	}
	st.Counts.RestoredRecords += before
	return st
}

// lag is Status's Lag.
func (s *Supervisor) lag() []PartitionLag {
	cur, parts := s.held()
	type key struct {
		part  int32
		topic string
	}
	live := map[key]int64{}
	if cur != nil {
		for _, l := range cur.lag() {
			live[key{l.Partition, l.Topic}] = l.Records
		}
	}
	var out []PartitionLag
	for _, part := range parts {
		for i, topic := range []string{s.cfg.Names.AgentEvents(), s.cfg.Names.HumanInput()} {
			n, ok := live[key{part, topic}]
			if !ok {
				n = s.cfg.progress.kept(part, i)
			}
			if n >= 0 {
				out = append(out, PartitionLag{Topic: topic, Partition: part, Records: n})
			}
		}
	}
	return out
}
