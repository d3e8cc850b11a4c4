package projector

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Hooks receive what a projector does, so that metrics and telemetry
// (internal/projectormetrics) stay out of the core. The projector calls
// them from its partitions' goroutines, in each partition's order; they
// must be quick and must not block. Embed NopHooks to implement only some.
type Hooks interface {
	// Consumed reports a record read from an input topic and what became of
	// it. typ is the event type when the record decoded, else "".
	Consumed(topic string, typ topics.EventType, outcome Outcome)
	// WakeCommitted reports a wake once the commit that publishes it
	// succeeded. ctx carries the wake's publish span.
	WakeCommitted(ctx context.Context, w CommittedWake)
	// Committed reports a partition's commit (a transaction, or the
	// acknowledged batch at least once): how long it took and its error.
	Committed(partition int32, took time.Duration, err error)
	// Assigned and Revoked report the group giving and taking partitions.
	Assigned(partitions []int32)
	Revoked(partitions []int32)
	// Restored reports a finished (or failed) restore of a partition.
	Restored(partition int32, res changelog.Result, err error)
	// GroupStalled reports that the consumer group gave this instance no
	// generation for stalled while the brokers answered: the instance
	// stops, and its Supervisor starts a fresh one, a new member of the group.
	GroupStalled(stalled time.Duration)
	// PriorityCommitted reports a human input record once the commit that
	// published its wake succeeded: how long it spent in each stage of the
	// priority path.
	PriorityCommitted(partition int32, stages PriorityStages)
	// Restarting reports, from a Supervisor, that its instance stopped on err
	// (or could not start) and that a new one starts after backoff. A
	// restart loop calls it again and again.
	Restarting(err error, backoff time.Duration)
	// Rewound reports that a partition rewound to its last commit after
	// err, a failure its input may cause, to apply again what was not
	// committed (poison.go): a poison record takes a few in a row.
	Rewound(partition int32, err error)
	// RunsExpired reports that retention deleted runs finished runs of a
	// partition (projection.Config.Retention).
	RunsExpired(partition int32, runs int)
	// Redacted reports one replacement of redaction (Config.Redaction) in
	// a record's event, by rule name: once per record, not again when a
	// rewind applies the record again.
	Redacted(rule string)
}

// PriorityStage is a stage of the priority path, the way of a human input
// record from the broker to its committed wake, in order.
type PriorityStage int

// The stages of the priority path.
const (
	// StageFetch: from the record's timestamp (the gateway's produce,
	// CreateTime) to the human input client's fetch returning it.
	StageFetch PriorityStage = iota
	// StageQueued: from the fetch to its partition's worker taking it up
	// (the worker was applying agent records, or paused).
	StageQueued
	// StageApplied: projecting the record (and the rest of its batch).
	StageApplied
	// StageBuilt: building the wakes of the commit that carries it, its
	// own priority wake first.
	StageBuilt
	// StageWaited: waiting for the partition's commit in flight, which
	// must be written before the next is prepared.
	StageWaited
	// StageProduced: preparing the state changes and producing the
	// commit's records (wakes, changelog, offsets) in its transaction.
	StageProduced
	// StageCommitted: ending the transaction and writing Pebble.
	StageCommitted
	// NumPriorityStages is the number of stages.
	NumPriorityStages
)

var priorityStageNames = [NumPriorityStages]string{"fetch", "queued", "applied", "built", "waited", "produced", "committed"}

// String is the stage's name, as metrics label it.
func (s PriorityStage) String() string {
	if s < 0 || s >= NumPriorityStages {
		return "unknown"
	}
	return priorityStageNames[s]
}

// PriorityStages are the time a human input record spent in each stage.
type PriorityStages [NumPriorityStages]time.Duration

// Outcome is what became of a consumed record.
type Outcome string

// Outcomes of a consumed record.
const (
	OutcomeApplied      Outcome = "applied"
	OutcomeDuplicate    Outcome = "duplicate"
	OutcomeDeadLettered Outcome = "dead_lettered"
	OutcomeUnknownType  Outcome = "unknown_type"
	OutcomeRerouted     Outcome = "rerouted"
	// OutcomeRunExpired: an event for a run that expired, dead-lettered.
	OutcomeRunExpired Outcome = "run_expired"
	// OutcomePoison: a record whose processing failed the same way a
	// bounded number of times (Config.PoisonAttempts), dead-lettered.
	OutcomePoison Outcome = "poison"
	// OutcomeDuplicateConflict: an event whose id its run applied with
	// other content (projection.DuplicateConflictError), dead-lettered;
	// the first content stays.
	OutcomeDuplicateConflict Outcome = "duplicate_conflict"
)

// DeadLetterDuplicateConflict starts the dead-letter reason of an event
// whose id its run applied with other content.
const DeadLetterDuplicateConflict = projection.DuplicateConflictCode

// CommittedWake is a published wake with what telemetry needs about it. The
// wake itself is there for its metadata (ids, seq, truncation meta): hooks
// must never export node contents.
type CommittedWake struct {
	// Wake is the wake as committed, but for its snapshot's nodes, which
	// are not kept once the wake is encoded (Nodes is nil; a commit under
	// a backlog holds hundreds of wakes): Info.NodesIncluded counts them.
	Wake      *topics.Wake
	Info      snapshot.Info
	Partition int32
	// Build is how long the snapshot took to build.
	Build time.Duration
	// FromRecord says a record triggered the wake, so that Lag is its lag;
	// false for wakes only timers raised.
	FromRecord bool
	// Lag is the time from the timestamp of the earliest record that
	// triggered the wake (CreateTime, the producer's clock, unless the topic
	// says LogAppendTime) to its commit: negative when that clock is ahead
	// of the projector's.
	Lag time.Duration
}

// NopHooks implements Hooks by doing nothing.
type NopHooks struct{}

// Consumed does nothing.
func (NopHooks) Consumed(string, topics.EventType, Outcome) {}

// WakeCommitted does nothing.
func (NopHooks) WakeCommitted(context.Context, CommittedWake) {}

// Committed does nothing.
func (NopHooks) Committed(int32, time.Duration, error) {}

// Assigned does nothing.
func (NopHooks) Assigned([]int32) {}

// Revoked does nothing.
func (NopHooks) Revoked([]int32) {}

// Restored does nothing.
func (NopHooks) Restored(int32, changelog.Result, error) {}

// GroupStalled does nothing.
func (NopHooks) GroupStalled(time.Duration) {}

// PriorityCommitted does nothing.
func (NopHooks) PriorityCommitted(int32, PriorityStages) {}

// Restarting does nothing.
func (NopHooks) Restarting(error, time.Duration) {}

// Rewound does nothing.
func (NopHooks) Rewound(int32, error) {}

// RunsExpired does nothing.
func (NopHooks) RunsExpired(int32, int) {}

// Redacted does nothing.
func (NopHooks) Redacted(string) {}

// KafkaHooks returns the franz-go hooks (such as kprom's) for one of the
// projector's Kafka clients, named by role: "group", "human", "producer",
// "standby", or "txn-<partition>" for a partition's transactional producer.
// The projector creates and closes clients as partitions move, so it asks
// for fresh hooks for each client.
type KafkaHooks func(role string) []kgo.Hook

// Consumed counts a consumed record by its outcome.
func (s *stats) Consumed(_ string, _ topics.EventType, outcome Outcome) {
	s.Records.Add(1)
	switch outcome {
	case OutcomeApplied:
		s.Applied.Add(1)
	case OutcomeDuplicate:
		s.Duplicates.Add(1)
	case OutcomeRerouted:
		s.Rerouted.Add(1)
	case OutcomeUnknownType:
		s.UnknownType.Add(1)
		s.DeadLettered.Add(1)
	case OutcomeDuplicateConflict:
		s.DuplicateConflicts.Add(1)
		s.DeadLettered.Add(1)
	case OutcomeDeadLettered, OutcomeRunExpired:
		s.DeadLettered.Add(1)
	case OutcomePoison:
		s.Poison.Add(1)
		s.DeadLettered.Add(1)
	}
}

// WakeCommitted counts a committed wake.
func (s *stats) WakeCommitted(_ context.Context, w CommittedWake) {
	s.Wakes.Add(1)
	if w.Wake.Lane == topics.LanePriority {
		s.PriorityWakes.Add(1)
	}
}

// GroupStalled counts a stalled group.
func (s *stats) GroupStalled(time.Duration) { s.GroupStalls.Add(1) }

// Rewound counts a partition's rewind.
func (s *stats) Rewound(int32, error) { s.Rewinds.Add(1) }

// RunsExpired counts the runs retention deleted.
func (s *stats) RunsExpired(_ int32, runs int) { s.Expired.Add(int64(runs)) }

// Redacted counts a replacement of redaction.
func (s *stats) Redacted(string) { s.Redactions.Add(1) }

// Committed counts a commit: a transaction committed (or, at least once,
// a batch acknowledged and written), or one that failed.
func (s *stats) Committed(_ int32, _ time.Duration, err error) {
	if err != nil {
		s.Aborts.Add(1)
	} else {
		s.Commits.Add(1)
	}
}

// tee reports to stats, then to next: an instance's hooks.
type tee struct {
	stats *stats
	next  Hooks
}

func (t tee) Consumed(topic string, typ topics.EventType, outcome Outcome) {
	t.stats.Consumed(topic, typ, outcome)
	t.next.Consumed(topic, typ, outcome)
}

func (t tee) WakeCommitted(ctx context.Context, w CommittedWake) {
	t.stats.WakeCommitted(ctx, w)
	t.next.WakeCommitted(ctx, w)
}

func (t tee) Committed(partition int32, took time.Duration, err error) {
	t.stats.Committed(partition, took, err)
	t.next.Committed(partition, took, err)
}

func (t tee) Assigned(partitions []int32) {
	t.stats.Assigned(partitions)
	t.next.Assigned(partitions)
}

func (t tee) Revoked(partitions []int32) {
	t.stats.Revoked(partitions)
	t.next.Revoked(partitions)
}

func (t tee) Restored(partition int32, res changelog.Result, err error) {
	t.stats.Restored(partition, res, err)
	t.next.Restored(partition, res, err)
}

func (t tee) GroupStalled(stalled time.Duration) {
	t.stats.GroupStalled(stalled)
	t.next.GroupStalled(stalled)
}

func (t tee) PriorityCommitted(partition int32, stages PriorityStages) {
	t.stats.PriorityCommitted(partition, stages)
	t.next.PriorityCommitted(partition, stages)
}

func (t tee) Restarting(err error, backoff time.Duration) {
	t.stats.Restarting(err, backoff)
	t.next.Restarting(err, backoff)
}

func (t tee) Rewound(partition int32, err error) {
	t.stats.Rewound(partition, err)
	t.next.Rewound(partition, err)
}

func (t tee) RunsExpired(partition int32, runs int) {
	t.stats.RunsExpired(partition, runs)
	t.next.RunsExpired(partition, runs)
}

func (t tee) Redacted(rule string) {
	t.stats.Redacted(rule)
	t.next.Redacted(rule)
}

var (
	_ Hooks = (*stats)(nil)
	_ Hooks = tee{}
)
