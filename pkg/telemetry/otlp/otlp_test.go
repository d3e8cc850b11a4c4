package otlp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectormetrics"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// Secrets planted in events' payloads: they may travel in wakes, never in
// telemetry.
const (
	// secret is a human's input text, which the priority wake's trigger
	// carries to the conductor.
	secret = "SECRET-canary-5d1e9b"
	// secretCapability is the root node's capability, which every snapshot
	// carries (the root is always included): the field a telemetry event
	// built from the snapshot would leak if it copied node contents.
	secretCapability = "SECRET-capability-7c20aa"
	// secretLabel is an artifact's free-text label, which no snapshot
	// carries.
	secretLabel = "SECRET-label-e41f03"
)

// receiver is an in-process OTLP/HTTP receiver: it keeps every request body
// as received and its decoded spans and log records.
type receiver struct {
	mu    sync.Mutex
	raw   [][]byte
	spans []span
	logs  []logRecord
}

type span struct {
	name, traceID string
	attrs         map[string]string
}

type logRecord struct {
	event, traceID string
	attrs          map[string]string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.raw = append(rc.raw, body)
	switch r.URL.Path {
	case "/v1/traces":
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					rc.spans = append(rc.spans, span{s.Name, fmt.Sprintf("%x", s.TraceId), attrMap(s.Attributes)})
				}
			}
		}
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	case "/v1/logs":
		var req collogs.ExportLogsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rl := range req.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, l := range sl.LogRecords {
					rc.logs = append(rc.logs, logRecord{l.EventName, fmt.Sprintf("%x", l.TraceId), attrMap(l.Attributes)})
				}
			}
		}
		b, _ := proto.Marshal(&collogs.ExportLogsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

func attrMap(kvs []*common.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.Value
		switch {
		case v.GetStringValue() != "":
			m[kv.Key] = v.GetStringValue()
		default:
			m[kv.Key] = strings.Trim(fmt.Sprint(v.Value), "&{}")
		}
	}
	return m
}

// TestOTLPExport runs a projector and a conductor's wake consumer against
// the embedded broker with OTLP export to an in-process receiver, and checks
// that seed 000's four events and the spans of one trace (event → projector
// → conductor) arrive with their names and attributes (offsets on process
// spans, the consumer group on both sides' process spans). Secrets planted
// in a human's input, in the root node's capability (a field every snapshot
// carries) and in an artifact's label (one none carries) reach the
// conductor where they should and no further: no span, log record, log line
// or /metrics byte carries any of them.
func TestOTLPExport(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: "canopy-test"})
	if err != nil {
		t.Fatal(err)
	}
	if !ot.Enabled || ot.Protocol != "http/protobuf" {
		t.Fatalf("export not on: %+v", ot)
	}
	var logBuf testenv.Buffer
	logger := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the projector's and the conductor's log:\n%s", logBuf.String())
		}
	})
	events := telemetry.NewEvents(ot.Logs, logger, nil)

	kc := brokertest.NewKfake(t).Cluster
	brokers := kc.ListenAddrs()
	names := topics.Names{Prefix: "otlp", Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const partitions = 2
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}

	// One run's events, all carrying the agent's trace context, with the
	// root's capability and an artifact's label secret, and a human's input
	// with the secret in its text.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceparent := "00-" + traceID + "-00f067aa0ba902b7-01"
	evs := workload.Generate(workload.Spec{RunID: "run-otlp", Nodes: 30, Seed: 7})
	root := evs[0]
	if nc, ok := root.Data.(*topics.NodeCreated); !ok || nc.ParentAgentID != "" {
		t.Fatalf("the workload's first event is not the root's creation: %+v", root)
	} else {
		nc.Capability = secretCapability
	}
	artifact := topics.Event{ID: "artifact-secret", Source: root.Source, Type: topics.TypeArtifactCreated, Time: root.Time, RunID: "run-otlp",
		AgentID: root.AgentID, SchemaVersion: topics.CurrentSchemaVersion,
		Data: &topics.ArtifactCreated{ArtifactID: "artifact-1", ArtifactType: "document", Label: secretLabel}}
	evs = slices.Insert(evs, 1, artifact)
	var recs []*kgo.Record
	for i := range evs {
		r, err := topics.EventRecord(names.AgentEvents(), &evs[i], traceparent)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	last := evs[len(evs)-1].Time.Std()
	input := topics.Event{ID: "input-secret", Source: "/gateway", Type: topics.TypeInput, Time: topics.NewTime(last), RunID: "run-otlp",
		AgentID: "human", SchemaVersion: topics.CurrentSchemaVersion, Data: &topics.Input{InputKind: "message", Text: secret}}
	ir, err := topics.EventRecord(names.HumanInput(), &input, traceparent)
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, ir)
	for _, r := range recs {
		r.Partition = topics.Partition(r.Key, partitions)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, events)
	if err != nil {
		t.Fatal(err)
	}
	// Small commits and a 1ms staleness threshold: batches short of the high
	// watermark build stale snapshots. Eight nodes at most: truncated ones.
	cfg := projector.Config{Kafka: kafkaconn.Conn{Brokers: brokers}, Names: names, DataDir: t.TempDir(), Group: "otlp-projector", Chunk: 10, MaxBatch: 10,
		Logger: logger, Hooks: pm, KafkaHooks: telemetry.KafkaHooks(reg), TracerProvider: ot.Tracer,
		Projection: projection.Config{Limits: snapshot.Limits{MaxNodes: 8, StaleAfter: time.Millisecond}}}
	p, err := projector.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := projectormetrics.RegisterGauges(reg, p); err != nil {
		t.Fatal(err)
	}
	pctx, pstop := context.WithCancel(ctx)
	// pdone closes when the projector returns, with its error in perr: the
	// wait below ends early if it does.
	pdone := make(chan struct{})
	var perr error
	go func() { defer close(pdone); perr = p.Run(pctx) }()
	stopProjector := sync.OnceValue(func() error { pstop(); <-pdone; return perr })
	defer stopProjector()

	obs, err := telemetry.NewWakeObserver(reg, events)
	if err != nil {
		t.Fatal(err)
	}
	var normal, priority atomic.Int64
	// Where each secret legitimately reached the conductor (positive
	// controls: the secrets did flow through the projector).
	var inWakes sync.Map
	wc, err := wake.New(wake.Config{Brokers: brokers, Names: names, Group: "otlp-conductor", Logger: logger, Observer: obs, TracerProvider: ot.Tracer},
		func(_ context.Context, w *topics.Wake, _ wake.Received) error {
			if w.Lane == topics.LanePriority {
				priority.Add(1)
			} else {
				normal.Add(1)
			}
			b, err := json.Marshal(w)
			if err != nil {
				return err
			}
			for _, s := range []string{secret, secretCapability, secretLabel} {
				if bytes.Contains(b, []byte(s)) {
					inWakes.Store(s, true)
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wstop := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() { wdone <- wc.Run(wctx) }()
	stopConductor := sync.OnceValue(func() error { wstop(); return <-wdone })
	defer stopConductor()
	testenv.WaitFor(t, 60*time.Second, func() error {
		select {
		case <-pdone:
			t.Fatalf("the projector stopped before the conductor had its wakes: %v", perr)
		default:
		}
		if priority.Load() == 0 || normal.Load() < 5 {
			return fmt.Errorf("the conductor received %d normal and %d priority wakes, want 5 and 1", normal.Load(), priority.Load())
		}
		return nil
	})
	if err := stopConductor(); err != nil {
		t.Fatal(err)
	}
	if err := stopProjector(); err != nil {
		t.Fatal(err)
	}
	// Shutdown flushes the batched spans and log records to the receiver.
	if err := ot.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// Positive controls: the input's text reached the conductor in the
	// priority wake's trigger and the root's capability in snapshots, as
	// they should; the artifact's label is in no wake.
	for s, want := range map[string]bool{secret: true, secretCapability: true, secretLabel: false} {
		if _, got := inWakes.Load(s); got != want {
			t.Errorf("%s in the wakes the conductor received: %v, want %v", s, got, want)
		}
	}
	// The metrics, as a scraper reads them.
	msrv := httptest.NewServer(telemetry.Handler(reg))
	defer msrv.Close()
	resp, err := http.Get(msrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	exposition, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Contains(exposition, []byte("canopy_projector_wakes_published_total")) {
		t.Fatalf("/metrics: %v\n%s", err, exposition)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, s := range []string{secret, secretCapability, secretLabel} {
		for _, b := range rc.raw {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s reached the collector:\n%q", s, b)
			}
		}
		if strings.Contains(logBuf.String(), s) {
			t.Errorf("%s is in the log lines", s)
		}
		if bytes.Contains(exposition, []byte(s)) {
			t.Errorf("%s is in /metrics", s)
		}
	}

	// Every event arrived, tied to a span, with metadata only.
	byEvent := map[string][]logRecord{}
	for _, l := range rc.logs {
		byEvent[l.event] = append(byEvent[l.event], l)
	}
	for _, name := range []string{telemetry.EventSnapshotGenerated, telemetry.EventSnapshotTruncated, telemetry.EventSnapshotStale, telemetry.EventWakeReceived} {
		ls := byEvent[name]
		if len(ls) == 0 {
			t.Errorf("no %s event arrived (events: %v)", name, keys(byEvent))
			continue
		}
		l := ls[0]
		if l.traceID == "" || strings.Trim(l.traceID, "0") == "" {
			t.Errorf("%s: no trace id: not tied to a span", name)
		}
		for _, attr := range []string{"snapshot_id", "wake_id", "run_id", "as_of_event_seq", "nodes_included", "nodes_omitted",
			"bytes", "policy_version", "snapshot_age_ms", "truncated", "stale"} {
			if _, ok := l.attrs[attr]; !ok {
				t.Errorf("%s: no %s attribute: %v", name, attr, l.attrs)
			}
		}
		if l.attrs["run_id"] != "run-otlp" {
			t.Errorf("%s: run_id %q", name, l.attrs["run_id"])
		}
		if !strings.Contains(logBuf.String(), name) {
			t.Errorf("%s: no slog line", name)
		}
	}
	if l := byEvent[telemetry.EventSnapshotGenerated]; len(l) > 0 {
		if _, ok := l[0].attrs["generation_ms"]; !ok {
			t.Errorf("%s: no generation_ms", telemetry.EventSnapshotGenerated)
		}
	}
	if l := byEvent[telemetry.EventSnapshotTruncated]; len(l) > 0 && l[0].attrs["truncated"] != "true" {
		t.Errorf("truncated event says truncated=%q", l[0].attrs["truncated"])
	}

	// The spans: the projector's batch spans, its wake spans continuing the
	// events' trace, and the conductor's process spans continuing the
	// wakes'.
	find := func(name, trace string) *span {
		for i := range rc.spans {
			if rc.spans[i].name == name && (trace == "" || rc.spans[i].traceID == trace) {
				return &rc.spans[i]
			}
		}
		return nil
	}
	checks := []struct {
		name, trace string
		attrs       map[string]string
	}{
		{"process " + names.AgentEvents(), "", map[string]string{"messaging.system": "kafka", "messaging.operation.type": "process",
			"messaging.destination.name": names.AgentEvents(), "messaging.consumer.group.name": "otlp-projector"}},
		{"send " + names.Wakes(), traceID, map[string]string{"messaging.system": "kafka", "messaging.operation.type": "send",
			"messaging.destination.name": names.Wakes(), "messaging.kafka.message.key": "run-otlp"}},
		{"send " + names.PriorityWakes(), traceID, map[string]string{"messaging.destination.name": names.PriorityWakes()}},
		{"process " + names.Wakes(), traceID, map[string]string{"messaging.system": "kafka", "messaging.destination.name": names.Wakes(),
			"messaging.consumer.group.name": "otlp-conductor"}},
		{"process " + names.PriorityWakes(), traceID, map[string]string{"messaging.destination.name": names.PriorityWakes(),
			"messaging.consumer.group.name": "otlp-conductor"}},
	}
	for _, c := range checks {
		s := find(c.name, c.trace)
		if s == nil {
			var got []string
			for _, s := range rc.spans {
				got = append(got, s.name+"@"+s.traceID)
			}
			t.Errorf("no span %q in trace %q; spans: %v", c.name, c.trace, dedupe(got))
			continue
		}
		for k, v := range c.attrs {
			if s.attrs[k] != v {
				t.Errorf("span %q: %s = %q, want %q", c.name, k, s.attrs[k], v)
			}
		}
		if _, ok := s.attrs["messaging.destination.partition.id"]; !ok {
			t.Errorf("span %q: no partition id", c.name)
		}
		// A process span says which record (the batch's first, for the
		// projector's) it processed.
		if strings.HasPrefix(c.name, "process ") {
			if off, err := strconv.ParseInt(s.attrs["messaging.kafka.offset"], 10, 64); err != nil || off < 0 {
				t.Errorf("span %q: messaging.kafka.offset %q, want an offset", c.name, s.attrs["messaging.kafka.offset"])
			}
		}
	}
}

// TestOTelOffWithoutEndpoint: no endpoint, no export, no error; a bad
// protocol is an error that names the variable.
func TestOTelOffWithoutEndpoint(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	ot, err := otlp.Setup(context.Background(), otlp.Config{ServiceName: "x", Getenv: getenv})
	if err != nil || ot.Enabled {
		t.Fatalf("without an endpoint: enabled %v, err %v", ot != nil && ot.Enabled, err)
	}
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4318"
	env["OTEL_SDK_DISABLED"] = "true"
	if ot, err := otlp.Setup(context.Background(), otlp.Config{ServiceName: "x", Getenv: getenv}); err != nil || ot.Enabled {
		t.Fatalf("OTEL_SDK_DISABLED: enabled %v, err %v", ot != nil && ot.Enabled, err)
	}
	delete(env, "OTEL_SDK_DISABLED")
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
	if _, err := otlp.Setup(context.Background(), otlp.Config{ServiceName: "x", Getenv: getenv}); err == nil ||
		!strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") && !strings.Contains(err.Error(), "PROTOCOL") {
		t.Fatalf("http/json: err %v, want one naming the protocol variable", err)
	}
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
	ot, err = otlp.Setup(context.Background(), otlp.Config{ServiceName: "x", Getenv: getenv})
	if err != nil || !ot.Enabled || ot.Protocol != "grpc" {
		t.Fatalf("grpc: %+v, %v", ot, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ot.Shutdown(ctx) // nothing was exported: nothing to flush
}

// TestOTelExporterVariables: OTEL_TRACES_EXPORTER and OTEL_LOGS_EXPORTER
// are honoured. "none" stops that signal reaching the collector while the
// other still does; "otlp" is the default; anything else is an error
// naming the variable, not a signal silently lost.
func TestOTelExporterVariables(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// export sets up OTel with env, makes one span and one event, flushes,
	// and returns how many spans and log records reached the receiver.
	export := func(env map[string]string) (spans, logs int, err error) {
		t.Helper()
		// The real environment: the OTLP exporters read it themselves.
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
		for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_LOGS_EXPORTER"} {
			t.Setenv(k, env[k])
		}
		ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: "x"})
		if err != nil {
			return 0, 0, err
		}
		sctx, s := ot.Tracer.Tracer("test").Start(ctx, "a span")
		telemetry.NewEvents(ot.Logs, slog.New(slog.DiscardHandler), nil).Snapshot(sctx, telemetry.SnapshotMeta{RunID: "r"})
		s.End()
		if err := ot.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		spans, logs = len(rc.spans), len(rc.logs)
		rc.spans, rc.logs, rc.raw = nil, nil, nil
		return spans, logs, nil
	}
	for _, c := range []struct {
		env         map[string]string
		spans, logs bool
	}{
		{map[string]string{}, true, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp"}, true, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false, true},
		{map[string]string{"OTEL_LOGS_EXPORTER": "none"}, true, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": " None ", "OTEL_LOGS_EXPORTER": "none"}, false, false},
	} {
		spans, logs, err := export(c.env)
		if err != nil {
			t.Errorf("%v: %v", c.env, err)
			continue
		}
		if (spans > 0) != c.spans || (logs > 0) != c.logs {
			t.Errorf("%v: %d spans and %d log records exported; want spans %v, logs %v", c.env, spans, logs, c.spans, c.logs)
		}
	}
	for _, c := range []struct{ name, value string }{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_LOGS_EXPORTER", "console"},
		{"OTEL_TRACES_EXPORTER", "otlp,none"},
	} {
		_, _, err := export(map[string]string{c.name: c.value})
		if !errors.Is(err, otlp.ErrConfig) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s=%s: err %v, want ErrOTelConfig naming the variable", c.name, c.value, err)
		}
	}
	// Both off is export off, as without an endpoint.
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_LOGS_EXPORTER", "none")
	ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: "x"})
	if err != nil || ot.Enabled {
		t.Errorf("both exporters none: enabled %v, err %v", ot != nil && ot.Enabled, err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
