package projector

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canopy-dev/canopy/pkg/projection"
)

// What a projector reports. Everything it does goes through its Hooks
// (hooks.go): the metrics adapter (internal/projectormetrics) counts there,
// and so does each instance, in its stats, for what is read at one time
// rather than counted: Status, the one read of a projector, which the
// metrics adapter scrapes, and tests and canopy-dev read.

// Status is what a projector is and has done, read at one time.
type Status struct {
	// Running says an instance runs. A Supervisor between two instances
	// reports Lag, Stalled and Counts.RestoredRecords only.
	Running bool
	// Owned are the partitions the instance owns and has restored, in
	// order.
	Owned []int32
	// Lag is how far each owned partition is behind each input topic, in
	// partition order (Projector.lag); Stalled the partitions whose records
	// wait without progress (Config.StalledAfter).
	Lag     []PartitionLag
	Stalled []PartitionStall
	// Memory is the budget of runs in memory, which the instance's
	// partitions (and a Supervisor's instances) share; MemoryLimit is
	// Config.MemoryLimit, defaults applied.
	Memory      projection.BudgetStats
	MemoryLimit int64
	// QueuedBytes is what the fetched agent records waiting for the
	// partitions hold (Config.MaxQueuedBytes bounds it); Throttling says
	// the agent intake is paused for memory now (intake.go).
	QueuedBytes int64
	Throttling  bool
	// Pebble is the state store's metrics (compactions, disk usage, cache
	// hits), nil once the instance is shutting down.
	Pebble *pebble.Metrics
	// Counts are what the instance counted.
	Counts Counts
}

// Counts are what an instance counted since it started.
type Counts struct {
	// Records counts the records consumed, Applied and the rest of them
	// by outcome (Hooks.Consumed); DeadLettered counts every record sent
	// to the dead-letter topic, UnknownType, RunExpired,
	// DuplicateConflicts and Poison ones included.
	Records, Applied, Duplicates, DeadLettered, UnknownType, Rerouted int64
	// DuplicateConflicts counts the events whose id their run applied
	// with other content (OutcomeDuplicateConflict); Poison the records
	// dead-lettered as poison, Rewinds the times a partition rewound to
	// apply again what was not committed (poison.go).
	DuplicateConflicts, Poison, Rewinds int64
	// Wakes counts the committed wakes, PriorityWakes those of the
	// priority lane.
	Wakes, PriorityWakes int64
	// GroupStalls is 1 once the instance found its group stalled and
	// stopped (ErrGroupStalled).
	GroupStalls int64
	// Commits counts the commits that succeeded (a transaction committed
	// and written to Pebble, or at least once, acknowledged and written),
	// Aborts those that failed.
	Commits, Aborts int64
	// Expired counts the finished runs retention deleted.
	Expired int64
	// Redactions counts the replacements redaction made in the events
	// of the records consumed (Hooks.Redacted).
	Redactions int64
	// Restoring is the number of partitions restoring from the changelog
	// now; RestoredRecords the changelog records restores wrote, as they
	// go (a Supervisor's, of every instance it ran).
	Restoring, RestoredRecords int64
	// StandbyRecords counts the changelog records standby replicas
	// applied.
	StandbyRecords int64
	// GatePauses counts the times a partition's worker paused its agent
	// records while another partition's human input was on its way,
	// GatePaused the time they spent paused (gate.go).
	GatePauses int64
	GatePaused time.Duration
	// Throttles counts the times the agent intake paused because the
	// heap was short of memory, Throttled the time it spent paused
	// (intake.go).
	Throttles int64
	Throttled time.Duration
}

// stats are an instance's Counts as it counts them: as a Hooks
// implementation (hooks.go), which the instance reports to before
// Config.Hooks, and where they happen for what no hook reports (restore
// progress, standby replicas, the gate's pauses).
type stats struct {
	NopHooks
	Records, Applied, Duplicates, DeadLettered, UnknownType, Rerouted atomic.Int64
	DuplicateConflicts, Poison, Rewinds                               atomic.Int64
	Wakes, PriorityWakes                                              atomic.Int64
	GroupStalls                                                       atomic.Int64
	Commits, Aborts                                                   atomic.Int64
	Expired, Redactions                                               atomic.Int64
	Restoring, RestoredRecords                                        atomic.Int64
	StandbyRecords                                                    atomic.Int64
	GatePauses, GatePausedNanos                                       atomic.Int64
}

// counts reads s.
func (s *stats) counts() Counts {
	return Counts{
		Records: s.Records.Load(), Applied: s.Applied.Load(), Duplicates: s.Duplicates.Load(), DeadLettered: s.DeadLettered.Load(),
		UnknownType: s.UnknownType.Load(), Rerouted: s.Rerouted.Load(), DuplicateConflicts: s.DuplicateConflicts.Load(),
		Poison: s.Poison.Load(), Rewinds: s.Rewinds.Load(), Wakes: s.Wakes.Load(), PriorityWakes: s.PriorityWakes.Load(),
		GroupStalls: s.GroupStalls.Load(), Commits: s.Commits.Load(), Aborts: s.Aborts.Load(), Expired: s.Expired.Load(),
		Redactions: s.Redactions.Load(), Restoring: s.Restoring.Load(), RestoredRecords: s.RestoredRecords.Load(), StandbyRecords: s.StandbyRecords.Load(),
		GatePauses: s.GatePauses.Load(), GatePaused: time.Duration(s.GatePausedNanos.Load()),
	}
}

// Status reads the instance: it is running, since it is its own instance.
func (p *Projector) Status() Status {
	st := Status{Running: true, Owned: p.Owned(), Lag: p.lag(), Stalled: p.stalledNow(),
		Memory: p.cfg.Projection.Memory.Stats(), MemoryLimit: p.cfg.MemoryLimit, Pebble: p.pebbleMetrics(), Counts: p.stats.counts()}
	p.intakeStatus(&st)
	return st
}

// intakeStatus adds the intake's figures (intake.go) to st: what is
// queued, and the governor's pauses. A projector built without a governor
// (by hand, in tests) has none.
func (p *Projector) intakeStatus(st *Status) {
	st.QueuedBytes = p.queuedBytes()
	if g := p.gov; g != nil {
		st.Counts.Throttles, st.Counts.Throttled = g.throttles.Load(), time.Duration(g.throttledNanos.Load())
		st.Throttling = g.throttling.Load()
	}
}

// queuedBytes is what the agent records waiting for the workers hold.
func (p *Projector) queuedBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, w := range p.workers {
		n += w.in.pendingBytes.Load()
	}
	return n
}

// PartitionLag is how far one owned partition is behind an input topic.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Records is the high watermark minus the next offset to apply, as of
	// the partition's last fetch.
	Records int64
}

// lag reports the lag of every owned partition on both input topics, in
// partition order. A partition not fetched from yet reports nothing.
func (p *Projector) lag() []PartitionLag {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PartitionLag
	for _, part := range slices.Sorted(maps.Keys(p.workers)) {
		w := p.workers[part]
		for i, topic := range []string{p.cfg.Names.AgentEvents(), p.cfg.Names.HumanInput()} {
			if n := w.in.lag[i].Load(); n >= 0 {
				out = append(out, PartitionLag{Topic: topic, Partition: part, Records: n})
			}
		}
	}
	return out
}

// pebbleMetrics returns the state store's metrics, or nil before the
// state is open or once the projector is shutting down.
func (p *Projector) pebbleMetrics() *pebble.Metrics {
	// Holding mu keeps shutdown, which sets closing under mu before it
	// closes the database, from closing it meanwhile.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing || p.db == nil {
		return nil
	}
	return p.db.Metrics()
}
