package dashboards_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"sigs.k8s.io/yaml"

	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectormetrics"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestRulesFileChecks: promtool accepts the rules file.
func TestRulesFileChecks(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestQueriesAgainstPrometheus runs `canopy-dev` (embedded broker,
// projector, gateway, demo workload) and two real Prometheus servers
// scraping its /metrics with canopy's rules loaded, one storing classic
// histograms and one native ones. It adds what the demo does not do: a
// second projector instance that joins the group and leaves again (a
// rebalance each way and restores with records to read) and whose
// transactional producers are fenced meanwhile (failed commits, and a
// restart of its instance by its projector.Supervisor), an undecodable record
// (a dead letter), a record in the wrong partition (a reroute) and requests
// through the gateway; the demo's runs are big enough to truncate
// snapshots. Then every query of every dashboard panel and every recording
// rule behind the alerts must return real data on both servers: finite
// values, not all zero unless the query is on the allow-list below, and a
// quantile only from a histogram that recorded observations. Every rule
// must evaluate without error, and each alert must be active exactly when
// its recorded series crosses its threshold.
func TestQueriesAgainstPrometheus(t *testing.T) {
	promBin := testenv.Tool(t, "prometheus")
	alertRules := alerts(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	bin := filepath.Join(dir, "canopy-dev")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/canopy-dev").CombinedOutput(); err != nil {
		t.Fatalf("building canopy-dev: %v\n%s", err, out)
	}
	// Runs of 70 nodes: past the snapshot's 64, so snapshots truncate.
	dev := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-gateway-addr", "127.0.0.1:0",
		"-rate", "300", "-runs", "6", "-nodes", "70", "-partitions", fmt.Sprint(devPartitions), "-duration", "200s",
		// Memtables of 256 KiB, so that Pebble flushes, compacts and reads
		// tables (the block cache) within the test, as it does in
		// production over hours.
		"-memtable-mb", "0.25",
		// Fewer nodes in memory per partition than two of its runs have,
		// so that runs are evicted and read back (the Runs in memory
		// panel): partition 1 gets run-1, run-2 and run-3.
		"-max-hot-nodes", "100",
		// And fewer nodes of a run than it has (70), so that nodes are
		// dropped and read back too (the same panel).
		"-max-hot-nodes-per-run", "40")
	devOut := startProcess(t, dev)
	addrs := devOut.await(t, regexp.MustCompile(`embedded Kafka on ([0-9.:]+),`),
		regexp.MustCompile(`gateway on http://([0-9.:]+) `), regexp.MustCompile(`metrics on http://([0-9.:]+)/metrics`))
	kafkaAddr, gatewayAddr, metricsAddr := addrs[0], addrs[1], addrs[2]

	// The second projector instance's metrics, served from before it
	// joins, so that Prometheus sees its counters move.
	second := newInstance(t, kafkaAddr, filepath.Join(dir, "second"))

	// Prometheus evaluates the rules every second (the file says 30s for
	// production).
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rules = bytes.ReplaceAll(rules, []byte("interval: 30s"), []byte("interval: 1s"))
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	// A scrape may take a while on a loaded machine: two seconds each.
	cfg := fmt.Sprintf(`global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 1s}
rule_files: [rules.yaml]
scrape_configs:
  - job_name: canopy
    static_configs: [{targets: [%q, %q]}]
`, metricsAddr, second.metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Two servers scrape the same canopy: one as Prometheus does by
	// default (classic histograms: x_bucket series), one with native
	// histograms on, which stores canopy's histograms as native ones only
	// (x, and no x_bucket). Every query must work on both.
	servers := []promServer{
		startPrometheus(t, promBin, dir, "classic"),
		startPrometheus(t, promBin, dir, "native", "--enable-feature=native-histograms"),
	}
	// What happens next must happen after both have scraped both
	// instances: a counter's increase before a series' first sample is
	// invisible to rate() and increase().
	for _, srv := range servers {
		waitQuery(t, srv, 60*time.Second, `count(up == 1) == 2`)
	}

	// Requests through the gateway, so that its panels have data: inputs
	// (202), each with a secret for the Redactions panel, and a snapshot
	// read refused for want of a token (401). A
	// labelled series appears with its first request, and rate() cannot
	// count that one: one of each first, and the rest once both servers
	// have the series.
	requests := func(n int) {
		for i := range n {
			req, _ := http.NewRequest("POST", "http://"+gatewayAddr+"/v1/runs/run-1/input", strings.NewReader(`{"input_kind":"steer","text":"go on with Bearer 0123456789abcdefXYZ"}`))
			req.Header.Set("Authorization", "Bearer canopy-dev-token")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("dash-%d-%d", n, i))
			doRequest(t, req)
			req, _ = http.NewRequest("GET", "http://"+gatewayAddr+"/v1/runs/run-1/snapshot", nil)
			doRequest(t, req)
		}
	}
	requests(1)
	for _, srv := range servers {
		waitQuery(t, srv, 30*time.Second, `count(canopy_gateway_requests_total) >= 2 and count(canopy_kafka_produce_records_total{client="gateway"}) > 0`)
	}
	requests(5)
	// Bad input: a dead letter and a reroute, for the Errors panel and the
	// dead-letter rule.
	produceBadRecords(t, ctx, kafkaAddr)
	// Scale out and back: the second instance takes partitions over
	// (revoked from dev's projector, restored from the changelog), commits
	// some batches, fails and is restarted, and leaves; dev's projector
	// takes them back and restores what the second committed.
	second.join(t, ctx)
	second.restart(t, ctx)
	second.leave(t)

	queries := panelQueries(t, window, ".*")
	for _, r := range recordingRules(t) {
		queries["rule "+r] = r
	}
	names := make([]string, 0, len(queries))
	for n := range queries {
		names = append(names, n)
	}
	sort.Strings(names)
	for n := range allowedZero {
		if _, ok := queries[n]; !ok {
			t.Errorf("allowedZero names %q, which is no query: keep the allow-list current", n)
		}
	}
	// Every query shows real data on each server at some evaluation within
	// the deadline, or the test names what did not and why. (Each event of
	// the workload is in the rate window for a minute; they need not all
	// be at once, so both servers are checked in the same rounds.)
	type key struct{ server, query string }
	missing := map[key]string{}
	for _, srv := range servers {
		for _, n := range names {
			missing[key{srv.name, n}] = "not evaluated"
		}
	}
	api := map[string]string{}
	for _, srv := range servers {
		api[srv.name] = srv.api
	}
	// Polled once a second, and not failed here: what is still missing at
	// the deadline is reported query by query below.
	_ = testenv.Poll(100*time.Second, time.Second, func() error {
		for k := range missing {
			if msg := check(t, api[k.server], queries[k.query], allowedZero[k.query] != ""); msg == "" {
				delete(missing, k)
			} else {
				missing[k] = msg
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d queries not evaluated", len(missing))
		}
		return nil
	})
	for _, srv := range servers {
		for _, n := range names {
			if msg, ok := missing[key{srv.name, n}]; ok {
				t.Errorf("%s Prometheus: %s: %s\n  query: %s", srv.name, n, msg, queries[n])
			}
		}
		checkRuleHealth(t, srv)
		checkAlerts(t, srv, alertRules)
	}
	// What canopy exposes passes promtool's lint (make test runs this;
	// kprom's buffered gauges named *_total failed it).
	for _, addr := range []string{metricsAddr, second.metricsAddr} {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		check := exec.Command(testenv.Tool(t, "promtool"), "check", "metrics")
		check.Stdin = resp.Body
		out, err := check.CombinedOutput()
		resp.Body.Close()
		if err != nil {
			t.Errorf("promtool check metrics on %s: %v\n%s", addr, err, out)
		}
	}
	// The job variable narrows every panel: another deployment's job
	// shows none of this one's series.
	for n, expr := range panelQueries(t, window, "another-deployment") {
		if res, msg := instant(t, servers[0].api, expr); msg != "" || len(res) > 0 {
			t.Errorf("%s with job=~\"another-deployment\": %d samples (%s), want none\n  query: %s", n, len(res), msg, expr)
		}
	}
	// Each server stored the kind of histogram it is there for, so that
	// each kind of query was really exercised.
	for _, srv := range servers {
		classic := len(instantOK(t, srv, "count(canopy_snapshot_build_seconds_bucket)")) > 0
		native := len(instantOK(t, srv, "count(canopy_snapshot_build_seconds)")) > 0
		if classic != (srv.name == "classic") || native != (srv.name == "native") {
			t.Errorf("%s Prometheus stored classic buckets %v, native histograms %v", srv.name, classic, native)
		}
	}
}

// window replaces Grafana's $__rate_interval in the test's queries.
const window = "1m"

// devPartitions is the partition count the test gives canopy-dev.
const devPartitions = 4

// allowedZero are the queries that may return only zeros in the test's
// workload, each with the reason. Every other query must return some value
// above zero: a series that is always present and always 0 proves nothing.
var allowedZero = map[string]string{
	"canopy-overview / Consumer lag / A":                "the projector keeps up with the demo: caught-up partitions have no lag",
	"canopy-overview / Errors / C":                      "failed commits: a rate, and the second instance's fenced commits are seconds long",
	"canopy-overview / Errors / D":                      "failed restores: nothing makes a restore fail",
	"canopy-overview / Stale snapshots / A":             "the projector keeps up with the demo: no snapshot is stale",
	"canopy-snapshots / Stale snapshots / A":            "as the overview's: no snapshot is stale",
	"canopy-scale-out / Partitions restoring / A":       "a gauge: restores take milliseconds here, so it is 0 at almost every scrape",
	"canopy-gateway / Refused and failed / A":           "5xx share: the gateway fails nothing",
	"rule canopy:projector_consumer_lag_records:max":    "as the Consumer lag panel",
	"rule canopy:snapshot_stale:ratio_rate5m":           "as the Stale snapshots panels",
	"rule canopy:projector_restores_failed:increase15m": "as failed restores",
	"canopy-scale-out / Rebalances / C":                 "group stalls: the demo's group never stalls (internal/projector TestStalledGroupRejoinsFresh makes one; pkg/telemetry TestGroupStallsCount counts it)",
	"rule canopy:projector_group_stalls:increase15m":    "as the group stalls of the Rebalances panel",
	// The second instance's restart makes restarts and failed commits
	// real data on its series; dev's own stay 0, which is data too.
	"canopy-overview / Stalled partitions / A":         "a gauge: no partition's records wait 60s here (internal/projector TestStalledPartition and TestRestartLoopIsSeen make some stall)",
	"rule canopy:projector_partitions_stalled:max":     "as the Stalled partitions panel",
	"canopy-overview / Poison records / A":             "no record here fails the same way repeatedly (projectormetrics TestRestartsAndPoisonCount counts one)",
	"rule canopy:projector_poison_records:increase10m": "as the Poison records panel",
	"canopy-overview / Poison records / B":             "no partition rewinds here: nothing fails that the input may cause (internal/projector TestPoisonRecord rewinds)",
}

// check evaluates expr now: "" when it returned real data, else what is
// wrong. Real data is at least one sample, no NaN or infinity, some value
// above zero unless zero is allowed, and, for a quantile, observations in
// the histogram it reads.
func check(t *testing.T, api, expr string, zeroAllowed bool) string {
	t.Helper()
	res, msg := instant(t, api, expr)
	if msg != "" {
		return msg
	}
	if len(res) == 0 {
		return "no data"
	}
	top := math.Inf(-1)
	for _, s := range res {
		if math.IsNaN(s.value) || math.IsInf(s.value, 0) {
			return fmt.Sprintf("%v is %v", s.labels, s.value)
		}
		top = max(top, s.value)
	}
	if !zeroAllowed && top <= 0 {
		return fmt.Sprintf("every series is %v (%d series)", top, len(res))
	}
	hists := histogramMetric.FindAllStringSubmatch(expr, -1)
	if strings.Contains(expr, "histogram_quantile") && len(hists) == 0 {
		return "the test finds no histogram in this quantile: update histogramMetric"
	}
	for _, m := range hists {
		// Classic: the _count series; native: the histogram's own count.
		obs := fmt.Sprintf("sum(increase(%[1]s_count[%[2]s])) > 0 or histogram_count(sum(increase(%[1]s[%[2]s]))) > 0", m[1], window)
		if res, msg := instant(t, api, obs); msg != "" || len(res) == 0 {
			return fmt.Sprintf("histogram %s recorded no observations in the last %s %s", m[1], window, msg)
		}
	}
	return ""
}

// histogramMetric finds the histograms a query takes quantiles of.
var histogramMetric = regexp.MustCompile(`histogram_quantile\([0-9.]+, sum(?: by \([^)]*\))? \(rate\(([a-z_:]+?)(?:_bucket)?(?:\{[^}]*\})?\[`)

// sample is one element of an instant vector.
type sample struct {
	labels map[string]string
	value  float64
}

// instant evaluates expr now; msg says why it could not.
func instant(t *testing.T, api, expr string) (res []sample, msg string) {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Status, Error string
		Data          struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err.Error()
	}
	if r.Status != "success" {
		t.Errorf("query does not parse or fails: %s\n  query: %s", r.Error, expr) // never fixed by waiting
		return nil, "error: " + r.Error
	}
	if r.Data.ResultType != "vector" {
		return nil, "result type " + r.Data.ResultType + ", want vector"
	}
	for _, e := range r.Data.Result {
		str, _ := e.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Sprintf("value %q: %v", str, err)
		}
		res = append(res, sample{e.Metric, v})
	}
	return res, ""
}

// instantOK evaluates expr now, failing the test if it cannot.
func instantOK(t *testing.T, srv promServer, expr string) []sample {
	t.Helper()
	res, msg := instant(t, srv.api, expr)
	if msg != "" {
		t.Fatalf("%s Prometheus: %s: %s", srv.name, expr, msg)
	}
	return res
}

// waitQuery waits until expr returns data on srv (which may still be
// starting).
func waitQuery(t *testing.T, srv promServer, d time.Duration, expr string) {
	t.Helper()
	testenv.WaitEvery(t, d, 200*time.Millisecond, func() error {
		if res, msg := instant(t, srv.api, expr); len(res) == 0 {
			return fmt.Errorf("%s Prometheus: %s returned nothing %s", srv.name, expr, msg)
		}
		return nil
	})
}

// produceBadRecords produces to dev's agent events topic an undecodable
// record (dead-lettered) and a valid event in a partition its run does not
// hash to (rerouted), as a misconfigured producer would.
func produceBadRecords(t *testing.T, ctx context.Context, kafkaAddr string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := topics.DefaultNames().AgentEvents()
	bad := &kgo.Record{Topic: topic, Key: []byte("run-dead-letter"), Value: []byte(`{"this is": "not a CloudEvent"}`)}
	bad.Partition = topics.Partition(bad.Key, devPartitions)
	ev := workload.Generate(workload.Spec{RunID: "run-rerouted", Nodes: 2, Seed: 1})[0]
	moved, err := topics.EventRecord(topic, &ev, "")
	if err != nil {
		t.Fatal(err)
	}
	moved.Partition = (topics.Partition(moved.Key, devPartitions) + 1) % devPartitions
	if err := cl.ProduceSync(ctx, bad, moved).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// instance is a second projector process in dev's group, a
// projector.Supervisor as `projector run` runs one, with its own state and its
// own /metrics.
type instance struct {
	dir         string
	kafkaAddr   string
	reg         *prometheus.Registry
	metrics     *projectormetrics.ProjectorMetrics
	srv         *httptest.Server
	metricsAddr string
	logs        *testenv.Buffer
	supervisor  *projector.Supervisor
	stop        func() error
}

func newInstance(t *testing.T, kafkaAddr, dir string) *instance {
	t.Helper()
	in := &instance{dir: dir, kafkaAddr: kafkaAddr, reg: telemetry.NewRegistry(), logs: &testenv.Buffer{}}
	var err error
	if in.metrics, err = projectormetrics.NewProjectorMetrics(in.reg, nil); err != nil {
		t.Fatal(err)
	}
	in.srv = httptest.NewServer(telemetry.Handler(in.reg))
	t.Cleanup(in.srv.Close)
	in.metricsAddr = in.srv.Listener.Addr().String()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("second projector's log:\n%s", tail(in.logs.String(), 60))
		}
	})
	return in
}

// devGroup is canopy-dev's consumer group (cmd/canopy-dev/dev.go).
const devGroup = "canopy-dev"

// join starts the instance in dev's group and returns once it owns and has
// restored partitions and committed batches of them.
func (in *instance) join(t *testing.T, ctx context.Context) {
	t.Helper()
	cfg := projector.Config{Kafka: kafkaconn.Conn{Brokers: []string{in.kafkaAddr}}, Names: topics.DefaultNames(), DataDir: in.dir, Group: devGroup,
		Logger: slog.New(slog.NewTextHandler(in.logs, &slog.HandlerOptions{Level: slog.LevelInfo})), Hooks: in.metrics,
		KafkaHooks: telemetry.KafkaHooks(in.reg)}
	var err error
	if in.supervisor, err = projector.NewSupervisor(cfg); err != nil {
		t.Fatal(err)
	}
	if err := projectormetrics.RegisterGauges(in.reg, in.supervisor); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- in.supervisor.Run(pctx) }()
	in.stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { in.stop() })
	testenv.WaitFor(t, 90*time.Second, func() error {
		if owned, commits := in.supervisor.Owned(), in.counter(t, "canopy_projector_commits_total", "committed"); len(owned) == 0 || commits < 5 {
			return fmt.Errorf("the second projector owns %v and committed %g batches, want partitions and 5", owned, commits)
		}
		return nil
	})
}

// restart fences the transactional producers of the partitions the
// instance owns, as another owner of them would, and gives each a record:
// its commits fail, and its Supervisor replaces the instance with a fresh one.
// It returns once that one owns partitions and commits again.
func (in *instance) restart(t *testing.T, ctx context.Context) {
	t.Helper()
	owned := in.supervisor.Owned()
	commits := in.counter(t, "canopy_projector_commits_total", "committed")
	var recs []*kgo.Record
	for _, part := range owned {
		fence, err := kgo.NewClient(kgo.SeedBrokers(in.kafkaAddr), kgo.TransactionalID(fmt.Sprintf("%s-%d", devGroup, part)))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = fence.ProducerID(ctx)
		fence.Close()
		if err != nil {
			t.Fatalf("fencing partition %d's producer: %v", part, err)
		}
		run := ""
		for i := 0; run == ""; i++ {
			if r := fmt.Sprintf("run-fenced-%d", i); topics.Partition([]byte(r), devPartitions) == part {
				run = r
			}
		}
		ev := workload.Generate(workload.Spec{RunID: run, Nodes: 1, Seed: 2})[0]
		rec, err := topics.EventRecord(topics.DefaultNames().AgentEvents(), &ev, "")
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = part
		recs = append(recs, rec)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(in.kafkaAddr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 90*time.Second, func() error {
		restarts, failed := in.counter(t, "canopy_projector_instance_restarts_total", ""), in.counter(t, "canopy_projector_commits_total", "failed")
		if now := in.counter(t, "canopy_projector_commits_total", "committed"); restarts < 1 || failed < 1 || len(in.supervisor.Owned()) == 0 || now < commits+5 {
			return fmt.Errorf("the second projector fenced on %v: %g restarts, %g failed commits, owns %v, %g commits since; want a restart, a failure, partitions and 5",
				owned, restarts, failed, in.supervisor.Owned(), now-commits)
		}
		return nil
	})
}

// counter is the instance's counter name, of the series whose result label
// is result ("" for a counter without labels).
func (in *instance) counter(t *testing.T, name, result string) float64 {
	t.Helper()
	fams, err := in.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if result == "" || slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "result" && l.GetValue() == result }) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// leave stops the instance: it leaves the group, and its partitions go
// back to dev's projector.
func (in *instance) leave(t *testing.T) {
	t.Helper()
	if err := in.stop(); err != nil {
		t.Errorf("second projector: %v", err)
	}
}

// promServer is a Prometheus process scraping canopy.
type promServer struct{ name, api string }

// startPrometheus starts Prometheus with dir's prometheus.yml (and its
// rules), its own storage, and the extra flags, until the test ends.
func startPrometheus(t *testing.T, bin, dir, name string, flags ...string) promServer {
	t.Helper()
	addr := testenv.FreeAddr(t)
	args := append([]string{"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "tsdb-"+name), "--web.listen-address=" + addr, "--log.level=warn"}, flags...)
	startProcess(t, exec.Command(bin, args...))
	return promServer{name: name, api: "http://" + addr}
}

// rulesDoc is the rules file: Prometheus's rule_files format.
type rulesDoc struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval"`
		Rules    []struct {
			Record      string            `json:"record"`
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// readRules reads the rules file.
func readRules(t *testing.T) rulesDoc {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc rulesDoc
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		// Strict: a misspelt key (exp: for expr:) would leave a rule empty.
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return doc
}

// count is the number of rules, recording and alerting, in the file.
func (d rulesDoc) count() int {
	n := 0
	for _, g := range d.Groups {
		n += len(g.Rules)
	}
	return n
}

// recordingRules are the names of the file's recording rules (each name is
// a query once the rule has evaluated).
func recordingRules(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out = append(out, r.Record)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no recording rules in " + rulesFile)
	}
	return out
}

// alertRule is an alert of the rules file in the form every canopy alert
// takes: a recorded series compared to a number.
type alertRule struct {
	name, series, op string
	threshold        float64
}

// alertExpr is that form.
var alertExpr = regexp.MustCompile(`^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*$`)

// alerts parses every alert of the rules file, failing the test for one
// that is not "<recorded series> <op> <number>" with the series recorded
// by a rule of the file: only then does checking the recorded series check
// what the alert evaluates.
func alerts(t *testing.T) []alertRule {
	t.Helper()
	doc := readRules(t)
	recorded := map[string]bool{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	var out []alertRule
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			m := alertExpr.FindStringSubmatch(r.Expr)
			if m == nil {
				t.Errorf("alert %s: expr %q is not <recorded series> <op> <number>", r.Alert, r.Expr)
				continue
			}
			if !recorded[m[1]] {
				t.Errorf("alert %s: %s is not recorded by a rule of %s", r.Alert, m[1], rulesFile)
				continue
			}
			th, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				t.Errorf("alert %s: threshold %q: %v", r.Alert, m[3], err)
				continue
			}
			out = append(out, alertRule{r.Alert, m[1], m[2], th})
		}
	}
	if len(out) == 0 {
		t.Fatal("no alerts in " + rulesFile)
	}
	return out
}

// holds reports whether v op threshold.
func (a alertRule) holds(v float64) bool {
	switch a.op {
	case ">":
		return v > a.threshold
	case ">=":
		return v >= a.threshold
	case "<":
		return v < a.threshold
	case "<=":
		return v <= a.threshold
	case "==":
		return v == a.threshold
	}
	return v != a.threshold
}

// ruleStates are the rules Prometheus loaded, by name: health, last error,
// type and, for alerts, state (inactive, pending, firing).
func ruleStates(t *testing.T, api string) map[string]struct{ Name, Health, LastError, Type, State string } {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Name  string
				Rules []struct{ Name, Health, LastError, Type, State string }
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	out := map[string]struct{ Name, Health, LastError, Type, State string }{}
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			out[g.Name+"/"+rule.Name] = rule
		}
	}
	return out
}

// checkRuleHealth: Prometheus loaded every rule of the file and evaluated
// each, alerts included, without error.
func checkRuleHealth(t *testing.T, srv promServer) {
	t.Helper()
	states := ruleStates(t, srv.api)
	for name, rule := range states {
		if rule.Health != "ok" {
			t.Errorf("%s Prometheus: rule %s: health %q: %s", srv.name, name, rule.Health, rule.LastError)
		}
	}
	if want := readRules(t).count(); len(states) != want {
		t.Errorf("%s Prometheus loaded %d rules, want the %d of %s", srv.name, len(states), want, rulesFile)
	}
}

// checkAlerts evaluates each alert's left-hand side, its recorded series,
// and requires Prometheus's state of the alert to agree: active (pending
// or firing) exactly when some series crosses the threshold. At least one
// alert must be active, or the check never saw an alert evaluate to true.
func checkAlerts(t *testing.T, srv promServer, rules []alertRule) {
	t.Helper()
	var disagree []string
	active := 0
	// Polled once a second, as the rules evaluate, and not failed here:
	// what still disagrees at the deadline is reported below.
	_ = testenv.Poll(30*time.Second, time.Second, func() error {
		disagree, active = disagree[:0], 0
		states := map[string]string{}
		for _, r := range ruleStates(t, srv.api) {
			if r.Type == "alerting" {
				states[r.Name] = r.State
			}
		}
		for _, a := range rules {
			res := instantOK(t, srv, a.series)
			if len(res) == 0 {
				disagree = append(disagree, fmt.Sprintf("%s: %s returns no data", a.name, a.series))
				continue
			}
			want := false
			for _, s := range res {
				if math.IsNaN(s.value) || math.IsInf(s.value, 0) {
					disagree = append(disagree, fmt.Sprintf("%s: %s is %v", a.name, a.series, s.value))
				}
				want = want || a.holds(s.value)
			}
			// The whole expression parses and agrees with its parts.
			whole := instantOK(t, srv, a.series+" "+a.op+" "+strconv.FormatFloat(a.threshold, 'g', -1, 64))
			state, ok := states[a.name]
			switch {
			case !ok:
				disagree = append(disagree, a.name+": not loaded")
			case want != (len(whole) > 0):
				disagree = append(disagree, fmt.Sprintf("%s: %s %s %g holds %v, the expression returns %d series", a.name, a.series, a.op, a.threshold, want, len(whole)))
			case want != (state != "inactive"):
				disagree = append(disagree, fmt.Sprintf("%s: %s %s %g holds %v, the alert is %s", a.name, a.series, a.op, a.threshold, want, state))
			case want:
				active++
			}
		}
		if len(disagree) == 0 && active > 0 {
			return nil
		}
		return fmt.Errorf("%d alerts disagree, %d active", len(disagree), active)
	})
	for _, d := range disagree {
		t.Errorf("%s Prometheus: alert %s", srv.name, d)
	}
	if active == 0 {
		t.Errorf("%s Prometheus: no alert was active: the workload's dead letter should make CanopyDeadLetters fire", srv.name)
	}
}

func doRequest(t *testing.T, req *http.Request) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// output collects a process's combined output, line by line.
type output struct {
	lines chan string
	all   bytes.Buffer
}

// startProcess starts cmd and stops it (SIGTERM, then SIGKILL after 10s)
// when the test ends, printing its output if the test failed.
func startProcess(t *testing.T, cmd *exec.Cmd) *output {
	t.Helper()
	o := &output{lines: make(chan string, 1024)}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			o.all.WriteString(sc.Text() + "\n")
			select {
			case o.lines <- sc.Text():
			default:
			}
		}
	}()
	exited := make(chan struct{})
	go func() { cmd.Wait(); pw.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		<-scanned
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), tail(o.all.String(), 60))
		}
	})
	return o
}

// await returns, for each re, the first submatch of the first line matching
// it.
func (o *output) await(t *testing.T, res ...*regexp.Regexp) []string {
	t.Helper()
	found := make([]string, len(res))
	left := len(res)
	timeout := time.After(60 * time.Second)
	for left > 0 {
		select {
		case l := <-o.lines:
			for i, re := range res {
				if m := re.FindStringSubmatch(l); m != nil && found[i] == "" {
					found[i] = m[1]
					left--
				}
			}
		case <-timeout:
			t.Fatalf("no lines matching %v within 60s", res)
		}
	}
	return found
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
