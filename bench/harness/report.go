package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Report is the result of one harness invocation, written as the JSON
// result file. Field names follow the OpenMessaging Benchmark's result
// (publishRate, consumeRate, endToEndLatency...), so its readers feel at
// home; rates are per second, latencies milliseconds.
type Report struct {
	Harness string `json:"harness"`
	Date    string `json:"date"`
	Command string `json:"command"`
	// Projector is the projector binary measured and what its Go build
	// info says it was built from (projectorBuild): a stale binary is the
	// easiest way to measure the wrong code.
	Projector string  `json:"projector,omitempty"`
	Machine   Machine `json:"machine"`
	// Broker is "embedded kfake", Apache Kafka's version, or the brokers
	// given.
	Broker string `json:"broker"`
	// Kafka is the kind of broker the harness started: Config.Kafka, or
	// "" when Config.Brokers were given.
	Kafka     string            `json:"kafka,omitempty"`
	Scenarios []*ScenarioResult `json:"scenarios"`
	// Repeat is how many times each scenario ran (Config.Repeat).
	Repeat int `json:"repeat,omitempty"`
	// Targets are every scenario's standing targets, for the summary: with
	// Repeat above 1, each is the median of its runs' values, with their
	// range (summary.go).
	Targets []Target `json:"targets"`
}

// Machine is where the figures were measured.
type Machine struct {
	Cores       int     `json:"cores"`
	MemoryBytes int64   `json:"memoryBytes"`
	LoadAvg1    float64 `json:"loadAverage1mAtStart"`
	LoadAvgEnd  float64 `json:"loadAverage1mAtEnd"`
	CPUModel    string  `json:"cpuModel"`
	GoVersion   string  `json:"goVersion"`
	OS          string  `json:"os"`
	// Pinning is the CPU split of a run with Config.Pin; absent when the
	// projectors and the harness shared every CPU.
	Pinning *Pinning `json:"pinning,omitempty"`
}

// ScenarioResult is one scenario's figures.
type ScenarioResult struct {
	Scenario string `json:"scenario"`
	// Repetition counts the runs of the scenario in the invocation, from
	// 1 (Config.Repeat).
	Repetition  int    `json:"repetition,omitempty"`
	Description string `json:"description"`
	// Mode is "open-loop" (a fixed schedule of sends, never waiting for
	// replies) or "closed-loop" (as fast as the broker takes them).
	Mode            string  `json:"mode"`
	Instances       int     `json:"instances"`
	Partitions      int     `json:"partitions"`
	DurationSeconds float64 `json:"durationSeconds"`
	// TargetRate is the open-loop schedule's rate.
	TargetRate float64 `json:"targetRate,omitempty"`
	// Events produced to the agent lane in the measured window.
	Events int64 `json:"events"`
	// PublishRate and ConsumeRate are per-second samples: events the
	// broker acknowledged, and events projected (as the wakes'
	// as_of_event_seq show).
	PublishRate []float64 `json:"publishRate"`
	ConsumeRate []float64 `json:"consumeRate"`
	// WakeRate are per-second samples of committed wakes read, by lane.
	WakeRate              map[string][]float64 `json:"wakeRate"`
	AggregatedPublishRate float64              `json:"aggregatedPublishRate"`
	// AggregatedConsumeRate is events projected per second over the
	// window (closed loop: every event, until the last run's marker wake
	// was read).
	AggregatedConsumeRate float64            `json:"aggregatedConsumeRate"`
	AggregatedWakeRate    map[string]float64 `json:"aggregatedWakeRate"`
	// PublishDelayLatency is how late the open-loop sender was against its
	// schedule; LateSends counts sends more than 10 ms late.
	PublishDelayLatency *Latency `json:"publishDelayLatency,omitempty"`
	LateSends           int64    `json:"lateSends"`
	// EndToEndLatency, by lane: from an event's append (the broker's
	// produce acknowledgement; for human input the gateway's 202, sent
	// once Kafka has the record) to its committed wake being read.
	EndToEndLatency map[string]*Latency `json:"endToEndLatency"`
	// EndToEndLatencyFromSchedule, by lane: from when the event was due
	// to be sent, which adds any delay of the sender (and, for human
	// input, the gateway's answer).
	EndToEndLatencyFromSchedule map[string]*Latency `json:"endToEndLatencyFromSchedule"`
	// WakesMissing counts waking events whose wake was not read by the end.
	WakesMissing int `json:"wakesMissing"`
	// Reassignments counts the partition assignments the projector
	// instances logged after the scenario's first full assignment: each is
	// a rebalance that moved partitions. With a fixed set of instances
	// (max, steady, grow, priority) anything above 0 is a spurious
	// rebalance, a session that expired under load; scale and failover
	// move partitions on purpose.
	Reassignments int `json:"reassignments"`
	// SnapshotBytes is the distribution of agent_tree_snapshot sizes.
	SnapshotBytes  *Sizes  `json:"snapshotBytes"`
	TruncationRate float64 `json:"truncationRate"`
	// ProjectorCPU is the projector processes' CPU in cores, their RSS
	// the largest total seen.
	ProjectorCPU      float64 `json:"projectorCpuCores"`
	ProjectorRSSBytes int64   `json:"projectorRssBytes"`
	// ProjectorGCCPUShare is the GC's share of the CPU the projectors used
	// over the window, from runtime/metrics' CPU classes on their
	// /metrics (the runtime's estimates, updated at each GC's end: GC
	// over total less idle).
	// ProjectorHeapBytes is their heap in use at the end
	// (go_memstats_heap_inuse_bytes, summed), ProjectorHeapMaxBytes the
	// largest total of the samples taken every few seconds.
	// ProjectorMemoryLimitBytes is their -memory-limit, as their /metrics
	// say (0 when they did not).
	ProjectorMemoryLimitBytes int64 `json:"projectorMemoryLimitBytes,omitempty"`
	// ProjectorCPUPerEvent is the projectors' CPU over the window divided
	// by the events of the window, in microseconds: what an event costs
	// canopy in the whole pipeline (fetch, apply, wakes, commits, Pebble,
	// GC), in closed-loop scenarios where every event is projected within
	// the window.
	ProjectorCPUPerEventMicros float64 `json:"projectorCpuPerEventMicros,omitempty"`
	ProjectorGCCPUShare        float64 `json:"projectorGcCpuShare"`
	ProjectorHeapBytes         int64   `json:"projectorHeapBytes"`
	ProjectorHeapMaxBytes      int64   `json:"projectorHeapMaxBytes"`
	// ProjectorIntakeThrottles and ProjectorIntakeThrottledSeconds are how
	// many times the projectors paused their agent intake for memory over
	// the window (their governor, above 70% of GOMEMLIMIT live), and for
	// how long in all: an event fetched after a pause waited through it.
	ProjectorIntakeThrottles        int64   `json:"projectorIntakeThrottles"`
	ProjectorIntakeThrottledSeconds float64 `json:"projectorIntakeThrottledSeconds"`
	// HarnessCPU is the harness process's CPU in cores: the embedded
	// broker, the load and the reader.
	HarnessCPU  float64 `json:"harnessCpuCores"`
	MachineBusy float64 `json:"machineBusy"`
	// LoadAvg1 is the machine's 1-minute load average when the scenario
	// started: how much else was running.
	LoadAvg1 float64 `json:"loadAverage1mAtStart"`
	// Baselines measured in the same run, by name.
	Baselines map[string]float64 `json:"baselines,omitempty"`
	// Steps are scenario-specific rows (grow's sizes, scale's instance
	// counts, failover's partitions).
	Steps []map[string]any `json:"steps,omitempty"`
	// Series are a scenario's samples over time, when it takes them
	// (soak's every few seconds; Steps has every tenth of them or so).
	Series  []map[string]any `json:"series,omitempty"`
	Targets []Target         `json:"targets,omitempty"`
	Notes   []string         `json:"notes,omitempty"`
}

// Latency is a latency distribution in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"50pct"`
	P99   float64 `json:"99pct"`
	P999  float64 `json:"99.9pct"`
	Max   float64 `json:"max"`
}

func latency(h *hdrhistogram.Histogram) *Latency {
	ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	return &Latency{Count: h.TotalCount(), P50: ms(50), P99: ms(99), P999: ms(99.9), Max: float64(h.Max()) / 1000}
}

// Sizes is a size distribution in bytes.
type Sizes struct {
	Count int64 `json:"count"`
	P50   int64 `json:"50pct"`
	P99   int64 `json:"99pct"`
	Max   int64 `json:"max"`
}

func sizes(h *hdrhistogram.Histogram) *Sizes {
	return &Sizes{Count: h.TotalCount(), P50: h.ValueAtQuantile(50), P99: h.ValueAtQuantile(99), Max: h.Max()}
}

// Target is a standing target beside its measured value.
type Target struct {
	Scenario string `json:"scenario"`
	Name     string `json:"name"`
	Want     string `json:"want"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	// Factor is how far the measured value is from the target: the
	// target over the measured value for a floor, the measured value over
	// the target for a ceiling. Above 1 is a miss by that factor.
	Factor float64 `json:"factor"`
	Note   string  `json:"note,omitempty"`
	// Value and Limit are Measured and Want as numbers (in Unit), and
	// Floor says Limit is a floor, not a ceiling: what the summary of
	// repeated runs takes the median of (summary.go).
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit,omitempty"`
	Floor bool    `json:"floor,omitempty"`
	// Runs is how many runs' values the target summarises (Config.Repeat),
	// with their range; 0 for one run's target.
	Runs int     `json:"runs,omitempty"`
	Min  float64 `json:"min,omitempty"`
	Max  float64 `json:"max,omitempty"`
}

// MarshalJSON writes a Factor or Value that JSON cannot carry (the +Inf
// of a target that was not measured or of a floor measured at 0, or a
// ratio over a zero baseline) as null, so that one such target does not
// cost the whole report.
func (t Target) MarshalJSON() ([]byte, error) {
	type plain Target // without this method
	finite := func(v float64) *float64 {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		plain
		Factor *float64 `json:"factor"`
		Value  *float64 `json:"value"`
	}{plain(t), finite(t.Factor), finite(t.Value)})
}

// atLeast and atMost make a target of a floor and a ceiling.
func atLeast(scenario, name string, measured, want float64, unit, note string) Target {
	t := Target{Scenario: scenario, Name: name, Want: fmt.Sprintf(">= %s%s", num(want), unit),
		Measured: num(measured) + unit, Met: measured >= want, Note: note,
		Value: measured, Limit: want, Unit: unit, Floor: true}
	t.Factor = want / measured
	if measured <= 0 {
		t.Factor = math.Inf(1)
	}
	return t
}

// unmeasured is the target of a ceiling that the run could not measure:
// not met, by no factor (+Inf, written as null), with note saying why.
func unmeasured(scenario, name string, want float64, unit, note string) Target {
	return Target{Scenario: scenario, Name: name, Want: fmt.Sprintf("<= %s%s", num(want), unit), Measured: "not measured",
		Factor: math.Inf(1), Note: note, Limit: want, Unit: unit}
}

func atMost(scenario, name string, measured, want float64, unit, note string) Target {
	return Target{Scenario: scenario, Name: name, Want: fmt.Sprintf("<= %s%s", num(want), unit),
		Measured: num(measured) + unit, Met: measured <= want, Factor: measured / want, Note: note,
		Value: measured, Limit: want, Unit: unit}
}

// num prints a figure with about three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return fmt.Sprint(v)
	case a >= 100_000:
		return commas(int64(math.Round(v)))
	case a >= 100:
		return commas(int64(math.Round(v)))
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func verdict(t Target) string {
	if t.Met {
		return "met"
	}
	return fmt.Sprintf("MISSED by %sx", num(t.Factor))
}

// WriteTable writes the final table: each scenario's main figures, then the
// targets beside the measured values.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmode\tinst\tevents/s in\tevents/s projected\twakes/s n/p\te2e normal p50/p99/p99.9/max ms\te2e priority p50/p99/p99.9/max ms\tsnapshot p50 B\ttrunc\tproj CPU\tproj RSS MB\tproj GC\tproj heap MB\tbusy")
	for _, s := range r.Scenarios {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s/%s\t%s\t%s\t%d\t%.0f%%\t%.2f\t%d\t%.1f%%\t%d\t%.0f%%\n", s.Scenario, s.Mode, s.Instances,
			num(s.AggregatedPublishRate), num(s.AggregatedConsumeRate),
			num(s.AggregatedWakeRate["normal"]), num(s.AggregatedWakeRate["priority"]),
			lat(s.EndToEndLatency["normal"]), lat(s.EndToEndLatency["priority"]),
			s.SnapshotBytes.P50, 100*s.TruncationRate, s.ProjectorCPU, s.ProjectorRSSBytes>>20,
			100*s.ProjectorGCCPUShare, s.ProjectorHeapMaxBytes>>20, 100*s.MachineBusy)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\twant\tmeasured\tverdict")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s: %s\t%s\t%s\t%s\n", t.Scenario, t.Name, t.Want, t.Measured, verdict(t))
	}
	tw.Flush()
}

func lat(l *Latency) string {
	if l == nil || l.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s/%s/%s/%s", num(l.P50), num(l.P99), num(l.P999), num(l.Max))
}
