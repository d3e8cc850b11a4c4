package projectormetrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projectormetrics"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// kafka is an embedded broker on loopback with canopy's topics.
type kafka struct {
	cluster    *kfake.Cluster
	brokers    []string
	names      topics.Names
	cl         *kgo.Client
	partitions int32
}

func newKafka(t *testing.T, prefix string, partitions int32) *kafka {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	k := &kafka{cluster: kc, brokers: kc.ListenAddrs(), names: topics.Names{Prefix: prefix, Version: 1}, partitions: partitions}
	k.cl, err = kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		kc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { k.cl.Close(); kc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(k.cl), k.names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	return k
}

// produce produces events to topic, each to its run's partition, stamped
// at (the record timestamp, which Kafka keeps as CreateTime) unless zero.
func (k *kafka) produce(t *testing.T, topic string, at time.Time, evs ...topics.Event) {
	t.Helper()
	var recs []*kgo.Record
	for i := range evs {
		r, err := topics.EventRecord(topic, &evs[i], "")
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = topics.Partition(r.Key, k.partitions)
		r.Timestamp = at
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// runProjector runs a projector instance reporting to pm until the test
// ends (or stop is called), with its Kafka clients' metrics on reg and its
// gauges on gauges (nil: none).
func runProjector(t *testing.T, k *kafka, pm *projectormetrics.ProjectorMetrics, reg, gauges prometheus.Registerer, group string) (p *projector.Projector, stop func()) {
	t.Helper()
	var logs testenv.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("projector %s log:\n%s", group, logs.String())
		}
	})
	cfg := projector.Config{Kafka: kafkaconn.Conn{Brokers: k.brokers}, Names: k.names, DataDir: t.TempDir(), Group: group,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})), Hooks: pm, KafkaHooks: telemetry.KafkaHooks(reg)}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := projector.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if gauges != nil {
		if err := projectormetrics.RegisterGauges(gauges, p); err != nil {
			cancel()
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	})
	t.Cleanup(stop)
	return p, stop
}

// metrics gathers reg: each family by name.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// sample is the metric of family name whose labels include every
// name=value pair of labels; nil if there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value (-1 when the series is missing).
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m := sample(fams, name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

// sum is the sum of a counter family's series (-1 when it is missing).
func sum(fams map[string]*dto.MetricFamily, name string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	var s float64
	for _, m := range f.GetMetric() {
		s += m.GetCounter().GetValue()
	}
	return s
}

// waitMetrics gathers reg until cond holds of what it gathered, failing
// the test after d; it returns the last gathering.
func waitMetrics(t *testing.T, reg prometheus.Gatherer, d time.Duration, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		fams := gather(t, reg)
		if cond(fams) {
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// TestWakeLagCountsSkew: the wake lag starts at the triggering record's
// timestamp, which on canopy's topics is its producer's CreateTime. A
// producer whose clock is ahead stamps records after the commit that
// publishes their wakes; those lags are observed as 0 and counted, not
// dropped, while a timely run's lags stay positive.
func TestWakeLagCountsSkew(t *testing.T) {
	k := newKafka(t, "skew", 2)
	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, k, pm, reg, reg, "skew-projector")

	// One run from a producer an hour ahead, one from a timely producer.
	ahead := workload.Generate(workload.Spec{RunID: "run-ahead", Nodes: 10, Seed: 1})
	timely := workload.Generate(workload.Spec{RunID: "run-timely", Nodes: 10, Seed: 2})
	k.produce(t, k.names.AgentEvents(), time.Now().Add(time.Hour), ahead...)
	// Every wake of the run, once all its records are applied and their
	// wakes committed, is observed as 0 and counted (timer wakes, which
	// its past lease times cause, are neither).
	var clamped float64
	waitMetrics(t, reg, 60*time.Second, "the skewed run's wakes are observed as 0 and counted", func(f map[string]*dto.MetricFamily) bool {
		h := sample(f, "canopy_projector_wake_lag_seconds", "lane", "normal").GetHistogram()
		clamped = value(f, "canopy_projector_wake_lag_clamped_total")
		return sum(f, "canopy_projector_records_consumed_total") == float64(len(ahead)) &&
			clamped > 0 && float64(h.GetSampleCount()) == clamped && h.GetSampleSum() == 0
	})

	k.produce(t, k.names.AgentEvents(), time.Time{}, timely...)
	fams := waitMetrics(t, reg, 60*time.Second, "the timely run's wakes are observed", func(f map[string]*dto.MetricFamily) bool {
		return sample(f, "canopy_projector_wake_lag_seconds", "lane", "normal").GetHistogram().GetSampleSum() > 0
	})
	if got := value(fams, "canopy_projector_wake_lag_clamped_total"); got != clamped {
		t.Errorf("clamped wakes went from %g to %g with a timely producer", clamped, got)
	}
}

// TestRebalancesCountCallbacks: a rebalance that moves three partitions is
// one rebalance and three partition changes; the Rebalances panel counts
// the first, which the partition count cannot stand in for.
func TestRebalancesCountCallbacks(t *testing.T) {
	k := newKafka(t, "rebalance", 3)
	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, stop := runProjector(t, k, pm, reg, reg, "rebalance-projector")
	waitMetrics(t, reg, 60*time.Second, "the instance owns all three partitions", func(map[string]*dto.MetricFamily) bool { return len(p.Owned()) == 3 })
	fams := gather(t, reg)
	if got := value(fams, "canopy_projector_rebalances_total", "change", "assigned"); got != 1 {
		t.Errorf("rebalances_total{change=assigned} = %g after one assignment of three partitions, want 1", got)
	}
	if got := value(fams, "canopy_projector_partition_changes_total", "change", "assigned"); got != 3 {
		t.Errorf("partition_changes_total{change=assigned} = %g, want 3", got)
	}
	// Leaving the group revokes all three in one callback.
	stop()
	fams = gather(t, reg)
	if r, c := value(fams, "canopy_projector_rebalances_total", "change", "revoked"), value(fams, "canopy_projector_partition_changes_total", "change", "revoked"); r != 1 || c != 3 {
		t.Errorf("after leaving: rebalances_total{change=revoked} = %g, partition_changes_total{change=revoked} = %g; want 1 and 3", r, c)
	}
}

// TestRestoreProgressIsLive: while a partition restores from a large
// changelog, restored_records_total already counts what it wrote and
// partitions_restoring says one is under way, rather than the counter
// moving only when the restore ended. The broker holds the restore's reads past the
// first batch until the test has looked. A second instance's restore adds
// to the hooks' counters.
func TestRestoreProgressIsLive(t *testing.T) {
	k := newKafka(t, "restore", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A changelog of one commit: records keys of applied event ids (which
	// nothing reads at start-up) and the offsets key that closes the
	// commit. Random values (which compression cannot shrink) pad each
	// record, so that a fetch (1 MiB a partition) returns a few thousand
	// records and the restore reads in several fetches.
	const ids = 50_000
	changelogTopic := k.names.Changelog()
	rng := rand.New(rand.NewPCG(1, 2))
	for from := 0; from < ids; from += 1000 {
		var recs []*kgo.Record
		for i := from; i < from+1000; i++ {
			key := append([]byte("r"+"run-restore"), 0, 'e')
			pad := make([]byte, 100)
			for j := range pad {
				pad[j] = byte(rng.Uint32())
			}
			recs = append(recs, &kgo.Record{Topic: changelogTopic, Partition: 0, Key: fmt.Appendf(key, "ev-%06d", i), Value: pad})
		}
		if err := k.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.cl.ProduceSync(ctx, &kgo.Record{Topic: changelogTopic, Partition: 0, Key: projection.OffsetsKey, Value: []byte("{}")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	const total = ids + 1
	details, err := kadm.NewClient(k.cl).ListTopics(ctx, changelogTopic)
	if err != nil {
		t.Fatal(err)
	}
	topicID := details[changelogTopic].ID

	// Fetches of the changelog from the first restore batch's end (20,000
	// records) up to where the restore's look for the last commit reads
	// (the last 4,096) wait until released.
	release := make(chan struct{})
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	var held atomic.Bool
	k.cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.cluster.KeepControl()
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			if tp.Topic != changelogTopic && tp.TopicID != topicID {
				continue
			}
			for _, p := range tp.Partitions {
				if p.FetchOffset >= 20_000 && p.FetchOffset < total-4096 {
					held.Store(true)
					k.cluster.SleepControl(func() { <-release })
				}
			}
		}
		return nil, nil, false
	})

	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := runProjector(t, k, pm, reg, reg, "restore-projector")
	fams := waitMetrics(t, reg, 60*time.Second, "the restore's first batch is counted while it runs", func(f map[string]*dto.MetricFamily) bool {
		return value(f, "canopy_projector_restored_records_total") >= 20_000
	})
	if !held.Load() {
		t.Fatal("the restore was not held: the test no longer looks at it mid-way")
	}
	if r, ok := value(fams, "canopy_projector_partitions_restoring"), value(fams, "canopy_projector_restores_total", "result", "ok"); r != 1 || ok != 0 {
		t.Errorf("mid-restore: partitions_restoring %g, restores_total{result=ok} %g; want 1 and 0", r, ok)
	}
	if got := value(fams, "canopy_projector_restored_records_total"); got >= total {
		t.Errorf("mid-restore: restored_records_total %g, the whole changelog", got)
	}

	closeRelease()
	waitMetrics(t, reg, 60*time.Second, "the restore ends with every record counted", func(f map[string]*dto.MetricFamily) bool {
		return value(f, "canopy_projector_restores_total", "result", "ok") == 1 && value(f, "canopy_projector_partitions_restoring") == 0 &&
			value(f, "canopy_projector_restored_records_total") == total
	})

	// An instance that replaces this one (here with empty state) restores
	// the partition again: the hooks' counters go on from where the first
	// left them. (Its gauges read a Source; that restored_records_total
	// goes on across a projector.Supervisor's replacements is internal/projector's
	// TestServerCountsReplacedRestores.)
	stop()
	second := telemetry.NewRegistry()
	runProjector(t, k, pm, reg, second, "restore-projector")
	waitMetrics(t, reg, 60*time.Second, "the second instance's restore is counted after the first's", func(f map[string]*dto.MetricFamily) bool {
		return value(f, "canopy_projector_restores_total", "result", "ok") == 2
	})
	waitMetrics(t, second, 60*time.Second, "the second instance's restored records", func(f map[string]*dto.MetricFamily) bool {
		return value(f, "canopy_projector_restored_records_total") == total
	})
}

// TestGroupStallsCount: the projector's GroupStalled hook (a stall
// detected by watchGroup, internal/projector's TestStalledGroupRejoinsFresh)
// is what the Rebalances panel's group stalls and the
// CanopyConsumerGroupStalled alert count.
func TestGroupStallsCount(t *testing.T) {
	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := value(gather(t, reg), "canopy_projector_group_stalls_total"); got != 0 {
		t.Fatalf("group_stalls_total = %g before any stall, want 0 (and the series present)", got)
	}
	pm.GroupStalled(2 * time.Minute)
	if got := value(gather(t, reg), "canopy_projector_group_stalls_total"); got != 1 {
		t.Errorf("group_stalls_total = %g after one stall, want 1", got)
	}
}

// TestRestartsAndPoisonCount: a Supervisor's Restarting hook (a restart loop:
// internal/projector's TestRestartLoopIsSeen) and a consumed record whose
// outcome is poison are what the CanopyProjectorRestartLoop and
// CanopyPoisonRecords alerts count, from series present at 0 before the
// first, so that increase() sees the first one; a poison record is not a
// dead letter of the contract's (dead_letters_total). The stalled
// partitions gauge is present while a Supervisor has no instance yet.
func TestRestartsAndPoisonCount(t *testing.T) {
	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := projector.NewSupervisor(projector.Config{Kafka: kafkaconn.Conn{Brokers: []string{"127.0.0.1:1"}}, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := projectormetrics.RegisterGauges(reg, srv); err != nil {
		t.Fatal(err)
	}
	fams := gather(t, reg)
	for _, name := range []string{"canopy_projector_instance_restarts_total", "canopy_projector_poison_records_total", "canopy_projector_partitions_stalled"} {
		if got := value(fams, name); got != 0 {
			t.Errorf("%s = %g before anything happened, want 0 (and the series present)", name, got)
		}
	}
	pm.Restarting(fmt.Errorf("projector: partition 0: committing the transaction: fenced"), time.Second)
	pm.Restarting(fmt.Errorf("projector: partition 0: committing the transaction: fenced"), 2*time.Second)
	pm.Consumed("canopy.agent-events.v1", "agent.started", projector.OutcomePoison)
	fams = gather(t, reg)
	if got := value(fams, "canopy_projector_instance_restarts_total"); got != 2 {
		t.Errorf("instance_restarts_total = %g after two restarts, want 2", got)
	}
	if got := value(fams, "canopy_projector_poison_records_total"); got != 1 {
		t.Errorf("poison_records_total = %g after one poison record, want 1", got)
	}
	if got := value(fams, "canopy_projector_records_consumed_total", "outcome", "poison"); got != 1 {
		t.Errorf("records_consumed_total{outcome=poison} = %g, want 1", got)
	}
	if got := value(fams, "canopy_projector_dead_letters_total"); got != 0 {
		t.Errorf("dead_letters_total = %g after a poison record, want 0 (counted apart)", got)
	}
}

// TestSnapshotNodesCountEveryWake: the snapshot nodes histogram counts,
// for each committed wake, the nodes its published snapshot includes. The
// projector does not keep a committed wake's nodes once it is encoded, so
// the count must come from the build's Info; counted from the wake it
// would be 0.
func TestSnapshotNodesCountEveryWake(t *testing.T) {
	k := newKafka(t, "nodes", 1)
	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, k, pm, reg, nil, "nodes-projector")
	evs := workload.Generate(workload.Spec{RunID: "run-nodes", Nodes: 12, Seed: 3})
	k.produce(t, k.names.AgentEvents(), time.Time{}, evs...)

	rd, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(k.names.Wakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var wakes, nodes int
	deadline := time.Now().Add(60 * time.Second)
	for {
		// What the wake topic has so far, then what the histogram says of
		// the same commits: equal once every wake read is reported.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := rd.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			w, err := topics.DecodeWake(r.Value)
			if err != nil {
				t.Fatalf("wake at offset %d: %v", r.Offset, err)
			}
			wakes++
			nodes += len(w.AgentTreeSnapshot.Nodes)
		})
		fams := gather(t, reg)
		h := sample(fams, "canopy_snapshot_nodes").GetHistogram()
		consumed := sum(fams, "canopy_projector_records_consumed_total") == float64(len(evs))
		if consumed && wakes > 0 && h.GetSampleCount() == uint64(wakes) && h.GetSampleSum() == float64(nodes) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: %d wakes published with %d nodes; the histogram counted %d wakes with %g nodes (records consumed: %v)",
				wakes, nodes, h.GetSampleCount(), h.GetSampleSum(), consumed)
		}
	}
}
