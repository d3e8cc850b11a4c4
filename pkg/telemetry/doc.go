// Package telemetry will adapt canopy's core events (snapshot generated,
// truncated, stale; wake received) to OpenTelemetry and Prometheus. The core
// reports them through snapshot.Info today; the telemetry issue adds the
// adapters here, so that registries and exporters are passed in, never global.
package telemetry
