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
// answered: its Supervisor replaces it with a fresh instance, a new member.
var ErrGroupStalled = errors.New("projector: the consumer group made no progress")

// ErrSessionUncertain is returned for reads while this instance cannot
// know that it still owns its partitions: the process was paused (SIGSTOP,
// a stalled VM, extreme starvation) for long enough that its group session
// may have expired and another instance may own them now.
var ErrSessionUncertain = errors.New("projector: this instance was paused; it may no longer own its partitions")

// notePause records that the process runs at now. A gap since the last
// note of more than the session timeout means the process was paused long
// enough for the group to have given its partitions away (a shorter pause
// cannot have expired the session): reads are
// refused until two heartbeat intervals (and a second) later, by when the
// group client has heard from the coordinator and revoked what it lost.
func (p *Projector) notePause(now time.Time) {
	last := p.alive.Swap(now.UnixNano())
	if last != 0 && now.UnixNano()-last > int64(p.cfg.SessionTimeout) {
		until := now.Add(p.cfg.SessionTimeout/3 + time.Second)
		p.uncertainUntil.Store(until.UnixNano())
		p.log.Warn("the process was paused: refusing reads until the group confirms what this instance owns",
			"paused", time.Duration(now.UnixNano()-last).Round(time.Millisecond), "until", until)
	}
}

// sessionUncertain reports whether reads must be refused: the process
// was paused lately (notePause), or is only now running again and
// watchGroup has not seen it yet.
func (p *Projector) sessionUncertain(now time.Time) bool {
	last := p.alive.Load()
	if last == 0 {
		return false // not running yet: nothing is owned
	}
	return now.UnixNano()-last > int64(p.cfg.SessionTimeout) || now.UnixNano() < p.uncertainUntil.Load()
}

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
	every := min(time.Second, p.cfg.StallTimeout/10, p.cfg.SessionTimeout/6)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var since time.Time // joining since, by the wall clock
	p.alive.Store(time.Now().UnixNano())
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.notePause(time.Now())
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
		p.hooks.GroupStalled(stalled)
		p.log.Error("the consumer group has given this instance no assignment while the brokers answer: rejoining as a fresh member",
			"group", p.cfg.Group, "joining_for", stalled.Round(time.Second), "stall_timeout", p.cfg.StallTimeout)
		p.fail(fmt.Errorf("%w: no assignment for %v while the brokers answer (group %s)", ErrGroupStalled,
			stalled.Round(time.Second), p.cfg.Group))
		return
	}
}
