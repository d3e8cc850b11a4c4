package topics

import (
	"fmt"
	"regexp"
	"strconv"
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

// Specs returns the specs of every canopy topic for a partition count. The
// inputs and the changelog are co-partitioned; wakes are co-partitioned too so
// a conductor consuming a subset of runs reads the same partition numbers.
func (n Names) Specs(partitions int32) []Spec {
	week := strconv.Itoa(7 * 24 * 3600 * 1000)
	day := strconv.Itoa(24 * 3600 * 1000)
	return []Spec{
		{Name: n.AgentEvents(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": week}},
		{Name: n.HumanInput(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": week}},
		// Tombstones stay a week: a projector trusts a Pebble checkpoint
		// for at most half that (changelog.Config.MaxCheckpointAge), so it
		// never resumes past a deletion it could no longer see.
		{Name: n.Changelog(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{
			"cleanup.policy": "compact", "min.compaction.lag.ms": "60000", "delete.retention.ms": week}},
		{Name: n.Wakes(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": day}},
		{Name: n.PriorityWakes(), Partitions: partitions, CoPartitioned: true, Configs: map[string]string{"retention.ms": day}},
		{Name: n.DeadLetter(), Partitions: partitions, Configs: map[string]string{"retention.ms": week}},
	}
}
