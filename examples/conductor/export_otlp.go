//go:build otlp

package main

import (
	"context"

	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
)

// setupExport exports spans and events over OTLP as the OTEL_* variables
// say (off without an endpoint).
func setupExport(ctx context.Context) (export, error) {
	p, err := otlp.Setup(ctx, otlp.Config{ServiceName: "canopy-example-conductor"})
	if err != nil {
		return export{}, err
	}
	return export{tracer: p.Tracer, logs: p.Logs, shutdown: p.Shutdown}, nil
}
