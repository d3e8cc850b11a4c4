package telemetry_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/telemetry"
)

// A projector instance that failed is replaced while its group client may
// still be leaving the group: the new instance's client of the same role
// must not panic on registering its metrics (it did, in CI), and the old
// client's late close must not take the new client's metrics with it.
func TestKafkaHooksClientOfTheSameRoleBeforeTheOldOneCloses(t *testing.T) {
	cluster := brokertest.NewKfake(t, kfake.SeedTopics(1, "t")).Cluster
	reg := prometheus.NewRegistry()
	hooks := telemetry.KafkaHooks(reg)
	newClient := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.WithHooks(hooks("group")...),
			kgo.DefaultProduceTopic("t"))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	produce := func(cl *kgo.Client, n int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for range n {
			if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produced := func() (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "canopy_kafka_produce_records_total" {
				continue
			}
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum, true
		}
		return 0, false
	}

	// kprom counts a batch in a hook that may run just after the produce
	// returns.
	waitProduced := func(want float64, what string) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, _ := produced()
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: produce_records_total = %v, want %v", what, n, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	old := newClient()
	produce(old, 3)
	waitProduced(3, "first client")

	cur := newClient() // panicked here before: duplicate metrics collector registration
	defer cur.Close()
	produce(cur, 2)
	waitProduced(2, "after the second client took the role over")

	old.Close()
	if n, ok := produced(); !ok || n != 2 {
		t.Fatalf("after the first client closed: produce_records_total = %v (present %v), want the second client's 2", n, ok)
	}

	cur.Close()
	if n, ok := produced(); ok {
		t.Fatalf("after every client closed: produce_records_total still exported (%v)", n)
	}
}

// The Kafka metrics pass promtool's lint (kprom names its buffered records
// gauges *_total, a counter's suffix: KafkaHooks serves them without it),
// and the renamed gauges go away with their client.
func TestKafkaMetricsPassPromtool(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	reg := prometheus.NewRegistry()
	hooks := telemetry.KafkaHooks(reg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.WithHooks(hooks("gateway")...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("x")).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var text bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]dto.MetricType{}
	for _, mf := range mfs {
		names[mf.GetName()] = mf.GetType()
		if _, err := expfmt.MetricFamilyToText(&text, mf); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"canopy_kafka_buffered_produce_records", "canopy_kafka_buffered_fetch_records"} {
		if typ, ok := names[n]; !ok || typ != dto.MetricType_GAUGE {
			t.Errorf("%s: exported %v, type %v; want a gauge", n, ok, typ)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = &text
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	cl.Close()
	mfs, err = reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "canopy_kafka_buffered_") {
			t.Errorf("%s still exported after its client closed", mf.GetName())
		}
	}
}

// TestKafkaBatchMetrics: the records, batches and uncompressed bytes of
// each topic a client fetches and produces are counted under kprom's
// names and labels, and counting a batch allocates nothing once its topic
// was seen (kprom made a label map per batch).
func TestKafkaBatchMetrics(t *testing.T) {
	cluster := brokertest.NewKfake(t, kfake.SeedTopics(1, "t")).Cluster
	reg := prometheus.NewRegistry()
	hooks := telemetry.KafkaHooks(reg)("role")
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.WithHooks(hooks...),
		kgo.DefaultProduceTopic("t"), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 5 {
		if err := cl.ProduceSync(ctx, kgo.StringRecord("0123456789")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < 5; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	value := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if len(labels) != 2 || labels["client"] != "role" || labels["topic"] != "t" {
					t.Fatalf("%s has labels %v, want client and topic", name, labels)
				}
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	// Each produce is a batch; the hooks may run just after it returns.
	deadline := time.Now().Add(10 * time.Second)
	for value("canopy_kafka_produce_batches_total") < 5 || value("canopy_kafka_fetch_records_total") < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("produce batches %v, fetched records %v, want 5 each", value("canopy_kafka_produce_batches_total"), value("canopy_kafka_fetch_records_total"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for name, want := range map[string]float64{
		"canopy_kafka_produce_records_total": 5, "canopy_kafka_produce_batches_total": 5, "canopy_kafka_fetch_records_total": 5,
	} {
		if got := value(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"canopy_kafka_produce_uncompressed_bytes_total", "canopy_kafka_fetch_uncompressed_bytes_total", "canopy_kafka_fetch_batches_total"} {
		if value(name) < 1 {
			t.Errorf("%s not counted", name)
		}
	}
	fetched, ok := hooks[0].(kgo.HookFetchBatchRead)
	if !ok {
		t.Fatal("the hooks count no fetched batches")
	}
	if n := testing.AllocsPerRun(100, func() {
		fetched.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{NumRecords: 1, UncompressedBytes: 10})
	}); n != 0 && !raceDetectorOn {
		t.Errorf("counting a fetched batch allocated %v times", n)
	}
}
