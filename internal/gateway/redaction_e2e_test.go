package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectorhttp"
	"github.com/canopy-dev/canopy/internal/projectormetrics"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// The canaries: a secret of a built-in rule's shape (an OpenAI key) and
// one only an operator's pattern knows. canaryCore are the parts of them
// that no redaction leaves, so that a trace of either is found, not only
// the whole.
const (
	canaryKey    = "sk-proj-CanaryQ7w2E9r4T1y6U3i8O5p0"
	canaryTicket = "CANARY-TICKET-90210"
	canaryText   = "ran it with " + canaryKey + " for " + canaryTicket
)

var canaryCore = []string{canaryKey, canaryTicket, "CanaryQ7w2E9r4", "TICKET-90210"}

// canaryRules are the operator's rules of the test: the pattern of the
// second canary.
var canaryRules = redact.Config{Patterns: []redact.PatternRule{{Name: "canary_ticket", Pattern: `CANARY-TICKET-[0-9]+`}}}

// TestCanaryNeverMaterialised: a canary secret in every free-text field of
// every event type (topics.FreeTextFields, so that a new type is covered
// as it is added), produced straight to the topics and, for a human's
// input, through the gateway, never appears in a wake (its trigger texts
// included), the wake stream of the live view, a read (snapshot, read
// model, history, nodes, the run list), the human input record the
// gateway produced, the session snapshot and history, a log line of the projector or the gateway, an
// OpenTelemetry record they exported, or /metrics; and
// canopy_redactions_total counts each placement, by rule. Positive
// controls say the text did flow: the wakes' trigger texts hold the
// markers, the history holds every event.
func TestCanaryNeverMaterialised(t *testing.T) {
	sink := &otlpSink{}
	otlpSrv := httptest.NewServer(sink)
	defer otlpSrv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlpSrv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	e := newEnv(t, 2)
	var logs testenv.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := startCanaryParts(t, e, logger)

	const run = "run-canary"
	wakes := openStream(t, c.srv, run, tokAll, "")
	produced := c.produceCanaries(t, e, run)
	viaGateway := decodeAccepted(t, post(t, c.srv, run, tokAll, `{"input_kind":"message","text":"`+canaryText+`"}`, "Idempotency-Key", "canary-1"))
	inputs := []string{produced.inputID, viaGateway.EventID}
	testenv.WaitFor(t, 60*time.Second, func() error {
		if n := c.p.Status().Counts.Applied; n != int64(produced.events+1) {
			return fmt.Errorf("%d events applied, want %d", n, produced.events+1)
		}
		return nil
	})
	live := c.liveView(t, wakes, inputs)

	// What canopy made of the events, and what it said about them.
	texts := map[string]string{"the wake stream (live view)": live}
	for _, topic := range []string{e.names.Wakes(), e.names.PriorityWakes()} {
		texts["the committed wakes of "+topic] = values(e.committed(topic))
	}
	for _, path := range redactedReads(run) {
		r := call(t, "GET", c.srv.URL+path, tokAll, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		texts["GET "+path] = string(r.body)
	}
	for _, rec := range e.records(e.names.HumanInput()) {
		if ev, err := topics.DecodeRecord(rec.Key, rec.Value, rec.Headers); err == nil && ev.ID == viaGateway.EventID {
			texts["the human input record the gateway produced"] = string(rec.Value)
		}
	}
	if dl := e.records(e.names.DeadLetter()); len(dl) > 0 {
		t.Errorf("%d dead letters: every canary event must be applied", len(dl))
	}
	metrics := c.exposition(t)
	texts["/metrics"] = metrics
	c.stop()
	texts["the log lines"] = logs.String()
	texts["the OTLP records"] = sink.all()

	for what, text := range texts {
		for _, s := range canaryCore {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %q", what, s)
			}
		}
	}
	checkCanaryControls(t, texts, produced, len(inputs))
	c.checkCounts(t, produced.placements+1)
}

// canarySession is the session of the canary run's events.
const canarySession = "session-canary"

// redactedReads are the gateway's reads of run (of session
// canarySession) that the canary test checks, each of which must answer
// 200: the run's, and its session's snapshot and history.
func redactedReads(run string) []string {
	return []string{"/v1/runs/" + run + "/snapshot", "/v1/runs/" + run + "/read-model", "/v1/runs/" + run + "/history?limit=100",
		"/v1/runs/" + run + "/nodes", "/v1/runs", "/v1/sessions/" + canarySession, "/v1/sessions/" + canarySession + "/history?limit=100"}
}

// canaryParts are the projector (its telemetry by projectormetrics, as
// projector run's), its query endpoint and the gateway of the test.
type canaryParts struct {
	p    *projector.Projector
	in   *projectormetrics.Instrumentation
	srv  *httptest.Server
	stop func()
}

func startCanaryParts(t *testing.T, e *env, logger *slog.Logger) *canaryParts {
	t.Helper()
	qsrv := httptest.NewUnstartedServer(nil)
	t.Cleanup(qsrv.Close)
	cfg := projector.Config{Kafka: e.config().Kafka, Names: e.names, DataDir: t.TempDir(), Group: e.group, SessionTimeout: 2 * time.Second,
		AdvertiseAddr: qsrv.Listener.Addr().String(), Logger: logger, Redaction: canaryRules}
	ctx, cancel := context.WithCancel(context.Background())
	in, err := projectormetrics.Instrument(ctx, &cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if !in.OTel.Enabled {
		t.Fatal("OpenTelemetry export is off")
	}
	p, err := projector.New(ctx, cfg)
	if err != nil {
		cancel()
		in.Shutdown()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	qsrv.Config.Handler = projectorhttp.New(projectorhttp.Config{Source: p})
	qsrv.Start()
	gcfg := e.config()
	gcfg.Logger, gcfg.TracerProvider, gcfg.Redaction = logger, in.OTel.Tracer, canaryRules
	gm, err := telemetry.NewGatewayMetrics(in.Registry, gcfg.Redaction.Rules())
	if err != nil {
		t.Fatal(err)
	}
	gcfg.Hooks = gm
	_, srv := e.gateway(gcfg)
	c := &canaryParts{p: p, in: in, srv: srv}
	// Stopped before the sink is read: the projector first, then the
	// export flushed.
	c.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
		in.Shutdown()
	})
	t.Cleanup(c.stop)
	testenv.WaitFor(t, 30*time.Second, testenv.Until("the projector owns both partitions", func() bool { return len(p.Owned()) == 2 }))
	return c
}

// canaries is what produceCanaries produced: how many events, how many
// canaries of each kind they carry, the human input's event id.
type canaries struct {
	events, placements int
	inputID            string
}

// produceCanaries produces run's root node, then one event of each type
// with free text, the canaries in each of its free-text fields: to the
// agent events topic, or, for a human input, to the human input topic
// (a producer that is not the gateway).
func (c *canaryParts) produceCanaries(t *testing.T, e *env, run string) canaries {
	t.Helper()
	at := e.clock.Now()
	root := &topics.Event{ID: "canary-root", Source: "/test", Type: topics.TypeNodeCreated, Time: topics.NewTime(at), RunID: run, AgentID: "root",
		SessionID: canarySession, SchemaVersion: topics.CurrentSchemaVersion, Data: &topics.NodeCreated{Role: topics.RoleConductor}}
	evs := []*topics.Event{root}
	var out canaries
	for _, typ := range slices.Sorted(maps.Keys(topics.FreeTextFields)) {
		ev, err := projectortest.ValidEvent(typ, "canary-"+string(typ), run, "root", at)
		if err != nil {
			t.Fatal(err)
		}
		ev.SessionID = canarySession
		for _, name := range topics.FreeTextFields[typ] {
			setJSONField(t, ev.Data, name, canaryText)
			out.placements++
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("the canary %s: %v", typ, err)
		}
		if typ == topics.TypeInput {
			out.inputID = ev.ID
		}
		evs = append(evs, ev)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, ev := range evs {
		topic := e.names.AgentEvents()
		if ev.Type == topics.TypeInput {
			topic = e.names.HumanInput()
		}
		rec, err := topics.EventRecord(topic, ev, "")
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = topics.Partition(rec.Key, e.parts)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = cl.ProduceSync(ctx, rec).FirstErr()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	out.events = len(evs)
	return out
}

// liveView reads the wake stream until it has delivered the wakes of the
// human inputs, and returns all it read.
func (c *canaryParts) liveView(t *testing.T, s *stream, inputs []string) string {
	t.Helper()
	var all strings.Builder
	seen := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(seen) < len(inputs) {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatal("the wake stream ended")
			}
			all.WriteString(ev.data + "\n")
			var w topics.Wake
			if ev.name != "wake" || json.Unmarshal([]byte(ev.data), &w) != nil {
				continue
			}
			for _, tr := range w.Triggers {
				if tr.EventID != nil && slices.Contains(inputs, *tr.EventID) {
					seen[*tr.EventID] = true
				}
			}
		case <-deadline:
			t.Fatalf("the wake stream delivered the wakes of %d of the %d inputs:\n%s", len(seen), len(inputs), all.String())
		}
	}
	return all.String()
}

// exposition is the process's /metrics, as a scraper reads it.
func (c *canaryParts) exposition(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(telemetry.Handler(c.in.Registry))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkCounts: canopy_redactions_total counted each canary once, by its
// rule, whichever of the projector and the gateway redacted it, and the
// projector's own count agrees.
func (c *canaryParts) checkCounts(t *testing.T, placements int) {
	t.Helper()
	fams, err := c.in.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "canopy_redactions_total" {
			for _, m := range f.GetMetric() {
				got[label(m, "rule")] = m.GetCounter().GetValue()
			}
		}
	}
	for _, rule := range []string{redact.RuleOpenAIKey, "canary_ticket"} {
		if got[rule] != float64(placements) {
			t.Errorf("canopy_redactions_total{rule=%q} = %v, want %d (all series: %v)", rule, got[rule], placements, got)
		}
	}
	// The human input through the gateway was redacted there: the
	// projector found nothing more in it.
	if n := c.p.Status().Counts.Redactions; n != int64(2*(placements-1)) {
		t.Errorf("the projector counted %d redactions, want %d", n, 2*(placements-1))
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// checkCanaryControls: the redacted text did reach where free text goes
// (the trigger texts of the inputs' wakes, each with both markers), the
// history holds every event, and the exports did arrive: the absence of
// the canaries means something.
func checkCanaryControls(t *testing.T, texts map[string]string, produced canaries, inputs int) {
	t.Helper()
	redacted := "ran it with [redacted:openai_key] for [redacted:canary_ticket]"
	for _, what := range []string{"the wake stream (live view)", "the human input record the gateway produced"} {
		if !strings.Contains(texts[what], redacted) {
			t.Errorf("%s does not hold the redacted text %q", what, redacted)
		}
	}
	var prio []string
	for what, text := range texts {
		if strings.HasPrefix(what, "the committed wakes of ") && strings.Contains(what, "priority") {
			prio = append(prio, text)
		}
	}
	if n := strings.Count(strings.Join(prio, ""), redacted); n < inputs {
		t.Errorf("the priority wakes hold the redacted input text %d times, want %d", n, inputs)
	}
	for _, typ := range slices.Collect(maps.Keys(topics.FreeTextFields)) {
		if !strings.Contains(texts["GET /v1/runs/run-canary/history?limit=100"], `"canary-`+string(typ)+`"`) {
			t.Errorf("the history has no entry of the canary %s: the test did not check it", typ)
		}
	}
	if !strings.Contains(texts["the OTLP records"], telemetry.EventSnapshotGenerated) || !strings.Contains(texts["the OTLP records"], "process ") {
		t.Error("the OTLP records hold no snapshot event or no span: the export did not work")
	}
	if !strings.Contains(texts["/metrics"], "canopy_redactions_total") || texts["the log lines"] == "" {
		t.Error("/metrics has no canopy_redactions_total, or nothing was logged")
	}
}

// values joins the values of records.
func values(recs []*kgo.Record) string {
	var b strings.Builder
	for _, r := range recs {
		b.Write(r.Value)
		b.WriteByte('\n')
	}
	return b.String()
}

// setJSONField sets the string field of data whose JSON name is name.
func setJSONField(t *testing.T, data topics.Payload, name, v string) {
	t.Helper()
	d := reflect.ValueOf(data).Elem()
	for i := range d.NumField() {
		if tag, _, _ := strings.Cut(d.Type().Field(i).Tag.Get("json"), ","); tag == name {
			d.Field(i).SetString(v)
			return
		}
	}
	t.Fatalf("%T has no field %q", data, name)
}

// otlpSink is an OTLP/HTTP collector that keeps what it receives, as
// sent: a secret in any span, attribute or log record is in its bytes.
type otlpSink struct {
	mu     sync.Mutex
	bodies []string
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func (s *otlpSink) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.bodies, "\n")
}
