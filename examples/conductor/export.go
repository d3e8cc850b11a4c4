//go:build !otlp

package main

import "context"

// setupExport exports nothing: this build has no OTLP exporter (build with
// -tags otlp for one). Events are still slog lines.
func setupExport(context.Context) (export, error) {
	return export{shutdown: func(context.Context) error { return nil }}, nil
}
