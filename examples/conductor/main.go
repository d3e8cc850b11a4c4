// Command conductor is an example conductor in Go: it consumes a canopy
// deployment's wakes with pkg/wake (priority lane first, read_committed,
// duplicates dropped, staleness recomputed at receipt), logs each wake's
// triggers and snapshot summary (wake.Line, as `make run` prints them), and
// acknowledges it with a
// conductor.wake_received event so the delivery watchdog sees its results
// forwarded. A real conductor would plan and delegate where this one logs.
//
//	go run ./examples/conductor -brokers 127.0.0.1:9092
//
// It imports only the public packages pkg/wake, pkg/topics and pkg/telemetry.
// It reports as slog lines (the wake-received event among them); built
// with -tags otlp it also exports spans and events over OTLP, configured by
// the OTEL_* variables (export_otlp.go, through pkg/telemetry/otlp): the
// OpenTelemetry SDK and its exporters would otherwise be most of what it
// links.
//
//	go run -tags otlp ./examples/conductor -brokers 127.0.0.1:9092
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the conductor until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conductor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", envOr("CANOPY_BROKERS", "127.0.0.1:9092"), "Kafka brokers, host:port[,host:port...] (env CANOPY_BROKERS)")
	prefix := fs.String("topic-prefix", topics.DefaultPrefix, "topic name prefix")
	group := fs.String("group", wake.DefaultGroup, "consumer group of this conductor")
	staleAfter := fs.Duration("stale-after", 0, "snapshot age over which a wake is stale at receipt (default 10s)")
	printWakes := fs.Bool("print-wakes", false, "print each wake's JSON instead of a summary line")
	work := fs.Duration("work", 0, "time each wake's handling takes (stands in for planning)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// OpenTelemetry export when built with it (-tags otlp): each wake's
	// process span continues the projector's trace, and
	// conductor.wake.received goes out as a log record on it.
	ot, err := setupExport(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "conductor: %v\n", err)
		return 2
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ot.shutdown(sctx)
	}()
	obs, err := telemetry.NewWakeObserver(nil, telemetry.NewEvents(ot.logs, log, nil))
	if err != nil {
		fmt.Fprintf(stderr, "conductor: %v\n", err)
		return 2
	}
	c, err := wake.New(wake.Config{Brokers: strings.Split(*brokers, ","), Names: topics.Names{Prefix: *prefix, Version: topics.DefaultVersion},
		Group: *group, StaleAfter: *staleAfter, Logger: log, Observer: obs, TracerProvider: ot.tracer}, func(ctx context.Context, w *topics.Wake, r wake.Received) error {
		if !*printWakes {
			fmt.Fprintln(stdout, wake.Line(w, r))
		} else if b, err := topics.Marshal(w); err == nil {
			fmt.Fprintf(stdout, "%s\n", b)
		}
		select { // a real conductor plans and delegates here
		case <-time.After(*work):
		case <-ctx.Done():
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "conductor: %v\n", err)
		return 2
	}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "conductor: %v\n", err)
		return 1
	}
	return 0
}

// export is where the conductor's spans and log-record events go: nowhere
// (nil providers: no-ops) unless built with -tags otlp.
type export struct {
	tracer   trace.TracerProvider
	logs     log.LoggerProvider
	shutdown func(context.Context) error
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
