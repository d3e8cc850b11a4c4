// Command conductor-gateway serves canopy's HTTP API for humans and readers:
// human input onto the priority lane, and a run's snapshot, read model,
// history and live wakes. Every flag -foo-bar is also read from the
// variable CANOPY_FOO_BAR (internal/flagenv); the command line wins.
// SIGTERM or SIGINT stops it gracefully.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/lifecycle"
	"github.com/canopy-dev/canopy/pkg/telemetry"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stderr, nil))
}

// run parses args, serves until SIGTERM, SIGINT or the end of ctx, then
// shuts down gracefully. onReady, when set, receives the API's and the
// metrics endpoint's listen addresses (for tests).
func run(ctx context.Context, args []string, stderr io.Writer, onReady func(api, metrics string)) int {
	// Config from flags and CANOPY_* variables (config.go).
	o, ok := parseOptions(args, stderr)
	if !ok {
		return 2
	}
	log := o.cfg.Logger
	fail := func(code int, err error) int { fmt.Fprintf(stderr, "conductor-gateway: %v\n", err); return code }

	// Clients: telemetry, and the gateway with its Kafka clients.
	ot, err := telemetry.SetupOTel(ctx, telemetry.OTelConfig{ServiceName: "canopy-gateway"})
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
	gm, err := telemetry.NewGatewayMetrics(reg)
	if err != nil {
		return fail(1, err)
	}
	o.cfg.Hooks, o.cfg.TracerProvider, o.cfg.KafkaHooks = gm, ot.Tracer, telemetry.KafkaHooks(reg)("gateway")
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	gw, err := gateway.New(startCtx, o.cfg)
	cancel()
	if err != nil {
		return fail(1, err)
	}
	defer gw.Close()

	// Servers, listening before the group starts: a taken port is
	// reported at once.
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fail(1, fmt.Errorf("-listen: %w", err))
	}
	defer ln.Close()
	// Headers have 10s to arrive and a body has the gateway's BodyTimeout
	// (set per request: a server-wide ReadTimeout would also end the wake
	// streams' contexts). A response has writeTimeout, longer than the
	// longest a request can wait (checked with the flags); a wake stream
	// sets a deadline per write instead.
	api := &http.Server{Handler: gw, TLSConfig: o.httpTLS, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: writeTimeout,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	// Wake streams hold their connection: ending the gateway's context ends
	// them, so that Shutdown does not wait for them forever.
	api.RegisterOnShutdown(gw.Drain)
	var ready lifecycle.Readiness
	var adminLn net.Listener
	if o.metricsAddr != "" {
		if adminLn, err = net.Listen("tcp", o.metricsAddr); err != nil {
			return fail(1, fmt.Errorf("-metrics-addr: %w", err))
		}
		defer adminLn.Close()
	}

	// Actors, in their stop order (lifecycle's package doc): not ready
	// first, so that load balancers stop sending requests while the API
	// drains; the API; the admin endpoint last, so that metrics stay
	// scrapeable until the end. A dead admin listener ends the process too.
	g := lifecycle.Group{Logger: log}
	g.Add(signals)
	g.Add(ready.Actor())
	g.Add(lifecycle.HTTPServer("api", api, ln, 20*time.Second))
	var adminAddr string
	if adminLn != nil {
		adminAddr = adminLn.Addr().String()
		admin := &http.Server{Handler: gateway.AdminHandler(telemetry.Handler(reg), readyCheck(&ready, gw)),
			ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		g.Add(lifecycle.HTTPServer("admin endpoint", admin, adminLn, 5*time.Second))
	}
	log.Info("conductor-gateway serving", "addr", ln.Addr().String(), "metrics", adminAddr, "tls", o.httpTLS != nil, "partitions", gw.Partitions())
	if onReady != nil {
		onReady(ln.Addr().String(), adminAddr)
	}
	if err := g.Run(ctx); err != nil {
		return fail(1, err)
	}
	log.Info("conductor-gateway stopped")
	return 0
}

// readyCheck is /readyz's: the process is up and not shutting down, and the
// gateway reaches Kafka.
func readyCheck(ready *lifecycle.Readiness, gw *gateway.Gateway) func(context.Context) error {
	return func(ctx context.Context) error {
		if !ready.Ready() {
			return errors.New("not serving")
		}
		return gw.Ready(ctx)
	}
}
