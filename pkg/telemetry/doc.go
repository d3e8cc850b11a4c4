// Package telemetry is the public part of canopy's telemetry, what a
// conductor needs: the snapshot and wake events (Events, SnapshotMeta,
// ReceivedMeta), a wake.Observer that emits and counts them (WakeObserver),
// the metric naming (Namespace, HistogramOpts), a registry and its /metrics
// handler, and Prometheus hooks for franz-go clients (KafkaHooks). The
// projector's and the gateway's adapters (internal/metrics) build on it;
// OTLP export is pkg/telemetry/otlp.
//
// The four events of seed 000 ("Observability Events") are OpenTelemetry log
// records with an event name, tied to the active span, carrying snapshot
// metadata only (ids, sequence, counts, bytes, policy version, age, build
// time), never node contents or payloads:
//
//	conductor.snapshot.generated   every snapshot a wake carries
//	conductor.snapshot.truncated   the snapshot left nodes out
//	conductor.snapshot.stale       the snapshot was stale when built
//	conductor.wake.received        a conductor's consumer delivered a wake
//
// Each is also a slog line at info level, so it can be found without a
// collector.
//
// Registries, tracer and logger providers are passed in, never global.
// OpenTelemetry export is package pkg/telemetry/otlp, configured by the
// standard OTEL_* environment variables and off unless an OTLP endpoint is
// set; without it the providers are no-ops and the events are slog lines.
package telemetry
