package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canopy-dev/canopy/internal/lifecycle"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectormetrics"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
)

// instrumentation is a projector process's telemetry: the registry behind
// /metrics, the OpenTelemetry providers (configured by OTEL_* variables, off
// without an endpoint), and the hooks that feed both.
type instrumentation struct {
	reg     *prometheus.Registry
	otel    *otlp.Providers
	metrics *projectormetrics.ProjectorMetrics
	log     *slog.Logger
}

// instrument sets up telemetry and wires it into cfg.
func instrument(ctx context.Context, cfg *projector.Config) (*instrumentation, error) {
	ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: "canopy-projector"})
	if err != nil {
		return nil, err
	}
	in := &instrumentation{reg: telemetry.NewRegistry(), otel: ot, log: cfg.Logger}
	in.metrics, err = projectormetrics.NewProjectorMetrics(in.reg, telemetry.NewEvents(ot.Logs, cfg.Logger, nil))
	if err != nil {
		return nil, in.shutdownWith(err)
	}
	cfg.Hooks, cfg.KafkaHooks, cfg.TracerProvider = in.metrics, telemetry.KafkaHooks(in.reg), ot.Tracer
	if ot.Enabled {
		cfg.Logger.Info("OpenTelemetry export on", "protocol", ot.Protocol)
	}
	return in, nil
}

// handler serves /metrics, answers /readyz 503 once the process is not
// ready (it is shutting down), and passes everything else to next.
func (in *instrumentation) handler(next http.Handler, ready *lifecycle.Readiness) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", telemetry.Handler(in.reg))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Ready() {
			http.Error(w, "not ready: shutting down", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
	mux.Handle("/", next)
	return mux
}

// shutdown flushes what OpenTelemetry buffered, within five seconds.
func (in *instrumentation) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := in.otel.Shutdown(ctx); err != nil {
		in.log.Warn("flushing OpenTelemetry", "err", err)
	}
}

func (in *instrumentation) shutdownWith(err error) error {
	in.shutdown()
	return err
}
