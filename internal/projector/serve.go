package projector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// ErrNoInstance is returned by a Server's reads while no instance runs: it
// has not started one yet, or it is replacing one that failed.
var ErrNoInstance = errors.New("projector: no projector instance is running in this process")

// Server is a process's projector. Run runs instances until its context
// ends: an instance that stops on a failure (a transaction that did not
// commit, a fenced producer, a broker gone for longer than a transaction
// may stay open, a storage error) is replaced by a new one after a backoff,
// which resumes from what was committed, so nothing is lost or published
// twice. Its reads (Snapshot, Ready, Owned, Counters, ...) answer for the
// instance running now, so that the query endpoint (NewQueryServer) and the
// metrics read through the Server and never see an instance replaced.
type Server struct {
	cfg Config
	// started, when set (tests), is called with each instance before it
	// runs.
	started func(*Projector)

	// mu guards cur and restoredBefore together, so that Counters never
	// sees a replaced instance's restored records twice or not at all.
	mu  sync.Mutex
	cur *Projector
	// restoredBefore counts the changelog records restored by the
	// instances replaced, so that Counters' RestoredRecords never goes
	// back.
	restoredBefore int64
}

// NewServer validates cfg and returns a Server that has started no
// instance yet: its reads answer ErrNoInstance until Run starts one.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// One budget for every instance the Server starts, so that its
	// counters carry across a restart.
	if cfg.Projection.Memory == nil {
		cfg.Projection.Memory = projection.NewBudget(cfg.HotRunBytes())
	}
	return &Server{cfg: cfg}, nil
}

// Run runs instances until ctx ends, and returns nil then. A configuration
// error, topics that are not co-partitioned, or a wake topic that takes
// records smaller than a wake (ErrRecordLimits), is returned at once: no
// restart can fix it; so is a data directory that another process still
// holds after Config.LockWait (ErrDataDirLocked).
func (s *Server) Run(ctx context.Context) error {
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
		// second process on the same directory must exit, so that its
		// supervisor notices, not retry for ever.
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
		s.cfg.Logger.Error("projector failed; starting a new instance from the committed state", "err", err, "in", backoff)
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

func (s *Server) runOnce(ctx context.Context) error {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := New(startCtx, s.cfg)
	cancel()
	if err != nil {
		return err
	}
	cfg := s.cfg
	cfg.Logger.Info("projector started", "brokers", cfg.Brokers, "group", cfg.Group, "partitions", p.Partitions(),
		"data_dir", cfg.DataDir, "transactions", !cfg.AtLeastOnce, "standby", cfg.Standby)
	if s.started != nil {
		s.started(p)
	}
	s.swap(p)
	return p.Run(ctx)
}

// swap makes p the instance the Server answers for. The instance it
// replaces has stopped; its restored records stay counted.
func (s *Server) swap(p *Projector) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && s.cur != p {
		s.restoredBefore += s.cur.Stats.RestoredRecords.Load()
	}
	s.cur = p
}

// current is the instance running now, nil if none.
func (s *Server) current() *Projector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Ready says whether the current instance is ready (Projector.Ready).
func (s *Server) Ready() (ok bool, why string) {
	p := s.current()
	if p == nil {
		return false, "no projector instance is running"
	}
	return p.Ready()
}

// Snapshot returns run's snapshot from the current instance
// (Projector.Snapshot), ErrNoInstance without one.
func (s *Server) Snapshot(ctx context.Context, run string) (*topics.AgentTreeSnapshot, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.Snapshot(ctx, run)
}

// ReadModel returns run's read model from the current instance
// (Projector.ReadModel), ErrNoInstance without one.
func (s *Server) ReadModel(ctx context.Context, run string) (*projection.ReadModel, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.ReadModel(ctx, run)
}

// History returns a page of run's history from the current instance
// (Projector.History), ErrNoInstance without one.
func (s *Server) History(ctx context.Context, run, cursor string, limit int) (*projection.HistoryPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.History(ctx, run, cursor, limit)
}

// Nodes returns a page of run's nodes from the current instance
// (Projector.Nodes), ErrNoInstance without one.
func (s *Server) Nodes(ctx context.Context, run, cursor string, limit int) (*projection.NodesPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.Nodes(ctx, run, cursor, limit)
}

// Runs returns a page of the runs the current instance owns
// (Projector.Runs), ErrNoInstance without one.
func (s *Server) Runs(ctx context.Context, after string, limit int) (*RunsPage, error) {
	p := s.current()
	if p == nil {
		return nil, ErrNoInstance
	}
	return p.Runs(ctx, after, limit)
}

// Owned returns the partitions the current instance owns (none without
// one).
func (s *Server) Owned() []int32 {
	if p := s.current(); p != nil {
		return p.Owned()
	}
	return nil
}

// Lag returns the current instance's lag (Projector.Lag).
func (s *Server) Lag() []PartitionLag {
	if p := s.current(); p != nil {
		return p.Lag()
	}
	return nil
}

// Memory returns the figures of the budget of runs in memory, which every
// instance of the Server shares.
func (s *Server) Memory() projection.BudgetStats { return s.cfg.Projection.Memory.Stats() }

// MemoryLimit is Config.MemoryLimit, defaults applied.
func (s *Server) MemoryLimit() int64 { return s.cfg.MemoryLimit }

// PebbleMetrics returns the current instance's state store metrics, nil
// without one or while it shuts down.
func (s *Server) PebbleMetrics() *pebble.Metrics {
	if p := s.current(); p != nil {
		return p.PebbleMetrics()
	}
	return nil
}

// Counters returns the current instance's counters, with the changelog
// records every instance before it restored in RestoredRecords; running
// is false while none runs (then only RestoredRecords is set).
func (s *Server) Counters() (c Counters, running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		c, running = s.cur.Counters()
	}
	c.RestoredRecords += s.restoredBefore
	return c, running
}
