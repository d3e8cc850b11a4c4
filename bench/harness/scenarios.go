package harness

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// eventsPerNode is about how many events a Tree emits per node (measured:
// 2,107 for 200 nodes, 1,031,451 for 100,000), to size closed-loop runs.
const eventsPerNode = 10.4

// runsFor is how many runs of nodes nodes make about events events.
func runsFor(events, nodes int) int {
	return max(1, int(float64(events)/(eventsPerNode*float64(nodes))+0.5))
}

// result fills in what every scenario reports from its stage and window.
func (s *stage) result(name, desc, mode string, instances int, st samplerStats) *ScenarioResult {
	r := &ScenarioResult{Scenario: name, Description: desc, Mode: mode, Instances: instances, Partitions: int(s.partitions),
		DurationSeconds: st.elapsed.Seconds(), Events: s.acked.Load(),
		ProjectorCPU: st.projectorCPU, ProjectorRSSBytes: st.projectorRSS, HarnessCPU: st.harnessCPU, MachineBusy: st.machineBusy,
		ProjectorGCCPUShare: st.gcShare, ProjectorHeapBytes: int64(st.heap), ProjectorHeapMaxBytes: int64(st.heapMax),
		ProjectorMemoryLimitBytes: int64(st.memLimit), ProjectorIntakeThrottles: int64(st.throttles), ProjectorIntakeThrottledSeconds: st.throttled,
		EndToEndLatency: map[string]*Latency{}, EndToEndLatencyFromSchedule: map[string]*Latency{}, Baselines: map[string]float64{}}
	if st.runtimeErr != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("some scrapes of the projectors' /metrics for their GC and heap failed (the figures leave those samples out): %v", st.runtimeErr))
	}
	if st.throttles > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("the projectors paused their agent intake for memory %.0f times, %.1f s in all over the %.0f s window (live heap above 70%% of GOMEMLIMIT; each pause at most 2 s)",
			st.throttles, st.throttled, st.elapsed.Seconds()))
	}
	sm := s.sampler
	sm.mu.Lock()
	r.PublishRate, r.ConsumeRate = sm.publish, sm.consume
	r.WakeRate = map[string][]float64{"normal": sm.wakes[laneNormal], "priority": sm.wakes[lanePriority]}
	sm.mu.Unlock()
	rs := s.reader.stats()
	el := st.elapsed.Seconds()
	r.AggregatedPublishRate = float64(r.Events) / el
	if s.publishRate > 0 {
		r.AggregatedPublishRate = s.publishRate
	}
	r.AggregatedConsumeRate = float64(rs.projected) / el
	r.AggregatedWakeRate = map[string]float64{"normal": float64(rs.wakes[laneNormal]) / el, "priority": float64(rs.wakes[lanePriority]) / el}
	s.tr.mu.Lock()
	if s.latency {
		// An event still waiting for its wake is not left out of the
		// distribution, which would flatter it: it counts with its age now,
		// a lower bound of its latency.
		now := time.Now()
		for k, f := range s.tr.pending {
			lane := laneNormal
			if strings.Contains(k, "\x00"+humanTag) {
				lane = lanePriority
			}
			if !f.ack.IsZero() {
				record(s.tr.e2e[lane], now.Sub(f.ack).Microseconds())
			}
			record(s.tr.fromSched[lane], now.Sub(f.sched).Microseconds())
		}
	}
	for lane, name := range []string{"normal", "priority"} {
		r.EndToEndLatency[name] = latency(s.tr.e2e[lane])
		r.EndToEndLatencyFromSchedule[name] = latency(s.tr.fromSched[lane])
	}
	if s.tr.readBeforeAck > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d wakes were read before the harness saw their event's acknowledgement: counted as 0 ms from the append", s.tr.readBeforeAck))
	}
	r.WakesMissing = len(s.tr.pending)
	s.tr.mu.Unlock()
	if s.assignedAtReady > 0 {
		r.Reassignments = s.assignments() - s.assignedAtReady
	}
	s.reader.mu.Lock()
	r.SnapshotBytes = sizes(s.reader.snapBytes)
	if n := rs.wakes[0] + rs.wakes[1]; n > 0 {
		r.TruncationRate = float64(rs.truncated) / float64(n)
	}
	s.reader.mu.Unlock()
	s.mu.Lock()
	if mode == "open-loop" {
		r.PublishDelayLatency = latency(s.publishDelay)
		r.LateSends = s.late + s.humanLate
	}
	if s.humanErrs > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d human inputs failed at the gateway", s.humanErrs))
	}
	s.mu.Unlock()
	if r.WakesMissing > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d waking events had no wake read by the end of the scenario; they count in the latencies with their age at the end, a lower bound", r.WakesMissing))
	}
	if st.machineBusy >= 0.9 {
		r.Notes = append(r.Notes, fmt.Sprintf("the machine was %.0f%% busy (%d cores; broker, load and projectors share them): figures are bounded by the machine",
			100*st.machineBusy, s.h.cfg.cores()))
	}
	return r
}

func (c Config) cores() int { return machine().Cores }

// drain waits (up to d) for every tracked event's wake: the latencies of
// the last sends are part of the window.
func (s *stage) drain(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_ = s.reader.waitFor(ctx, "the last wakes", func() bool { return s.tr.unmatched() == 0 })
}

// closedLoopDrain sends mix's runs as fast as the broker takes them to the
// stage's running projectors and waits for every run's marker wake. It
// returns the events sent and the projected rate: events over the time
// from the first send until the last marker's wake was read.
func (s *stage) closedLoopDrain(ctx context.Context, mix *workload.Mix) (int, float64, error) {
	began := time.Now()
	n, err := s.closedLoop(ctx, mix, 0)
	if err != nil {
		return n, 0, err
	}
	s.publishRate = float64(n) / (time.Duration(s.lastAck.Load() - began.UnixNano())).Seconds()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := s.reader.waitMarkers(wctx, mix.Started()); err != nil {
		if derr := s.died(); derr != nil {
			return n, 0, derr
		}
		return n, 0, err
	}
	return n, float64(n) / time.Since(began).Seconds(), nil
}

// runMax: the maximum throughput, closed loop. One projector instance,
// warm; a workload of MaxEvents events is sent as fast as the broker takes
// it, and the projected rate is the events over the time until every run's
// marker wake is read. Baseline (a), the raw consume rate of the same
// records from the same broker, follows in the same stage.
func (h *Harness) runMax(ctx context.Context) (*ScenarioResult, error) {
	s, err := h.newStage(ctx, "max")
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.startProjectors(ctx, 1, true); err != nil {
		return nil, err
	}
	s.resetMeasures()
	mix := workload.NewMix(workload.MixSpec{Prefix: "max", Runs: h.cfg.Runs, Nodes: h.cfg.Nodes, Total: runsFor(h.cfg.MaxEvents, h.cfg.Nodes), HugeShare: -1})
	s.startSampler()
	_, rate, err := s.closedLoopDrain(ctx, mix)
	if err != nil {
		return nil, err
	}
	st := s.sampler.close()
	raw, err := s.rawConsume(ctx)
	if err != nil {
		return nil, err
	}
	h.maxRate = rate
	r := s.result("max", fmt.Sprintf("maximum throughput: %d runs of %d nodes (%s events) sent as fast as the broker takes them to 1 warm projector instance",
		mix.Started(), h.cfg.Nodes, num(float64(s.acked.Load()))), "closed-loop", 1, st)
	r.AggregatedConsumeRate = rate
	r.Baselines["rawConsumeRate"] = raw
	r.Baselines["projectorToRaw"] = rate / raw
	r.Targets = append(r.Targets, atLeast("max", "projector throughput / raw consume of the same records", rate/raw, 0.5, "",
		fmt.Sprintf("%s vs %s events/s", num(rate), num(raw))))
	h.cpuPerEventTarget(r, st)
	rssTarget(r)
	return r, nil
}

// cpuPerEventTarget adds max's cost target to r: the projector's CPU per
// event in the whole pipeline, at most 5 µs on the embedded broker and 8 µs
// on Apache Kafka (whose fetches and transactions cost the client more).
// Both are meant pinned (-pin): unpinned, the projector's CPU includes what
// contention with the harness costs it.
func (h *Harness) cpuPerEventTarget(r *ScenarioResult, st samplerStats) {
	if r.Events <= 0 {
		return
	}
	r.ProjectorCPUPerEventMicros = 1e6 * st.projectorCPU * st.elapsed.Seconds() / float64(r.Events)
	want, note := 5.0, "on the embedded broker"
	if h.apache != nil {
		want, note = 8, "on Apache Kafka"
	}
	if h.pin == nil {
		note += "; not pinned, so contention with the harness is in it"
	}
	r.Targets = append(r.Targets, atMost(r.Scenario, "projector CPU per event in the pipeline", r.ProjectorCPUPerEventMicros, want, " µs", note))
}

// runSteady: a fixed rate, open loop, with human input through the gateway:
// the end-to-end latency of both lanes. The rate is Rate, or half the
// maximum of steady's own mix (huge runs included), measured closed loop on
// the same warm projector just before the window (steadyMax): half of max's
// rate, whose runs are all small, would be a different load.
func (h *Harness) runSteady(ctx context.Context) (*ScenarioResult, error) {
	s, err := h.newStage(ctx, "steady")
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.args = []string{"-http-addr", "127.0.0.1:0"} // its /metrics: the priority path's stages
	if err := s.startProjectors(ctx, 1, true); err != nil {
		return nil, err
	}
	if err := s.startGateway(ctx); err != nil {
		return nil, err
	}
	addr, err := s.procs[0].httpAddr()
	if err != nil {
		return nil, err
	}
	metrics := "http://" + addr + "/metrics"
	mix := workload.NewMix(workload.MixSpec{Prefix: "steady", Runs: h.cfg.Runs, Nodes: h.cfg.Nodes, HugeShare: h.cfg.HugeShare, HugeNodes: h.cfg.HugeNodes})
	rate, why, ownMax := h.cfg.Rate, "the rate given", 0.0
	if rate == 0 {
		if ownMax, err = h.steadyMax(ctx, s, mix, metrics); err != nil {
			return nil, err
		}
		rate, why = ownMax/2, "half the maximum of this mix, measured closed loop just before"
	}
	s.resetMeasures()
	s.latency = true
	before := s.acked.Load()
	s.startSampler()
	if err := h.openLoopWithHumans(ctx, s, mix, rate); err != nil {
		return nil, err
	}
	inWindow := s.reader.stats().projected
	s.drain(ctx, 15*time.Second)
	ss, scrapeErr := scrapeStages(ctx, metrics)
	st := s.sampler.close()
	r := s.result("steady", fmt.Sprintf("steady state: %s events/s (%s) from %d runs under way (%d nodes; %.0f%% huge runs of %s nodes), %s human inputs/s through the gateway, 1 projector instance",
		num(rate), why, h.cfg.Runs, h.cfg.Nodes, 100*max(h.cfg.HugeShare, 0), num(float64(h.cfg.HugeNodes)), num(h.cfg.HumanRate)), "open-loop", 1, st)
	r.TargetRate = rate
	r.Events = s.acked.Load() - before
	r.AggregatedPublishRate = float64(r.Events) / h.cfg.Duration.Seconds()
	r.AggregatedConsumeRate = float64(inWindow) / h.cfg.Duration.Seconds()
	if ownMax > 0 {
		r.Baselines["ownMixMaxRate"] = ownMax
	}
	if h.maxRate > 0 {
		r.Baselines["maxRate"] = h.maxRate
	}
	if r.AggregatedConsumeRate < 0.95*r.AggregatedPublishRate {
		r.Notes = append(r.Notes, fmt.Sprintf("the projector did not keep up with the schedule (%s of %s events/s projected during the window): the latency is mostly the queue that built up",
			num(r.AggregatedConsumeRate), num(r.AggregatedPublishRate)))
	}
	if scrapeErr != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("the projector's /metrics could not be read at the end (no stages): %v", scrapeErr))
	} else {
		r.Notes = append(r.Notes, stagesNote(ss))
	}
	h.steadyTargets(r)
	return r, nil
}

// steadyTargets adds steady's targets to r: both lanes' latency, keeping up
// to the end of the window, the GC's share and the memory limit.
func (h *Harness) steadyTargets(r *ScenarioResult) {
	note := ""
	if h.cfg.Rate != 0 {
		note = "at the rate given, not necessarily half the maximum"
	}
	r.Targets = append(r.Targets, atMost("steady", "normal lane end-to-end p99 at half the maximum throughput",
		r.EndToEndLatency["normal"].P99, 100, " ms", note))
	r.Targets = append(r.Targets, atMost("steady", "priority lane end-to-end p99 at half the maximum throughput",
		r.EndToEndLatency["priority"].P99, 50, " ms", fmt.Sprintf("%d human inputs", r.EndToEndLatency["priority"].Count)))
	if first, last, ok := thirds(r.ConsumeRate, int(h.cfg.Duration/time.Second)); ok {
		r.Baselines["projectedRateFirstThird"], r.Baselines["projectedRateLastThird"] = first, last
		r.Targets = append(r.Targets, atLeast("steady", "projected rate in the window's last third / its first third (no collapse)",
			last/first, 0.9, "x", fmt.Sprintf("%s vs %s events/s", num(last), num(first))))
	}
	const gcName = "GC share of the projector's CPU"
	if r.ProjectorGCCPUShare > 0 {
		r.Targets = append(r.Targets, atMost("steady", gcName, 100*r.ProjectorGCCPUShare, 15, "%", ""))
	} else {
		// The runtime counts the GC's CPU when a cycle ends: a window too
		// short for one to end between two scrapes measured nothing.
		r.Targets = append(r.Targets, unmeasured("steady", gcName, 15, "%", "no GC cycle ended between the first and last scrapes of the projector's /metrics"))
	}
	rssTarget(r)
}

// rssTarget adds the target of every single-instance scenario's memory to
// r: the largest RSS seen within the projector's -memory-limit.
func rssTarget(r *ScenarioResult) {
	if r.ProjectorMemoryLimitBytes > 0 && r.Instances == 1 {
		r.Targets = append(r.Targets, atMost(r.Scenario, "projector RSS, largest sample, vs its memory limit",
			float64(r.ProjectorRSSBytes)/(1<<20), float64(r.ProjectorMemoryLimitBytes)/(1<<20), " MiB", "-memory-limit, as canopy_projector_memory_limit_bytes says"))
	}
}

// thirds returns the mean of the first and of the last third of the first
// n per-second samples of rates; false with fewer than 3 samples or a
// first third of nothing.
func thirds(rates []float64, n int) (first, last float64, ok bool) {
	n = min(n, len(rates))
	if n < 3 {
		return 0, 0, false
	}
	mean := func(vs []float64) float64 {
		var t float64
		for _, v := range vs {
			t += v
		}
		return t / float64(len(vs))
	}
	first, last = mean(rates[:n/3]), mean(rates[n-n/3:n])
	return first, last, first > 0
}

// steadyMax measures the maximum rate of mix on the stage's warm projector:
// MaxEvents of its events sent as fast as the broker takes them, over the
// time until the projector has consumed them all (its
// records_consumed_total at metrics). The mix goes on from where it
// stopped in the window that follows.
func (h *Harness) steadyMax(ctx context.Context, s *stage, mix *workload.Mix, metrics string) (float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	base, err := consumed(ctx, client, metrics, s.names.AgentEvents())
	if err != nil {
		return 0, fmt.Errorf("steady: reading the projector's records consumed: %w", err)
	}
	fmt.Fprintf(h.cfg.Progress, "steady: the maximum of its own mix, closed loop (%s events)\n", num(float64(h.cfg.MaxEvents)))
	began := time.Now()
	n, err := s.closedLoop(ctx, mix, h.cfg.MaxEvents)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, err := consumed(ctx, client, metrics, s.names.AgentEvents()); err == nil && v-base >= float64(n) {
			break
		}
		if err := s.died(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("steady: the projector did not consume the %d events of the closed loop within 10 minutes", n)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	rate := float64(n) / time.Since(began).Seconds()
	// The wakes of the closed loop are not the window's: they are read
	// (or given up on) before it starts.
	s.drain(ctx, 10*time.Second)
	s.tr.mu.Lock()
	s.tr.pending = map[string]*flight{}
	s.tr.mu.Unlock()
	return rate, nil
}

// openLoopWithHumans sends mix open loop at rate for the configured
// duration, and human input at HumanRate into its active runs meanwhile.
func (h *Harness) openLoopWithHumans(ctx context.Context, s *stage, mix *workload.Mix, rate float64) error {
	hctx, stopHumans := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	rng := rand.New(rand.NewPCG(7, 7))
	var rngMu sync.Mutex
	go func() {
		defer wg.Done()
		s.humanInputs(hctx, h.cfg.HumanRate, func() string { rngMu.Lock(); defer rngMu.Unlock(); return mix.ActiveRun(rng) })
	}()
	err := s.openLoop(ctx, mix, rate, h.cfg.Duration)
	stopHumans()
	wg.Wait()
	return err
}

// scrapeStages reads the priority path's stages from a projector's
// /metrics.
func scrapeStages(ctx context.Context, url string) ([]stageFigures, error) {
	fams, err := scrapeFamilies(ctx, &http.Client{Timeout: 5 * time.Second}, url)
	if err != nil {
		return nil, err
	}
	return stages(fams), nil
}

// growCheckpoints are the run sizes grow measures at.
func growCheckpoints(total int) []int {
	var cps []int
	for c := 100; c < total; c *= 10 {
		cps = append(cps, c)
	}
	return append(cps, total)
}

// runGrow: one run growing to HugeNodes nodes. First, in this process and
// before any projector runs, the same run is projected with pkg/projection
// and at each size a snapshot is built by canopy's indexes and by baseline
// (b), the naive strategy. Then a projector instance consumes the run,
// sent closed loop, and at each size the harness notes its RSS and how
// fast it was projecting.
func (h *Harness) runGrow(ctx context.Context) (*ScenarioResult, error) {
	cps := growCheckpoints(h.cfg.HugeNodes)
	rows := make([]*growRow, len(cps))
	for i, c := range cps {
		rows[i] = &growRow{nodes: c}
	}
	fmt.Fprintf(h.cfg.Progress, "grow: building snapshots in-process at %v nodes\n", cps)
	// The in-process projection's memory goes before the projector's is
	// measured: growInProcess keeps none of it.
	if err := h.growInProcess(rows); err != nil {
		return nil, err
	}

	s, err := h.newStage(ctx, "grow")
	if err != nil {
		return nil, err
	}
	defer s.close()
	var mu sync.Mutex
	s.reader.setOnWake(func(w *wakeInfo, _ *kgo.Record, at time.Time) {
		if w.RunID != "grow-00000" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rows {
			if !r.projectorSeen && w.Nodes >= r.nodes {
				r.projectorSeen, r.seenAt, r.seq = true, at, w.Seq
				for _, pr := range s.procs {
					if ps, err := sampleProc(pr.pid()); err == nil {
						r.rss = ps.rss
					}
				}
			}
		}
	})
	if err := s.startProjectors(ctx, 1, true); err != nil {
		return nil, err
	}
	s.resetMeasures()
	mix := workload.NewMix(workload.MixSpec{Prefix: "grow", Runs: 1, Nodes: h.cfg.HugeNodes, Total: 1, Seed: 42, HugeShare: -1})
	s.startSampler()
	n, rate, err := s.closedLoopDrain(ctx, mix)
	if err != nil {
		return nil, err
	}
	st := s.sampler.close()
	r := s.result("grow", fmt.Sprintf("one run growing to %s nodes (%s events) sent as fast as the broker takes them to 1 projector instance; snapshot builds timed in-process on the same run",
		num(float64(h.cfg.HugeNodes)), num(float64(n))), "closed-loop", 1, st)
	r.AggregatedConsumeRate = rate
	mu.Lock()
	defer mu.Unlock()
	growReport(r, rows, s.sampler.began)
	rssTarget(r)
	return r, nil
}

// growRow is one of grow's sizes: what the in-process projection and the
// projector instance showed there.
type growRow struct {
	nodes, inRun          int
	events                int
	indexed, naive        time.Duration
	bytes                 int
	rss                   int64
	seenAt                time.Time
	seq                   int64
	projRate              float64
	projectorSeen, costOK bool
}

// growInProcess projects grow's run with pkg/projection in this process
// and, at each row's size, times a snapshot built by canopy's indexes and
// by the naive strategy.
func (h *Harness) growInProcess(rows []*growRow) error {
	p, err := projection.New(projection.Config{})
	if err != nil {
		return err
	}
	tree := workload.NewTree(workload.TreeSpec{RunID: "grow-00000", SessionID: "bench", Nodes: h.cfg.HugeNodes, Seed: 42})
	at := time.Now().Add(time.Hour)
	next := 0
	var run *projection.Run
	for ev, ok := tree.Next(at); ; ev, ok = tree.Next(at) {
		if ok {
			p.Apply(&ev)
			at = at.Add(time.Millisecond)
			if run == nil {
				run, _ = p.Run(tree.RunID())
			}
		}
		for next < len(rows) && (run.Len() >= rows[next].nodes || !ok) {
			r := rows[next]
			r.inRun, r.events = run.Len(), tree.Emitted()
			r.indexed, r.naive, r.bytes, err = buildCost(run, at, 21)
			if err != nil {
				return err
			}
			r.costOK = true
			next++
		}
		if !ok || next == len(rows) {
			break
		}
	}
	return p.Err()
}

// growReport adds grow's rows to r as its steps, and its targets: snapshot
// build time and projector RSS at the largest size against the smallest.
// began is when the sends began.
func growReport(r *ScenarioResult, rows []*growRow, began time.Time) {
	var prev *growRow
	for _, x := range rows {
		if x.projectorSeen {
			from, seq0 := began, int64(0)
			if prev != nil && prev.projectorSeen {
				from, seq0 = prev.seenAt, prev.seq
			}
			if d := x.seenAt.Sub(from).Seconds(); d > 0 {
				x.projRate = float64(x.seq-seq0) / d
			}
		}
		r.Steps = append(r.Steps, map[string]any{"nodes": x.nodes, "nodesInRun": x.inRun, "events": x.events,
			"snapshotBuildMs": ms(x.indexed), "naiveBuildMs": ms(x.naive), "naiveToIndexed": float64(x.naive) / float64(x.indexed),
			"snapshotBytes": x.bytes, "projectorRssBytes": x.rss, "projectedRateSincePrevious": x.projRate, "projectorReached": x.projectorSeen})
		prev = x
	}
	first, last := rows[0], rows[len(rows)-1]
	r.Baselines["naiveBuildMsAtMax"] = ms(last.naive)
	r.Targets = append(r.Targets, atMost("grow", fmt.Sprintf("snapshot build time at %s nodes / at %d", num(float64(last.nodes)), first.nodes),
		float64(last.indexed)/float64(first.indexed), 2, "x", fmt.Sprintf("%.2f ms vs %.2f ms; naive: %.1f ms vs %.2f ms",
			ms(last.indexed), ms(first.indexed), ms(last.naive), ms(first.naive))))
	if first.rss > 0 && last.rss > 0 {
		r.Targets = append(r.Targets, atMost("grow", fmt.Sprintf("projector RSS at %s nodes / at %d", num(float64(last.nodes)), first.nodes),
			float64(last.rss)/float64(first.rss), 2, "x", fmt.Sprintf("%d MB vs %d MB", last.rss>>20, first.rss>>20)))
	} else {
		r.Notes = append(r.Notes, "the projector's RSS was not sampled at every size (no wake of the run at that size was read)")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runPriority: human input through the gateway while Backlog events wait on
// the agent lane. The backlog is produced before the projector starts;
// then the projector starts, and for Duration human inputs are sent open
// loop, at HumanRate in half of eight windows (on, off, off, on, off, on,
// on, off: both halves have the same mean time, so that a drain rate that
// changes as the backlog goes cancels out), so that the agent lane's drain
// rate with human input and without it are measured in the same run; the
// windows begin priorityWarmUp after the projector starts draining. The normal lane is not measured here (its events
// wait behind the backlog by design).
func (h *Harness) runPriority(ctx context.Context) (*ScenarioResult, error) {
	idle, err := h.priorityIdle(ctx)
	if err != nil {
		return nil, fmt.Errorf("the idle priority latency: %w", err)
	}
	s, err := h.newStage(ctx, "priority")
	if err != nil {
		return nil, err
	}
	defer s.close()
	mix, runs, metrics, err := h.priorityBacklog(ctx, s)
	if err != nil {
		return nil, err
	}
	// The drain's first seconds run on what the projector fetched while
	// it started, much faster than what follows: the windows begin after
	// them (pacing, not synchronisation).
	select {
	case <-time.After(priorityWarmUp):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.resetMeasures()
	s.startSampler()
	rng := rand.New(rand.NewPCG(9, 9))
	began := time.Now()
	window := h.cfg.Duration / 8
	on := func(t time.Time) bool { return "ABBABAAB"[min(int(t.Sub(began)/window), 7)] == 'A' }
	client := &http.Client{Timeout: 5 * time.Second}
	dm := &drainMeter{url: metrics, topic: s.names.AgentEvents(), client: client, on: on}
	hctx, cancel := context.WithTimeout(ctx, h.cfg.Duration)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); dm.run(hctx, 250*time.Millisecond) }()
	s.humanInputs(hctx, h.cfg.HumanRate, func() string {
		if !on(time.Now()) {
			return ""
		}
		return fmt.Sprintf("backlog-%05d", rng.IntN(mix.Started()))
	})
	cancel()
	wg.Wait()
	s.drain(ctx, 15*time.Second)
	projected := s.reader.stats().projected
	var ss []stageFigures
	if fams, err := scrapeFamilies(ctx, client, metrics); err == nil {
		ss = stages(fams)
	}
	st := s.sampler.close()
	r := s.result("priority", fmt.Sprintf("human input at %s/s through the gateway in four of eight windows of %v (on, off, off, on, off, on, on, off) for %v, while %s agent events wait on the agent lane (%d runs of %d nodes), 1 projector instance",
		num(h.cfg.HumanRate), window, h.cfg.Duration, num(float64(h.cfg.Backlog)), runs, h.cfg.Nodes), "open-loop", 1, st)
	r.Notes = append(r.Notes, stagesNote(ss))
	r.EndToEndLatency["priorityIdle"] = idle
	h.priorityReport(r, dm, projected)
	priorityStagesTarget(r, ss)
	rssTarget(r)
	return r, nil
}

// priorityIdle measures the priority lane's latency without a backlog, the
// floor the broker and the machine set: on a stage of its own, a warm
// projector and the gateway, a few small runs projected, then human input
// into them at HumanRate for a quarter of Duration (at least 5 s).
func (h *Harness) priorityIdle(ctx context.Context) (*Latency, error) {
	s, err := h.newStage(ctx, "priority-idle")
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.startProjectors(ctx, 1, true); err != nil {
		return nil, err
	}
	if err := s.startGateway(ctx); err != nil {
		return nil, err
	}
	if err := s.probe(ctx, s.names.HumanInput()); err != nil {
		return nil, err
	}
	mix := workload.NewMix(workload.MixSpec{Prefix: "idle", Runs: 10, Nodes: 20, Total: 10, HugeShare: -1})
	if _, _, err := s.closedLoopDrain(ctx, mix); err != nil {
		return nil, err
	}
	s.resetMeasures()
	rng := rand.New(rand.NewPCG(11, 11))
	d := max(h.cfg.Duration/4, 5*time.Second)
	fmt.Fprintf(h.cfg.Progress, "priority: the idle priority latency (no backlog), %v of human input\n", d)
	hctx, cancel := context.WithTimeout(ctx, d)
	s.humanInputs(hctx, h.cfg.HumanRate, func() string { return fmt.Sprintf("idle-%05d", rng.IntN(mix.Started())) })
	cancel()
	s.drain(ctx, 15*time.Second)
	if err := s.died(); err != nil {
		return nil, err
	}
	s.tr.mu.Lock()
	defer s.tr.mu.Unlock()
	return latency(s.tr.e2e[lanePriority]), nil
}

// priorityStagesTarget adds the target of the projector's own share of a
// human input's time to r: its stages after the fetch and before the
// produce (queued, applied, built, waited), their p99s summed.
func priorityStagesTarget(r *ScenarioResult, ss []stageFigures) {
	var sum float64
	n := 0
	for _, sf := range ss {
		switch sf.Stage {
		case "queued", "applied", "built", "waited":
			sum += sf.P99Ms
			n++
		}
	}
	if n == 0 {
		return
	}
	r.Targets = append(r.Targets, atMost(r.Scenario, "the projector's own stages of a human input (queued, applied, built, waited), p99s summed",
		sum, 10, " ms", ""))
}

// priorityBacklog produces priority's backlog, then starts the projector
// (with its query endpoint on a free loopback port: its /metrics has the
// priority path's stages and the records consumed) and the gateway. It
// returns the backlog's mix and run count, and the projector's /metrics
// URL.
func (h *Harness) priorityBacklog(ctx context.Context, s *stage) (mix *workload.Mix, runs int, metrics string, err error) {
	s.args = []string{"-http-addr", "127.0.0.1:0"}
	fmt.Fprintf(h.cfg.Progress, "priority: producing a backlog of %s events\n", num(float64(h.cfg.Backlog)))
	runs = runsFor(h.cfg.Backlog, h.cfg.Nodes)
	mix = workload.NewMix(workload.MixSpec{Prefix: "backlog", Runs: runs, Nodes: h.cfg.Nodes, HugeShare: -1})
	if _, err := s.closedLoop(ctx, mix, h.cfg.Backlog); err != nil {
		return nil, 0, "", err
	}
	s.tr.mu.Lock()
	s.tr.pending = map[string]*flight{} // only human input is measured
	s.tr.mu.Unlock()
	if err := s.startProjectors(ctx, 1, false); err != nil {
		return nil, 0, "", err
	}
	if err := s.waitAssigned(ctx, 1); err != nil {
		return nil, 0, "", err
	}
	if err := s.startGateway(ctx); err != nil {
		return nil, 0, "", err
	}
	if err := s.probe(ctx, s.names.HumanInput()); err != nil {
		return nil, 0, "", err
	}
	addr, err := s.procs[0].httpAddr()
	if err != nil {
		return nil, 0, "", err
	}
	return mix, runs, "http://" + addr + "/metrics", nil
}

// priorityReport adds to r the agent lane's drain rates with human input
// and without, the backlog left, and priority's targets. projected is the
// events projected by the end.
func (h *Harness) priorityReport(r *ScenarioResult, dm *drainMeter, projected int64) {
	off, withHuman, derr := dm.rates()
	if derr != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("some scrapes of the projector's /metrics failed: %v", derr))
	}
	r.Baselines["drainWithoutHumanInput"], r.Baselines["drainWithHumanInput"] = off, withHuman
	r.Events = int64(h.cfg.Backlog)
	remaining := int64(h.cfg.Backlog) - projected
	r.Baselines["backlogAtEnd"] = float64(remaining)
	r.Notes = append(r.Notes, fmt.Sprintf("agent-lane backlog at the end: about %s of %s events not yet projected (from the wakes' as_of_event_seq: exact up to the last commit of each partition, at most -max-batch records)",
		num(float64(remaining)), num(float64(h.cfg.Backlog))))
	note := ""
	if remaining <= 0 {
		note = "the backlog was drained before the end: the figure is not under backlog"
	}
	p, idle := r.EndToEndLatency["priority"], r.EndToEndLatency["priorityIdle"]
	if h.apache != nil && idle != nil && idle.Count > 0 {
		// On Apache Kafka the broker's own round trips set a floor of
		// their own: the target is the same run's idle figure.
		r.Baselines["priorityIdleP99Ms"] = idle.P99
		r.Targets = append(r.Targets, atMost("priority", fmt.Sprintf("priority lane end-to-end p99 with a %s-event agent backlog / without one", num(float64(h.cfg.Backlog))),
			p.P99/idle.P99, 2, "x", fmt.Sprintf("%s vs %s ms; %s", num(p.P99), num(idle.P99), note)))
	} else {
		if idle != nil {
			r.Baselines["priorityIdleP99Ms"] = idle.P99
		}
		r.Targets = append(r.Targets, atMost("priority", fmt.Sprintf("priority lane end-to-end p99 with a %s-event agent backlog", num(float64(h.cfg.Backlog))),
			p.P99, 50, " ms", note))
		r.Targets = append(r.Targets, atMost("priority", fmt.Sprintf("priority lane end-to-end p99.9 with a %s-event agent backlog", num(float64(h.cfg.Backlog))),
			p.P999, 100, " ms", fmt.Sprintf("%d human inputs; %s", p.Count, note)))
	}
	if off > 0 {
		r.Targets = append(r.Targets, atLeast("priority", "agent drain rate with human input / without (interleaved windows of the same run)",
			withHuman/off, 0.9, "x", fmt.Sprintf("%s vs %s agent records/s", num(withHuman), num(off))))
	}
}

// priorityWarmUp is how long priority's projector drains its backlog before
// the measured windows begin.
const priorityWarmUp = 5 * time.Second

// runScale: the maximum throughput (as max) with each of Instances
// projector instances, each on a stage of its own, and the raw consume
// baseline beside each.
func (h *Harness) runScale(ctx context.Context) (*ScenarioResult, error) {
	var out *ScenarioResult
	rates, cpuPerEvent := map[int]float64{}, map[int]float64{}
	var busiest samplerStats
	for _, n := range h.cfg.Instances {
		s, err := h.newStage(ctx, fmt.Sprintf("scale%d", n))
		if err != nil {
			return nil, err
		}
		res, st, err := func() (*ScenarioResult, samplerStats, error) {
			defer s.close()
			if err := s.startProjectors(ctx, n, true); err != nil {
				return nil, samplerStats{}, err
			}
			s.resetMeasures()
			mix := workload.NewMix(workload.MixSpec{Prefix: fmt.Sprintf("scale%d", n), Runs: h.cfg.Runs, Nodes: h.cfg.Nodes,
				Total: runsFor(h.cfg.MaxEvents, h.cfg.Nodes), HugeShare: -1})
			s.startSampler()
			_, rate, err := s.closedLoopDrain(ctx, mix)
			if err != nil {
				return nil, samplerStats{}, err
			}
			st := s.sampler.close()
			raw, err := s.rawConsume(ctx)
			if err != nil {
				return nil, samplerStats{}, err
			}
			r := s.result("scale", "", "closed-loop", n, st)
			r.AggregatedConsumeRate = rate
			r.Baselines["rawConsumeRate"] = raw
			return r, st, nil
		}()
		if err != nil {
			return nil, err
		}
		rates[n] = res.AggregatedConsumeRate
		// CPU per event: the form of "scales linearly" that a machine
		// with fewer cores than instances can show.
		if res.Events > 0 {
			cpuPerEvent[n] = res.ProjectorCPU * res.DurationSeconds / float64(res.Events)
		}
		if out == nil {
			out = res
		}
		if st.machineBusy > busiest.machineBusy {
			busiest = st
		}
		out.Steps = append(out.Steps, map[string]any{"instances": n, "consumeRate": res.AggregatedConsumeRate,
			"rawConsumeRate": res.Baselines["rawConsumeRate"], "projectorToRaw": res.AggregatedConsumeRate / res.Baselines["rawConsumeRate"],
			"toOneInstance": res.AggregatedConsumeRate / rates[h.cfg.Instances[0]], "projectorCpuCores": res.ProjectorCPU,
			"harnessCpuCores": res.HarnessCPU, "machineBusy": res.MachineBusy, "projectorRssBytes": res.ProjectorRSSBytes,
			"projectorCpuMicrosPerEvent": 1e6 * cpuPerEvent[n]})
		for _, note := range res.Notes {
			if !slices.Contains(out.Notes, note) && !strings.HasPrefix(note, "the machine was") {
				out.Notes = append(out.Notes, fmt.Sprintf("%d instances: %s", n, note))
			}
		}
	}
	out.Description = fmt.Sprintf("maximum throughput with %v projector instances, each count on topics of its own as in max (%s events, closed loop); the summary row is the first count, the steps have each",
		h.cfg.Instances, num(float64(h.cfg.MaxEvents)))
	out.Notes = slices.DeleteFunc(out.Notes, func(n string) bool { return strings.HasPrefix(n, "the machine was") })
	lo, hi := slices.Min(h.cfg.Instances), slices.Max(h.cfg.Instances)
	if lo != hi && rates[lo] > 0 {
		note := ""
		if busiest.machineBusy >= 0.9 {
			note = fmt.Sprintf("the broker is in the harness process and everything shares %d cores, which were %.0f%% busy: the machine, not canopy, is the bottleneck here",
				h.cfg.cores(), 100*busiest.machineBusy)
		}
		out.Targets = append(out.Targets, atLeast("scale", fmt.Sprintf("throughput with %d instances / with %d", hi, lo),
			rates[hi]/rates[lo], 2*float64(hi)/(3*float64(lo)), "x", note))
		if cpuPerEvent[lo] > 0 {
			out.Targets = append(out.Targets, atMost("scale", fmt.Sprintf("projector CPU per event with %d instances / with %d", hi, lo),
				cpuPerEvent[hi]/cpuPerEvent[lo], 1.15, "x", fmt.Sprintf("%.1f µs vs %.1f µs of CPU per event", 1e6*cpuPerEvent[hi], 1e6*cpuPerEvent[lo])))
		}
	}
	return out, nil
}

// runFailover: FailoverInstances instances under open-loop load; after a
// warm-up one is SIGKILLed, and for each partition it owned the harness
// measures the time from the kill until the wake of a probe sent after the
// kill is read (a probe goes to every partition every 50 ms, so a quiet
// partition's resumption is seen too). The baseline is the group session timeout, which alone
// decides when the group notices the dead member.
func (h *Harness) runFailover(ctx context.Context) (*ScenarioResult, error) {
	// The load is light (a tenth of the maximum, or of steady's rate): the
	// scenario measures the failover, not a queue of overload.
	rate := 1000.0
	switch {
	case h.cfg.Rate > 0:
		rate = h.cfg.Rate / 5
	case h.maxRate > 0:
		rate = h.maxRate / 10
	}
	s, err := h.newStage(ctx, "failover")
	if err != nil {
		return nil, err
	}
	defer s.close()
	fw := &failoverWatch{partitions: s.partitions, victim: map[int32]bool{}, resumed: map[int32]time.Duration{}}
	s.reader.setOnWake(fw.onWake)
	if err := s.startProjectors(ctx, h.cfg.FailoverInstances, true); err != nil {
		return nil, err
	}
	s.resetMeasures()
	s.latency = true
	mix := workload.NewMix(workload.MixSpec{Prefix: "failover", Runs: h.cfg.Runs, Nodes: h.cfg.Nodes, HugeShare: -1})
	s.startSampler()
	warm, after := h.cfg.FailoverWarmup, h.cfg.SessionTimeout+h.cfg.FailoverWarmup
	errc := make(chan error, 1)
	go func() { errc <- s.openLoop(ctx, mix, rate, warm+after) }()
	// Probes: every 50 ms, a waking event to each partition, so that each
	// one's resumption is seen even when its runs are quiet.
	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	go s.heartbeatProbes(pctx, 50*time.Millisecond)
	timer := time.NewTimer(warm)
	select {
	case <-timer.C:
	case err := <-errc:
		timer.Stop()
		if err == nil {
			err = fmt.Errorf("the load ended before the kill")
		}
		return nil, err
	}
	if err := h.killFirst(ctx, s, fw); err != nil {
		<-errc
		return nil, err
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	s.drain(ctx, 15*time.Second)
	st := s.sampler.close()
	r := s.result("failover", fmt.Sprintf("%d projector instances under %s events/s (open loop); after %v one is SIGKILLed: the time until wakes flow again for each partition it owned",
		h.cfg.FailoverInstances, num(rate), warm), "open-loop", h.cfg.FailoverInstances, st)
	r.TargetRate = rate
	fw.report(r, h.cfg.SessionTimeout)
	return r, nil
}

// failoverWatch is what failover learns from the wakes it reads: when each
// partition of the killed instance (a victim) resumed after the kill.
type failoverWatch struct {
	partitions int32

	mu       sync.Mutex
	killedAt time.Time
	victim   map[int32]bool
	resumed  map[int32]time.Duration // since killedAt
}

// onWake notes a victim partition's resumption: the first wake read of a
// heartbeat probe sent after the kill.
func (fw *failoverWatch) onWake(w *wakeInfo, _ *kgo.Record, at time.Time) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.killedAt.IsZero() {
		return
	}
	p := topics.Partition([]byte(w.RunID), fw.partitions)
	if !fw.victim[p] {
		return
	}
	if _, ok := fw.resumed[p]; ok {
		return
	}
	for _, t := range w.Triggers {
		if t.EventID != nil && strings.HasPrefix(*t.EventID, "heartbeat-probe-") && t.At.Std().After(fw.killedAt) {
			fw.resumed[p] = at.Sub(fw.killedAt)
			return
		}
	}
}

// killFirst notes the partitions of the stage's first instance as victims
// and SIGKILLs it.
func (h *Harness) killFirst(ctx context.Context, s *stage, fw *failoverWatch) error {
	a, err := cluster.Assignment(ctx, h.adm, s.group, s.names)
	if err != nil {
		return err
	}
	fw.mu.Lock()
	for p, m := range a {
		if m.Addr == "i0:1" {
			fw.victim[p] = true
		}
	}
	fw.killedAt = time.Now()
	fw.mu.Unlock()
	fmt.Fprintf(h.cfg.Progress, "failover: SIGKILL %s, which owned partitions %v\n", s.procs[0].name, keys(fw.victim))
	s.procs[0].kill()
	return nil
}

// report adds each victim partition's failover time to r as its steps, and
// failover's target against the session timeout.
func (fw *failoverWatch) report(r *ScenarioResult, sessionTimeout time.Duration) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	var worst time.Duration
	for _, p := range keys(fw.victim) {
		d, ok := fw.resumed[p]
		step := map[string]any{"partition": p, "resumed": ok}
		if ok {
			step["failoverSeconds"] = d.Seconds()
			worst = max(worst, d)
		}
		r.Steps = append(r.Steps, step)
	}
	if len(fw.resumed) < len(fw.victim) {
		r.Notes = append(r.Notes, fmt.Sprintf("only %d of the %d partitions of the killed instance resumed within the scenario", len(fw.resumed), len(fw.victim)))
	}
	r.Baselines["sessionTimeoutSeconds"] = sessionTimeout.Seconds()
	r.Baselines["failoverSeconds"] = worst.Seconds()
	r.Baselines["failoverToSessionTimeout"] = worst.Seconds() / sessionTimeout.Seconds()
	// The liveness target is a p90 over kills; one kill's worst moved
	// partition is at least its p90. A partition that never resumed misses.
	measured := worst.Seconds()
	if len(fw.resumed) < len(fw.victim) {
		measured = math.Inf(1)
	}
	r.Targets = append(r.Targets, atMost("failover", "SIGKILL to wakes flowing again, worst moved partition", measured, 5, " s",
		fmt.Sprintf("session timeout %v", sessionTimeout)))
}

func keys(m map[int32]bool) []int32 {
	var out []int32
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
