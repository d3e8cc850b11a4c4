package projector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ErrGroupStalled is the error an instance stops with when its consumer
// group made no progress for Config.StallTimeout while the brokers
// answered: Serve replaces it with a fresh instance, a new member.
var ErrGroupStalled = errors.New("projector: the consumer group made no progress")

// groupHook notes when the group client loses its session (a JoinGroup
// that timed out, a coordinator that forgot the member): franz-go reports
// the partitions lost and rejoins, keeping the generation it had.
type groupHook struct{ p *Projector }

// OnGroupManageError implements kgo.HookGroupManageError.
func (h groupHook) OnGroupManageError(error) {
	_, gen := h.p.group.GroupMetadata()
	h.p.lostGen.Store(int64(gen))
	h.p.lost.Store(true)
}

// joining reports whether the member is without a generation: it never
// joined, or lost its session and has not been answered a JoinGroup since
// (the classic protocol's client keeps its old generation until then).
func (p *Projector) joining() bool {
	_, gen := p.group.GroupMetadata()
	if gen < 0 {
		return true
	}
	if p.lost.Load() {
		if int64(gen) == p.lostGen.Load() {
			return true
		}
		p.lost.Store(false) // a JoinGroup was answered since
	}
	return false
}

// watchGroup is the instance's liveness check of its group: a member that
// has no generation (it is joining) for Config.StallTimeout while the
// brokers answer a metadata request fails the instance with
// ErrGroupStalled. A rebalance that a coordinator never completes (seen:
// kfake's re-armed deadline, third_party/kfake/README.md), or a JoinGroup
// lost for good, then costs a bounded wait and a rejoin by a fresh client,
// not the partitions for ever. While the brokers do not answer, the wait
// starts again: that is an outage, which the clients' retries and the
// transaction timeout handle.
func (p *Projector) watchGroup(ctx context.Context) {
	every := min(time.Second, p.cfg.StallTimeout/10)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var since time.Time // joining since, by the wall clock
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !p.joining() {
			since = time.Time{}
			continue
		}
		now := time.Now()
		if since.IsZero() {
			since = now
			continue
		}
		stalled := now.Sub(since)
		if stalled < p.cfg.StallTimeout {
			continue
		}
		probe, cancel := context.WithTimeout(ctx, every*5)
		_, err := kadm.NewClient(p.prod).BrokerMetadata(probe)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("the consumer group has given no assignment, and the brokers do not answer: waiting for them",
					"joining_for", stalled.Round(time.Second), "err", err)
			}
			since = now
			continue
		}
		p.Stats.GroupStalls.Add(1)
		p.cfg.Hooks.GroupStalled(stalled)
		p.log.Error("the consumer group has given this instance no assignment while the brokers answer: rejoining as a fresh member",
			"group", p.cfg.Group, "joining_for", stalled.Round(time.Second), "stall_timeout", p.cfg.StallTimeout)
		p.fail(fmt.Errorf("%w: no assignment for %v while the brokers answer (group %s)", ErrGroupStalled,
			stalled.Round(time.Second), p.cfg.Group))
		return
	}
}
