package projector

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// tracerName is the instrumentation scope of the projector's spans.
const tracerName = "github.com/canopy-dev/canopy/internal/projector"

// maxLinks bounds the links of a batch's span to the traces of the records
// that triggered wakes: a backlog batch can hold thousands.
const maxLinks = 128

// Attribute keys of OpenTelemetry's messaging semantic conventions (v1.30+).
const (
	attrSystem        = attribute.Key("messaging.system")
	attrOperationType = attribute.Key("messaging.operation.type")
	attrOperationName = attribute.Key("messaging.operation.name")
	attrDestination   = attribute.Key("messaging.destination.name")
	attrPartition     = attribute.Key("messaging.destination.partition.id")
	attrGroup         = attribute.Key("messaging.consumer.group.name")
	attrBatchCount    = attribute.Key("messaging.batch.message_count")
	attrOffset        = attribute.Key("messaging.kafka.offset")
	attrMessageKey    = attribute.Key("messaging.kafka.message.key")
	attrMessageID     = attribute.Key("messaging.message.id")
)

// batchSpan starts the consumer span of processing one batch. Its links
// point at the traces of the records that triggered wakes (added as they
// are found); each wake's own span is a child of its triggering record's
// trace, so that one trace runs from a worker's event to the conductor.
func (w *worker) batchSpan(b batch) (context.Context, trace.Span) {
	if !w.tracing {
		// A no-op span, as the options would give: their strings and
		// slices were 2% of what steady's projector allocated.
		return w.tracer.Start(context.Background(), "process")
	}
	first := b.records[0]
	return w.tracer.Start(context.Background(), "process "+first.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attrSystem.String("kafka"),
			attrOperationType.String("process"),
			attrOperationName.String("process"),
			attrDestination.String(first.Topic),
			attrPartition.String(strconv.Itoa(int(first.Partition))),
			attrGroup.String(w.p.cfg.Group),
			attrBatchCount.Int(len(b.records)),
			attrOffset.Int64(first.Offset),
		))
}

// wakeSpan starts the producer span of publishing one wake: the child of
// the record that triggered it when that record carried trace context,
// else of the batch's span (timers: a root).
func (w *worker) wakeSpan(batchCtx context.Context, rec *kgo.Record, wake *topics.Wake, parent trace.SpanContext) (context.Context, trace.Span) {
	ctx := batchCtx
	if !w.tracing {
		// The record's trace context still reaches the wake's events
		// (telemetry.Events takes it from ctx), as with a tracer.
		if parent.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(batchCtx, parent)
		}
		return w.tracer.Start(ctx, "send")
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attrSystem.String("kafka"),
			attrOperationType.String("send"),
			attrOperationName.String("send"),
			attrDestination.String(rec.Topic),
			attrPartition.String(strconv.Itoa(int(rec.Partition))),
			attrMessageKey.String(wake.RunID),
			attrMessageID.String(wake.WakeID),
		),
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(batchCtx, parent)
		if bs := trace.SpanContextFromContext(batchCtx); bs.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: bs}))
		}
	}
	return w.tracer.Start(ctx, "send "+rec.Topic, opts...)
}

// topicIndex is the index into worker.lag of an input topic.
func (w *worker) topicIndex(topic string) int {
	if topic == w.p.humanTopic {
		return 1
	}
	return 0
}
