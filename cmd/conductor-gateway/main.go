// Command conductor-gateway serves canopy's HTTP API for humans and readers:
// human input onto the priority lane, and a run's snapshot, read model,
// history and live wakes. Every flag -foo-bar is also read from the
// variable CANOPY_FOO_BAR (internal/flagenv); the command line wins.
// SIGTERM or SIGINT stops it gracefully.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/lifecycle"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(telemetry.ReadBuild())
		return
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stderr, nil))
}

// run parses args, serves until SIGTERM, SIGINT or the end of ctx, then
// shuts down gracefully. onReady, when set, receives the API's and the
// metrics endpoint's listen addresses (for tests). Its steps: config from
// flags (config.go), clients, servers, actors.
func run(ctx context.Context, args []string, stderr io.Writer, onReady func(api, metrics string)) int {
	o, ok := parseOptions(args, stderr)
	if !ok {
		return 2
	}
	fail := func(code int, err error) int { fmt.Fprintf(stderr, "conductor-gateway: %v\n", err); return code }
	ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: "canopy-gateway"})
	if err != nil {
		return fail(2, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ot.Shutdown(sctx) // the exporters connect lazily: -check-config dialled nothing
	}()
	if o.check {
		fmt.Fprintln(stderr, "conductor-gateway: configuration ok")
		return 0
	}
	// Caught from here on, so that a signal while the gateway starts
	// still stops it in order.
	signals := lifecycle.Signals()
	reg := telemetry.NewRegistry()
	gw, err := newGateway(ctx, o.cfg, reg, ot)
	if err != nil {
		return fail(1, err)
	}
	defer gw.Close()
	s, err := listen(o, gw, reg)
	if err != nil {
		return fail(1, err)
	}
	defer s.close()
	g := s.actors(signals, o.cfg.Logger)
	o.cfg.Logger.Info("conductor-gateway serving", "addr", s.apiLn.Addr().String(), "metrics", s.adminAddr(), "tls", o.httpTLS != nil, "partitions", gw.Partitions())
	if onReady != nil {
		onReady(s.apiLn.Addr().String(), s.adminAddr())
	}
	if err := g.Run(ctx); err != nil {
		return fail(1, err)
	}
	o.cfg.Logger.Info("conductor-gateway stopped")
	return 0
}

// newGateway makes the gateway, its Kafka clients and its metrics in reg;
// it gives up after 30s.
func newGateway(ctx context.Context, cfg gateway.Config, reg *prometheus.Registry, ot *otlp.Providers) (*gateway.Gateway, error) {
	gm, err := telemetry.NewGatewayMetrics(reg, cfg.Redaction.Rules())
	if err != nil {
		return nil, err
	}
	cfg.Hooks, cfg.TracerProvider, cfg.KafkaHooks = gm, ot.Tracer, telemetry.KafkaHooks(reg)("gateway")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return gateway.New(ctx, cfg)
}
