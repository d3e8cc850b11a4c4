package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTraffic checks the generator against the contract and the projection:
// every event is valid (the stage skips that check when it sends), no node
// is deeper than the budget (no guard trigger; workload's TestTreeFits
// checks a huge tree's plans), and Wakes says exactly which events the projection raises a trigger
// for (but progress, which wakes at most once per interval).
func TestTraffic(t *testing.T) {
	p, err := projection.New(projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mix := workload.NewMix(workload.MixSpec{Runs: 4, Nodes: 60, Total: 6, HugeShare: -1})
	at := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	n, waking := 0, 0
	for ev, ok := mix.Next(at); ok; ev, ok = mix.Next(at) {
		at = at.Add(10 * time.Millisecond)
		if _, err := topics.EventRecord("t", &ev, ""); err != nil {
			t.Fatalf("event %d (%s) is not valid: %v", n, ev.Type, err)
		}
		trigs, dup := p.Apply(&ev)
		if dup {
			t.Fatalf("event %d (%s): duplicate id %s", n, ev.Type, ev.ID)
		}
		raised := false
		for _, tr := range trigs {
			if tr.Kind == topics.TriggerGuard {
				t.Fatalf("event %d: guard trigger %v: the tree is deeper than its budget", n, tr.Detail)
			}
			if tr.EventID != nil && *tr.EventID == ev.ID && tr.Kind != topics.TriggerProgress {
				raised = true
			}
		}
		if raised != Wakes(&ev) {
			t.Fatalf("event %d (%s): the projection raised a trigger: %v; Wakes says %v", n, ev.Type, raised, Wakes(&ev))
		}
		if raised {
			waking++
		}
		n++
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if mix.Started() != 6 || waking == 0 || n < 6*60*5 {
		t.Fatalf("%d runs, %d events, %d waking: want 6 runs of about 10 events per node, some waking", mix.Started(), n, waking)
	}
}

// TestDecodeWake reads a real wake, as the projector encodes it.
func TestDecodeWake(t *testing.T) {
	p, err := projection.New(projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tree := workload.NewTree(workload.TreeSpec{RunID: "run-1", Nodes: 300})
	at := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	var pending projection.Pending
	for ev, ok := tree.Next(at); ok; ev, ok = tree.Next(at) {
		trigs, _ := p.Apply(&ev)
		pending.Add(ev.RunID, trigs)
		at = at.Add(10 * time.Millisecond)
	}
	input := workload.Marker("run-1", at)
	input.Type, input.Data = topics.TypeInput, &topics.Input{InputKind: "steer", Text: humanTag + "7"}
	trigs, _ := p.Apply(&input)
	pending.Add("run-1", trigs)
	built, err := p.Wakes(&pending, at, topics.Time{})
	if err != nil || len(built) == 0 {
		t.Fatalf("no wake built: %v", err)
	}
	foundInput := false
	for _, b := range built {
		enc, err := topics.Marshal(b.Wake)
		if err != nil {
			t.Fatal(err)
		}
		w, err := decodeWake(enc)
		if err != nil {
			t.Fatal(err)
		}
		s := &b.Wake.AgentTreeSnapshot
		senc, _ := topics.Marshal(s)
		if w.RunID != "run-1" || w.Lane != b.Wake.Lane || w.Seq != s.AsOfEventSeq || w.Truncated != s.Truncated ||
			w.Nodes != s.Summary.NodeCountTotal || len(w.Triggers) != len(b.Wake.Triggers) || w.SnapshotBytes != len(senc) {
			t.Fatalf("decoded run %s, lane %s, seq %d, truncated %v, %d nodes, %d triggers, snapshot %d bytes; want %s, %s, %d, %v, %d, %d, %d",
				w.RunID, w.Lane, w.Seq, w.Truncated, w.Nodes, len(w.Triggers), w.SnapshotBytes,
				"run-1", b.Wake.Lane, s.AsOfEventSeq, s.Truncated, s.Summary.NodeCountTotal, len(b.Wake.Triggers), len(senc))
		}
		// The human input is in one of the priority lane's wakes: the
		// run's triggers of the whole tree come with it, split over parts.
		for _, tr := range w.Triggers {
			foundInput = foundInput || b.Wake.Lane == topics.LanePriority && tr.Input != nil && tr.Input.Text == humanTag+"7"
		}
	}
	if !foundInput {
		t.Fatal("the priority wake's human input trigger was not decoded")
	}
}

// TestRun runs every scenario, tiny, against the embedded broker and real
// projector processes, and checks that the report's fields are filled and
// sane, and that RESULTS.md's other sections survive the rewrite. soak,
// which runs only when named, is named: its runs finish within a second and
// expire a second later.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts projector processes")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "projector")
	// Not race-built: the projectors are measured, not tested.
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/projector").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var progress strings.Builder
	cfg := Config{Projector: bin, Partitions: 2, Duration: 2 * time.Second, Rate: 300, Runs: 4, Nodes: 30, HugeShare: 0.25,
		HugeNodes: 500, HumanRate: 10, MaxEvents: 3000, Backlog: 5000, Instances: []int{1, 2}, SessionTimeout: time.Second,
		FailoverWarmup: time.Second, WorkDir: tmp, Progress: &progress, ProgressEvery: time.Second,
		Scenarios: append(slices.Clone(Scenarios), MoreScenarios...), SoakEvents: 3000, SoakRate: 1000, SoakNodes: 10,
		SoakRetention: time.Second, SoakTimers: time.Second, SoakSampleEvery: 250 * time.Millisecond, SoakCompactEvery: time.Second}
	// Pinned (-pin) where there are CPUs to split; this process's own
	// affinity and GOMAXPROCS are restored for the tests after it.
	cpus, err := availableCPUs()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pin = len(cpus) >= 2
	defer func() {
		if err := pinSelf(cpus); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pin {
		p := rep.Machine.Pinning
		if p == nil || len(p.Harness) == 0 || len(p.Projectors) == 0 {
			t.Fatalf("a pinned run's report says %+v, want the CPU split", p)
		}
		now, err := availableCPUs()
		if err != nil || !slices.Equal(now, p.Harness) {
			t.Errorf("the harness runs on CPUs %v (%v), want %v", now, err, p.Harness)
		}
		if md := rep.Markdown(); !strings.Contains(md, "pinned (-pin): "+p.String()) {
			t.Errorf("RESULTS.md does not say the run was pinned:\n%s", md)
		}
	}
	if len(rep.Scenarios) != len(cfg.Scenarios) {
		t.Fatalf("%d scenarios reported, want %d", len(rep.Scenarios), len(cfg.Scenarios))
	}
	byName := map[string]*ScenarioResult{}
	gcMeasured := 0
	for _, s := range rep.Scenarios {
		byName[s.Scenario] = s
		if s.Events <= 0 || s.AggregatedConsumeRate <= 0 || s.AggregatedPublishRate <= 0 || s.DurationSeconds <= 0 {
			t.Errorf("%s: events %d, consume %v/s, publish %v/s over %vs: want all positive", s.Scenario, s.Events,
				s.AggregatedConsumeRate, s.AggregatedPublishRate, s.DurationSeconds)
		}
		if s.SnapshotBytes.Count == 0 || s.SnapshotBytes.P50 <= 0 || s.SnapshotBytes.Max > 24_000 {
			t.Errorf("%s: snapshot sizes %+v: want wakes, each at most 24,000 bytes", s.Scenario, s.SnapshotBytes)
		}
		if s.TruncationRate < 0 || s.TruncationRate > 1 || s.MachineBusy <= 0 || s.MachineBusy > 1 {
			t.Errorf("%s: truncation rate %v, machine busy %v: want shares", s.Scenario, s.TruncationRate, s.MachineBusy)
		}
		if s.ProjectorCPU <= 0 || s.ProjectorRSSBytes <= 1<<20 {
			t.Errorf("%s: projector CPU %v cores, RSS %d bytes: want them measured", s.Scenario, s.ProjectorCPU, s.ProjectorRSSBytes)
		}
		if s.ProjectorGCCPUShare < 0 || s.ProjectorGCCPUShare >= 1 || s.ProjectorHeapBytes <= 0 || s.ProjectorHeapMaxBytes < s.ProjectorHeapBytes {
			t.Errorf("%s: projector GC share %v, heap %d bytes at the end, %d at most: want a share and the heap measured",
				s.Scenario, s.ProjectorGCCPUShare, s.ProjectorHeapBytes, s.ProjectorHeapMaxBytes)
		}
		if s.ProjectorGCCPUShare > 0 {
			gcMeasured++
		}
		if len(s.PublishRate) == 0 || len(s.ConsumeRate) != len(s.PublishRate) {
			t.Errorf("%s: %d publish and %d consume samples", s.Scenario, len(s.PublishRate), len(s.ConsumeRate))
		}
		for lane, l := range s.EndToEndLatency {
			if l.Count > 0 && !(l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
				t.Errorf("%s: %s latency %+v: percentiles out of order", s.Scenario, lane, l)
			}
		}
		if s.WakesMissing != 0 {
			t.Errorf("%s: %d waking events without a wake", s.Scenario, s.WakesMissing)
		}
	}
	if gcMeasured == 0 {
		t.Errorf("no scenario measured the projectors' GC CPU: want a share in those that collected")
	}
	if m := byName["max"]; m.Baselines["rawConsumeRate"] <= m.AggregatedConsumeRate {
		t.Errorf("max: raw consume %v/s not above the projector's %v/s", m.Baselines["rawConsumeRate"], m.AggregatedConsumeRate)
	}
	st := byName["steady"]
	if st.EndToEndLatency["normal"].Count == 0 || st.EndToEndLatency["priority"].Count == 0 || st.PublishDelayLatency.Count == 0 {
		t.Errorf("steady: latencies %+v, %+v, send delay %+v: want both lanes and the sender measured",
			st.EndToEndLatency["normal"], st.EndToEndLatency["priority"], st.PublishDelayLatency)
	}
	if math.Abs(st.AggregatedPublishRate-300)/300 > 0.2 {
		t.Errorf("steady: %v events/s sent, want about the 300 scheduled", st.AggregatedPublishRate)
	}
	if pr := byName["priority"]; pr.EndToEndLatency["priority"].Count == 0 || pr.EndToEndLatency["priorityIdle"].Count == 0 {
		t.Errorf("priority: latency %+v, without a backlog %+v: want both measured", pr.EndToEndLatency["priority"], pr.EndToEndLatency["priorityIdle"])
	}
	if m := byName["max"]; m.ProjectorCPUPerEventMicros <= 0 || m.ProjectorMemoryLimitBytes != 512<<20 {
		t.Errorf("max: CPU per event %v µs, memory limit %d: want the cost measured and the default limit read", m.ProjectorCPUPerEventMicros, m.ProjectorMemoryLimitBytes)
	}
	if g := byName["grow"]; len(g.Steps) != 2 || g.Steps[1]["nodes"] != 500 || g.Steps[1]["snapshotBuildMs"].(float64) <= 0 {
		t.Errorf("grow: steps %v: want 100 and 500 nodes with build times", g.Steps)
	}
	if sc := byName["scale"]; len(sc.Steps) != 2 {
		t.Errorf("scale: steps %v: want one per instance count", sc.Steps)
	}
	if f := byName["failover"]; f.Baselines["failoverSeconds"] <= 0 || len(f.Steps) == 0 {
		t.Errorf("failover: %v, steps %v: want the killed instance's partitions resumed", f.Baselines, f.Steps)
	}
	so := byName["soak"]
	if b := so.Baselines; b["runsEnded"] <= 0 || b["runsExpired"] != b["runsEnded"] || b["changelogTombstonesAtEnd"] <= 0 || b["compactions"] <= 0 {
		t.Errorf("soak: %v: want every ended run expired, tombstones counted, compactions", b)
	}
	if len(so.Series) < 3 || len(so.Steps) < 3 || so.Steps[len(so.Steps)-1]["phase"] != "drain" {
		t.Errorf("soak: %d samples, steps %v: want a series, tenths of it and the drain's end", len(so.Series), so.Steps)
	}
	// Each measure is taken, in some sample at least: one scrape can fail
	// on a loaded machine (the run notes it). The changelog's size is left
	// out here: the tiny soak may take a single sample, and CI's run once
	// got nothing from DescribeLogDirs in it; the census of its records
	// (tombstones, above) shows the changelog was read.
	for _, k := range []string{"rssBytes", "heapInuseBytes", "pebbleBytes", "liveRuns"} {
		measured := false
		for _, x := range so.Series {
			if v, ok := x[k].(int64); ok && v > 0 {
				measured = true
			}
		}
		if !measured {
			t.Errorf("soak: %s not measured in any of %d samples: %v", k, len(so.Series), so.Series)
		}
	}
	soakTargets := 0
	for _, tg := range so.Targets {
		if tg.Measured == "not measured" {
			t.Errorf("soak: target %+v: not measured", tg)
		}
		soakTargets++
	}
	if soakTargets != 7 {
		t.Errorf("soak: %d targets, want RSS, Pebble and changelog growth (largest and trend) and RSS against the limit", soakTargets)
	}
	if len(rep.Targets) < 5 {
		t.Errorf("%d targets reported, want every scenario's", len(rep.Targets))
	}
	for _, tg := range rep.Targets {
		if tg.Want == "" || tg.Measured == "" || tg.Factor <= 0 {
			t.Errorf("target %+v: not filled in", tg)
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("the report does not encode: %v", err)
	}

	// RESULTS.md: the section is replaced, the rest kept.
	path := filepath.Join(tmp, "RESULTS.md")
	if err := os.WriteFile(path, []byte("# Results\n\nhand-written\n\n"+BeginMarker+"\nold\n"+EndMarker+"\n\n## Later\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateResults(path, rep.Kafka, rep.Markdown()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	out := string(b)
	for _, want := range []string{"hand-written", "## Later\n\nkept", "### Targets", "#### failover", rep.Date} {
		if !strings.Contains(out, want) {
			t.Errorf("RESULTS.md lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\nold\n") || strings.Count(out, BeginMarker) != 1 {
		t.Errorf("RESULTS.md: the old section is still there:\n%s", out)
	}
}

// TestRunRepeated: with Repeat, every scenario runs that many times,
// interleaved, each run numbered; steady measures the maximum of its own
// mix when no rate is given; and the report's targets are the medians of
// the runs, with their range.
func TestRunRepeated(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "projector")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/projector").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var progress strings.Builder
	cfg := Config{Projector: bin, Partitions: 2, Duration: 3 * time.Second, Runs: 4, Nodes: 30, HugeShare: 0.25,
		HugeNodes: 500, HumanRate: 10, MaxEvents: 3000, SessionTimeout: time.Second, WorkDir: tmp,
		Progress: &progress, ProgressEvery: time.Second, Scenarios: []string{"steady", "max"}, Repeat: 2,
		ProfileDir: filepath.Join(tmp, "profiles")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	// -profile-dir: each stage's instance left its CPU profile, and its
	// heap profile fetched before it stopped (gzipped protobuf, as pprof
	// writes them).
	for _, name := range []string{"max-i0.cpu.pprof", "max-i0.heap.pprof", "steady-i0.cpu.pprof", "steady-i0.heap.pprof"} {
		b, err := os.ReadFile(filepath.Join(cfg.ProfileDir, name))
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("-profile-dir: %s: %d bytes, %v; want a pprof profile", name, len(b), err)
		}
	}
	var order []string
	for _, s := range rep.Scenarios {
		order = append(order, fmt.Sprintf("%s/%d", s.Scenario, s.Repetition))
	}
	if want := []string{"steady/1", "max/1", "steady/2", "max/2"}; !slices.Equal(order, want) {
		t.Fatalf("scenarios ran as %v, want %v", order, want)
	}
	for _, s := range rep.Scenarios {
		if s.Scenario == "steady" && (s.Baselines["ownMixMaxRate"] <= 0 || math.Abs(s.TargetRate-s.Baselines["ownMixMaxRate"]/2) > 1e-6) {
			t.Errorf("steady run %d: rate %v, own mix's maximum %v: want half of it", s.Repetition, s.TargetRate, s.Baselines["ownMixMaxRate"])
		}
	}
	n := 0
	for _, tg := range rep.Targets {
		if tg.Runs != 2 {
			t.Errorf("target %s: %s summarises %d runs, want 2", tg.Scenario, tg.Name, tg.Runs)
			continue
		}
		n++
		if tg.Min > tg.Max || tg.Min > tg.Value || tg.Value > tg.Max || !strings.Contains(tg.Measured, "median of 2") {
			t.Errorf("target %+v: want the median within the range, and said", tg)
		}
	}
	if n == 0 {
		t.Errorf("no targets: want the medians of max's and steady's")
	}
	if md := rep.Markdown(); !strings.Contains(md, "ran 2 times") || !strings.Contains(md, "#### max (run 2)") {
		t.Errorf("RESULTS.md does not say the scenarios were repeated:\n%s", md)
	}
}

// TestSummarize: repeated targets become one each, judged on the median.
func TestSummarize(t *testing.T) {
	ts := []Target{
		atMost("priority", "p99", 400, 50, " ms", ""), atLeast("max", "ratio", 0.2, 0.5, "", ""),
		atMost("priority", "p99", 30, 50, " ms", ""), atLeast("max", "ratio", 0.6, 0.5, "", ""),
		atMost("priority", "p99", 40, 50, " ms", ""), atLeast("max", "ratio", 0.7, 0.5, "", ""),
		atMost("steady", "once", 1, 2, "", "kept"),
	}
	got := summarize(ts)
	if len(got) != 3 || got[0].Name != "p99" || got[1].Name != "ratio" || got[2].Name != "once" {
		t.Fatalf("summarize: %+v: want p99, ratio, once in the order first seen", got)
	}
	if p := got[0]; p.Value != 40 || !p.Met || p.Min != 30 || p.Max != 400 || p.Runs != 3 || p.Measured != "40.0 ms (median of 3; 30.0 to 400)" {
		t.Errorf("p99: %+v: want the median 40 met, range 30 to 400", p)
	}
	if r := got[1]; r.Value != 0.6 || !r.Met || !r.Floor {
		t.Errorf("ratio: %+v: want the median 0.6, a floor, met", r)
	}
	if o := got[2]; o.Runs != 0 || o.Note != "kept" || o.Measured != "1.00" {
		t.Errorf("a target of one run: %+v: want it as it was", o)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", m)
	}
}

// TestTargetJSON: a target whose factor or value JSON cannot carry (one not
// measured, a floor measured at 0, a ratio over a zero baseline) encodes
// them as null, and the report with it still encodes.
func TestTargetJSON(t *testing.T) {
	ts := []Target{
		unmeasured("steady", "gc", 15, "%", "no cycle ended"),
		atLeast("priority", "drain", 0, 0.9, "x", ""),
		atMost("priority", "p99 / idle", math.Inf(1), 2, "x", ""),
		atMost("steady", "p99", 40, 50, " ms", "kept"),
	}
	b, err := json.Marshal(&Report{Targets: ts})
	if err != nil {
		t.Fatalf("the report does not encode: %v", err)
	}
	var got struct {
		Targets []map[string]any `json:"targets"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ factor, value any }{{nil, 0.0}, {nil, 0.0}, {nil, nil}, {0.8, 40.0}} {
		g := got.Targets[i]
		if g["factor"] != want.factor || g["value"] != want.value {
			t.Errorf("target %d: factor %v, value %v; want %v and %v: %s", i, g["factor"], g["value"], want.factor, want.value, b)
		}
	}
	if g := got.Targets[3]; g["name"] != "p99" || g["note"] != "kept" || g["limit"] != 50.0 || g["met"] != true {
		t.Errorf("the other fields: %v", g)
	}
}

// TestThirds: steady's collapse check compares the means of the window's
// first and last thirds, and leaves out what follows the window.
func TestThirds(t *testing.T) {
	first, last, ok := thirds([]float64{10, 10, 10, 20, 20, 20, 5, 5, 5, 1000}, 9)
	if !ok || first != 10 || last != 5 {
		t.Errorf("thirds = %v, %v, %v; want 10, 5, true", first, last, ok)
	}
	if _, _, ok := thirds([]float64{1, 2}, 30); ok {
		t.Errorf("thirds of 2 samples: want false")
	}
	if _, _, ok := thirds([]float64{0, 0, 0, 1, 1, 1}, 6); ok {
		t.Errorf("thirds with nothing in the first: want false")
	}
}

// TestConfig: defaults validate, and every problem is reported.
func TestConfig(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	err := Config{Scenarios: []string{"nope", "scale"}, Brokers: []string{"nohost"}, Instances: []int{9}}.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`scenario "nope"`, `broker "nohost"`, "instances 9"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// soak runs only when named.
	if slices.Contains((Config{}).WithDefaults().Scenarios, "soak") {
		t.Error("soak is in the standard set")
	}
	if err := (Config{Scenarios: []string{"soak"}}).Validate(); err != nil {
		t.Errorf("soak: %v", err)
	}
	if err := (Config{Scenarios: []string{"soak"}, SoakEvents: 10, SoakRetention: time.Millisecond}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "soak events 10") || !strings.Contains(err.Error(), "soak retention 1ms") {
		t.Errorf("soak's bad config: %v", err)
	}
}
