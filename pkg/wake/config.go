package wake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Config is a conductor's wake consumer. Zero fields take the default their
// comment names; only Brokers is required.
type Config struct {
	// Brokers are the Kafka seed brokers, host:port. Required.
	Brokers []string
	// ClientOpts are added to every option the consumer sets, for TLS
	// (kgo.DialTLSConfig), SASL (kgo.SASL), a client id, and so on.
	ClientOpts []kgo.Opt
	// Names are the topic names; default prefix "canopy", version 1.
	Names topics.Names
	// Group is the consumer group of this conductor's instances; default
	// "canopy-conductor". Instances of one conductor share it and split the
	// partitions; every other conductor needs its own.
	Group string
	// Source is the CloudEvents source of the acknowledgements; default
	// "/conductors/" + Group.
	Source string
	// AgentID is the agent id of an acknowledgement when the wake's snapshot
	// has no root agent; default "conductor". Otherwise the root (the
	// conductor node) is used, so acknowledging never adds a node to the
	// tree.
	AgentID string
	// NoAck turns the wake_received acknowledgements off (default false:
	// each handled wake is acknowledged on the agent events topic, which is
	// what lets the delivery watchdog mark its results forwarded).
	NoAck bool
	// StaleAfter is the snapshot age over which a wake counts as stale at
	// receipt; default 10s, the projector's default (snapshot.DefaultStaleAfter).
	StaleAfter time.Duration
	// DedupeSize is how many recent wake ids are remembered to drop
	// duplicates; default 10,000. Memory stays bounded by it.
	DedupeSize int
	// MaxQueued is how many fetched normal wakes may wait in memory for the
	// handler; default 32. At that many the consumer pauses fetching the
	// normal topic, and resumes at half, so a backlog (or a slow handler,
	// such as one that calls a model) leaves the wakes in Kafka rather
	// than in memory. The priority topic is never paused: a priority wake
	// fetched while normal wakes wait is delivered before them. Rebalances
	// are allowed while the handler runs, so a slow handler does not hold
	// one past the group's rebalance timeout; queued wakes of a partition
	// that moves to another member are dropped (that member delivers them),
	// and a wake whose partition moved while it was handled is acknowledged
	// but not committed, so it may come again: duplicates are dropped by
	// wake_id within a process, and acknowledgements of the same wake share
	// an event id, which the projector applies once.
	MaxQueued int
	// PriorityWait bounds how long normal wakes wait, after partitions are
	// assigned, for the priority backlog listed then to arrive; default 5s.
	// It is only reached when that backlog cannot be fetched.
	PriorityWait time.Duration
	// Now is the wall clock staleness is measured on and acknowledgements
	// are timed with; default time.Now. Tests inject one.
	Now func() time.Time
	// Observer is told about every delivered wake (conductor.wake.received);
	// nil means none.
	Observer Observer
	// TracerProvider makes the "process" span of each wake; nil means no
	// tracing (never the global provider, so a library does not trace by
	// surprise).
	TracerProvider trace.TracerProvider
	// Logger gets one line per received wake (metadata only); default
	// slog.Default().
	Logger *slog.Logger
}

// Observer is told about every wake delivered to the handler, with the
// context of the wake's process span. Implementations must be safe to call
// from the consumer's goroutine and should not block.
type Observer interface {
	WakeReceived(ctx context.Context, r Received)
}

// Defaults of Config.
const (
	DefaultGroup        = "canopy-conductor"
	DefaultAgentID      = "conductor"
	DefaultDedupeSize   = 10_000
	DefaultPriorityWait = 5 * time.Second
	DefaultMaxQueued    = 32
)

// ErrConfig is wrapped by Validate's error.
var ErrConfig = errors.New("wake: invalid config")

func (c Config) withDefaults() Config {
	if c.Names == (topics.Names{}) {
		c.Names = topics.DefaultNames()
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Source == "" {
		c.Source = "/conductors/" + c.Group
	}
	if c.AgentID == "" {
		c.AgentID = DefaultAgentID
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = snapshot.DefaultStaleAfter
	}
	if c.DedupeSize == 0 {
		c.DedupeSize = DefaultDedupeSize
	}
	if c.PriorityWait == 0 {
		c.PriorityWait = DefaultPriorityWait
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem with c, each with what to do about it.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []string
	if len(c.Brokers) == 0 {
		errs = append(errs, "no brokers: set Brokers to host:port of at least one Kafka broker")
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			errs = append(errs, fmt.Sprintf("broker %q: want host:port", b))
		}
	}
	if err := c.Names.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if c.StaleAfter < 0 {
		errs = append(errs, fmt.Sprintf("stale after %v: must not be negative", c.StaleAfter))
	}
	if c.DedupeSize < 0 {
		errs = append(errs, fmt.Sprintf("dedupe size %d: must not be negative (0 means the default %d)", c.DedupeSize, DefaultDedupeSize))
	}
	if c.MaxQueued < 0 {
		errs = append(errs, fmt.Sprintf("max queued %d: must not be negative (0 means the default %d)", c.MaxQueued, DefaultMaxQueued))
	}
	if c.PriorityWait < 0 {
		errs = append(errs, fmt.Sprintf("priority wait %v: must not be negative", c.PriorityWait))
	}
	// The acknowledgement is an event: its source and fallback agent id
	// must pass the contract's identifier rules.
	probe := topics.Event{ID: "probe", Source: c.Source, Time: topics.NewTime(time.Unix(0, 0)), RunID: "probe", AgentID: c.AgentID,
		SchemaVersion: topics.CurrentSchemaVersion, Data: &topics.WakeReceived{WakeID: "probe"}}
	if err := probe.Validate(); err != nil {
		errs = append(errs, fmt.Sprintf("source %q or agent id %q: %v", c.Source, c.AgentID, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return nil
}
