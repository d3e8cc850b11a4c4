// Command bench is canopy's load harness: it runs the standard scenarios
// (or the ones named) against an embedded broker on loopback, or any Kafka
// with -brokers, prints a progress line every few seconds and a final table,
// and writes a JSON result file and the harness's section of
// bench/RESULTS.md. The logic is in bench/harness.
//
//	go run ./bench                          the standard set (make bench)
//	go run ./bench -scenario steady         one scenario
//	go run ./bench -scenario max -brokers kafka:9092
//	go run ./bench -scenario soak           bounded state: 5,000,000 events of runs that finish
//	go run ./bench -kafka real              against Apache Kafka, started here
//	go run ./bench -pin                     each projector on a CPU of its own, the harness on the others
//	go run ./bench -pin -repeat 3           every scenario 3 times, interleaved: medians and ranges
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/canopy-dev/canopy/bench/harness"
	"github.com/canopy-dev/canopy/internal/workload"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	c, out, ok := parseArgs(args, stdout, stderr)
	if !ok {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := harness.Run(ctx, c)
	if rep != nil && len(rep.Scenarios) > 0 {
		if werr := out.write(rep, err == nil, stdout); werr != nil {
			fmt.Fprintf(stderr, "bench: %v\n", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}

// flagValues are the flags that parseArgs turns into a harness.Config's
// fields, or into outputs.
type flagValues struct {
	scenarios, brokers, projectorFlags, instances, jsonOut, results *string
	quiet                                                           *bool
}

// addFlags defines bench's flags on fs: those of one field each set c's
// fields, the others are returned.
func addFlags(fs *flag.FlagSet, c *harness.Config) flagValues {
	var f flagValues
	f.scenarios = fs.String("scenario", "standard", "comma-separated scenarios ("+strings.Join(harness.Scenarios, ", ")+", or "+
		strings.Join(harness.MoreScenarios, ", ")+", which run only when named), or standard for the standard set")
	f.brokers = fs.String("brokers", "", "Kafka seed brokers, host:port,...; default a broker on loopback that -kafka names")
	fs.StringVar(&c.Kafka, "kafka", harness.KafkaEmbedded, "the broker the harness starts when -brokers is empty: kfake (embedded, in this process) or\n"+
		"real (Apache Kafka from tools/kafka/lib, a KRaft node in a child JVM; make test installs it)")
	f.projectorFlags = fs.String("projector-flags", "", "more flags for every projector instance, e.g. \"-group-protocol consumer\"")
	fs.StringVar(&c.Projector, "projector", "bin/projector", "the projector binary (make build)")
	fs.IntVar(&c.Partitions, "partitions", 6, "partitions of every topic")
	fs.DurationVar(&c.Duration, "duration", 30e9, "how long steady and priority measure")
	fs.Float64Var(&c.Rate, "rate", 0, "steady's rate in events/s (default half the maximum measured by max in the same run)")
	fs.IntVar(&c.Runs, "runs", 50, "runs under way at once")
	fs.IntVar(&c.Nodes, "nodes", 200, "nodes of an ordinary run")
	fs.Float64Var(&c.HugeShare, "huge-share", 0.02, "share of huge runs in steady's traffic (negative: none)")
	fs.IntVar(&c.HugeNodes, "huge-nodes", 100_000, "nodes of a huge run, and of grow's run")
	fs.Float64Var(&c.HumanRate, "human-rate", 5, "human inputs per second through the gateway (steady, priority)")
	fs.IntVar(&c.MaxEvents, "max-events", 200_000, "events of the closed-loop scenarios (max, scale)")
	fs.IntVar(&c.Backlog, "backlog", 1_000_000, "agent-lane backlog of priority, in events")
	f.instances = fs.String("instances", "1,2,3", "projector instance counts scale compares")
	fs.IntVar(&c.SoakEvents, "soak-events", 5_000_000, "events soak sends")
	fs.Float64Var(&c.SoakRate, "soak-rate", 0, "soak's rate in events/s (default 60% of the maximum measured by max in the same run, at most 10,000)")
	fs.IntVar(&c.SoakNodes, "soak-nodes", 20, "nodes of each of soak's runs, which finish")
	fs.DurationVar(&c.SoakRetention, "soak-retention", 20e9, "the projector's -retention in soak")
	fs.DurationVar(&c.SoakTimers, "soak-timers", workload.DefaultFinishTimers, "within how long of its last event each of soak's runs is finished (its expected_by; requests live half of it)")
	fs.DurationVar(&c.SoakSampleEvery, "soak-sample", 5e9, "interval of soak's samples of RSS, heap, Pebble, changelog and live runs")
	fs.DurationVar(&c.SoakCompactEvery, "soak-compact-every", 15e9, "how often soak compacts the embedded broker's compacted topics (negative: never)")
	fs.IntVar(&c.FailoverInstances, "failover-instances", 2, "instances in failover, one of which is killed")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", 3e9, "the projectors' group session timeout (the harness's brokers allow 1s and more)")
	fs.BoolVar(&c.Pin, "pin", false, "run each projector instance on a CPU of its own and the harness (broker, gateway, load, readers)\n"+
		"on the others (needs 2 CPUs; GOMAXPROCS set to match)")
	fs.IntVar(&c.Repeat, "repeat", 1, "run each scenario this many times, interleaved; the targets are judged on the medians")
	fs.StringVar(&c.ProfileDir, "profile-dir", "", "write a CPU profile of each projector instance here (<stage>-i<n>.cpu.pprof), and its heap at the stage's end (<stage>-i<n>.heap.pprof); go tool pprof")
	f.jsonOut = fs.String("json", "", "the JSON result file (default bench/results.json, with -kafka real bench/results-kafka.json; - : none)")
	f.results = fs.String("results", "", "a RESULTS.md whose harness section to rewrite (make bench: bench/RESULTS.md)")
	f.quiet = fs.Bool("quiet", false, "no progress lines")
	return f
}

// parseArgs returns the harness's configuration and bench's outputs from
// the command line; false, with the problem on stderr, for a command line
// that is not valid.
func parseArgs(args []string, stdout, stderr io.Writer) (harness.Config, outputs, bool) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c harness.Config
	f := addFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		return c, outputs{}, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return c, outputs{}, false
	}
	c.ProjectorArgs = strings.Fields(*f.projectorFlags)
	for _, b := range strings.Split(*f.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.Brokers = append(c.Brokers, b)
		}
	}
	// After the brokers: -kafka real names the JSON file only when the
	// harness starts that Kafka itself.
	out := outputs{json: *f.jsonOut, results: *f.results}
	switch out.json {
	case "":
		out.json = "bench/results.json"
		if c.Kafka == harness.KafkaReal && len(c.Brokers) == 0 {
			out.json = "bench/results-kafka.json"
		}
	case "-":
		out.json = ""
	}
	if *f.scenarios != "standard" {
		c.Scenarios = strings.Split(*f.scenarios, ",")
	}
	for _, field := range strings.Split(*f.instances, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil {
			fmt.Fprintf(stderr, "bench: -instances %q: want counts like 1,2,3\n", *f.instances)
			return c, outputs{}, false
		}
		c.Instances = append(c.Instances, n)
	}
	if !*f.quiet {
		c.Progress = stdout
	}
	c.Command = "go run ./bench " + strings.Join(args, " ")
	if len(args) == 0 {
		c.Command = "go run ./bench"
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return c, outputs{}, false
	}
	return c, out, true
}

// outputs are where bench writes its report beside the table on stdout:
// the JSON result file and the RESULTS.md whose harness section it
// rewrites ("" for none).
type outputs struct {
	json, results string
}

// write prints rep's table on stdout and writes the JSON result file, and
// RESULTS.md when every scenario succeeded.
func (o outputs) write(rep *harness.Report, succeeded bool, stdout io.Writer) error {
	fmt.Fprintln(stdout)
	rep.WriteTable(stdout)
	if o.json != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.json, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if o.results != "" && succeeded {
		if err := harness.UpdateResults(o.results, rep.Kafka, rep.Markdown()); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", o.results)
	}
	return nil
}
