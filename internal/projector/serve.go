package projector

import (
	"context"
	"errors"
	"fmt"
	"github.com/canopy-dev/canopy/pkg/projection"
	"time"
)

// Serve runs projector instances until ctx ends, and returns nil then. An
// instance that stops on a failure (a transaction that did not commit, a
// fenced producer, a broker gone for longer than a transaction may stay
// open, a storage error) is replaced by a new one after a backoff: the new
// one resumes from what was committed, so nothing is lost or published
// twice. A configuration error, or topics that are not co-partitioned, is
// returned at once: no restart can fix it; so is a data directory that
// another process still holds after Config.LockWait (ErrDataDirLocked).
// started, when not nil, is called with each instance before it runs.
func Serve(ctx context.Context, cfg Config, started func(*Projector)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	// One budget for every instance Serve starts, so that its counters
	// carry across a restart.
	if cfg.Projection.Memory == nil {
		cfg.Projection.Memory = projection.NewBudget(cfg.HotRunBytes())
	}
	const minBackoff, maxBackoff = 500 * time.Millisecond, 30 * time.Second
	backoff := minBackoff
	var lockedSince time.Time // when the data directory was first found locked
	for {
		began := time.Now()
		err := serveOnce(ctx, cfg, started)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrConfig) || errors.Is(err, ErrNotCoPartitioned) {
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
			if time.Since(lockedSince) >= cfg.LockWait {
				return fmt.Errorf("%w (waited %v)", err, cfg.LockWait.Round(time.Second))
			}
		} else {
			lockedSince = time.Time{}
		}
		if time.Since(began) > time.Minute {
			backoff = minBackoff // it ran a while: this is a new trouble
		}
		cfg.Logger.Error("projector failed; starting a new instance from the committed state", "err", err, "in", backoff)
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

func serveOnce(ctx context.Context, cfg Config, started func(*Projector)) error {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := New(startCtx, cfg)
	cancel()
	if err != nil {
		return err
	}
	cfg.Logger.Info("projector started", "brokers", cfg.Brokers, "group", cfg.Group, "partitions", p.Partitions(),
		"data_dir", cfg.DataDir, "transactions", !cfg.AtLeastOnce, "standby", cfg.Standby)
	if started != nil {
		started(p)
	}
	return p.Run(ctx)
}
