// Package replay runs the projection over a file of events without Kafka and
// writes the wakes the projector would publish for them. Users drive it from
// the command line (canopy's "projector replay") to see what their events do;
// tests use it as the reference the live projector must agree with.
package replay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// Options configure a replay.
type Options struct {
	// Projection configures the projection; zero fields take their defaults.
	Projection projection.Config
	// Now, when set, is the wall clock of every wake (generated_at and
	// staleness), and at the end of input every run's clock is advanced to it
	// so that timers due by then fire. When zero, each wake is generated at
	// its run's logical time and the output is a pure function of the input.
	Now time.Time
	// Batch is how many input lines form one processing batch, whose triggers
	// are coalesced into one wake per run; default 1.
	Batch int
	// MaxLineBytes bounds an input line; default 1 MiB.
	MaxLineBytes int
	// Summary writes one human-readable line per wake instead of its JSON.
	Summary bool
}

// Stats count what a replay did. Conflicts are events whose id their run
// had applied with other content (the projector dead-letters them as
// duplicate_id_conflict): not applied.
type Stats struct {
	Lines, Applied, Duplicates, Conflicts, Invalid, UnknownType, Wakes int
}

// Run reads newline-delimited structured CloudEvents from in and writes one
// wake per line to out. A line that cannot be decoded, or whose event id
// its run applied with other content ("line N: duplicate_id_conflict:
// ..."), is reported on errw with its line number and the reason, and the
// replay goes on. The error is for failures of the replay itself (reading,
// writing), not of input lines.
func Run(in io.Reader, out, errw io.Writer, opts Options) (Stats, error) {
	var st Stats
	p, err := projection.New(opts.Projection)
	if err != nil {
		return st, err
	}
	if opts.Batch <= 0 {
		opts.Batch = 1
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = 1 << 20
	}
	bw := bufio.NewWriter(out)
	var pending projection.Pending
	flush := func() error {
		built, err := p.Wakes(&pending, opts.Now, topics.Time{})
		pending.Reset()
		if err != nil {
			return err
		}
		for _, b := range built {
			st.Wakes++
			if opts.Summary {
				bw.WriteString(wake.Line(b.Wake, wake.Received{}))
				bw.WriteByte('\n')
				continue
			}
			enc, err := topics.Marshal(b.Wake)
			if err != nil {
				return fmt.Errorf("replay: encoding wake %s: %w", b.Wake.WakeID, err)
			}
			bw.Write(enc)
			bw.WriteByte('\n')
		}
		return nil
	}

	br := bufio.NewReaderSize(in, 64<<10)
	inBatch := 0
	for {
		line, tooLong, err := readLine(br, opts.MaxLineBytes)
		if err == io.EOF && line == nil {
			break
		}
		if err != nil && err != io.EOF {
			return st, fmt.Errorf("replay: reading input: %w", err)
		}
		st.Lines++
		switch {
		case tooLong:
			st.Invalid++
			fmt.Fprintf(errw, "line %d: longer than %d bytes; skipped\n", st.Lines, opts.MaxLineBytes)
		case len(bytes.TrimSpace(line)) == 0:
			// Blank lines are allowed, for readability.
		default:
			ev, derr := topics.DecodeEvent(line)
			switch {
			case errors.Is(derr, topics.ErrUnknownType):
				st.UnknownType++
				fmt.Fprintf(errw, "line %d: skipped: %v\n", st.Lines, derr)
			case derr != nil:
				st.Invalid++
				fmt.Fprintf(errw, "line %d: %v\n", st.Lines, derr)
			default:
				trigs, dup, aerr := p.ApplyEvent(ev)
				switch {
				case errors.Is(aerr, projection.ErrDuplicateConflict):
					st.Conflicts++
					fmt.Fprintf(errw, "line %d: %s: %v\n", st.Lines, projection.DuplicateConflictCode, aerr)
				case aerr != nil:
					// Without a store nothing else refuses an event: a bug.
					return st, fmt.Errorf("replay: line %d: %w", st.Lines, aerr)
				case dup:
					st.Duplicates++
				default:
					st.Applied++
				}
				pending.Add(ev.RunID, trigs)
			}
		}
		if inBatch++; inBatch == opts.Batch {
			inBatch = 0
			if err := flush(); err != nil {
				return st, err
			}
		}
		if err == io.EOF {
			break
		}
	}
	if err := flush(); err != nil {
		return st, err
	}
	if !opts.Now.IsZero() {
		// Timers that would have fired by now, run by run in a stable order.
		ids := p.RunIDs()
		slices.Sort(ids)
		for _, id := range ids {
			pending.Add(id, p.Advance(id, topics.NewTime(opts.Now)))
		}
		if err := flush(); err != nil {
			return st, err
		}
	}
	if err := bw.Flush(); err != nil {
		return st, fmt.Errorf("replay: writing output: %w", err)
	}
	return st, nil
}

// readLine reads one line without its newline. A line longer than max is
// consumed and reported as tooLong.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if line != nil || tooLong {
				return line, tooLong, io.EOF
			}
			return nil, false, err
		}
		if !tooLong {
			if len(line)+len(chunk) > max {
				tooLong, line = true, []byte{}
			} else {
				line = append(line, chunk...)
			}
		}
		if !isPrefix {
			if line == nil {
				line = []byte{}
			}
			return line, tooLong, nil
		}
	}
}
