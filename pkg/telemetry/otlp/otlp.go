// Package otlp exports canopy's spans and log-record events over OTLP
// (gRPC or HTTP/protobuf), configured by the standard OTEL_* environment
// variables. It is apart from pkg/telemetry because the OpenTelemetry SDK and
// its exporters (gRPC, protobuf) are most of a binary's dependencies: a
// conductor that logs and serves Prometheus metrics does without them, and
// one that exports imports this package and passes Providers' Tracer and
// Logs to pkg/wake and telemetry.NewEvents.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/log"
	lognoop "go.opentelemetry.io/otel/log/noop"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Config configures Setup. Everything about the collector (endpoint,
// protocol, headers, timeouts, TLS, sampling, resource attributes) comes from
// the standard OTEL_* environment variables.
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME is set.
	// Required.
	ServiceName string
	// Version is service.version; default none.
	Version string
	// Getenv reads the environment; default os.Getenv. Tests inject one.
	Getenv func(string) string
}

// Providers hold the tracer and logger providers canopy's parts use. When export
// is off they are no-op providers: spans and events cost next to nothing and
// go nowhere.
type Providers struct {
	// Tracer makes spans; pass it to the parts (never set it globally).
	Tracer trace.TracerProvider
	// Logs carries the events as OpenTelemetry log records.
	Logs log.LoggerProvider
	// Enabled says export is on, and Protocol says how ("grpc" or
	// "http/protobuf").
	Enabled  bool
	Protocol string

	shutdown []func(context.Context) error
}

// ErrConfig is wrapped by Setup's error for a bad OTEL_* setting.
var ErrConfig = errors.New("otlp: invalid OpenTelemetry configuration")

// Setup builds the providers from the environment. A signal (traces,
// logs) is exported when OTEL_EXPORTER_OTLP_ENDPOINT or its own
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_LOGS_ENDPOINT is
// set, its OTEL_TRACES_EXPORTER / OTEL_LOGS_EXPORTER is not "none", and
// OTEL_SDK_DISABLED is not "true"; otherwise Setup returns no-op
// providers and no error, so a process without a collector exports nothing
// and pays next to nothing for its spans and events.
// The exporter variables take "otlp" (the default) or "none"; any other
// value is an error, since canopy has no other exporter. The protocol is
// OTEL_EXPORTER_OTLP_PROTOCOL (or the per-signal variable): "grpc" or
// "http/protobuf", the default. Call Shutdown to flush.
func Setup(ctx context.Context, cfg Config) (*Providers, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	o := &Providers{Tracer: tracenoop.NewTracerProvider(), Logs: lognoop.NewLoggerProvider()}
	if cfg.ServiceName == "" {
		return nil, fmt.Errorf("%w: no service name", ErrConfig)
	}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return o, nil
	}
	tracesOn, err := exporterOn(getenv, "OTEL_TRACES_EXPORTER")
	if err != nil {
		return nil, err
	}
	logsOn, err := exporterOn(getenv, "OTEL_LOGS_EXPORTER")
	if err != nil {
		return nil, err
	}
	traces := tracesOn && (getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "")
	logs := logsOn && (getenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "")
	if !traces && !logs {
		return o, nil
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	// Environment last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	if traces {
		if err := o.exportTraces(ctx, getenv, res); err != nil {
			return nil, err
		}
	}
	if logs {
		if err := o.exportLogs(ctx, getenv, res); err != nil {
			return nil, o.shutdownWith(ctx, err)
		}
	}
	o.Enabled = true
	return o, nil
}

// protocol is a signal's OTLP protocol ("TRACES" or "LOGS"; "" for the
// variable of both): its own variable's, else OTEL_EXPORTER_OTLP_PROTOCOL's,
// else http/protobuf.
func protocol(getenv func(string) string, signal string) (string, error) {
	p := getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
	if p == "" {
		p = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("%w: OTEL_EXPORTER_OTLP_%sPROTOCOL %q: want grpc or http/protobuf (http/json is not supported)",
		ErrConfig, strings.TrimPrefix(signal+"_", "_"), p)
}

// exportTraces sets o.Tracer to a provider exporting spans of res.
func (o *Providers) exportTraces(ctx context.Context, getenv func(string) string, res *resource.Resource) error {
	p, err := protocol(getenv, "TRACES")
	if err != nil {
		return err
	}
	var exp sdktrace.SpanExporter
	if p == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return fmt.Errorf("otlp: trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	o.Tracer, o.Protocol = tp, p
	o.shutdown = append(o.shutdown, tp.Shutdown)
	return nil
}

// exportLogs sets o.Logs to a provider exporting log records of res.
func (o *Providers) exportLogs(ctx context.Context, getenv func(string) string, res *resource.Resource) error {
	p, err := protocol(getenv, "LOGS")
	if err != nil {
		return err
	}
	var exp sdklog.Exporter
	if p == "grpc" {
		exp, err = otlploggrpc.New(ctx)
	} else {
		exp, err = otlploghttp.New(ctx)
	}
	if err != nil {
		return fmt.Errorf("otlp: log exporter: %w", err)
	}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewBatchProcessor(exp)), sdklog.WithResource(res))
	o.Logs, o.Protocol = lp, p
	o.shutdown = append(o.shutdown, lp.Shutdown)
	return nil
}

// exporterOn reads a signal's exporter variable (OTEL_TRACES_EXPORTER or
// OTEL_LOGS_EXPORTER): a comma-separated list, as the specification allows,
// of "otlp" (the default when unset) or "none". It reports whether the
// signal goes to OTLP. "none" turns the signal off: a deployment that wants
// only logs (or only traces) from a collector set for both says so. An
// exporter canopy does not have (console, zipkin, ...) is an error naming
// the variable rather than a signal that silently goes nowhere.
func exporterOn(getenv func(string) string, name string) (bool, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return true, nil
	}
	otlp, none := false, false
	for _, e := range strings.Split(v, ",") {
		switch strings.ToLower(strings.TrimSpace(e)) {
		case "otlp":
			otlp = true
		case "none":
			none = true
		default:
			return false, fmt.Errorf("%w: %s %q: want otlp or none (canopy exports over OTLP only)", ErrConfig, name, v)
		}
	}
	if otlp && none {
		return false, fmt.Errorf("%w: %s %q: none cannot be combined with otlp", ErrConfig, name, v)
	}
	return otlp, nil
}

func (o *Providers) shutdownWith(ctx context.Context, err error) error {
	return errors.Join(err, o.Shutdown(ctx))
}

// Shutdown flushes what is buffered and stops the exporters; ctx bounds how
// long it may take.
func (o *Providers) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range o.shutdown {
		errs = append(errs, f(ctx))
	}
	o.shutdown = nil
	return errors.Join(errs...)
}
