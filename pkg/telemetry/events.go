package telemetry

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	lognoop "go.opentelemetry.io/otel/log/noop"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Event names of seed 000's observability events.
const (
	EventSnapshotGenerated = "conductor.snapshot.generated"
	EventSnapshotTruncated = "conductor.snapshot.truncated"
	EventSnapshotStale     = "conductor.snapshot.stale"
	EventWakeReceived      = "conductor.wake.received"
)

// scopeName is the instrumentation scope of the events.
const scopeName = "github.com/canopy-dev/canopy/pkg/telemetry"

// SnapshotMeta is what the events say about a snapshot: metadata only. It
// has no field for node contents, summaries or payloads, so no event can
// carry them.
type SnapshotMeta struct {
	SnapshotID   string
	WakeID       string
	RunID        string
	Lane         topics.Lane
	AsOfEventSeq int64
	// NodesIncluded and NodesOmitted count the snapshot's nodes and those
	// it left out; OmittedCorrelationHandles and CutStrings the other two
	// kinds of truncation.
	NodesIncluded, NodesOmitted           int
	OmittedCorrelationHandles, CutStrings int
	// Bytes is the encoded size; ByteBudget the budget it was built under.
	Bytes, ByteBudget int
	PolicyVersion     string
	Truncated, Stale  bool
	// Age is how far the projection was behind its input (seed 000's
	// snapshot_age_ms).
	Age time.Duration
	// Build is how long the snapshot took to build (0 when unknown).
	Build time.Duration
}

// MetaOf is a wake's SnapshotMeta, with info from the builder and its
// build time. The nodes included are info's count, not the wake's: a
// projector does not keep a committed wake's nodes once it is encoded.
func MetaOf(w *topics.Wake, info snapshot.Info, build time.Duration) SnapshotMeta {
	s := &w.AgentTreeSnapshot
	return SnapshotMeta{
		SnapshotID: s.SnapshotID, WakeID: w.WakeID, RunID: w.RunID, Lane: w.Lane, AsOfEventSeq: s.AsOfEventSeq,
		NodesIncluded: info.NodesIncluded, NodesOmitted: s.TruncationMeta.OmittedCountTotal,
		OmittedCorrelationHandles: s.TruncationMeta.OmittedCorrelationHandles, CutStrings: s.TruncationMeta.CutStrings,
		Bytes: info.Bytes, ByteBudget: s.TruncationMeta.ByteBudget, PolicyVersion: s.TruncationMeta.PolicyVersion,
		Truncated: s.Truncated, Stale: s.Stale, Age: time.Duration(s.SnapshotAgeMs) * time.Millisecond, Build: build,
	}
}

// ReceivedMeta is what conductor.wake.received says about a delivered wake:
// the snapshot's metadata plus where the wake was read and how old it was
// then.
type ReceivedMeta struct {
	SnapshotMeta
	Topic     string
	Partition int32
	Offset    int64
}

// Events emits the four events as OpenTelemetry log records and slog lines.
// It is safe for concurrent use.
type Events struct {
	otel log.Logger
	log  *slog.Logger
	now  func() time.Time
}

// NewEvents emits through lp (nil: OpenTelemetry off) and logger (nil:
// slog.Default()). now stamps the records; nil means time.Now.
func NewEvents(lp log.LoggerProvider, logger *slog.Logger, now func() time.Time) *Events {
	if lp == nil {
		lp = lognoop.NewLoggerProvider()
	}
	if logger == nil {
		logger = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &Events{otel: lp.Logger(scopeName), log: logger, now: now}
}

// Snapshot emits conductor.snapshot.generated for a wake's snapshot, and
// conductor.snapshot.truncated and conductor.snapshot.stale when they
// apply. ctx's span (the wake's publish span) ties them to the trace.
func (e *Events) Snapshot(ctx context.Context, m SnapshotMeta) {
	// Info, like stale and received: the events are the audit trail of what
	// each conductor was shown (seed 000), so at the default level each is a
	// line that can be found without a collector. A process that wants
	// fewer lines (canopy-dev, make run's binary) sets its logger's level above info.
	//
	// The three events share one array of attributes, with room for emit's
	// event name, on the stack: at a projector's wake rate, a slice per
	// event (and a second when emit appended to it) was a twentieth of
	// what the projector allocated.
	var buf [snapshotAttrs + 1]slog.Attr
	attrs := m.appendAttrs(buf[:0])
	e.emit(ctx, EventSnapshotGenerated, slog.LevelInfo, attrs)
	if m.Truncated {
		e.emit(ctx, EventSnapshotTruncated, slog.LevelInfo, attrs)
	}
	if m.Stale {
		e.emit(ctx, EventSnapshotStale, slog.LevelInfo, attrs)
	}
}

// WakeReceived emits conductor.wake.received.
func (e *Events) WakeReceived(ctx context.Context, m ReceivedMeta) {
	var buf [snapshotAttrs + 4]slog.Attr
	attrs := append(m.appendAttrs(buf[:0]),
		slog.String("messaging.destination.name", m.Topic),
		slog.Int("messaging.destination.partition.id", int(m.Partition)),
		slog.Int64("messaging.kafka.offset", m.Offset))
	e.emit(ctx, EventWakeReceived, slog.LevelInfo, attrs)
}

// snapshotAttrs is how many attributes SnapshotMeta.appendAttrs appends.
const snapshotAttrs = 16

// appendAttrs appends m's snapshotAttrs attributes to dst.
func (m SnapshotMeta) appendAttrs(dst []slog.Attr) []slog.Attr {
	return append(dst,
		slog.String("snapshot_id", m.SnapshotID),
		slog.String("wake_id", m.WakeID),
		slog.String("run_id", m.RunID),
		slog.String("lane", string(m.Lane)),
		slog.Int64("as_of_event_seq", m.AsOfEventSeq),
		slog.Int("nodes_included", m.NodesIncluded),
		slog.Int("nodes_omitted", m.NodesOmitted),
		slog.Int("omitted_correlation_handles", m.OmittedCorrelationHandles),
		slog.Int("cut_strings", m.CutStrings),
		slog.Int("bytes", m.Bytes),
		slog.Int("byte_budget", m.ByteBudget),
		slog.String("policy_version", m.PolicyVersion),
		slog.Bool("truncated", m.Truncated),
		slog.Bool("stale", m.Stale),
		slog.Int64("snapshot_age_ms", m.Age.Milliseconds()),
		slog.Float64("generation_ms", float64(m.Build.Microseconds())/1000),
	)
}

// emit writes one event both ways. The slog line only when its level is
// enabled; the log record only when the OpenTelemetry logger wants it. It
// appends the event's name to attrs, in the room they have.
func (e *Events) emit(ctx context.Context, name string, level slog.Level, attrs []slog.Attr) {
	if e.log.Enabled(ctx, level) {
		e.log.LogAttrs(ctx, level, name, append(attrs, slog.String("event", name))...)
	}
	sev := log.SeverityInfo
	if level < slog.LevelInfo {
		sev = log.SeverityDebug
	}
	if !e.otel.Enabled(ctx, log.EnabledParameters{Severity: sev, EventName: name}) {
		return
	}
	var r log.Record
	r.SetEventName(name)
	r.SetTimestamp(e.now())
	r.SetSeverity(sev)
	r.SetBody(attribute.StringValue(name))
	kvs := make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		kvs = append(kvs, logKV(a))
	}
	r.AddAttributes(kvs...)
	e.otel.Emit(ctx, r)
}

func logKV(a slog.Attr) attribute.KeyValue {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return attribute.String(a.Key, v.String())
	case slog.KindInt64:
		return attribute.Int64(a.Key, v.Int64())
	case slog.KindBool:
		return attribute.Bool(a.Key, v.Bool())
	case slog.KindFloat64:
		return attribute.Float64(a.Key, v.Float64())
	default:
		return attribute.String(a.Key, v.String())
	}
}
