package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
)

// Which projector instance owns a run: the projector group's assignment,
// read through ownerCache, and the run's partition in it. Routed reads
// (reads.go) and the run list ask here.

// ownerCache caches the projector group's assignment for AssignmentTTL, so
// that a read does not ask the group coordinator every time.
//
// No lock is held across the admin call: one request reads the assignment
// (within KafkaTimeout, and not cut short when that request's client goes
// away: the others wait on its answer). When the read fails, the last
// assignment read is used however old, and the next read is tried only
// RetryAfter later: routing by a stale owner is safe, because a projector
// refuses a run it does not own (421), and a slow or absent broker must not
// turn every read into a wait. Only a request that has no assignment at all
// to use waits for a read in flight.
type ownerCache struct {
	ttl        time.Duration
	mu         sync.Mutex
	assignment map[int32]cluster.Member // nil until first read
	at         time.Time                // when assignment was read
	inflight   chan struct{}            // closed when the read in flight ends; nil if none
	err        error                    // the last read's error, nil if it succeeded
	failedAt   time.Time                // when the last read failed
}

// assignment returns the cached assignment, reading it again when it is
// older than the TTL or refresh is set.
func (g *Gateway) assignment(ctx context.Context, refresh bool) (map[int32]cluster.Member, error) {
	c := &g.owners
	c.mu.Lock()
	now := g.cfg.Now()
	fresh := c.assignment != nil && now.Sub(c.at) < c.ttl && !refresh
	backoff := c.err != nil && now.Sub(c.failedAt) < g.cfg.RetryAfter
	if fresh || backoff || c.inflight != nil && c.assignment != nil {
		c.mu.Unlock()
		return c.latest()
	}
	if wait := c.inflight; wait != nil {
		// Another request is reading the first assignment: wait for it.
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return c.latest()
	}
	wait := make(chan struct{})
	c.inflight = wait
	c.mu.Unlock()

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.KafkaTimeout)
	a, err := cluster.Assignment(rctx, g.adm, g.cfg.ProjectorGroup, g.cfg.Names)
	cancel()
	if errors.Is(err, kerr.GroupIDNotFound) {
		// No projector has joined the group yet: nobody owns anything.
		a, err = map[int32]cluster.Member{}, nil
	}
	c.mu.Lock()
	if err == nil {
		c.assignment, c.at = a, g.cfg.Now()
	} else {
		c.failedAt = g.cfg.Now()
	}
	c.err = err
	c.inflight = nil
	c.mu.Unlock()
	close(wait)
	if err != nil {
		g.cfg.Logger.Warn("gateway: cannot read the projector group's assignment", "group", g.cfg.ProjectorGroup, "err", err)
	}
	return c.latest()
}

// latest is the last assignment read, stale if the last read failed; the
// error only when there is none.
func (c *ownerCache) latest() (map[int32]cluster.Member, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assignment != nil {
		return c.assignment, nil
	}
	if c.err != nil {
		return nil, c.err
	}
	return nil, context.DeadlineExceeded
}

// owner returns the advertised address of the projector that owns run, or a
// 503 problem that says why there is none.
func (g *Gateway) owner(ctx context.Context, run string, refresh bool) (string, error) {
	a, err := g.assignment(ctx, refresh)
	if err != nil {
		return "", g.unavailable(problem.Unavailable, "cannot read the projector group's assignment from Kafka in time; retry later")
	}
	m, part, err := cluster.Owner(a, run, g.partitions)
	if errors.Is(err, cluster.ErrNoOwner) && !refresh {
		// A cached assignment may predate the owner: ask again once.
		return g.owner(ctx, run, true)
	}
	if err != nil {
		return "", g.unavailable(problem.NoOwner,
			"no projector instance owns partition %d of run %q yet (the group %q is rebalancing, or no projector is running); retry later",
			part, run, g.cfg.ProjectorGroup)
	}
	if m.Addr == "" {
		g.cfg.Logger.Error("gateway: a projector advertises no address; start it with -advertise-addr", "client_id", m.ClientID, "partition", part)
		return "", g.unavailable(problem.NoOwner,
			"the projector that owns partition %d of run %q advertises no address to read from", part, run)
	}
	return m.Addr, nil
}
