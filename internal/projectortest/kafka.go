package projectortest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Kafka says where the projector instances under test ran.
type Kafka struct {
	// ClientOpts connect a franz-go client to the brokers, e.g.
	// kgo.SeedBrokers(addrs...); the checks add the options they need.
	ClientOpts []kgo.Opt
	// Names are the topic names the instances used.
	Names topics.Names
}

// ReadCommitted returns every committed record of the topics: it reads each
// partition with read_committed isolation from its start to its last stable
// offset as listed when it is called, so records of aborted transactions are
// left out and records produced after the listing are not waited for. Each
// partition's records are in offset order. It fails if a topic does not
// exist, or if ctx ends before every partition has been read to its end.
func ReadCommitted(ctx context.Context, opts []kgo.Opt, topicNames ...string) ([]*kgo.Record, error) {
	opts = slices.Clip(opts) // appends below must copy
	starts, ends, err := listBounds(ctx, opts, topicNames)
	if err != nil {
		return nil, fmt.Errorf("listing the offsets of %s: %w", strings.Join(topicNames, ", "), err)
	}
	rp := newReadProgress(starts, ends)
	if rp.left == 0 {
		return nil, nil
	}
	// Control records (transaction markers) are kept so that every offset up
	// to the end is seen: the last record before a partition's last stable
	// offset is a marker whenever that partition was last written in a
	// transaction, and may end an aborted one whose records are dropped.
	rd, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(rp.from),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var out []*kgo.Record
	for rp.left > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, rp.shortError(ctx.Err())
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("reading %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if rp.take(r) && !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out, nil
}

// listBounds lists the topics' partitions' start offsets and last stable
// offsets (everything before them is decided).
func listBounds(ctx context.Context, opts []kgo.Opt, topicNames []string) (starts, ends kadm.ListedOffsets, err error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err = adm.ListStartOffsets(ctx, topicNames...)
	if err == nil {
		err = starts.Error()
	}
	if err == nil {
		ends, err = adm.ListCommittedOffsets(ctx, topicNames...)
		if err == nil {
			err = ends.Error()
		}
	}
	return starts, ends, err
}

// readProgress is how far ReadCommitted has read each partition that is
// not empty.
type readProgress struct {
	end  map[string]map[int32]int64      // partitions still to read, to their end
	next map[string]map[int32]int64      // the next offset of each, as read so far
	from map[string]map[int32]kgo.Offset // what to consume
	left int                             // partitions not read to their end
}

func newReadProgress(starts, ends kadm.ListedOffsets) *readProgress {
	rp := &readProgress{end: map[string]map[int32]int64{}, next: map[string]map[int32]int64{}, from: map[string]map[int32]kgo.Offset{}}
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset <= start.Offset {
			return // empty
		}
		if rp.end[o.Topic] == nil {
			rp.end[o.Topic], rp.next[o.Topic], rp.from[o.Topic] = map[int32]int64{}, map[int32]int64{}, map[int32]kgo.Offset{}
		}
		rp.end[o.Topic][o.Partition], rp.next[o.Topic][o.Partition] = o.Offset, start.Offset
		rp.from[o.Topic][o.Partition] = kgo.NewOffset().At(start.Offset)
		rp.left++
	})
	return rp
}

// take notes a record read, and reports whether it is before its
// partition's end as listed (else it was produced after the listing).
func (rp *readProgress) take(r *kgo.Record) bool {
	e, ok := rp.end[r.Topic][r.Partition]
	if !ok || r.Offset >= e {
		return false
	}
	if rp.next[r.Topic][r.Partition] < e && r.Offset+1 >= e {
		rp.left--
	}
	rp.next[r.Topic][r.Partition] = r.Offset + 1
	return true
}

// shortError is the error of a read that ctx ended (with err) before
// every partition was read to its end: it names those that were not.
func (rp *readProgress) shortError(err error) error {
	var short []string
	for t, parts := range rp.end {
		for p, e := range parts {
			if rp.next[t][p] < e {
				short = append(short, fmt.Sprintf("%s/%d at %d of %d", t, p, rp.next[t][p], e))
			}
		}
	}
	slices.Sort(short)
	return fmt.Errorf("reading committed records: %w with %d partition(s) not read to their end: %s",
		err, len(short), strings.Join(short, ", "))
}

// CheckWakes reads every committed wake of both wake topics and checks them
// against the reference: each wake decodes, is on its lane's topic, in its
// run's partition and keyed by its run; no wake id is committed twice; every
// event that raised a trigger in the reference is a trigger of exactly one
// committed wake (or of parts of one split wake), of its own run; and no
// wake has a trigger naming an event that raised none in the reference.
// Timer triggers (no event id) are not
// checked. Problems are reported through tb.Errorf.
//
// Call it once the instances have stopped (or at least stopped producing):
// it reads to the end the topics have when it is called.
func CheckWakes(ctx context.Context, tb testing.TB, k Kafka, ref *Reference) {
	tb.Helper()
	began := time.Now()
	recs, err := ReadCommitted(ctx, k.ClientOpts, k.Names.Wakes(), k.Names.PriorityWakes())
	if err != nil {
		tb.Fatalf("projectortest: wakes: %v", err)
	}
	read := time.Since(began)
	wakes, errs := decodeWakes(recs)
	decoded := time.Since(began) - read
	c := &wakeCheck{k: k, ref: ref, where: map[string]string{}, woke: map[string][]string{}, parts: map[string][]*topics.WakePart{}}
	for i, r := range recs {
		at := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
		if errs[i] != nil {
			c.rep.add("undecodable wakes", "wake at %s does not decode: %v", at, errs[i])
			continue
		}
		c.wake(r, wakes[i], at)
	}
	missing := c.missing()
	tb.Logf("projectortest: %d committed wakes (%d priority, read in %v, decoded in %v) with %d event triggers; %d events raise a trigger in the reference, %d of them in no wake",
		len(c.where), c.priority, read.Round(time.Millisecond), decoded.Round(time.Millisecond), c.triggers, len(ref.triggering), missing)
	c.rep.flush(tb, "committed wakes against the reference")
}

// wakeCheck is what CheckWakes gathers from the committed wakes.
type wakeCheck struct {
	k   Kafka
	ref *Reference
	rep report

	where map[string]string   // wake id -> where it was first read
	woke  map[string][]string // triggering event id -> the wakes naming it
	// triggering event id -> the parts naming it, nil for a wake not split:
	// one event's triggers may be split over parts of one wake.
	parts              map[string][]*topics.WakePart
	triggers, priority int
}

// wake checks one committed wake w, read from r (at says where), and
// notes the events its triggers name.
func (c *wakeCheck) wake(r *kgo.Record, w *topics.Wake, at string) {
	if first, dup := c.where[w.WakeID]; dup {
		// Its triggers are not counted again: one problem, not two.
		c.rep.add("wake ids committed twice", "wake %s of run %s is committed twice: at %s and at %s", w.WakeID, w.RunID, first, at)
		return
	}
	c.where[w.WakeID] = at
	if w.Lane == topics.LanePriority {
		c.priority++
	}
	if want := c.k.Names.WakeTopic(w.Lane); r.Topic != want {
		c.rep.add("wakes on the wrong topic", "wake %s at %s: lane %s belongs on %s", w.WakeID, at, w.Lane, want)
	}
	if want := topics.Partition([]byte(w.RunID), c.ref.partitions); r.Partition != want {
		c.rep.add("wakes in the wrong partition", "wake %s at %s: run %s lives in partition %d", w.WakeID, at, w.RunID, want)
	}
	if string(r.Key) != w.RunID {
		c.rep.add("wakes with the wrong key", "wake %s at %s: keyed %q, want its run id %q", w.WakeID, at, r.Key, w.RunID)
	}
	var ids []string // distinct: an event may raise several triggers of one wake
	for _, tr := range w.Triggers {
		if tr.EventID != nil && !slices.Contains(ids, *tr.EventID) {
			ids = append(ids, *tr.EventID)
		}
	}
	for _, id := range ids {
		c.triggers++
		c.woke[id] = append(c.woke[id], w.WakeID+" at "+at)
		c.parts[id] = append(c.parts[id], w.Part)
		run, ok := c.ref.triggering[id]
		switch {
		case !ok:
			c.rep.add("triggers by events that raise none in the reference", "wake %s at %s (run %s): a trigger names event %s, which raises no trigger in the reference",
				w.WakeID, at, w.RunID, id)
		case run != w.RunID:
			c.rep.add("triggers in a wake of another run", "wake %s at %s is of run %s but a trigger names event %s of run %s", w.WakeID, at, w.RunID, id, run)
		}
	}
}

// missing reports every event that raises a trigger in the reference but
// is in no committed wake, or in several that are not parts of one, and
// returns how many are in none.
func (c *wakeCheck) missing() int {
	expected := c.ref.triggering
	ids := make([]string, 0, len(expected))
	for id := range expected {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	missing := 0
	for _, id := range ids {
		switch n := len(c.woke[id]); {
		case n == 0:
			missing++
			c.rep.add("triggering events in no wake", "event %s of run %s raises a trigger in the reference but is in no committed wake", id, expected[id])
		case n > 1 && !partsOfOne(c.parts[id]):
			c.rep.add("triggering events in several wakes", "event %s of run %s is a trigger of %d committed wakes: %s", id, expected[id], n, strings.Join(c.woke[id], "; "))
		}
	}
	return missing
}

// partsOfOne says whether ps are distinct parts of one split wake: the
// wakes one event's triggers may be in (docs/CONTRACT.md "Wake size").
func partsOfOne(ps []*topics.WakePart) bool {
	seen := map[int]bool{}
	for _, p := range ps {
		if p == nil || p.Count != ps[0].Count || seen[p.Number] {
			return false
		}
		seen[p.Number] = true
	}
	return true
}

// decodeWakes decodes the records' values with topics.DecodeWake, on every
// CPU: strict decoding of wakes with snapshots of many nodes is the bulk of
// CheckWakes' time, above all under the race detector.
func decodeWakes(recs []*kgo.Record) ([]*topics.Wake, []error) {
	wakes, errs := make([]*topics.Wake, len(recs)), make([]error, len(recs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(recs); i = int(next.Add(1) - 1) {
				wakes[i], errs[i] = topics.DecodeWake(recs[i].Value)
			}
		})
	}
	wg.Wait()
	return wakes, errs
}

// CheckDeadLetter checks that nothing is committed in the dead-letter topic:
// what a projector must achieve when every input record was valid.
func CheckDeadLetter(ctx context.Context, tb testing.TB, k Kafka) {
	tb.Helper()
	recs, err := ReadCommitted(ctx, k.ClientOpts, k.Names.DeadLetter())
	if err != nil {
		tb.Fatalf("projectortest: dead letters: %v", err)
	}
	var rep report
	for _, r := range recs {
		reason, _ := topics.Header(r.Headers, topics.HeaderDeadLetterReason)
		src, _ := topics.Header(r.Headers, topics.HeaderDeadLetterTopic)
		part, _ := topics.Header(r.Headers, topics.HeaderDeadLetterPartition)
		off, _ := topics.Header(r.Headers, topics.HeaderDeadLetterOffset)
		rep.add("dead letters", "dead letter at %s/%d@%d, from %s/%s@%s: %s", r.Topic, r.Partition, r.Offset, src, part, off, reason)
	}
	rep.flush(tb, "the dead-letter topic, which must be empty when all input is valid")
}

// CheckState restores each partition's committed changelog into a fresh
// Pebble database (in a directory of tb.TempDir) with changelog.Restore,
// opens the partition's projection on it, and compares every run of the
// reference in that partition with it (see CompareRun). It also checks that
// the restored next offset of the agent events topic is the end of that
// partition: the instances consumed everything and said so in the changelog,
// and that the changelog does not end in a torn commit. Problems are
// reported through tb.Errorf.
//
// Call it once the instances have stopped: it restores what is committed
// when it is called.
func CheckState(ctx context.Context, tb testing.TB, k Kafka, ref *Reference) {
	tb.Helper()
	cl, err := kgo.NewClient(k.ClientOpts...)
	if err != nil {
		tb.Fatalf("projectortest: %v", err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, k.Names.AgentEvents())
	if err == nil {
		err = ends.Error()
	}
	cl.Close()
	if err != nil {
		tb.Fatalf("projectortest: listing the ends of %s: %v", k.Names.AgentEvents(), err)
	}
	if n := int32(len(ends[k.Names.AgentEvents()])); n != ref.partitions {
		tb.Fatalf("projectortest: %s has %d partitions, the reference was made for %d", k.Names.AgentEvents(), n, ref.partitions)
	}
	var rep report
	dir := tb.TempDir()
	for part := int32(0); part < ref.partitions; part++ {
		end, _ := ends.Lookup(k.Names.AgentEvents(), part)
		before := rep.count()
		checkPartition(ctx, tb, &rep, k, ref, part, end.Offset, filepath.Join(dir, fmt.Sprintf("restore-%d", part)))
		if rep.count() > before {
			// The evidence, in the log itself: a rare mismatch may be
			// seen only in CI, where nothing else is kept.
			lines, err := timeline(ctx, k.ClientOpts, k.Names.Changelog(), part)
			tb.Logf("projectortest: partition %d's changelog, for the mismatch (offsets, producer, epoch, fate, count, keys; err %v):\n%s",
				part, err, strings.Join(lines, "\n"))
			if keep := os.Getenv(KeepVar); keep != "" {
				path, err := dumpChangelog(ctx, k.ClientOpts, k.Names.Changelog(), part, keep, tb.Name())
				tb.Logf("projectortest: partition %d's whole changelog: %s (%v)", part, path, err)
			}
		}
	}
	rep.flush(tb, "state restored from the changelog against the reference")
}

func checkPartition(ctx context.Context, tb testing.TB, rep *report, k Kafka, ref *Reference, part int32, end int64, dir string) {
	tb.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{tb}})
	if err != nil {
		tb.Fatalf("projectortest: partition %d: opening a fresh Pebble: %v", part, err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			tb.Errorf("projectortest: partition %d: closing Pebble: %v", part, err)
		}
	}()
	st := store.New(db, part)
	res, err := changelog.Restore(ctx, changelog.Config{ClientOpts: k.ClientOpts, Topic: k.Names.Changelog()}, part, st)
	if err != nil {
		rep.add("restore failures", "partition %d: restoring the changelog: %v", part, err)
		return
	}
	tb.Logf("projectortest: partition %d: restored changelog offsets [%d, %d), %d records, in %v",
		part, res.From, res.To, res.Records, res.Elapsed.Round(time.Millisecond))
	if len(res.Tail) > 0 {
		// Every instance has stopped: whoever wrote last finished (a
		// transaction, or a commit and its offsets record), or a later owner
		// rolled the torn commit back.
		rep.add("torn commits", "partition %d: the changelog ends in a torn commit of %d keys after every instance stopped", part, len(res.Tail))
	}
	offs, err := st.Offsets()
	if err != nil {
		rep.add("offsets unreadable", "partition %d: restored offsets: %v", part, err)
		return
	}
	if got, ok := offs[k.Names.AgentEvents()]; !ok || got != end {
		rep.add("consumed offsets not at the end", "partition %d: restored next offset of %s is %d (present: %v), want the end of the partition, %d",
			part, k.Names.AgentEvents(), got, ok, end)
	}
	checkJournal(rep, st, ref, part)
	live, err := projection.Open(ref.cfg, st)
	if err != nil {
		rep.add("restored projections unreadable", "partition %d: opening the restored projection: %v", part, err)
		return
	}
	ref.comparePartition(rep, part, live)
}

// checkJournal checks what the changelog holds of each run's journal (its
// history entries and dedupe ids, pkg/projection journal.go): every entry
// the windows hold, no chunk wholly older than them (entries that left the
// windows must have left the changelog too: a later load would ignore them,
// hiding the leak from CompareRun), and no key of the legacy encoding.
func checkJournal(rep *report, st *store.Store, ref *Reference, part int32) {
	cfg := ref.cfg.WithDefaults()
	keep := int64(max(cfg.HistorySize, cfg.DedupeWindow))
	for _, run := range ref.Runs() {
		if topics.Partition([]byte(run), ref.partitions) != part {
			continue
		}
		spans, legacy, err := st.Journal(run)
		if err != nil {
			rep.add("journal unreadable", "run %s: %v", run, err)
			continue
		}
		if legacy > 0 {
			rep.add("keys of the legacy encoding", "run %s: %d applied-id or history keys in the changelog", run, legacy)
		}
		seq := int64(ref.Events(run))
		covered := map[int64]bool{}
		for _, sp := range spans {
			if sp.Last <= seq-keep {
				rep.add("journal beyond the windows", "run %s: a chunk of seqs %d-%d is kept at seq %d (windows %d)", run, sp.First, sp.Last, seq, keep)
			}
			for s := sp.First; s <= sp.Last; s++ {
				covered[s] = true
			}
		}
		for s := max(1, seq-keep+1); s <= seq; s++ {
			if !covered[s] {
				rep.add("journal entries missing", "run %s: no entry of seq %d in the changelog (seq %d, windows %d)", run, s, seq, keep)
				break
			}
		}
	}
}

// quietLogger keeps Pebble's routine messages out of the test's output and
// turns its errors into test errors.
type quietLogger struct{ tb testing.TB }

func (quietLogger) Infof(string, ...any) {}
func (l quietLogger) Errorf(format string, args ...any) {
	l.tb.Errorf("projectortest: pebble: "+format, args...)
}
func (l quietLogger) Fatalf(format string, args ...any) {
	l.tb.Fatalf("projectortest: pebble: "+format, args...)
}
