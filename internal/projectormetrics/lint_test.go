package projectormetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projectormetrics"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/telemetry"
)

// unboundedLabels are label names that would take a value per run, wake,
// event or snapshot: none may exist, whatever the metric.
var unboundedLabels = []string{"run_id", "wake_id", "event_id", "snapshot_id"}

// kpromNames are the lint problems of franz-go's kprom plugin that canopy
// keeps: kprom names its gauges of buffered records *_total, and its
// documentation (and anyone's queries written from it) use those names.
// canopy's own metrics have no exception.
var kpromNames = map[string]string{
	"canopy_kafka_buffered_fetch_records_total":   `non-counter metrics should not have "_total" suffix`,
	"canopy_kafka_buffered_produce_records_total": `non-counter metrics should not have "_total" suffix`,
}

// TestMetricsLint: after a workload through a projector and a gateway, each
// binary's registry (as served on its /metrics: Go runtime, process,
// canopy's and kprom's metrics) passes client_golang's linter (naming,
// units, help, counters' _total) and has no label that takes an id.
func TestMetricsLint(t *testing.T) {
	k := newKafka(t, "lint", 2)
	preg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(preg, nil)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, k, pm, preg, preg, "lint-projector")

	greg := telemetry.NewRegistry()
	gm, err := telemetry.NewGatewayMetrics(greg, redact.Config{}.Rules())
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Kafka: kafkaconn.Conn{Brokers: k.brokers}, Names: k.names, ProjectorGroup: "lint-projector", JWTKey: key,
		Hooks: gm, KafkaHooks: telemetry.KafkaHooks(greg)("gateway")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer func() { gw.Drain(); srv.Close(); gw.Close() }()

	// The workload: a run's events, a human's input through the gateway,
	// a read, a made-up method and an unknown path.
	k.produce(t, k.names.AgentEvents(), time.Time{}, workload.Generate(workload.Spec{RunID: "run-lint", Nodes: 20, Seed: 3})...)
	// The run's own wakes first: an input that came while its events were
	// being applied would share their commit, and their one wake would be
	// the priority lane's.
	waitMetrics(t, preg, 60*time.Second, "the run's wakes are committed", func(f map[string]*dto.MetricFamily) bool {
		return value(f, "canopy_projector_wakes_published_total", "lane", "normal") > 0
	})
	token := gateway.SignJWT(key, gateway.Principal{Subject: "lint", Runs: []string{"*"}}, time.Now().Add(time.Hour))
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/runs/run-lint/input", `{"input_kind":"steer","text":"lint"}`},
		{"GET", "/v1/runs/run-lint/snapshot", ""},
		{"BREW", "/v1/runs/run-lint/input", ""},
		{"GET", "/no/such/path", ""},
	} {
		req, _ := http.NewRequestWithContext(ctx, r.method, srv.URL+r.path, strings.NewReader(r.body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	waitMetrics(t, preg, 60*time.Second, "the input's wake is committed", func(f map[string]*dto.MetricFamily) bool {
		return value(f, "canopy_projector_wakes_published_total", "lane", "priority") > 0
	})

	for name, reg := range map[string]interface {
		Gather() ([]*dto.MetricFamily, error)
	}{"projector": preg, "gateway": greg} {
		problems, err := testutil.GatherAndLint(reg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			if kpromNames[p.Metric] != p.Text {
				t.Errorf("%s /metrics: %s: %s", name, p.Metric, p.Text)
			}
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if slices.Contains(unboundedLabels, l.GetName()) {
						t.Errorf("%s /metrics: %s has a %s label", name, f.GetName(), l.GetName())
					}
					// Whatever its name, no label carries the run's id.
					if strings.Contains(l.GetValue(), "run-lint") {
						t.Errorf("%s /metrics: %s{%s=%q} carries a run id", name, f.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
		}
	}
}
