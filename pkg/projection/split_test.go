package projection

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestSplitPartsMakeTheWhole: over generated logs (several runs, shuffled
// together, with bursts of triggers), cut into batches of every size, with
// small wake bounds, each run's wakes of a batch carry exactly the
// triggers one unbounded wake carries, in its order; every part is within
// the bounds and numbered (checkParts); and the same log gives the same
// wakes, ids included, again.
func TestSplitPartsMakeTheWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 1))
	limits := snapshot.Limits{MaxBytes: snapshot.MinBytes, MaxNodes: 12}
	smallest := limits.MaxBytes + wakeOverhead()
	split, whole := 0, 0
	for trial := range 6 {
		var events []topics.Event
		for i, n := range []int{40, 150, 300} {
			events = append(events, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%d-%d", trial, i), Nodes: n, Seed: uint64(trial*10 + i + 1)})...)
		}
		burst := workload.Burst{RunID: fmt.Sprintf("chain-%d", trial), Nodes: 300 + 300*trial, Seed: uint64(trial)}
		events = append(events, burst.LeafFirstChain()...)
		leases, _ := workload.Burst{RunID: fmt.Sprintf("leases-%d", trial), Nodes: 150 * (trial + 1), Seed: uint64(trial),
			Owner: fmt.Sprintf("owner-%0*d", 10*trial, trial)}.LeasesDueTogether()
		events = append(events, leases...)
		rng.Shuffle(len(events), func(i, j int) {
			if events[i].RunID != events[j].RunID {
				events[i], events[j] = events[j], events[i]
			}
		})
		cfg := Config{Limits: limits, MaxWakeTriggers: 1 + rng.IntN(12), MaxWakeBytes: smallest + rng.IntN(40_000)}
		if trial%2 == 1 {
			cfg.MaxWakeTriggers = 1 << 20 // the bytes alone bound them
		}
		batch := []int{1, 5, 64, 997, len(events)}[trial%5]
		unbounded := cfg
		unbounded.MaxWakeTriggers, unbounded.MaxWakeBytes = 1<<30, 1<<30

		type wakes struct{ ids, parts []string }
		replay := func(cfg Config, check bool) (out wakes, runs map[string][][]topics.Trigger) {
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			runs = map[string][][]topics.Trigger{}
			ids := map[string]bool{}
			var pending Pending
			flush := func() {
				want := map[string][]topics.Trigger{}
				for _, run := range pending.order {
					want[run] = append([]topics.Trigger(nil), pending.trigs[run]...)
				}
				built, err := p.Wakes(&pending, time.Time{}, topics.Time{})
				pending.Reset()
				if err != nil {
					t.Fatal(err)
				}
				if check {
					checkParts(t, p.cfg, built, want, ids)
				}
				// The triggers of each run in this batch, as its wakes
				// carry them, gathered over its parts.
				got := map[string][]topics.Trigger{}
				for _, b := range built {
					got[b.Wake.RunID] = append(got[b.Wake.RunID], b.Wake.Triggers...)
					part := "-"
					if b.Wake.Part != nil {
						part = fmt.Sprintf("%d/%d", b.Wake.Part.Number, b.Wake.Part.Count)
					}
					out.ids = append(out.ids, b.Wake.WakeID)
					out.parts = append(out.parts, part)
				}
				for run, trigs := range got {
					runs[run] = append(runs[run], trigs)
				}
			}
			for i := range events {
				trigs, _ := p.Apply(&events[i])
				pending.Add(events[i].RunID, trigs)
				if (i+1)%batch == 0 {
					flush()
				}
			}
			flush()
			return out, runs
		}
		got, gotRuns := replay(cfg, true)
		again, _ := replay(cfg, false)
		_, wantRuns := replay(unbounded, false)
		if !reflect.DeepEqual(got, again) {
			t.Fatalf("trial %d: the same log gave other wakes the second time", trial)
		}
		if !reflect.DeepEqual(gotRuns, wantRuns) {
			t.Fatalf("trial %d (%d triggers a wake, %d bytes, batches of %d): the parts' triggers are not one unbounded wake's",
				trial, cfg.MaxWakeTriggers, cfg.MaxWakeBytes, batch)
		}
		for _, part := range got.parts {
			if part == "-" {
				whole++
			} else {
				split++
			}
		}
	}
	t.Logf("%d wakes whole, %d parts of split ones", whole, split)
	if split < 100 || whole < 100 {
		t.Fatalf("%d wakes whole and %d parts: the test no longer splits (or no longer keeps wakes whole) as it should", whole, split)
	}
}

// TestConfigWakeBounds: the wake bounds take their defaults at zero, refuse
// negative values, and refuse a byte bound that cannot hold a snapshot at
// its budget with the widest envelope and trigger, naming the smallest it
// takes and the flags; Validate reports them together.
func TestConfigWakeBounds(t *testing.T) {
	d := Config{}.WithDefaults()
	if d.MaxWakeBytes != DefaultMaxWakeBytes || d.MaxWakeTriggers != DefaultMaxWakeTriggers || DefaultMaxWakeBytes != 524_288 {
		t.Errorf("defaults: %d bytes, %d triggers", d.MaxWakeBytes, d.MaxWakeTriggers)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the defaults are refused: %v", err)
	}
	least := snapshot.DefaultMaxBytes + topics.MaxWakeEnvelopeJSONBytes() + topics.MaxTriggerJSONBytes()
	if err := (Config{MaxWakeBytes: least}).Validate(); err != nil {
		t.Errorf("%d bytes, the least that holds a wake, refused: %v", least, err)
	}
	for _, c := range []struct {
		cfg  Config
		want []string
	}{
		{Config{MaxWakeBytes: least - 1}, []string{fmt.Sprintf("max wake bytes %d:", least-1), fmt.Sprintf("to at least %d", least), "-max-wake-bytes", "-max-snapshot-bytes"}},
		{Config{MaxWakeBytes: 600_000, Limits: snapshot.Limits{MaxBytes: 16 << 20}}, []string{"max wake bytes 600000:", fmt.Sprintf("to at least %d", 16<<20+least-snapshot.DefaultMaxBytes)}},
		{Config{MaxWakeBytes: -1, MaxWakeTriggers: -2}, []string{"max wake bytes -1: must not be negative", "max wake triggers -2: must not be negative"}},
	} {
		err := c.cfg.Validate()
		if err == nil {
			t.Errorf("%+v accepted", c.cfg)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v; want it to say %q", c.cfg, err, w)
			}
		}
	}
}
