package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// soak: bounded memory and state. Runs that finish are sent open
// loop, SoakEvents of them at SoakRate, to one projector instance with a
// short -retention (SoakRetention), so that runs finish, expire and are
// deleted all along. Every SoakSampleEvery the harness notes the
// projector's RSS (/proc), Go heap, hot-run bytes and Pebble bytes (its
// /metrics), the changelog topic's bytes (DescribeLogDirs) and the live
// runs (started less expired). After the sends it goes on sampling until
// every finished run has expired (a drain, SoakTimers + retention and
// some), and reports the series, with targets: no growth beyond noise of
// RSS, Pebble and changelog in the last third of the sends, and the RSS
// within the memory limit throughout.
//
// The embedded broker's own cleaner runs once an hour (kfake's default
// log.cleaner.backoff.ms), so soak compacts it every SoakCompactEvery, as a
// broker's cleaner would (Kafka's default backoff is 15 s). Consumed input
// and wakes are deleted from the broker as the scenario goes (DeleteRecords
// up to what the projector has provably applied, and up to what the
// harness's reader has read), so that the embedded broker's memory, which
// holds every record, does not bound the scenario; the changelog is never
// touched; its tombstones are kept for soakTombstones of the retention
// (delete.retention.ms).

// soak's default rate: soakShare of the maximum measured by max, at most
// soakMaxRate. The cap, because what bounds soak is memory rather than CPU:
// the runs that have finished but not yet expired number about rate / 221
// (the events of a run) × (SoakTimers + SoakRetention), some 1,700
// runs at 10,000 events/s with the defaults, about 70 KB each in the
// projector's memory (its hot-run estimate); measured on a machine whose
// max was 32,800 events/s, 19,680 events/s (60%) with a 30 s retention
// filled the hot-run budget (192 MiB of the default 512 MiB limit), the
// heap went past GOMEMLIMIT, the projector fell behind, and a partition
// behind fires no timer, so runs stopped expiring.
const (
	soakShare   = 0.6
	soakMaxRate = 10_000
)

// soakSessionTimeout is the least session timeout of soak's projector: the
// embedded broker answers nothing while it compacts, for seconds that grow
// with the changelog (3.7 s at most in the first full run, over the
// harness's 3 s default: its partitions were reassigned 10 times).
// soak measures no failover, so a longer session costs it nothing.
const soakSessionTimeout = 30 * time.Second

// soakSegmentBytes is the segment size of soak's input and wake topics:
// the broker frees a deleted record's memory only with its whole segment,
// 100 MiB by default in kfake.
const soakSegmentBytes = 8 << 20

// soakTombstones is how long soak's changelog keeps the tombstones of
// deleted keys (its delete.retention.ms) for a -retention: three times it,
// and at least 10 s. canopy's default, a day, is longer than a soak of
// minutes, in which the changelog would only grow; a window on the runs'
// own time scale lets the scenario see it level off at the live runs'
// state plus the window's tombstones. Its projector trusts a checkpoint for
// half of it. At least 10 s so that the last expiries' tombstones are still
// there for the census at the end of a tiny soak (TestRun's).
func soakTombstones(retention time.Duration) time.Duration {
	return max(3*retention, 10*time.Second)
}

// soakGrowthLimit is how much a measure may grow over the last third of the
// sends, its largest sample over the first, and still count as flat: the
// noise of sizes that move with flushes, compactions and GC.
const soakGrowthLimit = 1.10

// soakSample is one of soak's samples.
type soakSample struct {
	at    time.Duration // since the sends began
	drain bool          // after the sends
	sent, projected,
	started, ended, expired int64
	rss, heap, hot, hotLimit, memLimit, pebble, changelog int64
	changelogOK                                           bool
	lag                                                   int64 // consumer lag, records, all partitions
	harnessRSS                                            int64 // this process: the embedded broker, the load, the reader
	// goRuntime is the memory the projector's Go runtime holds from the
	// OS (go_memstats_sys_bytes less heap released): what GOMEMLIMIT
	// bounds. RSS beyond it is memory allocated outside Go (cgo: Pebble's
	// memtables and block cache) and the binary's pages.
	goRuntime int64
}

func (x soakSample) live() int64 { return x.started - x.expired }

func (x soakSample) row() map[string]any {
	phase := "load"
	if x.drain {
		phase = "drain"
	}
	m := map[string]any{"seconds": math.Round(x.at.Seconds()*10) / 10, "phase": phase, "eventsSent": x.sent,
		"eventsProjected": x.projected, "runsStarted": x.started, "runsEnded": x.ended, "runsExpired": x.expired,
		"liveRuns": x.live(), "rssBytes": x.rss, "heapInuseBytes": x.heap, "hotRunsBytes": x.hot, "pebbleBytes": x.pebble,
		"consumerLag": x.lag, "harnessRssBytes": x.harnessRSS, "goRuntimeBytes": x.goRuntime}
	if x.changelogOK {
		m["changelogBytes"] = x.changelog
	}
	return m
}

// soakState is what soak's sampler, its sends and its reader share.
type soakState struct {
	s       *stage
	mix     *workload.Mix
	metrics string // the projector's /metrics URL
	client  *http.Client

	mu sync.Mutex
	// Applied input: a run's marker is the last event of its traffic, so
	// once its wake is read, its partition is projected up to its offset.
	markerAt   map[string]markerRec // acknowledged markers whose wake is not read yet
	markerRead map[string]bool      // markers whose wake was read before their ack
	applied    map[int32]int64      // per partition: input below this offset is projected
	read       map[topicPart]int64  // per wake partition: the next offset the reader will read
	compacts   []time.Duration
	samples    []soakSample
	scrapeErr  error
	logDirErr  error
}

type markerRec struct {
	partition int32
	offset    int64
}

type topicPart struct {
	topic     string
	partition int32
}

// marker notes a marker's ack (rec non-nil) or its wake's read; once both
// are in, its partition's input up to it is projected.
func (st *soakState) marker(run string, rec *kgo.Record) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case rec != nil && st.markerRead[run]:
		delete(st.markerRead, run)
		st.applied[rec.Partition] = max(st.applied[rec.Partition], rec.Offset+1)
	case rec != nil:
		st.markerAt[run] = markerRec{rec.Partition, rec.Offset}
	default:
		if m, ok := st.markerAt[run]; ok {
			delete(st.markerAt, run)
			st.applied[m.partition] = max(st.applied[m.partition], m.offset+1)
		} else {
			st.markerRead[run] = true
		}
	}
}

func (h *Harness) runSoak(ctx context.Context) (*ScenarioResult, error) {
	c := h.cfg
	rate, why, err := h.soakRate()
	if err != nil {
		return nil, err
	}
	tombstones := soakTombstones(c.SoakRetention)
	st, err := h.soakStage(ctx, tombstones)
	if err != nil {
		return nil, err
	}
	defer st.s.close()
	defer st.client.CloseIdleConnections()
	d := time.Duration(float64(c.SoakEvents)/rate*float64(time.Second)) + time.Millisecond
	fmt.Fprintf(c.Progress, "soak: %s events at %s events/s (%v), runs of %d nodes that finish, -retention %v, changelog tombstones kept %v; a sample every %v\n",
		num(float64(c.SoakEvents)), num(rate), d.Round(time.Second), c.SoakNodes, c.SoakRetention, tombstones, c.SoakSampleEvery)
	loadEnd, projectedInLoad, err := st.sendAndDrain(ctx, rate, d, c.SoakTimers+c.SoakRetention+30*time.Second)
	if err != nil {
		return nil, err
	}
	stats := st.s.sampler.close()
	// What the changelog holds at the end, after a last compaction: live
	// state, and tombstones of deleted keys.
	if h.cluster != nil && c.SoakCompactEvery >= 0 {
		h.cluster.Compact()
	}
	var end soakEnd
	end.bytes, end.bytesOK, _ = st.changelogBytes(ctx)
	end.census, end.censusErr = st.census(ctx)
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.samples) == 0 {
		return nil, errors.New("soak: no sample taken")
	}
	r := st.s.result("soak", fmt.Sprintf("bounded state: %s events/s (%s) open loop from %d runs under way, each of %d nodes and finishing "+
		"(every lease released, the root completed), to 1 projector instance with -retention %v, its changelog keeping tombstones %v (delete.retention.ms; canopy's default: a day); "+
		"sampled every %v during the sends (load) and after them until every ended run expired (drain)",
		num(rate), why, c.Runs, c.SoakNodes, c.SoakRetention, tombstones, c.SoakSampleEvery), "open-loop", 1, stats)
	r.TargetRate = rate
	r.DurationSeconds = loadEnd.Seconds()
	r.AggregatedPublishRate = float64(st.s.acked.Load()) / loadEnd.Seconds()
	r.AggregatedConsumeRate = float64(projectedInLoad) / loadEnd.Seconds()
	r.Baselines["maxRate"] = h.maxRate
	h.soakReport(r, st, end, tombstones)
	r.Targets = append(r.Targets, soakTargets(st.samples, loadEnd, stats.projectorRSS, st.samples[len(st.samples)-1].memLimit)...)
	return r, nil
}

// soakRate is soak's rate, and why that one: the one given, or soakShare
// of max's, at most soakMaxRate.
func (h *Harness) soakRate() (rate float64, why string, err error) {
	rate, why = h.cfg.SoakRate, "the rate given"
	if rate == 0 {
		rate, why = soakShare*h.maxRate, fmt.Sprintf("%.0f%% of the maximum measured by max in this run", 100*soakShare)
		if rate > soakMaxRate {
			rate, why = soakMaxRate, fmt.Sprintf("the default cap, below %.0f%% of the maximum measured by max in this run (%s events/s)", 100*soakShare, num(h.maxRate))
		}
	}
	if rate <= 0 {
		return 0, "", errors.New("no rate: give -soak-rate, or let max run first")
	}
	return rate, why, nil
}

// soakStage starts soak's stage: small segments for its input and wakes,
// its changelog keeping tombstones for tombstones, one projector with
// soak's retention and session, and the acks and wakes of the runs'
// markers noted in the state it returns. On an error it closes what it
// started.
func (h *Harness) soakStage(ctx context.Context, tombstones time.Duration) (st *soakState, err error) {
	c := h.cfg
	s, err := h.newStage(ctx, "soak", topics.TombstoneRetention(tombstones))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	seg := strconv.Itoa(soakSegmentBytes)
	if _, err := h.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "segment.bytes", Value: &seg}},
		s.names.AgentEvents(), s.names.Wakes(), s.names.PriorityWakes()); err != nil {
		return nil, fmt.Errorf("soak: small segments for its input and wakes: %w", err)
	}
	st = &soakState{s: s, client: &http.Client{Timeout: 5 * time.Second}, markerAt: map[string]markerRec{},
		markerRead: map[string]bool{}, applied: map[int32]int64{}, read: map[topicPart]int64{}}
	s.args = []string{"-retention", c.SoakRetention.String(), "-http-addr", "127.0.0.1:0",
		"-session-timeout", max(c.SessionTimeout, soakSessionTimeout).String()}
	s.onAck = func(run, id string, rec *kgo.Record) {
		if strings.HasPrefix(id, "marker-") {
			st.marker(run, rec)
		}
	}
	s.reader.setOnWake(func(w *wakeInfo, rec *kgo.Record, _ time.Time) {
		st.mu.Lock()
		tp := topicPart{rec.Topic, rec.Partition}
		st.read[tp] = max(st.read[tp], rec.Offset+1)
		st.mu.Unlock()
		for _, t := range w.Triggers {
			if t.EventID != nil && strings.HasPrefix(*t.EventID, "marker-soak-") {
				st.marker(w.RunID, nil)
			}
		}
	})
	if err := s.startProjectors(ctx, 1, true); err != nil {
		return nil, err
	}
	addr, err := s.procs[0].httpAddr()
	if err != nil {
		return nil, err
	}
	st.metrics = "http://" + addr + "/metrics"
	s.resetMeasures()
	st.mix = workload.NewMix(workload.MixSpec{Prefix: "soak", Runs: c.Runs, Nodes: c.SoakNodes, HugeShare: -1, Finish: true, FinishTimers: c.SoakTimers})
	return st, nil
}

// sendAndDrain sends soak's runs open loop at rate for d, sampling and
// compacting all along, then drains for at most drain: every run whose
// traffic ended expires within SoakTimers + retention of its last event,
// once its partition is caught up and a commit has written it. It returns
// how long the sends took and the events projected meanwhile.
func (st *soakState) sendAndDrain(ctx context.Context, rate float64, d, drain time.Duration) (loadEnd time.Duration, projectedInLoad int64, err error) {
	s := st.s
	s.startSampler()
	began := time.Now()
	sctx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Add(2)
	drainFrom := make(chan time.Duration, 1)
	go func() { defer sampling.Done(); st.sample(sctx, began, drainFrom) }()
	go func() { defer sampling.Done(); st.compact(sctx) }()
	err = s.openLoop(ctx, st.mix, rate, d)
	loadEnd = time.Since(began)
	projectedInLoad = s.reader.stats().projected
	drainFrom <- loadEnd
	if err == nil {
		err = st.drain(ctx, drain)
	}
	stopSampling()
	sampling.Wait()
	return loadEnd, projectedInLoad, err
}

// soakEnd is what the changelog holds at soak's end.
type soakEnd struct {
	bytes     int64
	bytesOK   bool
	census    changelogCensus
	censusErr error
}

// soakReport adds to r soak's samples (as its series and steps), its
// baselines and its notes. st.mu is held.
func (h *Harness) soakReport(r *ScenarioResult, st *soakState, end soakEnd, tombstones time.Duration) {
	c := h.cfg
	samples := st.samples
	last := samples[len(samples)-1]
	r.Baselines["retentionSeconds"] = c.SoakRetention.Seconds()
	r.Baselines["changelogTombstoneRetentionSeconds"] = tombstones.Seconds()
	r.Baselines["memoryLimitBytes"] = float64(last.memLimit)
	r.Baselines["hotRunsLimitBytes"] = float64(last.hotLimit)
	r.Baselines["runsStarted"] = float64(last.started)
	r.Baselines["runsEnded"] = float64(last.ended)
	r.Baselines["runsExpired"] = float64(last.expired)
	var atLoadEnd soakSample
	for _, x := range samples {
		r.Series = append(r.Series, x.row())
		if !x.drain {
			atLoadEnd = x
		}
	}
	r.Baselines["runsExpiredBySendsEnd"] = float64(atLoadEnd.expired)
	r.Steps = tenths(samples)
	if end.bytesOK {
		r.Baselines["changelogBytesAtEnd"] = float64(end.bytes)
	}
	soakChangelogNotes(r, end, last, tombstones, c.SoakRetention)
	var top soakSample
	for _, x := range samples {
		if x.rss > top.rss {
			top = x
		}
	}
	if top.goRuntime > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("at its largest sample the projector's RSS was %s MiB, of which its Go runtime held %s MiB (what GOMEMLIMIT bounds; heap in use %s MiB, hot runs %s MiB of a %s MiB budget): the other %s MiB were allocated outside Go (Pebble's memtables and block cache, through cgo) or are the binary's pages",
			mb(top.rss), mb(top.goRuntime), mb(top.heap), mb(top.hot), mb(top.hotLimit), mb(top.rss-top.goRuntime)))
	}
	h.soakCompactionNotes(r, st.compacts, tombstones)
	if st.scrapeErr != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("some scrapes of the projector's /metrics failed (those samples lack its figures): %v", st.scrapeErr))
	}
	if st.logDirErr != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("some DescribeLogDirs of the changelog failed: %v", st.logDirErr))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("runs: %s started, %s ended (their traffic over), %s expired by the end of the sends and %s by the end of the drain; live runs are started less expired (the %d probe runs, which never finish, are not counted)",
		commas(last.started), commas(last.ended), commas(atLoadEnd.expired), commas(last.expired), st.s.partitions))
	if r.Reassignments > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d partition reassignments after the first: the projector's group session expired (with the embedded broker, most likely while it compacted, answering nothing); a revoked partition's runs leave memory, so RSS, heap and hot-run bytes drop after each", r.Reassignments))
	}
	if last.expired < last.ended {
		r.Notes = append(r.Notes, fmt.Sprintf("%s runs whose traffic ended had not expired by the end of the drain", commas(last.ended-last.expired)))
	}
	if r.AggregatedConsumeRate < 0.95*r.AggregatedPublishRate {
		r.Notes = append(r.Notes, fmt.Sprintf("the projector did not keep up with the schedule (%s of %s events/s projected): timers and expiry fire only when a partition is caught up",
			num(r.AggregatedConsumeRate), num(r.AggregatedPublishRate)))
	}
}

// soakChangelogNotes adds the changelog's census at soak's end to r.
func soakChangelogNotes(r *ScenarioResult, end soakEnd, last soakSample, tombstones, retention time.Duration) {
	if end.censusErr != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("the changelog's census at the end failed: %v", end.censusErr))
		return
	}
	cen := end.census
	r.Baselines["changelogRecordsAtEnd"] = float64(cen.values)
	r.Baselines["changelogValueBytesAtEnd"] = float64(cen.valueBytes)
	r.Baselines["changelogTombstonesAtEnd"] = float64(cen.tombstones)
	r.Baselines["changelogTombstoneBytesAtEnd"] = float64(cen.tombstoneBytes)
	perRun := 0.0
	if last.expired > 0 {
		perRun = float64(cen.tombstones) / float64(last.expired)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("the changelog at the end, after a last compaction (%s MiB as the broker counts it): %s records with a value (%s MiB of keys and values: the state of the runs still under way, expiry markers, offsets) and %s tombstones (%s MiB of keys; %.1f per expired run), the keys deleted in the last %v (the topic's delete.retention.ms, %s the retention), which compaction keeps that long",
		mb(end.bytes), commas(cen.values), mb(cen.valueBytes), commas(cen.tombstones), mb(cen.tombstoneBytes), perRun, tombstones, times(tombstones, retention)))
}

// soakCompactionNotes adds to r how the changelog was compacted: by the
// harness (the embedded broker), or by the broker's own cleaner.
func (h *Harness) soakCompactionNotes(r *ScenarioResult, compacts []time.Duration, tombstones time.Duration) {
	if n := len(compacts); n > 0 {
		cs := slices.Clone(compacts)
		slices.Sort(cs)
		r.Baselines["compactions"] = float64(n)
		r.Baselines["compactionMsMedian"] = ms(cs[n/2])
		r.Baselines["compactionMsMax"] = ms(cs[n-1])
		r.Notes = append(r.Notes, fmt.Sprintf("the embedded broker was compacted %d times (every %v; kfake's own cleaner runs hourly), %.0f ms each at the median, %.0f ms at most, during which the broker answered nothing; kfake compacts every batch but the last, whatever min.compaction.lag.ms says, and drops a tombstone once the topic's delete.retention.ms (here %v) has passed since its record's timestamp",
			n, h.cfg.SoakCompactEvery, ms(cs[n/2]), ms(cs[n-1]), tombstones))
	} else if h.cluster == nil {
		r.Notes = append(r.Notes, fmt.Sprintf("the broker is not the embedded one: its own cleaner compacts the changelog, on its own schedule: closed segments only (this changelog's segment.ms: %v), and a tombstone goes in a cleaning once its delete.retention.ms (%v) has passed since the cleaning that first kept it",
			topics.ChangelogSegment(tombstones), tombstones))
	}
}

// tenths returns the samples at about every tenth of the sends, and the
// last of the drain, as rows.
func tenths(samples []soakSample) []map[string]any {
	var load []soakSample
	for _, x := range samples {
		if !x.drain {
			load = append(load, x)
		}
	}
	var rows []map[string]any
	picked := -1
	for i := 0; i <= 10 && len(load) > 0; i++ {
		k := int(math.Round(float64(i) * float64(len(load)-1) / 10))
		if k != picked {
			rows, picked = append(rows, load[k].row()), k
		}
	}
	if x := samples[len(samples)-1]; x.drain {
		rows = append(rows, x.row())
	}
	return rows
}

// soakTargets are soak's verdicts: over the last third of the sends, the
// largest sample of RSS, Pebble bytes and changelog bytes against the first
// sample of that third, and their trend (the least-squares line through
// that third's samples, its end against its start); and the largest RSS
// against the memory limit. Both growth figures are kept: the first is
// strict but also measures noise (a changelog compacted every 15 s is a
// sawtooth, and the third's first sample may fall at its foot); the trend
// says whether the size is going anywhere.
func soakTargets(samples []soakSample, loadEnd time.Duration, rssMax, limit int64) []Target {
	var third []soakSample
	for _, x := range samples {
		if !x.drain && x.at >= loadEnd*2/3 {
			third = append(third, x)
		}
	}
	var ts []Target
	growth := func(name string, get func(soakSample) (int64, bool)) {
		var first, most int64
		n := 0
		for _, x := range third {
			v, ok := get(x)
			if !ok {
				continue
			}
			if n == 0 {
				first = v
			}
			most = max(most, v)
			n++
		}
		if n < 2 || first <= 0 {
			ts = append(ts, unmeasured("soak", name+", last third of the sends: largest sample / first", soakGrowthLimit, "x",
				fmt.Sprintf("%d samples of it in the last third", n)))
			return
		}
		ts = append(ts, atMost("soak", name+", last third of the sends: largest sample / first", float64(most)/float64(first), soakGrowthLimit, "x",
			fmt.Sprintf("%s MiB at most vs %s MiB at %.0f s; %d samples", mb(most), mb(first), third[0].at.Seconds(), n)))
		start, end := trend(third, get)
		if start <= 0 {
			ts = append(ts, unmeasured("soak", name+", last third of the sends: trend, fitted end / fitted start", soakGrowthLimit, "x",
				fmt.Sprintf("the fitted line starts at %s MiB: no ratio", mb(int64(start)))))
			return
		}
		ts = append(ts, atMost("soak", name+", last third of the sends: trend, fitted end / fitted start", end/start, soakGrowthLimit, "x",
			fmt.Sprintf("the least-squares line through its %d samples runs from %s MiB to %s MiB", n, mb(int64(start)), mb(int64(end)))))
	}
	growth("projector RSS", func(x soakSample) (int64, bool) { return x.rss, x.rss > 0 })
	growth("Pebble bytes", func(x soakSample) (int64, bool) { return x.pebble, x.pebble > 0 })
	growth("changelog bytes", func(x soakSample) (int64, bool) { return x.changelog, x.changelogOK })
	for _, x := range samples {
		rssMax = max(rssMax, x.rss)
	}
	if limit > 0 {
		ts = append(ts, atMost("soak", "projector RSS, largest sample (every second, sends and drain) vs the memory limit",
			float64(rssMax)/(1<<20), float64(limit)/(1<<20), " MiB", "-memory-limit, as the projector's canopy_projector_memory_limit_bytes says"))
	}
	return ts
}

// trend fits a least-squares line through the samples get measures and
// returns its values at the first and the last of them.
func trend(xs []soakSample, get func(soakSample) (int64, bool)) (start, end float64) {
	var ts, vs []float64
	for _, x := range xs {
		if v, ok := get(x); ok {
			ts, vs = append(ts, x.at.Seconds()), append(vs, float64(v))
		}
	}
	n := float64(len(ts))
	var mt, mv float64
	for i := range ts {
		mt, mv = mt+ts[i]/n, mv+vs[i]/n
	}
	var num, den float64
	for i := range ts {
		num += (ts[i] - mt) * (vs[i] - mv)
		den += (ts[i] - mt) * (ts[i] - mt)
	}
	slope := 0.0
	if den > 0 {
		slope = num / den
	}
	return mv + slope*(ts[0]-mt), mv + slope*(ts[len(ts)-1]-mt)
}

// mb is b in MiB, for reading.
func mb(b int64) string { return num(float64(b) / (1 << 20)) }

// times says how many times b a is, e.g. "3x".
func times(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'g', 3, 64) + "x"
}

// sample takes a sample every SoakSampleEvery until ctx ends, and on the
// way deletes consumed input and read wakes from the broker. drainFrom
// receives the time the sends ended.
func (st *soakState) sample(ctx context.Context, began time.Time, drainFrom <-chan time.Duration) {
	tick := time.NewTicker(st.s.h.cfg.SoakSampleEvery)
	defer tick.Stop()
	var loadEnd time.Duration
	for {
		x := st.take(ctx, began)
		if ctx.Err() != nil {
			// Sampling was stopped while this one was taken: its scrapes
			// may have been cut short, leaving zeros that would read as
			// the end's figures.
			return
		}
		x.drain = loadEnd > 0
		st.mu.Lock()
		st.samples = append(st.samples, x)
		st.mu.Unlock()
		phase := "load"
		if x.drain {
			phase = "drain"
		}
		fmt.Fprintf(st.s.h.cfg.Progress, "soak %-5s %5.0fs  sent %9d  projected %9d  lag %7d  runs %6d started %6d expired %5d live  rss %4s MiB  heap %4s MiB  hot %4s MiB  pebble %5s MiB  changelog %6s MiB  harness rss %5s MiB\n",
			phase, x.at.Seconds(), x.sent, x.projected, x.lag, x.started, x.expired, x.live(), mb(x.rss), mb(x.heap), mb(x.hot), mb(x.pebble), mb(x.changelog), mb(x.harnessRSS))
		st.trim(ctx)
		select {
		case <-ctx.Done():
			return
		case loadEnd = <-drainFrom:
		case <-tick.C:
		}
	}
}

// take samples the projector and the broker now.
func (st *soakState) take(ctx context.Context, began time.Time) soakSample {
	s := st.s
	x := soakSample{at: time.Since(began), sent: s.acked.Load(), projected: s.reader.stats().projected,
		started: int64(st.mix.Started()), ended: int64(st.mix.Ended())}
	if ps, err := sampleProc(s.procs[0].pid()); err == nil {
		x.rss = ps.rss
	}
	if ps, err := sampleProc(os.Getpid()); err == nil {
		x.harnessRSS = ps.rss
	}
	m, err := st.scrape(ctx)
	st.mu.Lock()
	if err != nil && st.scrapeErr == nil && ctx.Err() == nil {
		st.scrapeErr = err
	}
	st.mu.Unlock()
	x.heap = int64(m["go_memstats_heap_inuse_bytes"])
	x.hot = int64(m["canopy_projector_hot_runs_bytes"])
	x.hotLimit = int64(m["canopy_projector_hot_runs_limit_bytes"])
	x.memLimit = int64(m["canopy_projector_memory_limit_bytes"])
	x.pebble = int64(m["canopy_pebble_disk_usage_bytes"])
	x.expired = int64(m["canopy_projector_runs_expired_total"])
	x.lag = int64(m["canopy_projector_consumer_lag_records"])
	x.goRuntime = int64(m["go_memstats_sys_bytes"] - m["go_memstats_heap_released_bytes"])
	x.changelog, x.changelogOK, err = st.changelogBytes(ctx)
	if err != nil {
		st.mu.Lock()
		if st.logDirErr == nil && ctx.Err() == nil {
			st.logDirErr = err
		}
		st.mu.Unlock()
	}
	return x
}

// scrape reads the projector's /metrics: each metric's value, summed over
// its label sets.
func (st *soakState) scrape(ctx context.Context) (map[string]float64, error) {
	fams, err := scrapeFamilies(ctx, st.client, st.metrics)
	if err != nil {
		return nil, err
	}
	return sumFamilies(fams), nil
}

// parseMetrics reads Prometheus's text format: every sample's value,
// summed by metric name over its labels.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	fams, err := parseFamilies(r)
	if err != nil {
		return nil, err
	}
	return sumFamilies(fams), nil
}

// sumFamilies sums each counter, gauge or untyped family's values over its
// label sets (histograms and summaries are read by stages).
func sumFamilies(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] += m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[name] += m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

// changelogBytes is the size of the stage's changelog topic, all
// partitions, as the broker reports it (DescribeLogDirs; kfake: the bytes
// of the batches it holds).
func (st *soakState) changelogBytes(ctx context.Context) (int64, bool, error) {
	s := st.s
	topic := s.names.Changelog()
	set := kadm.TopicsSet{}
	for p := range s.partitions {
		set.Add(topic, p)
	}
	dirs, err := s.h.adm.DescribeAllLogDirs(ctx, set)
	if err != nil {
		return 0, false, err
	}
	var total int64
	found := false
	dirs.Each(func(d kadm.DescribedLogDir) {
		for _, p := range d.Topics[topic] {
			total += p.Size
			found = true
		}
	})
	return total, found, nil
}

// trim deletes from the broker the input the projector has provably
// applied (up to the last marker whose wake was read, per partition) and
// the wakes the reader has read.
func (st *soakState) trim(ctx context.Context) {
	s := st.s
	offs := kadm.Offsets{}
	st.mu.Lock()
	for p, o := range st.applied {
		offs.Add(kadm.Offset{Topic: s.names.AgentEvents(), Partition: p, At: o})
	}
	for tp, o := range st.read {
		offs.Add(kadm.Offset{Topic: tp.topic, Partition: tp.partition, At: o})
	}
	st.mu.Unlock()
	if len(offs) > 0 {
		_, _ = s.h.adm.DeleteRecords(ctx, offs) // best effort: only the broker's memory is at stake
	}
}

// changelogCensus counts the changelog's records: with a value (state) and
// without (tombstones), and their bytes (keys and values).
type changelogCensus struct {
	values, valueBytes, tombstones, tombstoneBytes int64
}

// census reads the changelog once from its start to its end. Control
// records are kept (and not counted) so that a partition whose last record
// is a transaction's marker is seen to its end.
func (st *soakState) census(ctx context.Context) (changelogCensus, error) {
	var cen changelogCensus
	s := st.s
	topic := s.names.Changelog()
	ends, err := s.h.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return cen, err
	}
	starts, err := s.h.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return cen, err
	}
	want := map[int32]int64{} // the last offset of each partition not yet read
	ends.Each(func(o kadm.ListedOffset) {
		if so, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > so.Offset {
			want[o.Partition] = o.Offset - 1
		}
	})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(s.h.kafka.Opts(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return cen, err
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return cen, fmt.Errorf("reading the changelog: %d partitions not read to their end: %w", len(want), err)
		}
		if err := fs.Err0(); err != nil {
			return cen, fmt.Errorf("reading the changelog: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if last, ok := want[r.Partition]; ok && r.Offset >= last {
				delete(want, r.Partition)
			}
			switch {
			case r.Attrs.IsControl():
			case r.Value == nil:
				cen.tombstones++
				cen.tombstoneBytes += int64(len(r.Key))
			default:
				cen.values++
				cen.valueBytes += int64(len(r.Key) + len(r.Value))
			}
		})
	}
	return cen, nil
}

// compact has the embedded broker compact every SoakCompactEvery until ctx
// ends, timing each compaction.
func (st *soakState) compact(ctx context.Context) {
	h := st.s.h
	if h.cluster == nil || h.cfg.SoakCompactEvery < 0 {
		return
	}
	tick := time.NewTicker(h.cfg.SoakCompactEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t := time.Now()
		h.cluster.Compact()
		d := time.Since(t)
		st.mu.Lock()
		st.compacts = append(st.compacts, d)
		st.mu.Unlock()
	}
}

// drain waits, up to d, until every run whose traffic ended has expired,
// as the samples show.
func (st *soakState) drain(ctx context.Context, d time.Duration) error {
	fmt.Fprintf(st.s.h.cfg.Progress, "soak: sends done; sampling on until every ended run has expired (at most %v)\n", d)
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		st.mu.Lock()
		var x soakSample
		if n := len(st.samples); n > 0 {
			x = st.samples[n-1]
		}
		st.mu.Unlock()
		if x.drain && x.expired >= x.ended {
			return nil
		}
		if err := st.s.died(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil // reported: the runs not expired are counted
		case <-poll.C:
		}
	}
}

// listening matches the projector's log line naming its HTTP address.
var listening = regexp.MustCompile(`msg="query endpoint listening".* addr=(\S+)`)

// httpAddr is the address the instance's HTTP endpoint listens on, from its
// log (it was started with -http-addr 127.0.0.1:0).
func (p *proc) httpAddr() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.addr != "" {
		return p.addr, nil
	}
	if m := listening.FindStringSubmatch(p.out.String()); m != nil {
		p.addr = strings.Trim(m[1], `"`)
		return p.addr, nil
	}
	return "", fmt.Errorf("%s: no %q line in its log", p.name, "query endpoint listening")
}
