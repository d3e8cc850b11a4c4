// Package telemetry adapts what canopy's parts report to OpenTelemetry and
// Prometheus, so that the core never imports either: the projector reports
// through projector.Hooks, the gateway through gateway.Hooks, a conductor's
// wake consumer through wake.Observer, and this package turns those reports
// into Prometheus metrics, OpenTelemetry spans and log-record events, and
// slog lines.
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
// OpenTelemetry export is configured by the standard OTEL_* environment
// variables (SetupOTel) and is off unless an OTLP endpoint is set.
package telemetry
