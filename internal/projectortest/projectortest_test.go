package projectortest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The checks are only worth something if they fail when they should: each
// test below feeds them a known-good input (no problem reported) and inputs
// with known faults (exactly those reported).

const partitions = 3

// recorder is a testing.TB whose Errorf is recorded instead of failing the
// test; everything else (Fatalf, TempDir, Logf) goes to the real test.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "\n")
}

// broker is a kfake cluster with canopy's topics under a fresh prefix.
type broker struct {
	k   Kafka
	cl  *kgo.Client // transactional producer, manual partitions
	ctx context.Context
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c := brokertest.NewKfake(t).Cluster
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	names := topics.Names{Prefix: fmt.Sprintf("pt%d", time.Now().UnixNano()), Version: 1}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("projectortest-"+names.Prefix))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for _, s := range names.Specs(partitions) {
		cfg := map[string]*string{}
		for k, v := range s.Configs {
			cfg[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, 1, cfg, s.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return &broker{k: Kafka{ClientOpts: opts, Names: names}, cl: cl, ctx: ctx}
}

// produce writes records in one transaction, committed or aborted.
func (b *broker) produce(t *testing.T, commit bool, recs ...*kgo.Record) {
	t.Helper()
	if err := b.cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := b.cl.ProduceSync(b.ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := b.cl.EndTransaction(b.ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// events returns the events of a few small runs, each run's in order.
func events(runs int) []topics.Event {
	var out []topics.Event
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for i := range runs {
		out = append(out, workload.Generate(workload.Spec{RunID: fmt.Sprintf("pt-run-%d", i), Nodes: 25, Seed: uint64(i + 1),
			Start: start, Step: 10 * time.Millisecond})...)
	}
	return out
}

// wakeRecords are the wakes a projector processing batch events per batch
// publishes for evs, as records of names' wake topics.
func wakeRecords(t *testing.T, names topics.Names, evs []topics.Event, batch int) []*kgo.Record {
	t.Helper()
	projs := map[string]*projection.Projection{}
	pending := map[string]*projection.Pending{}
	var runs []string // with pending triggers, in order
	var out []*kgo.Record
	flush := func() {
		for _, run := range runs {
			built, err := projs[run].Wakes(pending[run], time.Time{}, topics.Time{})
			if err != nil {
				t.Fatal(err)
			}
			pending[run].Reset()
			for _, b := range built {
				v, err := topics.Marshal(b.Wake)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, &kgo.Record{Topic: names.WakeTopic(b.Wake.Lane), Key: []byte(b.Wake.RunID), Value: v,
					Partition: topics.Partition([]byte(b.Wake.RunID), partitions)})
			}
		}
		runs = runs[:0]
	}
	for i := range evs {
		ev := evs[i]
		p := projs[ev.RunID]
		if p == nil {
			var err error
			if p, err = projection.New(projection.Config{}); err != nil {
				t.Fatal(err)
			}
			projs[ev.RunID], pending[ev.RunID] = p, &projection.Pending{}
		}
		if trigs, _ := p.Apply(&ev); len(trigs) > 0 {
			if pending[ev.RunID].Len() == 0 {
				runs = append(runs, ev.RunID)
			}
			pending[ev.RunID].Add(ev.RunID, trigs)
		}
		if (i+1)%batch == 0 {
			flush()
		}
	}
	flush()
	return out
}

func reference(t *testing.T, evs []topics.Event) *Reference {
	ref := NewReference(partitions)
	for i := range evs {
		ref.Apply(t, &evs[i])
	}
	return ref
}

func TestReference(t *testing.T) {
	evs := events(2)
	ref := reference(t, evs)
	if got := ref.Runs(); len(got) != 2 || got[0] != "pt-run-0" || got[1] != "pt-run-1" {
		t.Fatalf("runs %v", got)
	}
	n := 0
	for _, ev := range evs {
		if ev.RunID == "pt-run-0" {
			n++
		}
	}
	if got := ref.Events("pt-run-0"); got != n {
		t.Errorf("events of pt-run-0: %d, want %d", got, n)
	}
	trig := ref.Triggering()
	if len(trig) == 0 || len(trig) >= len(evs) {
		t.Errorf("%d of %d events raise a trigger: the workload has results, failures and requests, and heartbeats", len(trig), len(evs))
	}
	// A projection fed the same events compares equal; one fed fewer does not.
	same, short := reference(t, evs), reference(t, evs[:len(evs)-3])
	for _, run := range ref.Runs() {
		CompareRun(t, run, ref.Events(run), same.Projection(run), ref.Projection(run), time.Now())
	}
	rec := &recorder{TB: t}
	last := evs[len(evs)-1].RunID
	CompareRun(rec, last, ref.Events(last), short.Projection(last), ref.Projection(last), time.Now())
	if got := rec.text(); !strings.Contains(got, "events applied under test") || !strings.Contains(got, "differs at byte") {
		t.Errorf("a run missing its last events: got report %q", got)
	}
}

func TestCheckWakes(t *testing.T) {
	evs := events(3)
	t.Run("exactly once", func(t *testing.T) {
		b := newBroker(t)
		wakes := wakeRecords(t, b.k.Names, evs, 1)
		half := len(wakes) / 2
		b.produce(t, true, wakes[:half]...)
		// Aborted duplicates are not read, wherever they are, and neither
		// is a dead letter in an aborted transaction.
		dl := &kgo.Record{Topic: b.k.Names.DeadLetter(), Partition: 0, Value: []byte("{}")}
		b.produce(t, false, append([]*kgo.Record{dl}, wakes[:half]...)...)
		b.produce(t, true, wakes[half:]...)
		b.produce(t, false, append([]*kgo.Record{dl}, wakes[half:]...)...)
		rec := &recorder{TB: t}
		CheckWakes(b.ctx, rec, b.k, reference(t, evs))
		CheckDeadLetter(b.ctx, rec, b.k)
		if got := rec.text(); got != "" {
			t.Errorf("problems reported with every wake committed once:\n%s", got)
		}
	})
	t.Run("duplicate, missing and unexpected", func(t *testing.T) {
		b := newBroker(t)
		wakes := wakeRecords(t, b.k.Names, evs, 1)
		// The last wake is lost, the first is committed twice, and the
		// reference lacks the last run's events.
		b.produce(t, true, wakes[:len(wakes)-1]...)
		b.produce(t, true, wakes[0])
		var fewer []topics.Event
		for _, ev := range evs {
			if ev.RunID != "pt-run-2" {
				fewer = append(fewer, ev)
			}
		}
		ref := reference(t, fewer)
		rec := &recorder{TB: t}
		CheckWakes(b.ctx, rec, b.k, ref)
		got := rec.text()
		t.Logf("what a failing check reports:\n%s", got)
		for _, want := range []string{"is committed twice", "raises no trigger in the reference"} {
			if !strings.Contains(got, want) {
				t.Errorf("report lacks %q:\n%s", want, got)
			}
		}
		// The lost wake is of pt-run-2, absent from this reference: check
		// missing wakes against the full one.
		rec = &recorder{TB: t}
		CheckWakes(b.ctx, rec, b.k, reference(t, evs))
		if got := rec.text(); !strings.Contains(got, "is in no committed wake") || strings.Contains(got, "raises no trigger") {
			t.Errorf("with the last wake lost, got report:\n%s", got)
		}
	})
}

// TestCheckWakesRebatched: the wakes of the same events published twice with
// different batching (as a projector that processed a batch, died before
// committing it, and processed it again in other batches would) name every
// triggering event twice, under different wake ids.
func TestCheckWakesRebatched(t *testing.T) {
	evs := events(2)
	b := newBroker(t)
	b.produce(t, true, wakeRecords(t, b.k.Names, evs, 1)...)
	b.produce(t, true, wakeRecords(t, b.k.Names, evs, 7)...)
	rec := &recorder{TB: t}
	CheckWakes(b.ctx, rec, b.k, reference(t, evs))
	if got := rec.text(); !strings.Contains(got, "triggering events in several wakes") {
		t.Errorf("wakes published twice in other batches: got report:\n%s", got)
	}
}

// TestCheckWakesSplit: one event whose triggers are split over parts of one
// wake (the root of a chain created leaf-first) is in each part, and that
// is no problem (TestCheckWakesRebatched: in two wakes that are not parts of
// one, it is).
func TestCheckWakesSplit(t *testing.T) {
	evs := append(events(1), workload.Burst{RunID: "pt-chain", Nodes: 600, Start: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}.LeafFirstChain()...)
	b := newBroker(t)
	wakes := wakeRecords(t, b.k.Names, evs, 1)
	split := 0
	for _, r := range wakes {
		if w, err := topics.DecodeWake(r.Value); err == nil && w.Part != nil {
			split++
		}
	}
	if split < 2 {
		t.Fatalf("%d parts of split wakes, want the chain's guards split", split)
	}
	b.produce(t, true, wakes...)
	rec := &recorder{TB: t}
	CheckWakes(b.ctx, rec, b.k, reference(t, evs))
	if got := rec.text(); got != "" {
		t.Errorf("problems reported with an event's triggers in the parts of one wake:\n%s", got)
	}
}

func TestCheckDeadLetter(t *testing.T) {
	b := newBroker(t)
	b.produce(t, true, &kgo.Record{Topic: b.k.Names.DeadLetter(), Partition: 0, Value: []byte("{}"),
		Headers: []kgo.RecordHeader{{Key: topics.HeaderDeadLetterReason, Value: []byte("bad input")}}})
	rec := &recorder{TB: t}
	CheckDeadLetter(b.ctx, rec, b.k)
	if got := rec.text(); !strings.Contains(got, "bad input") {
		t.Errorf("a committed dead letter: got report %q", got)
	}
}

// TestCheckStateEmpty: with nothing in the changelog, every run is missing
// and no partition's offset is at its end.
func TestCheckStateEmpty(t *testing.T) {
	b := newBroker(t)
	evs := events(2)
	recs := make([]*kgo.Record, len(evs))
	for i := range evs {
		r, err := topics.EventRecord(b.k.Names.AgentEvents(), &evs[i], "")
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = topics.Partition(r.Key, partitions)
		recs[i] = r
	}
	b.produce(t, true, recs...)
	ref := NewReference(partitions)
	ref.ApplyRecords(t, recs)
	rec := &recorder{TB: t}
	CheckState(b.ctx, rec, b.k, ref)
	got := rec.text()
	for _, run := range ref.Runs() {
		if !strings.Contains(got, "run "+run+": not in the projection under test") {
			t.Errorf("report does not say run %s is missing:\n%s", run, got)
		}
	}
	if !strings.Contains(got, "want the end of the partition") {
		t.Errorf("report does not say the offsets are short:\n%s", got)
	}
}
