package projector

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestUntracedWakeKeepsItsRecordsTrace: with OpenTelemetry's no-op tracer
// a wake's span is started without its name and attributes, and its
// context still carries the trace of the record that triggered it, which
// the wake's events take their trace id from; without one, no trace. The
// batch's span is as valid as a no-op tracer would make it.
func TestUntracedWakeKeepsItsRecordsTrace(t *testing.T) {
	tp := noop.NewTracerProvider()
	w := &worker{p: &Projector{}, tracer: tp.Tracer(tracerName)}
	if _, off := trace.TracerProvider(tp).(noop.TracerProvider); !off {
		t.Fatal("the no-op tracer provider is not recognized")
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true})
	rec := &kgo.Record{Topic: "canopy.agent-events", Partition: 3}
	wake := &topics.Wake{WakeID: "wake-1", RunID: "run-1"}
	for _, tracing := range []bool{false, true} {
		w.tracing = tracing
		ctx, span := w.wakeSpan(context.Background(), rec, wake, parent)
		if got := trace.SpanContextFromContext(ctx); got.TraceID() != parent.TraceID() || span.IsRecording() {
			t.Errorf("tracing %v: the wake's context has trace %v (recording %v), want the record's %v", tracing, got.TraceID(), span.IsRecording(), parent.TraceID())
		}
		ctx, _ = w.wakeSpan(context.Background(), rec, wake, trace.SpanContext{})
		if got := trace.SpanContextFromContext(ctx); got.IsValid() {
			t.Errorf("tracing %v: a wake without a traced record has trace %v", tracing, got.TraceID())
		}
		_, bs := w.batchSpan(batch{records: []*kgo.Record{rec}})
		if bs.IsRecording() || bs.SpanContext().IsValid() {
			t.Errorf("tracing %v: a no-op tracer's batch span records or has a trace", tracing)
		}
	}
}
