package topics

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// DefaultPrefix and DefaultVersion make the default topic names, e.g.
// "canopy.agent-events.v1".
const (
	DefaultPrefix  = "canopy"
	DefaultVersion = 1
)

// Names derives every topic name from a prefix and a contract version. A new
// version gets new topics, so an incompatible contract never shares a topic
// with the old one.
type Names struct {
	// Prefix starts every name; default "canopy". Letters, digits, '.', '_' and '-'.
	Prefix string
	// Version is the contract version suffix; default 1.
	Version int
}

// DefaultNames returns the names with the default prefix and version.
func DefaultNames() Names { return Names{Prefix: DefaultPrefix, Version: DefaultVersion} }

var topicChars = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// Validate reports what is wrong with the prefix or version.
func (n Names) Validate() error {
	switch {
	case n.Prefix == "" || !topicChars.MatchString(n.Prefix):
		return fmt.Errorf("topics: prefix %q: use letters, digits, '.', '_' and '-'", n.Prefix)
	case len(n.Prefix) > 200:
		return fmt.Errorf("topics: prefix is longer than 200 characters")
	case n.Version < 1:
		return fmt.Errorf("topics: version %d: must be 1 or more", n.Version)
	}
	return nil
}

func (n Names) name(base string) string {
	return n.Prefix + "." + base + ".v" + strconv.Itoa(n.Version)
}

// AgentEvents is the topic agents produce their events to (key = run id).
func (n Names) AgentEvents() string { return n.name("agent-events") }

// HumanInput is the priority input lane the gateway produces human input to.
func (n Names) HumanInput() string { return n.name("human-input") }

// Changelog is the compacted topic of projector state changes.
func (n Names) Changelog() string { return n.name("projector-changelog") }

// Wakes is the normal-lane wake topic conductors consume.
func (n Names) Wakes() string { return n.name("wakes") }

// PriorityWakes is the wake topic for wakes raised by human input.
func (n Names) PriorityWakes() string { return n.name("wakes-priority") }

// DeadLetter receives input records that cannot be decoded or fail the schema.
func (n Names) DeadLetter() string { return n.name("dead-letter") }

// WakeTopic returns the wake topic of a lane.
func (n Names) WakeTopic(l Lane) string {
	if l == LanePriority {
		return n.PriorityWakes()
	}
	return n.Wakes()
}

// Spec is how a topic is created: its partition count and topic configs.
type Spec struct {
	Name       string
	Partitions int32
	// CoPartitioned topics must all have the same partition count.
	CoPartitioned bool
	Configs       map[string]string
}

// DefaultTombstoneRetention is how long the changelog keeps the tombstone
// of a deleted key (its delete.retention.ms) unless TombstoneRetention says
// otherwise: a day, Kafka's own default.
const DefaultTombstoneRetention = 24 * time.Hour

// ChangelogSegment is the changelog's segment.ms for a tombstone retention
// (delete.retention.ms): an hour at most, and no longer than the retention.
// Apache Kafka's cleaner never cleans a partition's active segment (rolled
// every 7 days by default), so a tombstone could otherwise outlive its
// delete.retention.ms by a week.
func ChangelogSegment(tombstones time.Duration) time.Duration { return min(time.Hour, tombstones) }

// SpecOption changes what Specs makes.
type SpecOption func(*specOptions)

type specOptions struct {
	tombstones time.Duration
}

// TombstoneRetention sets the changelog's delete.retention.ms: how long
// compaction keeps a deleted key's tombstone, so how long the changelog
// keeps deletions besides the live state. Its segment.ms is an hour, or d
// if that is shorter. A projector trusts a Pebble checkpoint for half of d
// (it reads the topic's value at start), so it never resumes past a
// deletion whose tombstone may be gone. d below a millisecond keeps the
// default.
func TombstoneRetention(d time.Duration) SpecOption {
	return func(o *specOptions) {
		if d >= time.Millisecond {
			o.tombstones = d
		}
	}
}

// Specs returns the specs of every canopy topic for a partition count. The
// inputs and the changelog are co-partitioned; wakes are co-partitioned too so
// a conductor consuming a subset of runs reads the same partition numbers.
func (n Names) Specs(partitions int32, opts ...SpecOption) []Spec {
	o := specOptions{tombstones: DefaultTombstoneRetention}
	for _, opt := range opts {
		opt(&o)
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	week := ms(7 * 24 * time.Hour)
	day := ms(24 * time.Hour)
	return []Spec{
		{Name: n.AgentEvents(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": week}},
		{Name: n.HumanInput(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": week}},
		{Name: n.Changelog(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{
			"cleanup.policy": "compact", "min.compaction.lag.ms": "60000",
			"delete.retention.ms": ms(o.tombstones), "segment.ms": ms(ChangelogSegment(o.tombstones))}},
		{Name: n.Wakes(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": day}},
		{Name: n.PriorityWakes(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": day}},
		{Name: n.DeadLetter(), Partitions: partitions, Configs: map[string]string{"retention.ms": week}},
	}
}
