// Command canopy-dev is `make run`: everything on one machine, for a first
// look. An embedded Kafka (franz-go's kfake) listens on loopback only; the
// projector, the conductor gateway, a demo workload of agent trees and a
// human typing into one of them run against it, and every wake is printed
// as it is published. It is a binary of its own so that the production
// projector does not link the embedded broker.
//
// Every flag -foo-bar is also read from the variable CANOPY_FOO_BAR
// (internal/flagenv); the command line wins. SIGTERM or SIGINT (Ctrl-C)
// stops it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/canopy-dev/canopy/internal/flagenv"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/pkg/redact"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// flagsParsed, set by tests only, receives each command's flag set once
// its flags and variables are parsed; the command then returns 0 at once.
var flagsParsed func(*flag.FlagSet)

// run parses args and runs the whole until a signal or -duration.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("canopy-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		runs       = fs.Int("runs", 3, "concurrent demo runs")
		nodes      = fs.Int("nodes", 25, "nodes per demo run")
		rate       = fs.Float64("rate", 40, "demo events per second, all runs together")
		partitions = fs.Int("partitions", 4, "partitions of the topics")
		duration   = fs.Duration("duration", 0, "stop after this long (default: until Ctrl-C)")
		dataDir    = fs.String("data-dir", "", "keep the projector's state here (default: a temporary directory)")
		httpAddr   = fs.String("http-addr", "127.0.0.1:8081", "the projector's query endpoint (loopback)")
		gwAddr     = fs.String("gateway-addr", "127.0.0.1:8080", "the conductor gateway (loopback)")
		memtableMB = fs.Float64("memtable-mb", float64(projector.DefaultMemTableSize)/(1<<20), "size of each of the projector's Pebble memtables, in MiB")
		maxHot     = fs.Int("max-hot-nodes", 0, "nodes the projector keeps in memory per partition (default: run's default); a small value shows eviction")
		maxHotRun  = fs.Int("max-hot-nodes-per-run", 0, "nodes of one run the projector keeps in memory (default: run's default); a small value shows nodes read back")
		kafka      = fs.String("kafka", "kfake", "the broker to start: kfake (embedded, instant) or real (Apache Kafka from tools/kafka/lib,\n"+
			"a KRaft node in a child JVM; ./tools/install.sh installs it)")
		brokers = fs.String("brokers", "", "use this Kafka (host:port,...) instead of starting one; the demo's topics get a prefix of their own")
		red     redact.Config // the projector's and the gateway's
	)
	red.RegisterFlags(fs)
	if _, err := flagenv.Parse(fs, args); err != nil {
		return 2
	}
	// A CANOPY_BROKERS exported for another canopy command would send the
	// demo to that Kafka; dev says so on its first line.
	brokersFrom := ""
	if v := os.Getenv(flagenv.Var("brokers")); v != "" && *brokers == v {
		brokersFrom = flagenv.Var("brokers")
	}
	if flagsParsed != nil {
		flagsParsed(fs)
		return 0
	}
	if *runs < 1 || *nodes < 2 || *rate <= 0 || *partitions < 1 || (*kafka != "kfake" && *kafka != "real") {
		fmt.Fprintln(stderr, "canopy-dev: want -runs >= 1, -nodes >= 2, -rate > 0, -partitions >= 1, -kafka kfake or real")
		return 2
	}
	ctx := context.Background()
	if err := dev(ctx, devOptions{runs: *runs, nodes: *nodes, rate: *rate, partitions: int32(*partitions), dataDir: *dataDir,
		httpAddr: *httpAddr, gatewayAddr: *gwAddr, memTableSize: int(*memtableMB * (1 << 20)), maxHotNodes: *maxHot, maxHotPerRun: *maxHotRun, kafka: *kafka,
		brokers: splitList(*brokers), brokersFrom: brokersFrom, duration: *duration, redaction: red}, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "canopy-dev: %v\n", err)
		return 1
	}
	return 0
}
