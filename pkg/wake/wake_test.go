package wake_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

func TestValidateListsEveryProblem(t *testing.T) {
	err := wake.Config{Brokers: []string{"nohost"}, Names: topics.Names{Prefix: "bad prefix", Version: 1},
		StaleAfter: -1, DedupeSize: -1, PriorityWait: -1, MaxQueued: -1, Source: "bad\nsource"}.Validate()
	if !errors.Is(err, wake.ErrConfig) {
		t.Fatalf("Validate = %v, want ErrConfig", err)
	}
	for _, want := range []string{`broker "nohost"`, "prefix", "stale after", "dedupe size", "max queued", "priority wait", "source"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate's error does not mention %q: %v", want, err)
		}
	}
	if err := (wake.Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("empty config: %v, want no brokers", err)
	}
	if err := (wake.Config{Brokers: []string{"127.0.0.1:9092"}}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

// realWakes replays examples/small-run.jsonl plus a human input and
// returns the wakes the projector would publish, as records of their lanes'
// topics.
func realWakes(t *testing.T, names topics.Names) []*kgo.Record {
	t.Helper()
	in, err := os.ReadFile("../../examples/small-run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	human := `{"specversion":"1.0","id":"01JM00000000000000000HUMAN","source":"/gateway/test","type":"signal.input","time":"2026-02-14T10:05:00.000Z","runid":"run-demo-1","agentid":"human:test","schemaversion":1,"data":{"input_kind":"steer","text":"look at the failure"}}`
	var out bytes.Buffer
	if _, err := replay.Run(io.MultiReader(bytes.NewReader(in), strings.NewReader(human+"\n")), &out, io.Discard, replay.Options{}); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		w, err := topics.DecodeWake(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: names.WakeTopic(w.Lane), Key: []byte(w.RunID), Value: bytes.Clone(sc.Bytes())})
	}
	return recs
}

type observed struct {
	mu  sync.Mutex
	got []wake.Received
	ctx []context.Context
}

func (o *observed) WakeReceived(ctx context.Context, r wake.Received) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got, o.ctx = append(o.got, r), append(o.ctx, ctx)
}

// TestConsumer: a backlog of normal wakes with a duplicate, then a priority
// wake, all waiting before the conductor starts: the priority wake is
// delivered first, the duplicate is dropped, staleness is measured on the
// injected clock, the span continues the record's trace, and every wake is
// acknowledged on the agent events topic, keyed and partitioned by run.
func TestConsumer(t *testing.T) {
	kc := brokertest.NewKfake(t).Cluster
	brokers := kc.ListenAddrs()
	names := topics.Names{Prefix: "waketest", Version: 1}
	const partitions = 3
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}

	recs := realWakes(t, names)
	var normal, prio []*kgo.Record
	for _, r := range recs {
		if r.Topic == names.PriorityWakes() {
			prio = append(prio, r)
		} else {
			normal = append(normal, r)
		}
	}
	if len(prio) < 1 || len(normal) < 5 {
		t.Fatalf("replay gave %d priority and %d normal wakes, want at least 1 and 5", len(prio), len(normal))
	}
	// The priority wake carries a trace context its process span continues.
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(ctx, parent), topics.HeaderCarrier{Headers: &prio[0].Headers})
	dup := *normal[1]
	dup.Headers = nil
	send := append(append(append([]*kgo.Record{}, normal...), &dup), prio...)
	if err := cl.ProduceSync(ctx, send...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	now := time.Date(2026, 2, 14, 12, 0, 0, 0, time.UTC)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	obs := &observed{}
	var mu sync.Mutex
	var order []string
	c, err := wake.New(wake.Config{Brokers: brokers, Names: names, Group: "conductor-test", Now: func() time.Time { return now },
		Observer: obs, TracerProvider: tp, Logger: discard()}, func(ctx context.Context, w *topics.Wake, r wake.Received) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, w.WakeID)
		if !trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("wake %s: the handler's context has no span", w.WakeID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	want := int64(len(recs))
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return c.Stats.Acked.Load() == want && c.Stats.Duplicates.Load() == 1 }, func() string {
		return "every wake delivered and acknowledged, the duplicate dropped"
	}))
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	for i, r := range prio {
		if w, _ := topics.DecodeWake(r.Value); order[i] != w.WakeID {
			t.Errorf("delivered %s %dth, want the priority wake %s (order %v)", order[i], i+1, w.WakeID, order)
		}
	}
	prioWake, _ := topics.DecodeWake(prio[0].Value)
	if c.Stats.Delivered.Load() != want {
		t.Errorf("delivered %d, want %d", c.Stats.Delivered.Load(), want)
	}

	// Staleness at receipt: age when generated plus the time since.
	obs.mu.Lock()
	for _, r := range obs.got {
		var w *topics.Wake
		for _, rec := range recs {
			if x, _ := topics.DecodeWake(rec.Value); x.WakeID == r.WakeID {
				w = x
			}
		}
		wantAge := w.AgentTreeSnapshot.SnapshotAgeMs + now.Sub(w.AgentTreeSnapshot.GeneratedAt.Std()).Milliseconds()
		if r.AgeMs != wantAge || !r.Stale {
			t.Errorf("wake %s: age %d stale %v, want %d true", r.WakeID, r.AgeMs, r.Stale, wantAge)
		}
		if r.SnapshotID != w.AgentTreeSnapshot.SnapshotID || r.AsOfEventSeq != w.AgentTreeSnapshot.AsOfEventSeq ||
			r.NodesIncluded != len(w.AgentTreeSnapshot.Nodes) || r.PolicyVersion == "" || r.Bytes == 0 {
			t.Errorf("wake %s: receipt metadata %+v does not match the wake", r.WakeID, r)
		}
	}
	if len(obs.got) != int(want) {
		t.Errorf("observer saw %d wakes, want %d", len(obs.got), want)
	}
	obs.mu.Unlock()

	// The priority wake's span is a consumer process span under the
	// record's trace, with the messaging attributes.
	var found bool
	for _, s := range spans.Ended() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if attrs["messaging.message.id"] != prioWake.WakeID {
			continue
		}
		found = true
		if s.Parent().TraceID() != parent.TraceID() || s.Parent().SpanID() != parent.SpanID() || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("priority span: parent %v kind %v, want %v consumer", s.Parent(), s.SpanKind(), parent)
		}
		for k, v := range map[string]string{"messaging.system": "kafka", "messaging.destination.name": names.PriorityWakes(),
			"messaging.operation.type": "process", "messaging.consumer.group.name": "conductor-test",
			"messaging.destination.partition.id": "", "messaging.kafka.offset": ""} {
			if got, ok := attrs[k]; !ok || (v != "" && got != v) {
				t.Errorf("priority span: %s = %q (present %v), want %q", k, got, ok, v)
			}
		}
	}
	if !found {
		t.Error("no span for the priority wake")
	}

	// The acknowledgements: one per wake, keyed and partitioned by run,
	// naming the agents of result and completion triggers.
	acks := readAll(t, brokers, names.AgentEvents(), int(want))
	byWake := map[string]*topics.Event{}
	for _, r := range acks {
		ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
		if err != nil {
			t.Fatalf("acknowledgement does not decode: %v", err)
		}
		if r.Partition != topics.Partition(r.Key, partitions) {
			t.Errorf("acknowledgement of run %s in partition %d, want %d", r.Key, r.Partition, topics.Partition(r.Key, partitions))
		}
		byWake[ev.Data.(*topics.WakeReceived).WakeID] = ev
	}
	for _, rec := range recs {
		w, _ := topics.DecodeWake(rec.Value)
		ev := byWake[w.WakeID]
		if ev == nil {
			t.Errorf("wake %s was not acknowledged", w.WakeID)
			continue
		}
		if ev.AgentID != *w.AgentTreeSnapshot.RootAgentID || !ev.Time.Std().Equal(now) {
			t.Errorf("ack of %s: agent %s at %v, want the root %s at %v", w.WakeID, ev.AgentID, ev.Time, *w.AgentTreeSnapshot.RootAgentID, now)
		}
		var wantAgents []string
		for _, tr := range w.Triggers {
			if (tr.Kind == topics.TriggerResult || tr.Kind == topics.TriggerCompleted) && !contains(wantAgents, tr.AgentID) {
				wantAgents = append(wantAgents, tr.AgentID)
			}
		}
		if got := ev.Data.(*topics.WakeReceived).AgentIDs; strings.Join(got, ",") != strings.Join(wantAgents, ",") {
			t.Errorf("ack of %s names %v, want %v", w.WakeID, got, wantAgents)
		}
	}
}

// TestAckEventIsStable: acknowledging the same wake twice gives the same
// event id, so the projector applies a repeated acknowledgement once.
// TestStopDuringDelivery: a consumer stopped while it delivers a wake (here
// the handler itself ends Run's context, so the acknowledgement's produce
// sees it end) returns nil, as Run promises when its context is done, not
// the produce's "context canceled"; the wake is not acknowledged, so it is
// delivered again after a restart.
func TestStopDuringDelivery(t *testing.T) {
	kc := brokertest.NewKfake(t).Cluster
	brokers := kc.ListenAddrs()
	names := topics.Names{Prefix: "wakestop", Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, realWakes(t, names)[0]).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c, err := wake.New(wake.Config{Brokers: brokers, Names: names, Group: "conductor-stop", Logger: discard()},
		func(context.Context, *topics.Wake, wake.Received) error { stop(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		t.Fatalf("Run stopped during a delivery: %v, want nil", err)
	}
	if c.Stats.Delivered.Load() != 1 || c.Stats.Acked.Load() != 0 {
		t.Errorf("delivered %d, acknowledged %d; want 1 and 0", c.Stats.Delivered.Load(), c.Stats.Acked.Load())
	}
}

func TestAckEventIsStable(t *testing.T) {
	w := &topics.Wake{WakeID: "01JM0000000000000000000100", RunID: "run-1"}
	a := wake.AckEvent(w, "/conductors/a", "conductor", time.Unix(100, 0))
	b := wake.AckEvent(w, "/conductors/a", "conductor", time.Unix(200, 0))
	if a.ID != b.ID {
		t.Errorf("ids %s and %s differ", a.ID, b.ID)
	}
	if err := a.Validate(); err != nil {
		t.Errorf("ack event: %v", err)
	}
	if c := wake.AckEvent(w, "/conductors/b", "conductor", time.Unix(100, 0)); c.ID == a.ID {
		t.Error("two conductors' acknowledgements share an id")
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestSplitWakeParts: a commit of 150 results of 150 agents on one run
// comes as three parts (no acknowledgement names more than 64 agents):
// each part is delivered once with its part in Received and in its Line,
// a part sent again is dropped as a duplicate, and each is acknowledged by
// one valid conductor.wake_received naming the agents of its own triggers,
// every agent once over the three.
func TestSplitWakeParts(t *testing.T) {
	kc := brokertest.NewKfake(t).Cluster
	brokers := kc.ListenAddrs()
	names := topics.Names{Prefix: "wakeparts", Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 2, 1); err != nil {
		t.Fatal(err)
	}
	events := workload.Burst{RunID: "run-results", Nodes: 150}.Results()
	var in bytes.Buffer
	for i := range events {
		enc, err := events[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		in.Write(append(enc, '\n'))
	}
	var out bytes.Buffer
	if _, err := replay.Run(&in, &out, io.Discard, replay.Options{Batch: len(events)}); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	parts := map[string]*topics.Wake{}
	for line := range bytes.Lines(out.Bytes()) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		w, err := topics.DecodeWake(line)
		if err != nil {
			t.Fatal(err)
		}
		parts[w.WakeID] = w
		recs = append(recs, &kgo.Record{Topic: names.WakeTopic(w.Lane), Key: []byte(w.RunID), Value: bytes.Clone(line)})
	}
	if len(recs) != 3 {
		t.Fatalf("replay gave %d wakes, want the 150 results in 3 parts", len(recs))
	}
	dup := *recs[1]
	if err := cl.ProduceSync(ctx, append(recs, &dup)...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	obs := &observed{}
	var mu sync.Mutex
	lines := map[string]string{}
	c, err := wake.New(wake.Config{Brokers: brokers, Names: names, Group: "conductor-parts", Observer: obs, Logger: discard()},
		func(_ context.Context, w *topics.Wake, r wake.Received) error {
			mu.Lock()
			defer mu.Unlock()
			lines[w.WakeID] = wake.Line(w, r)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	testenv.WaitFor(t, 60*time.Second, testenv.Holds(func() bool { return c.Stats.Acked.Load() == 3 && c.Stats.Duplicates.Load() == 1 }, func() string {
		return fmt.Sprintf("%d of 3 parts acknowledged, %d duplicates dropped", c.Stats.Acked.Load(), c.Stats.Duplicates.Load())
	}))
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	obs.mu.Lock()
	for _, r := range obs.got {
		w := parts[r.WakeID]
		if r.Part == nil || w.Part == nil || *r.Part != *w.Part {
			t.Errorf("wake %s: received part %+v, the wake's %+v", r.WakeID, r.Part, w.Part)
			continue
		}
		if want := fmt.Sprintf(" part=%d/3 triggers=[", r.Part.Number); !strings.Contains(lines[r.WakeID], want) {
			t.Errorf("wake %s: Line %q does not say %q", r.WakeID, lines[r.WakeID], want)
		}
	}
	if len(obs.got) != 3 {
		t.Errorf("%d wakes received, want the 3 parts", len(obs.got))
	}
	obs.mu.Unlock()

	named := map[string]int{}
	for _, r := range readAll(t, brokers, names.AgentEvents(), 3) {
		ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
		if err != nil {
			t.Fatalf("acknowledgement does not decode: %v", err)
		}
		data := ev.Data.(*topics.WakeReceived)
		w := parts[data.WakeID]
		if w == nil {
			t.Fatalf("acknowledgement of an unknown wake %s", data.WakeID)
		}
		var want []string
		for _, tr := range w.Triggers {
			want = append(want, tr.AgentID)
		}
		if strings.Join(data.AgentIDs, ",") != strings.Join(want, ",") {
			t.Errorf("part %d/3 is acknowledged naming %d agents, not its own %d", w.Part.Number, len(data.AgentIDs), len(want))
		}
		for _, a := range data.AgentIDs {
			named[a]++
		}
	}
	for i := 1; i <= 150; i++ {
		if a := fmt.Sprintf("agent-%05d", i); named[a] != 1 {
			t.Errorf("%s is named by %d acknowledgements, want 1", a, named[a])
		}
	}
}
