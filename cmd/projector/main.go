// Command projector is canopy's stream processor. Its subcommands:
//
//	projector run [flags]                      one projector instance
//	projector create-topics [flags]            create canopy's topics, co-partitioned
//	projector replay [flags] < events.jsonl    project a file of events and print the wakes
//
// Every flag -foo-bar of every subcommand is also read from the variable
// CANOPY_FOO_BAR (internal/flagenv); the command line wins. The embedded
// broker of `make run` is not in this binary: it is cmd/canopy-dev's. See
// the README and docs/ for the whole picture.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/canopy-dev/canopy/internal/flagenv"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/telemetry"
)

const usage = `usage: projector <command> [flags]

commands:
  run            run a projector instance against Kafka
  create-topics  create canopy's topics, co-partitioned
  replay         read newline-delimited events on stdin, write the wakes the
                 projector would publish for them on stdout, one per line
  version        print the version, commit and Go version of this binary

Run "projector <command> -h" for a command's flags. Every flag -foo-bar is
also read from the variable CANOPY_FOO_BAR. The embedded broker and demo
of "make run" are the canopy-dev command's.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "replay":
		return runReplay(args[1:], stdin, stdout, stderr)
	case "run":
		return runProjector(args[1:], stderr)
	case "create-topics":
		return createTopics(args[1:], stderr)
	case "version":
		fmt.Fprintln(stdout, telemetry.ReadBuild())
		return 0
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "projector: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// flagsParsed, set by tests only, receives each command's flag set once
// its flags and variables are parsed; the command then returns 0 at once.
var flagsParsed func(*flag.FlagSet)

func runReplay(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		now  = fs.String("now", "", "wall clock of the wakes, RFC 3339; timers due by then fire at the end (default: each run's own logical time, fully deterministic)")
		opts replay.Options
	)
	format := fs.String("format", "json", "output: json (the wakes exactly as published) or summary (one line per wake, for people)")
	fs.IntVar(&opts.Batch, "batch", 1, "input lines per processing batch; a run's triggers in one batch are coalesced into one wake (split over several when they do not fit one)")
	addProjectionFlags(fs, &opts.Projection)
	opts.Redaction.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: projector replay [flags] < events.jsonl\n\n")
		fs.PrintDefaults()
	}
	if _, err := flagenv.Parse(fs, args); err != nil {
		return 2
	}
	if flagsParsed != nil {
		flagsParsed(fs)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "projector replay: unexpected argument %q: events are read from stdin\n", fs.Arg(0))
		return 2
	}
	switch *format {
	case "json":
	case "summary":
		opts.Summary = true
	default:
		fmt.Fprintf(stderr, "projector replay: -format %q: want json or summary\n", *format)
		return 2
	}
	if *now != "" {
		t, err := time.Parse(time.RFC3339Nano, *now)
		if err != nil {
			fmt.Fprintf(stderr, "projector replay: -now %q: want RFC 3339, like 2026-02-14T10:40:00Z\n", *now)
			return 2
		}
		opts.Now = t
	}
	if err := errors.Join(opts.Projection.Validate(), opts.Redaction.Validate()); err != nil {
		fmt.Fprintf(stderr, "projector replay: %v\n", err)
		return 2
	}
	st, err := replay.Run(stdin, stdout, stderr, opts)
	if err != nil {
		fmt.Fprintf(stderr, "projector replay: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "replay: %d lines, %d events applied, %d duplicates, %d id conflicts, %d invalid, %d of unknown type, %d wakes, %d redactions\n",
		st.Lines, st.Applied, st.Duplicates, st.Conflicts, st.Invalid, st.UnknownType, st.Wakes, st.Redactions)
	if st.Invalid > 0 || st.Conflicts > 0 {
		return 1
	}
	return 0
}

// addProjectionFlags registers the projection's and the snapshot's settings.
func addProjectionFlags(fs *flag.FlagSet, c *projection.Config) {
	fs.IntVar(&c.Limits.MaxNodes, "max-nodes", snapshot.DefaultMaxNodes, "max nodes in a snapshot")
	fs.IntVar(&c.Limits.MaxBytes, "max-snapshot-bytes", snapshot.DefaultMaxBytes, "max encoded snapshot size in bytes")
	fs.IntVar(&c.Limits.MaxStringLength, "max-string-length", snapshot.DefaultMaxStringLength, "max characters of a string in a snapshot")
	fs.IntVar(&c.Limits.MaxDedupeKeys, "max-dedupe-keys", snapshot.DefaultMaxDedupeKeys, "max recent request dedupe keys per node")
	fs.IntVar(&c.Limits.MaxCorrelationHandles, "max-correlation-handles", snapshot.DefaultMaxCorrelationHandles, "max active correlation handles in a snapshot")
	fs.DurationVar(&c.Limits.StaleAfter, "stale-after", snapshot.DefaultStaleAfter, "snapshot age over which it is marked stale")
	fs.IntVar(&c.MaxDepth, "max-depth", projection.DefaultMaxDepth, "tree depth budget; deeper nodes raise guard:maxDepth (negative: off)")
	fs.DurationVar(&c.ProgressInterval, "progress-interval", projection.DefaultProgressInterval, "progress signals wake a run at most once per interval")
	fs.DurationVar(&c.ForwardGrace, "forward-grace", projection.DefaultForwardGrace, "time after a completion before the watchdog reports done_but_not_forwarded")
	fs.IntVar(&c.DedupeWindow, "dedupe-window", projection.DefaultDedupeWindow,
		"applied event ids each run keeps: an event sent again with one of them is a duplicate, one reusing one with other content is dead-lettered (state: give every instance the same)")
	fs.IntVar(&c.MaxWakeBytes, "max-wake-bytes", projection.DefaultMaxWakeBytes,
		"max encoded wake size in bytes: a run's triggers that do not fit one wake are split over several (give every instance the same)")
	fs.IntVar(&c.MaxWakeTriggers, "max-wake-triggers", projection.DefaultMaxWakeTriggers,
		"max triggers in one wake: more are split over several wakes (give every instance the same)")
}
