package harness

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
)

// Scenarios is the standard set, in the order it runs them: max first,
// because steady runs at half the maximum it measured.
var Scenarios = []string{"max", "steady", "grow", "priority", "scale", "failover"}

// MoreScenarios run only when named (Config.Scenarios): soak sends millions
// of events for minutes, too long for the standard set.
var MoreScenarios = []string{"soak"}

// The brokers the harness can start (Config.Kafka).
const (
	KafkaEmbedded = "kfake" // franz-go's kfake, in the harness process
	KafkaReal     = "real"  // Apache Kafka, a KRaft node in a child JVM
)

// Config configures a harness invocation. Zero fields take the default
// their comment names.
type Config struct {
	// Scenarios to run, from Scenarios and MoreScenarios; default all of
	// Scenarios (the standard set), in that order.
	Scenarios []string
	// Brokers are the seed brokers of the Kafka to run against; default
	// none: a broker on loopback that the harness starts, of the kind
	// Kafka names.
	Brokers []string
	// Kafka is the broker the harness starts when Brokers is empty:
	// KafkaEmbedded (default), franz-go's kfake in this process; or
	// KafkaReal, Apache Kafka (internal/apachekafka: a KRaft node in a
	// child JVM, from tools/kafka/lib).
	Kafka string
	// ProjectorArgs are more flags for every projector instance, after
	// the harness's own (e.g. -group-protocol consumer).
	ProjectorArgs []string
	// Projector is the projector binary each instance runs as; default
	// "bin/projector" (make build).
	Projector string
	// Partitions of every topic; default 6, so that 1, 2 and 3 instances
	// share them evenly.
	Partitions int
	// Duration is how long the open-loop scenarios (steady, priority)
	// measure; default 30s.
	Duration time.Duration
	// Rate is steady's target rate in events/s; default half the maximum
	// measured by max in the same invocation (max runs first if needed).
	Rate float64
	// Runs under way at once in the traffic; default 50.
	Runs int
	// Nodes of an ordinary run; default 200.
	Nodes int
	// HugeShare is the share of huge runs in steady's traffic; default
	// 0.02 (one run in fifty). Negative: none.
	HugeShare float64
	// HugeNodes is the size of a huge run, and of grow's run; default
	// 100,000.
	HugeNodes int
	// HumanRate is the rate of human inputs through the gateway, per
	// second, in steady and priority; default 5.
	HumanRate float64
	// MaxEvents is about how many events the closed-loop scenarios (max,
	// scale) produce; default 200,000.
	MaxEvents int
	// Backlog is how many events wait on the agent lane in priority;
	// default 1,000,000.
	Backlog int
	// Instances are the projector instance counts scale compares; default
	// 1, 2 and 3.
	Instances []int
	// FailoverInstances run in failover, one of which is killed; default 2.
	FailoverInstances int
	// FailoverWarmup is how long failover's load runs before the kill, and
	// after the session timeout has passed; default 10s.
	FailoverWarmup time.Duration
	// SessionTimeout is the projector group's session timeout: a killed
	// instance's partitions move once it has passed. Default 3s, below the
	// projector's own 6 s default (which stock Kafka's
	// group.min.session.timeout.ms allows): the harness's brokers allow
	// 1 s, and every scenario reports its rebalances (Reassignments), so
	// a session too short for the load shows.
	SessionTimeout time.Duration
	// ProfileDir, when set, gets a CPU profile of every projector instance
	// that stops cleanly (SIGTERM), as <stage>-i<n>.cpu.pprof, and the heap
	// profile of every instance still running at its stage's end, as
	// <stage>-i<n>.heap.pprof: pprof of the bench scenarios. Default none.
	ProfileDir string
	// WorkDir holds the projectors' data directories; default a new
	// temporary directory, removed at the end.
	WorkDir string
	// Progress receives a progress line every ProgressEvery; default
	// io.Discard.
	Progress io.Writer
	// ProgressEvery is the interval of the progress lines; default 5s.
	ProgressEvery time.Duration
	// Pin, when set, runs each projector instance on a CPU of its own and
	// the harness (the embedded broker, the gateway, the load and the
	// readers) on the others, so that the projector's figures are not the
	// harness's contention: the projectors get the last min(I, N-1) of the
	// N CPUs this process may use, I the most instances any scenario runs,
	// one each (round-robin when a scenario runs more instances than that),
	// with GOMAXPROCS set to match. It needs 2 CPUs at least. Default off.
	Pin bool
	// Repeat is how many times each scenario runs: the runs are
	// interleaved (every scenario once, then again), each with the
	// baselines it measures in its own run, and the targets are judged on
	// the median of the runs (summary.go); default 1.
	Repeat int
	// Command is the command line recorded in the result; default
	// "go run ./bench".
	Command string

	// SoakEvents is about how many events soak sends; default 5,000,000.
	SoakEvents int
	// SoakRate is soak's open-loop rate in events/s; default 60% of the
	// maximum measured by max in the same invocation (max runs first if
	// needed), at most 10,000 (soak is bound by memory: see soakMaxRate).
	SoakRate float64
	// SoakNodes are the nodes of each of soak's runs; default 20 (about
	// 220 events a run, so that 5,000,000 events make over 20,000 runs).
	SoakNodes int
	// SoakRetention is the projector's -retention in soak: how long a
	// finished run is kept after its last event; default 20s.
	SoakRetention time.Duration
	// SoakTimers bounds the timers of soak's runs (workload.TreeSpec.FinishTimers):
	// delegations expect a result within it, requests live half of it, so
	// a run is finished at most this long after its last event; default
	// workload.DefaultFinishTimers (20s).
	SoakTimers time.Duration
	// SoakSampleEvery is the interval of soak's samples (RSS, heap, Pebble,
	// changelog, live runs); default 5s.
	SoakSampleEvery time.Duration
	// SoakCompactEvery is how often soak has the embedded broker compact
	// its compacted topics (kfake's own cleaner runs every
	// log.cleaner.backoff.ms, an hour by default; Kafka's default is 15 s);
	// default 15s; negative: never. Other brokers compact on their own.
	SoakCompactEvery time.Duration
}

// ErrConfig is wrapped by Validate's error.
var ErrConfig = errors.New("bench: invalid config")

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if len(c.Scenarios) == 0 {
		c.Scenarios = slices.Clone(Scenarios)
	}
	if c.Projector == "" {
		c.Projector = "bin/projector"
	}
	if c.Kafka == "" {
		c.Kafka = KafkaEmbedded
	}
	if c.Partitions == 0 {
		c.Partitions = 6
	}
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Runs == 0 {
		c.Runs = 50
	}
	if c.Nodes == 0 {
		c.Nodes = 200
	}
	if c.HugeShare == 0 {
		c.HugeShare = 0.02
	}
	if c.HugeNodes == 0 {
		c.HugeNodes = 100_000
	}
	if c.HumanRate == 0 {
		c.HumanRate = 5
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = 200_000
	}
	if c.Backlog == 0 {
		c.Backlog = 1_000_000
	}
	if len(c.Instances) == 0 {
		c.Instances = []int{1, 2, 3}
	}
	if c.FailoverInstances == 0 {
		c.FailoverInstances = 2
	}
	if c.FailoverWarmup == 0 {
		c.FailoverWarmup = 10 * time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 3 * time.Second
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 5 * time.Second
	}
	if c.Command == "" {
		c.Command = "go run ./bench"
	}
	if c.Repeat == 0 {
		c.Repeat = 1
	}
	return c.withSoakDefaults()
}

// withSoakDefaults returns c with soak's zero fields set to their defaults.
func (c Config) withSoakDefaults() Config {
	if c.SoakEvents == 0 {
		c.SoakEvents = 5_000_000
	}
	if c.SoakNodes == 0 {
		c.SoakNodes = 20
	}
	if c.SoakRetention == 0 {
		c.SoakRetention = 20 * time.Second
	}
	if c.SoakTimers == 0 {
		c.SoakTimers = workload.DefaultFinishTimers
	}
	if c.SoakSampleEvery == 0 {
		c.SoakSampleEvery = 5 * time.Second
	}
	if c.SoakCompactEvery == 0 {
		c.SoakCompactEvery = 15 * time.Second
	}
	return c
}

// Validate reports every problem with c (after defaults) in one error.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var ps []string
	for _, s := range c.Scenarios {
		if !slices.Contains(Scenarios, s) && !slices.Contains(MoreScenarios, s) {
			ps = append(ps, fmt.Sprintf("scenario %q: want one of %s", s, strings.Join(append(slices.Clone(Scenarios), MoreScenarios...), ", ")))
		}
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			ps = append(ps, fmt.Sprintf("broker %q: want host:port", b))
		}
	}
	if c.Kafka != KafkaEmbedded && c.Kafka != KafkaReal {
		ps = append(ps, fmt.Sprintf("kafka %q: want %s or %s", c.Kafka, KafkaEmbedded, KafkaReal))
	}
	check := func(ok bool, format string, args ...any) {
		if !ok {
			ps = append(ps, fmt.Sprintf(format, args...))
		}
	}
	check(c.Repeat >= 1 && c.Repeat <= 10, "repeat %d: want 1 to 10 runs of each scenario", c.Repeat)
	check(c.Partitions >= 1, "partitions %d: want 1 or more", c.Partitions)
	check(c.Duration >= time.Second, "duration %v: want 1s or more", c.Duration)
	check(c.Rate >= 0, "rate %v: want 0 (half the measured maximum) or more", c.Rate)
	check(c.Runs >= 1, "runs %d: want 1 or more", c.Runs)
	check(c.Nodes >= 2, "nodes %d: want 2 or more", c.Nodes)
	check(c.HugeShare <= 1, "huge share %v: want at most 1", c.HugeShare)
	check(c.HugeNodes >= 100, "huge nodes %d: want 100 or more (grow measures from 100 nodes)", c.HugeNodes)
	check(c.HumanRate > 0, "human rate %v: want more than 0", c.HumanRate)
	check(c.MaxEvents >= 1000, "max events %d: want 1000 or more", c.MaxEvents)
	check(c.Backlog >= 1000, "backlog %d: want 1000 or more", c.Backlog)
	if slices.Contains(c.Scenarios, "scale") {
		for _, n := range c.Instances {
			check(n >= 1 && n <= c.Partitions, "instances %d: want 1 to the partition count (%d)", n, c.Partitions)
		}
	}
	if slices.Contains(c.Scenarios, "failover") {
		check(c.FailoverInstances >= 2 && c.FailoverInstances <= c.Partitions,
			"failover instances %d: want 2 (one to kill, one to take over) to the partition count (%d)", c.FailoverInstances, c.Partitions)
	}
	check(c.FailoverWarmup >= time.Second, "failover warm-up %v: want 1s or more", c.FailoverWarmup)
	check(c.SessionTimeout >= time.Second, "session timeout %v: want 1s or more", c.SessionTimeout)
	check(c.ProgressEvery > 0, "progress interval %v: want more than 0", c.ProgressEvery)
	check(c.SoakEvents >= 1000, "soak events %d: want 1000 or more", c.SoakEvents)
	check(c.SoakRate >= 0, "soak rate %v: want 0 (60%% of the measured maximum) or more", c.SoakRate)
	check(c.SoakNodes >= 2, "soak nodes %d: want 2 or more", c.SoakNodes)
	check(c.SoakRetention >= time.Second, "soak retention %v: want 1s or more", c.SoakRetention)
	check(c.SoakTimers >= 100*time.Millisecond, "soak timers %v: want 100ms or more", c.SoakTimers)
	check(c.SoakSampleEvery >= 100*time.Millisecond, "soak sample interval %v: want 100ms or more", c.SoakSampleEvery)
	if len(ps) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(ps, "; "))
	}
	return nil
}
