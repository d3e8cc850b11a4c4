// Package projectortest checks what projector instances wrote to Kafka
// against a reference: a projection of each run that never stopped, fed
// every produced event in order.
//
// Tests that crash, restart, add and remove projector instances build a
// Reference from the events they produce, let the instances catch up and
// stop, and then check
//   - the committed wakes (CheckWakes): every event that raises a trigger in
//     the reference is the trigger of exactly one committed wake, no wake id
//     is committed twice, and no wake names an event that should not have
//     woken anybody;
//   - the dead-letter topic (CheckDeadLetter): nothing committed in it when
//     every input was valid;
//   - the changelog (CheckState): restored into a fresh Pebble database,
//     partition by partition, every run is what the reference computed, and
//     the restored consumed offsets are the ends of the input partitions.
//
// Everything is read with read_committed isolation, as a conductor (or a
// projector restoring a partition) reads it. Problems are reported through
// testing.TB's Errorf, clipped to a readable number of lines; a check that
// cannot run at all (the broker is unreachable, its deadline passes) fails
// the test with Fatalf.
package projectortest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Reference is what projector instances must have computed from a sequence
// of events: for each run, a projection that applied every event of the run
// in order without ever stopping, and the set of events whose application
// raised a trigger, each of which must wake the run's conductor exactly once.
//
// Only events produced to the agent events (or human input) topic belong in
// a Reference; timer triggers (those without an event id) are not part of
// the expected set, since whether and when they fire depends on the wall
// clock.
type Reference struct {
	partitions int32
	cfg        projection.Config
	runs       map[string]*refRun
	triggering map[string]string // event id -> its run
	latest     time.Time         // the newest event time applied
}

type refRun struct {
	proj   *projection.Projection
	events int
}

// NewReference returns an empty reference for topics of the given partition
// count (the partition of a run is topics.Partition of its id).
func NewReference(partitions int32) *Reference {
	return &Reference{partitions: partitions, runs: map[string]*refRun{}, triggering: map[string]string{}}
}

// Apply feeds ev to its run's projection; the caller gives each run's events
// in the order they were produced. An event the projection finds to be a
// duplicate, or refuses, fails the test: the reference is built from the
// workload, which must not repeat ids.
func (r *Reference) Apply(tb testing.TB, ev *topics.Event) {
	tb.Helper()
	run := r.runs[ev.RunID]
	if run == nil {
		p, err := projection.New(r.cfg)
		if err != nil {
			tb.Fatalf("projectortest: %v", err)
		}
		run = &refRun{proj: p}
		r.runs[ev.RunID] = run
	}
	e := *ev // Apply is given its own copy: the caller's event stays as it was
	trigs, dup, err := run.proj.ApplyEvent(&e)
	if err != nil {
		tb.Fatalf("projectortest: applying event %s of run %s: %v", ev.ID, ev.RunID, err)
	}
	if dup {
		tb.Fatalf("projectortest: the workload repeats event %s of run %s", ev.ID, ev.RunID)
	}
	run.events++
	for _, tr := range trigs {
		if tr.EventID == nil {
			continue
		}
		if *tr.EventID != ev.ID {
			// CheckWakes counts wakes per event: that holds only if a
			// trigger names the event whose application raised it.
			tb.Fatalf("projectortest: applying event %s raised a trigger naming event %s", ev.ID, *tr.EventID)
		}
		r.triggering[ev.ID] = ev.RunID
	}
	if t := ev.Time.Std(); t.After(r.latest) {
		r.latest = t
	}
}

// ApplyRecords decodes produced records (as topics.EventRecord made them)
// and applies each, in order, redacted by the built-in rules as a
// projector without operator rules redacts them.
func (r *Reference) ApplyRecords(tb testing.TB, records []*kgo.Record) {
	tb.Helper()
	for _, rec := range records {
		ev, err := topics.DecodeRecord(rec.Key, rec.Value, rec.Headers)
		if err != nil {
			tb.Fatalf("projectortest: a produced record does not decode: %v", err)
		}
		redact.Default().Event(ev, nil)
		r.Apply(tb, ev)
	}
}

// Partitions is the partition count the reference was made for.
func (r *Reference) Partitions() int32 { return r.partitions }

// Runs returns the ids of the runs applied, sorted.
func (r *Reference) Runs() []string {
	out := make([]string, 0, len(r.runs))
	for id := range r.runs {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Events returns how many events of run were applied.
func (r *Reference) Events(run string) int {
	if rr := r.runs[run]; rr != nil {
		return rr.events
	}
	return 0
}

// Projection returns the reference projection holding run, or nil.
func (r *Reference) Projection(run string) *projection.Projection {
	if rr := r.runs[run]; rr != nil {
		return rr.proj
	}
	return nil
}

// Triggering returns the ids of the events that raised a trigger, each with
// its run: each must be a trigger of exactly one committed wake of that run.
func (r *Reference) Triggering() map[string]string {
	out := make(map[string]string, len(r.triggering))
	for id, run := range r.triggering {
		out[id] = run
	}
	return out
}

// now is the wall clock the snapshots are compared at: well after every
// event, so that nothing in them depends on when the test ran.
func (r *Reference) now() time.Time { return r.latest.Add(24 * time.Hour) }

// ComparePartition compares every run of the reference that lives in
// partition part with the same run in live (a projection opened on that
// partition's restored or on-disk state), and reports each difference
// through tb.Errorf: see CompareRun.
func (r *Reference) ComparePartition(tb testing.TB, part int32, live *projection.Projection) {
	tb.Helper()
	var rep report
	r.comparePartition(&rep, part, live)
	rep.flush(tb, fmt.Sprintf("partition %d against the reference", part))
}

func (r *Reference) comparePartition(rep *report, part int32, live *projection.Projection) {
	for _, run := range r.Runs() {
		if topics.Partition([]byte(run), r.partitions) != part {
			continue
		}
		rr := r.runs[run]
		compareRun(rep, run, rr.events, live, rr.proj, r.now())
	}
}

// CompareRun checks that run is the same in live and in ref: both applied
// events events, and its snapshot at now (but for the wall-clock fields
// generated_at, snapshot_age_ms and stale), its clock, totals and every node
// are byte for byte equal, and so is its history window. Differences are
// reported through tb.Errorf.
func CompareRun(tb testing.TB, run string, events int, live, ref *projection.Projection, now time.Time) {
	tb.Helper()
	var rep report
	compareRun(&rep, run, events, live, ref, now)
	rep.flush(tb, "run "+run+" against the reference")
}

func compareRun(rep *report, run string, events int, live, ref *projection.Projection, now time.Time) {
	lr, ok := live.Run(run)
	if !ok {
		rep.add("runs missing", "run %s: not in the projection under test (store error: %v)", run, live.Err())
		return
	}
	rr, ok := ref.Run(run)
	if !ok {
		rep.add("runs missing from the reference", "run %s: not in the reference", run)
		return
	}
	if lr.Seq() != int64(events) || rr.Seq() != int64(events) {
		rep.add("event counts differ", "run %s: %d events applied under test, %d in the reference, want %d", run, lr.Seq(), rr.Seq(), events)
	}
	snap := func(p *projection.Projection) []byte {
		s, _, err := p.Snapshot(run, now)
		if err != nil {
			return []byte("snapshot error: " + err.Error())
		}
		s.GeneratedAt, s.SnapshotAgeMs, s.Stale = topics.Time{}, 0, false
		b, err := topics.Marshal(s)
		if err != nil {
			return []byte("snapshot encoding error: " + err.Error())
		}
		return b
	}
	if a, b := snap(live), snap(ref); !bytes.Equal(a, b) {
		rep.add("snapshots differ", "run %s: snapshot differs %s", run, difference(a, b))
	}
	tree := func(r *projection.Run) []byte {
		var nodes []snapshot.Node
		for n := range r.ByLastSignal() {
			nodes = append(nodes, n)
		}
		b, err := json.Marshal(struct {
			Clock topics.Time
			Stats snapshot.Stats
			Nodes []snapshot.Node
		}{r.Clock(), r.Stats(), nodes})
		if err != nil {
			return []byte("tree encoding error: " + err.Error())
		}
		return b
	}
	if a, b := tree(lr), tree(rr); !bytes.Equal(a, b) {
		rep.add("trees differ", "run %s: tree (clock, totals, nodes by last signal) differs %s", run, difference(a, b))
	}
	// The history window is state too: the same entries, in the store and
	// the changelog, as a projection that never stopped keeps.
	history := func(p *projection.Projection) []byte {
		var all []projection.HistoryEntry
		for cursor := ""; ; {
			pg, err := p.History(run, cursor, projection.MaxHistoryLimit)
			if err != nil {
				return []byte("history error: " + err.Error())
			}
			all = append(all, pg.Entries...)
			if cursor = pg.NextCursor; cursor == "" {
				break
			}
		}
		b, err := json.Marshal(all)
		if err != nil {
			return []byte("history encoding error: " + err.Error())
		}
		return b
	}
	if a, b := history(live), history(ref); !bytes.Equal(a, b) {
		rep.add("histories differ", "run %s: history window differs %s", run, difference(a, b))
	}
}

// difference describes where two encodings first differ, with some context
// on either side, rather than printing kilobytes of JSON.
func difference(got, want []byte) string {
	const context = 120
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	clip := func(b []byte) string {
		from, to := max(i-context, 0), min(i+context, len(b))
		s := string(b[from:to])
		if from > 0 {
			s = "…" + s
		}
		if to < len(b) {
			s += "…"
		}
		return s
	}
	return fmt.Sprintf("at byte %d (%d bytes under test, %d in the reference):\n  under test: %s\n  reference:  %s",
		i, len(got), len(want), clip(got), clip(want))
}
