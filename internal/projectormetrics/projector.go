package projectormetrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// ProjectorMetrics implements projector.Hooks: it counts what projector
// instances do as Prometheus metrics and emits the snapshot events. Counters
// live here rather than in the instance, so they go on counting when a
// projector.Supervisor replaces a failed instance; gauges (partitions owned,
// consumer lag, Pebble) are read at scrape time from a Source
// (RegisterGauges).
type ProjectorMetrics struct {
	projector.NopHooks
	events *telemetry.Events

	consumed       *prometheus.CounterVec
	deadLetters    prometheus.Counter
	reroutes       prometheus.Counter
	wakes          *prometheus.CounterVec
	triggers       *prometheus.CounterVec
	build          prometheus.Histogram
	bytes, nodes   prometheus.Histogram
	truncated      *prometheus.CounterVec
	omitted        prometheus.Counter
	stale          *prometheus.CounterVec
	wakeLag        *prometheus.HistogramVec
	wakeLagClamped prometheus.Counter
	commits        *prometheus.CounterVec
	commitTime     prometheus.Histogram
	partChanges    *prometheus.CounterVec
	rebalances     *prometheus.CounterVec
	restores       *prometheus.CounterVec
	restoreTime    prometheus.Histogram
	groupStalls    prometheus.Counter
	restarts       prometheus.Counter
	poison         prometheus.Counter
	rewinds        prometheus.Counter
	runsExpired    prometheus.Counter
	priorityStages *prometheus.HistogramVec
	stageObs       [projector.NumPriorityStages]prometheus.Observer // priorityStages' series, by stage
	redactions     *telemetry.Redactions
}

// NewProjectorMetrics registers the projector's metrics on reg. events
// (nil: none) receives the snapshot events. The series of
// canopy_redactions_total are made for the built-in rules; Instrument
// adds the operator's.
func NewProjectorMetrics(reg prometheus.Registerer, events *telemetry.Events) (*ProjectorMetrics, error) {
	const sub = "projector"
	red, err := telemetry.NewRedactions(reg, redact.Config{}.Rules())
	if err != nil {
		return nil, err
	}
	m := &ProjectorMetrics{
		redactions: red,
		events:     events,
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "records_consumed_total",
			Help: "Records read from an input topic, by topic, event type (\"\" when undecodable) and outcome: applied, duplicate, dead_lettered, unknown_type, rerouted, run_expired, duplicate_conflict (an event id sent again with other content, dead-lettered), poison (a record whose processing failed the same way every time, dead-lettered)."},
			[]string{"topic", "type", "outcome"}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "dead_letters_total",
			Help: "Records sent to the dead-letter topic because they could not be projected (their headers say why)."}),
		reroutes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "reroutes_total",
			Help: "Records found in the wrong partition for their run (a producer with another partitioner) and sent to the right one."}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "wakes_published_total",
			Help: "Wakes committed to a wake topic, by lane."}, []string{"lane"}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "wake_triggers_total",
			Help: "Triggers carried by committed wakes, by lane and trigger kind."}, []string{"lane", "kind"}),
		build: prometheus.NewHistogram(telemetry.HistogramOpts("snapshot", "build_seconds",
			"Time to build one wake's snapshot.", telemetry.SecondsBuckets)),
		bytes: prometheus.NewHistogram(telemetry.HistogramOpts("snapshot", "size_bytes",
			"Encoded size of each wake's snapshot.", bytesBuckets)),
		nodes: prometheus.NewHistogram(telemetry.HistogramOpts("snapshot", "nodes",
			"Nodes included in each wake's snapshot.", nodesBuckets)),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: "snapshot", Name: "truncated_total",
			Help: "Snapshots that left nodes, handles or text out, by lane."}, []string{"lane"}),
		omitted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: "snapshot", Name: "omitted_nodes_total",
			Help: "Nodes left out of snapshots by their bounds."}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: "snapshot", Name: "stale_total",
			Help: "Snapshots built while the projection was behind its input by more than the staleness threshold, by lane."}, []string{"lane"}),
		wakeLag: prometheus.NewHistogramVec(telemetry.HistogramOpts(sub, "wake_lag_seconds",
			"Time from the timestamp of the earliest record that triggered a wake to the commit that published it, by lane. "+
				"That timestamp is the producer's CreateTime (unless the topic uses LogAppendTime), so the producer's clock counts: "+
				"a record stamped at or after the commit is observed as 0 and counted in wake_lag_clamped_total. Timer wakes are not observed.",
			telemetry.SecondsBuckets), []string{"lane"}),
		wakeLagClamped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "wake_lag_clamped_total",
			Help: "Wakes whose triggering record was stamped at or after the commit that published them " +
				"(the producer's clock ahead of the projector's): observed as 0 in wake_lag_seconds."}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "commits_total",
			Help: "Batch commits (transactions), by result: committed or failed."}, []string{"result"}),
		commitTime: prometheus.NewHistogram(telemetry.HistogramOpts(sub, "commit_seconds",
			"Time to commit one batch: produce, end the transaction, write Pebble.", telemetry.SecondsBuckets)),
		partChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "partition_changes_total",
			Help: "Partitions the consumer group assigned to or revoked from this instance, by change."}, []string{"change"}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "rebalances_total",
			Help: "Consumer group rebalances that assigned partitions to or revoked partitions from this instance, " +
				"by change: one per assignment or revocation, however many partitions it moved."}, []string{"change"}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "restores_total",
			Help: "Partition restores from the changelog, by result: ok or failed."}, []string{"result"}),
		groupStalls: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "group_stalls_total",
			Help: "Times the consumer group gave this process's instance no assignment for the stall timeout while the brokers answered, " +
				"so that the instance stopped and a fresh one rejoined as a new member."}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "instance_restarts_total",
			Help: "Times this process's projector instance stopped on a failure (or could not start) and a new one was started " +
				"after a backoff (0.5 s doubling to 30 s): a restart loop climbs by one at each."}),
		poison: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "poison_records_total",
			Help: "Records dead-lettered because processing them failed the same way a bounded number of times " +
				"(records_consumed_total's outcome poison, counted from 0 so that the first one shows in increase())."}),
		rewinds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "rewinds_total",
			Help: "Times a partition rewound to its last commit after a failure its input may cause (a record refused, a wake that cannot be " +
				"built, a panic), to apply again what was not committed, a few records at a time: a poison record takes a few in a row."}),
		runsExpired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: telemetry.Namespace, Subsystem: sub, Name: "runs_expired_total",
			Help: "Finished runs whose state was deleted after the retention (-retention)."}),
		priorityStages: prometheus.NewHistogramVec(telemetry.HistogramOpts(sub, "priority_stage_seconds",
			"Time a human input record spent in each stage of the priority path, observed once the commit that published its wake succeeded: "+
				"fetch (from its timestamp, the gateway's produce, to the fetch returning it), queued (until its partition's worker took it up), "+
				"applied, built (the commit's wakes), waited (for the partition's commit in flight), produced (the commit's records, in its transaction), "+
				"committed (ending the transaction, writing Pebble).",
			telemetry.SecondsBuckets), []string{"stage"}),
		restoreTime: prometheus.NewHistogram(telemetry.HistogramOpts(sub, "restore_seconds",
			"Time to restore one partition from the changelog.", []float64{.01, .05, .1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600})),
	}
	return m, m.register(reg)
}

// register creates the series of every label value known in advance, so
// that each shows from 0 (and increase() sees its first count), and
// registers the metrics on reg.
func (m *ProjectorMetrics) register(reg prometheus.Registerer) error {
	for _, change := range []string{"assigned", "revoked"} {
		m.partChanges.WithLabelValues(change)
		m.rebalances.WithLabelValues(change)
	}
	for _, r := range []string{"ok", "failed"} {
		m.restores.WithLabelValues(r)
	}
	for _, r := range []string{"committed", "failed"} {
		m.commits.WithLabelValues(r)
	}
	for s := range projector.NumPriorityStages {
		m.stageObs[s] = m.priorityStages.WithLabelValues(s.String())
	}
	for _, lane := range []topics.Lane{topics.LaneNormal, topics.LanePriority} {
		m.wakes.WithLabelValues(string(lane))
		m.truncated.WithLabelValues(string(lane))
		m.stale.WithLabelValues(string(lane))
		m.wakeLag.WithLabelValues(string(lane))
	}
	return telemetry.Register(reg, m.consumed, m.deadLetters, m.reroutes, m.wakes, m.triggers, m.build, m.bytes, m.nodes, m.truncated, m.omitted, m.stale,
		m.wakeLag, m.wakeLagClamped, m.commits, m.commitTime, m.partChanges, m.rebalances, m.restores, m.restoreTime, m.groupStalls, m.restarts, m.poison, m.rewinds, m.runsExpired,
		m.priorityStages)
}

// Source is what the gauges read at scrape time: a projector.Supervisor, which
// answers for whichever of its instances runs now and counts the records
// its replaced instances restored, or one projector.Projector.
type Source interface {
	Status() projector.Status
}

var (
	_ Source = (*projector.Supervisor)(nil)
	_ Source = (*projector.Projector)(nil)
)

// RegisterGauges registers on reg the metrics read from src at scrape
// time: partitions owned, restoring and stalled, consumer lag, the memory
// budget, Pebble's figures, restored records, expiries and the priority
// gate.
func RegisterGauges(reg prometheus.Registerer, src Source) error {
	return telemetry.Register(reg, gauges{src})
}

// Consumed counts a consumed record.
func (m *ProjectorMetrics) Consumed(topic string, typ topics.EventType, outcome projector.Outcome) {
	m.consumed.WithLabelValues(topic, string(typ), string(outcome)).Inc()
	switch outcome {
	case projector.OutcomeDeadLettered, projector.OutcomeDuplicateConflict:
		m.deadLetters.Inc()
	case projector.OutcomeRerouted:
		m.reroutes.Inc()
	case projector.OutcomePoison:
		m.poison.Inc()
	}
}

// WakeCommitted counts a wake and its snapshot and emits its events.
func (m *ProjectorMetrics) WakeCommitted(ctx context.Context, w projector.CommittedWake) {
	lane := string(w.Wake.Lane)
	m.wakes.WithLabelValues(lane).Inc()
	for _, t := range w.Wake.Triggers {
		m.triggers.WithLabelValues(lane, string(t.Kind)).Inc()
	}
	s := &w.Wake.AgentTreeSnapshot
	m.build.Observe(w.Build.Seconds())
	m.bytes.Observe(float64(w.Info.Bytes))
	m.nodes.Observe(float64(w.Info.NodesIncluded))
	if s.Truncated {
		m.truncated.WithLabelValues(lane).Inc()
		m.omitted.Add(float64(s.TruncationMeta.OmittedCountTotal))
	}
	if s.Stale {
		m.stale.WithLabelValues(lane).Inc()
	}
	if w.FromRecord {
		// A lag of 0 or less is a record's CreateTime at or after the
		// commit: a producer clock ahead of ours. Dropping those would hide
		// the skew and bias the quantiles, so they count as 0 and are
		// counted.
		if w.Lag <= 0 {
			m.wakeLagClamped.Inc()
		}
		m.wakeLag.WithLabelValues(lane).Observe(max(w.Lag, 0).Seconds())
	}
	if m.events != nil {
		m.events.Snapshot(ctx, telemetry.MetaOf(w.Wake, w.Info, w.Build))
	}
}

// Redacted counts a replacement of redaction by rule.
func (m *ProjectorMetrics) Redacted(rule string) { m.redactions.Redacted(rule) }

// PriorityCommitted observes the stages of a human input record's way to
// its committed wake.
func (m *ProjectorMetrics) PriorityCommitted(_ int32, stages projector.PriorityStages) {
	for s, d := range stages {
		m.stageObs[s].Observe(max(d, 0).Seconds())
	}
}

// Committed counts a commit.
func (m *ProjectorMetrics) Committed(_ int32, took time.Duration, err error) {
	if err != nil {
		m.commits.WithLabelValues("failed").Inc()
		return
	}
	m.commits.WithLabelValues("committed").Inc()
	m.commitTime.Observe(took.Seconds())
}

// Assigned counts an assignment (the projector calls it once per group
// callback, with every partition it assigned) and its partitions.
func (m *ProjectorMetrics) Assigned(parts []int32) {
	m.rebalances.WithLabelValues("assigned").Inc()
	m.partChanges.WithLabelValues("assigned").Add(float64(len(parts)))
}

// Revoked counts a revocation (once per group callback) and its
// partitions.
func (m *ProjectorMetrics) Revoked(parts []int32) {
	m.rebalances.WithLabelValues("revoked").Inc()
	m.partChanges.WithLabelValues("revoked").Add(float64(len(parts)))
}

// Restored counts a finished restore and its time. Its records were
// counted as they were written (restored_records_total reads the Source's
// Counters at scrape time), so that a long restore shows progress
// while it runs rather than all at once when it ends.
func (m *ProjectorMetrics) Restored(_ int32, res changelog.Result, err error) {
	if err != nil {
		m.restores.WithLabelValues("failed").Inc()
		return
	}
	m.restores.WithLabelValues("ok").Inc()
	m.restoreTime.Observe(res.Elapsed.Seconds())
}

// GroupStalled counts a stalled group.
func (m *ProjectorMetrics) GroupStalled(time.Duration) { m.groupStalls.Inc() }

// Restarting counts a restart of the instance.
func (m *ProjectorMetrics) Restarting(error, time.Duration) { m.restarts.Inc() }

// Rewound counts a partition's rewind.
func (m *ProjectorMetrics) Rewound(int32, error) { m.rewinds.Inc() }

// RunsExpired counts the runs retention deleted.
func (m *ProjectorMetrics) RunsExpired(_ int32, runs int) { m.runsExpired.Add(float64(runs)) }

// gauges reads, at scrape time, what only the running instance knows.
type gauges struct{ src Source }

var (
	descOwned = prometheus.NewDesc(telemetry.Namespace+"_projector_partitions_owned",
		"Partitions this instance owns and has restored.", nil, nil)
	descRestoring = prometheus.NewDesc(telemetry.Namespace+"_projector_partitions_restoring",
		"Partitions this instance is restoring from the changelog now.", nil, nil)
	descRestoredRecords = prometheus.NewDesc(telemetry.Namespace+"_projector_restored_records_total",
		"Changelog records written to Pebble by restores, counted after each batch written (20,000 records), "+
			"so that it moves while a restore runs.", nil, nil)
	descLag = prometheus.NewDesc(telemetry.Namespace+"_projector_consumer_lag_records",
		"Records of an input topic's partition not yet applied: high watermark minus next offset, as of the last fetch. "+
			"While no instance runs (a restart), the partitions the failed instance had keep their series: high watermark "+
			"of the last fetch minus the offset the next instance resumes from.",
		[]string{"topic", "partition"}, nil)
	descStalled = prometheus.NewDesc(telemetry.Namespace+"_projector_partitions_stalled",
		"Partitions this process owns (or owned when its instance failed, until the next one runs) whose fetched records "+
			"have waited longer than -stalled-after (60s) with no commit moving past them; restarts do not reset the clock.", nil, nil)
	descCompactions = prometheus.NewDesc(telemetry.Namespace+"_pebble_compactions_total",
		"Pebble compactions since the store was opened.", nil, nil)
	descFlushes = prometheus.NewDesc(telemetry.Namespace+"_pebble_flushes_total",
		"Pebble memtable flushes since the store was opened.", nil, nil)
	descDisk = prometheus.NewDesc(telemetry.Namespace+"_pebble_disk_usage_bytes",
		"Disk space used by Pebble: tables, WAL, manifests.", nil, nil)
	descReadAmp = prometheus.NewDesc(telemetry.Namespace+"_pebble_read_amplification",
		"Pebble's read amplification: sublevels plus non-empty levels.", nil, nil)
	descDebt = prometheus.NewDesc(telemetry.Namespace+"_pebble_compaction_debt_bytes",
		"Pebble's estimate of bytes to compact before the LSM is stable.", nil, nil)
	descCacheHits = prometheus.NewDesc(telemetry.Namespace+"_pebble_block_cache_hits_total",
		"Pebble block cache hits since the store was opened.", nil, nil)
	descCacheMisses = prometheus.NewDesc(telemetry.Namespace+"_pebble_block_cache_misses_total",
		"Pebble block cache misses since the store was opened.", nil, nil)
	descCacheBytes = prometheus.NewDesc(telemetry.Namespace+"_pebble_block_cache_size_bytes",
		"Bytes in Pebble's block cache.", nil, nil)
	descMemoryLimit = prometheus.NewDesc(telemetry.Namespace+"_projector_memory_limit_bytes",
		"The instance's memory limit (-memory-limit), from which GOMEMLIMIT and the runs budget are derived.", nil, nil)
	descHotLimit = prometheus.NewDesc(telemetry.Namespace+"_projector_hot_runs_limit_bytes",
		"The budget of runs kept in memory, shared by the instance's partitions: half of what the memory limit leaves after Pebble's memtables and the process.", nil, nil)
	descHotBytes = prometheus.NewDesc(telemetry.Namespace+"_projector_hot_runs_bytes",
		"Estimated bytes of the runs in memory (the budget evicts by this estimate).", nil, nil)
	descHotHits = prometheus.NewDesc(telemetry.Namespace+"_projector_hot_run_hits_total",
		"Runs found in memory when an event or a read needed them.", nil, nil)
	descHotMisses = prometheus.NewDesc(telemetry.Namespace+"_projector_hot_run_misses_total",
		"Runs read back from Pebble when an event or a read needed them.", nil, nil)
	descHotEvictions = prometheus.NewDesc(telemetry.Namespace+"_projector_hot_run_evictions_total",
		"Runs dropped from memory to keep the budget (they stay in Pebble).", nil, nil)
	descThrottles = prometheus.NewDesc(telemetry.Namespace+"_projector_intake_throttles_total",
		"Times the agent intake paused because the Go heap's live bytes passed 70% of its memory limit (it resumes below 55%, or after 2 s).", nil, nil)
	descThrottled = prometheus.NewDesc(telemetry.Namespace+"_projector_intake_throttled_seconds_total",
		"Time the agent intake spent paused for memory.", nil, nil)
	descThrottling = prometheus.NewDesc(telemetry.Namespace+"_projector_intake_throttling",
		"1 while the agent intake is paused for memory, else 0.", nil, nil)
	descQueuedBytes = prometheus.NewDesc(telemetry.Namespace+"_projector_queued_bytes",
		"Bytes of the fetched agent records waiting for the partitions' owners (bounded by -max-queued-bytes).", nil, nil)
	descHotInForce = prometheus.NewDesc(telemetry.Namespace+"_projector_hot_runs_limit_in_force_bytes",
		"The budget of runs in memory in force: below the limit while the heap is short of memory.", nil, nil)
	descGatePauses = prometheus.NewDesc(telemetry.Namespace+"_projector_priority_gate_pauses_total",
		"Times a partition paused its agent records while another partition's human input was on its way to its wake.", nil, nil)
	descGatePaused = prometheus.NewDesc(telemetry.Namespace+"_projector_priority_gate_paused_seconds_total",
		"Time partitions spent paused while another partition's human input was on its way to its wake.", nil, nil)
	descNodeReads = prometheus.NewDesc(telemetry.Namespace+"_projector_run_node_reads_total",
		"Nodes of runs larger than -max-hot-nodes-per-run read back from Pebble when an event, a timer or a read needed them.", nil, nil)
	descNodeEvictions = prometheus.NewDesc(telemetry.Namespace+"_projector_run_node_evictions_total",
		"Nodes of runs larger than -max-hot-nodes-per-run dropped from memory (they stay in Pebble and the run's indexes).", nil, nil)
)

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOwned, descRestoring, descRestoredRecords, descLag, descStalled, descCompactions, descFlushes, descDisk,
		descReadAmp, descDebt, descCacheHits, descCacheMisses, descCacheBytes,
		descMemoryLimit, descHotLimit, descHotBytes, descHotHits, descHotMisses, descHotEvictions, descNodeReads, descNodeEvictions, descGatePauses, descGatePaused,
		descThrottles, descThrottled, descThrottling, descQueuedBytes, descHotInForce} {
		ch <- d
	}
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	st := g.src.Status()
	c := st.Counts
	// Read live: restores advance it after every batch they write.
	ch <- prometheus.MustNewConstMetric(descRestoredRecords, prometheus.CounterValue, float64(c.RestoredRecords))
	// Lag and stalls also between instances: a Supervisor answers for the
	// partitions its failed instance had.
	ch <- prometheus.MustNewConstMetric(descStalled, prometheus.GaugeValue, float64(len(st.Stalled)))
	for _, l := range st.Lag {
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(l.Records), l.Topic, strconv.Itoa(int(l.Partition)))
	}
	if !st.Running {
		return
	}
	ch <- prometheus.MustNewConstMetric(descOwned, prometheus.GaugeValue, float64(len(st.Owned)))
	ch <- prometheus.MustNewConstMetric(descRestoring, prometheus.GaugeValue, float64(c.Restoring))
	ch <- prometheus.MustNewConstMetric(descMemoryLimit, prometheus.GaugeValue, float64(st.MemoryLimit))
	mem := st.Memory
	ch <- prometheus.MustNewConstMetric(descHotLimit, prometheus.GaugeValue, float64(mem.Limit))
	ch <- prometheus.MustNewConstMetric(descHotBytes, prometheus.GaugeValue, float64(mem.Used))
	ch <- prometheus.MustNewConstMetric(descHotHits, prometheus.CounterValue, float64(mem.Hits))
	ch <- prometheus.MustNewConstMetric(descHotMisses, prometheus.CounterValue, float64(mem.Misses))
	ch <- prometheus.MustNewConstMetric(descHotEvictions, prometheus.CounterValue, float64(mem.Evictions))
	ch <- prometheus.MustNewConstMetric(descNodeReads, prometheus.CounterValue, float64(mem.NodeReads))
	ch <- prometheus.MustNewConstMetric(descNodeEvictions, prometheus.CounterValue, float64(mem.NodeEvictions))
	ch <- prometheus.MustNewConstMetric(descGatePauses, prometheus.CounterValue, float64(c.GatePauses))
	ch <- prometheus.MustNewConstMetric(descGatePaused, prometheus.CounterValue, c.GatePaused.Seconds())
	ch <- prometheus.MustNewConstMetric(descThrottles, prometheus.CounterValue, float64(c.Throttles))
	ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, c.Throttled.Seconds())
	throttling := 0.0
	if st.Throttling {
		throttling = 1
	}
	ch <- prometheus.MustNewConstMetric(descThrottling, prometheus.GaugeValue, throttling)
	ch <- prometheus.MustNewConstMetric(descQueuedBytes, prometheus.GaugeValue, float64(st.QueuedBytes))
	ch <- prometheus.MustNewConstMetric(descHotInForce, prometheus.GaugeValue, float64(mem.InForce))
	pm := st.Pebble
	if pm == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descCompactions, prometheus.CounterValue, float64(pm.Compact.Count))
	ch <- prometheus.MustNewConstMetric(descFlushes, prometheus.CounterValue, float64(pm.Flush.Count))
	ch <- prometheus.MustNewConstMetric(descDisk, prometheus.GaugeValue, float64(pm.DiskSpaceUsage()))
	ch <- prometheus.MustNewConstMetric(descReadAmp, prometheus.GaugeValue, float64(pm.ReadAmp()))
	ch <- prometheus.MustNewConstMetric(descDebt, prometheus.GaugeValue, float64(pm.Compact.EstimatedDebt))
	ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(pm.BlockCache.Hits))
	ch <- prometheus.MustNewConstMetric(descCacheMisses, prometheus.CounterValue, float64(pm.BlockCache.Misses))
	ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, float64(pm.BlockCache.Size))
}

// Bucket layouts of the snapshots' sizes: 256 B to 1 MiB, and nodes.
var (
	bytesBuckets = prometheus.ExponentialBuckets(256, 2, 13)
	nodesBuckets = []float64{1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256}
)
