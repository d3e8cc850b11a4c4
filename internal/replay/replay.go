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
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// Options configure a replay.
type Options struct {
	// Projection configures the projection; zero fields take their defaults.
	Projection projection.Config
	// Redaction is the operator's redaction rules, added to the built-in
	// ones, as the projector's (projector.Config.Redaction): each event is
	// redacted once decoded, so that the wakes show what the projector's
	// would. Default none: the built-in rules alone.
	Redaction redact.Config
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
	// Redactions counts the replacements redaction made.
	Redactions int
}

// Run reads newline-delimited structured CloudEvents from in and writes one
// wake per line to out. A line that cannot be decoded, or whose event id
// its run applied with other content ("line N: duplicate_id_conflict:
// ..."), is reported on errw with its line number and the reason, and the
// replay goes on. The error is for failures of the replay itself (reading,
// writing), not of input lines.
func Run(in io.Reader, out, errw io.Writer, opts Options) (Stats, error) {
	p, err := projection.New(opts.Projection)
	if err != nil {
		return Stats{}, err
	}
	policy, err := redact.New(opts.Redaction)
	if err != nil {
		return Stats{}, err
	}
	if opts.Batch <= 0 {
		opts.Batch = 1
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = 1 << 20
	}
	r := &replayer{p: p, policy: policy, opts: opts, bw: bufio.NewWriter(out), errw: errw}
	br := bufio.NewReaderSize(in, 64<<10)
	inBatch := 0
	for {
		line, tooLong, err := readLine(br, opts.MaxLineBytes)
		if err == io.EOF && line == nil {
			break
		}
		if err != nil && err != io.EOF {
			return r.st, fmt.Errorf("replay: reading input: %w", err)
		}
		if aerr := r.line(line, tooLong); aerr != nil {
			return r.st, aerr
		}
		if inBatch++; inBatch == opts.Batch {
			inBatch = 0
			if err := r.flush(); err != nil {
				return r.st, err
			}
		}
		if err == io.EOF {
			break
		}
	}
	if err := r.flush(); err != nil {
		return r.st, err
	}
	if !opts.Now.IsZero() {
		if err := r.advance(); err != nil {
			return r.st, err
		}
	}
	if err := r.bw.Flush(); err != nil {
		return r.st, fmt.Errorf("replay: writing output: %w", err)
	}
	return r.st, nil
}

// replayer is one replay: its projection, the triggers of the batch being
// read, and where it writes.
type replayer struct {
	p       *projection.Projection
	policy  *redact.Policy
	opts    Options
	st      Stats
	pending projection.Pending
	bw      *bufio.Writer // the wakes
	errw    io.Writer     // the lines that cannot be applied
}

// line applies one input line, or reports on errw why it cannot. The error
// is a failure of the replay itself.
func (r *replayer) line(line []byte, tooLong bool) error {
	r.st.Lines++
	switch {
	case tooLong:
		r.st.Invalid++
		fmt.Fprintf(r.errw, "line %d: longer than %d bytes; skipped\n", r.st.Lines, r.opts.MaxLineBytes)
		return nil
	case len(bytes.TrimSpace(line)) == 0:
		return nil // blank lines are allowed, for readability
	}
	ev, derr := topics.DecodeEvent(line)
	switch {
	case errors.Is(derr, topics.ErrUnknownType):
		r.st.UnknownType++
		fmt.Fprintf(r.errw, "line %d: skipped: %v\n", r.st.Lines, derr)
		return nil
	case derr != nil:
		r.st.Invalid++
		fmt.Fprintf(r.errw, "line %d: %v\n", r.st.Lines, derr)
		return nil
	}
	r.st.Redactions += r.policy.Event(ev, nil)
	trigs, dup, aerr := r.p.ApplyEvent(ev)
	switch {
	case errors.Is(aerr, projection.ErrDuplicateConflict):
		r.st.Conflicts++
		fmt.Fprintf(r.errw, "line %d: %s: %v\n", r.st.Lines, projection.DuplicateConflictCode, aerr)
	case aerr != nil:
		// Without a store nothing else refuses an event: a bug.
		return fmt.Errorf("replay: line %d: %w", r.st.Lines, aerr)
	case dup:
		r.st.Duplicates++
	default:
		r.st.Applied++
	}
	r.pending.Add(ev.RunID, trigs)
	return nil
}

// flush writes the wakes of the batch's triggers.
func (r *replayer) flush() error {
	built, err := r.p.Wakes(&r.pending, r.opts.Now, topics.Time{})
	r.pending.Reset()
	if err != nil {
		return err
	}
	for _, b := range built {
		r.st.Wakes++
		if r.opts.Summary {
			r.bw.WriteString(wake.Line(b.Wake, wake.Received{}))
			r.bw.WriteByte('\n')
			continue
		}
		enc, err := topics.Marshal(b.Wake)
		if err != nil {
			return fmt.Errorf("replay: encoding wake %s: %w", b.Wake.WakeID, err)
		}
		r.bw.Write(enc)
		r.bw.WriteByte('\n')
	}
	return nil
}

// advance moves every run's clock to Options.Now and writes the wakes of
// the timers that would have fired by then, run by run in a stable order.
func (r *replayer) advance() error {
	ids := r.p.RunIDs()
	slices.Sort(ids)
	for _, id := range ids {
		r.pending.Add(id, r.p.Advance(id, topics.NewTime(r.opts.Now)))
	}
	return r.flush()
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
