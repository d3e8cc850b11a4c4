package projectormetrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
)

// Instrumentation is a projector process's telemetry: the registry behind
// /metrics, the OpenTelemetry providers (configured by the OTEL_* variables,
// off without an endpoint), and the hooks that feed both. projector run and
// canopy-dev set it up the same way, through Instrument.
type Instrumentation struct {
	// Registry is the process's /metrics.
	Registry *prometheus.Registry
	// OTel are the providers spans and events go to.
	OTel *otlp.Providers
	// Metrics are the projector's hooks.
	Metrics *ProjectorMetrics

	log *slog.Logger
}

// Instrument sets up telemetry and wires it into cfg: its Hooks, KafkaHooks
// and TracerProvider. Call Shutdown when the process ends.
func Instrument(ctx context.Context, cfg *projector.Config) (*Instrumentation, error) {
	ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: "canopy-projector"})
	if err != nil {
		return nil, err
	}
	in := &Instrumentation{Registry: telemetry.NewRegistry(), OTel: ot, log: cfg.Logger}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	in.Metrics, err = NewProjectorMetrics(in.Registry, telemetry.NewEvents(ot.Logs, cfg.Logger, nil))
	if err == nil {
		// The operator's rules' series too, from 0.
		_, err = telemetry.NewRedactions(in.Registry, cfg.Redaction.Rules())
	}
	if err != nil {
		in.Shutdown()
		return nil, err
	}
	cfg.Hooks, cfg.KafkaHooks, cfg.TracerProvider = in.Metrics, telemetry.KafkaHooks(in.Registry), ot.Tracer
	if ot.Enabled {
		in.log.Info("OpenTelemetry export on", "protocol", ot.Protocol)
	}
	return in, nil
}

// Shutdown flushes what OpenTelemetry buffered, within five seconds.
func (in *Instrumentation) Shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := in.OTel.Shutdown(ctx); err != nil {
		in.log.Warn("flushing OpenTelemetry", "err", err)
	}
}
