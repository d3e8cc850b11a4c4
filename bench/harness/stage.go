package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// stage is one measurement: its own topics (a fresh prefix) and consumer
// group, projector instances, a producer, the wake reader and, when human
// input is part of it, a gateway. Everything it starts, close stops.
type stage struct {
	h          *Harness
	name       string
	names      topics.Names
	group      string
	partitions int32
	procs      []*proc
	producer   *kgo.Client
	tr         *tracker
	reader     *wakeReader
	gw         *gateway.Gateway
	gwSrv      *http.Server
	gwURL      string
	gwDone     chan struct{}

	// Counters of the senders.
	sent, acked, sendErrs atomic.Int64
	lastAck               atomic.Int64 // unix nanoseconds
	// publishRate is a closed loop's rate: events over the time to the
	// last acknowledgement.
	publishRate float64
	firstErr    atomic.Pointer[error]

	mu           sync.Mutex
	publishDelay *hdrhistogram.Histogram // how late sends were against their schedule
	late         int64                   // sends more than lateAfter behind their schedule
	humanLate    int64                   // human inputs not sent on time (too many in flight)
	humanErrs    int64

	sampler *sampler
	// assignedAtReady is how many partition assignments the instances had
	// logged once the stage's first instances were ready: those after it
	// are rebalances (ScenarioResult.Reassignments).
	assignedAtReady int
	// latency makes send track every waking event's latency to its wake
	// (open-loop scenarios); closed-loop scenarios, whose latency is the
	// queue they build on purpose, track only what they wait for.
	latency bool
	// args are more flags of the stage's projector instances, after the
	// harness's own and before Config.ProjectorArgs.
	args []string
	// onAck, when set, is called with every event the broker
	// acknowledged, its run and id, and its record (offset set), on the
	// producer's goroutine.
	onAck func(run, id string, rec *kgo.Record)
}

// lateAfter is how far behind its schedule a send counts as late.
const lateAfter = 10 * time.Millisecond

// newStage makes a stage of topics of its own, created with canopy's
// configs changed by opts.
func (h *Harness) newStage(ctx context.Context, name string, opts ...topics.SpecOption) (*stage, error) {
	h.stages++
	s := &stage{h: h, name: name, partitions: int32(h.cfg.Partitions), tr: newTracker(), publishDelay: newHist(),
		names: topics.Names{Prefix: fmt.Sprintf("bench-%s-%d-%d", name, h.began.Unix(), h.stages), Version: 1}}
	s.group = s.names.Prefix
	if err := cluster.CreateTopics(ctx, h.adm, s.names, s.partitions, -1, opts...); err != nil {
		return nil, fmt.Errorf("%s: creating topics: %w", name, err)
	}
	var err error
	s.producer, err = kgo.NewClient(h.kafka.Opts(kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(50_000), kgo.ProducerLinger(time.Millisecond))...)
	if err != nil {
		s.close()
		return nil, err
	}
	s.reader, err = newWakeReader(h.kafka.Opts(), s.names, s.tr, nil)
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// startProjectors starts n instances and waits until they share every
// partition and each partition's worker publishes wakes.
func (s *stage) startProjectors(ctx context.Context, n int, ready bool) error {
	for range n {
		i := len(s.procs)
		name := fmt.Sprintf("%s-i%d", s.name, i)
		args := []string{"run", "-brokers", strings.Join(s.h.kafka.Brokers, ","), "-topic-prefix", s.names.Prefix,
			"-data-dir", filepath.Join(s.h.work, name), "-group", s.group, "-session-timeout", s.h.cfg.SessionTimeout.String(),
			"-advertise-addr", fmt.Sprintf("i%d:1", i), "-http-addr", "127.0.0.1:0", "-log-level", "info"}
		if d := s.h.cfg.ProfileDir; d != "" {
			// Made here: a mistyped or fresh directory must not cost a
			// whole scenario's run.
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("bench: -profile-dir: %w", err)
			}
			// -pprof: close fetches the heap profile before it stops
			// the instance (heapProfiles).
			args = append(args, "-cpu-profile", filepath.Join(d, name+".cpu.pprof"), "-pprof")
		}
		args = append(append(args, s.args...), s.h.cfg.ProjectorArgs...)
		var cpus []int
		if s.h.pin != nil {
			cpus = s.h.pin.forProjector(i)
		}
		p, err := startProc(name, s.h.cfg.Projector, args, cpus)
		if err != nil {
			return err
		}
		s.procs = append(s.procs, p)
	}
	if !ready {
		return nil
	}
	if err := s.waitAssigned(ctx, n); err != nil {
		return err
	}
	if err := s.probe(ctx, s.names.AgentEvents()); err != nil {
		return err
	}
	if s.assignedAtReady == 0 {
		s.assignedAtReady = s.assignments()
	}
	return nil
}

// assignments counts the partition assignments the stage's instances have
// logged ("partitions assigned", at info level): each rebalance that moves
// anything logs one on the instance that gains.
func (s *stage) assignments() int {
	n := 0
	for _, p := range s.procs {
		n += strings.Count(p.out.String(), `msg="partitions assigned"`)
	}
	return n
}

// waitAssigned waits until the group has n members with every partition
// assigned, polling the coordinator (the group offers nothing to wait on).
func (s *stage) waitAssigned(ctx context.Context, n int) error {
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		if err := s.died(); err != nil {
			return err
		}
		a, err := cluster.Assignment(ctx, s.h.adm, s.group, s.names)
		if err == nil && len(a) == int(s.partitions) {
			members := map[string]bool{}
			for _, m := range a {
				members[m.Addr] = true
			}
			if len(members) == n {
				return nil
			}
		}
		select {
		case <-poll.C:
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %d instances to share %d partitions: %w", s.name, n, s.partitions, ctx.Err())
		}
	}
}

// probeRun is the id of a run in partition p, for probes.
func (s *stage) probeRun(p int32) string {
	for n := 0; ; n++ {
		run := fmt.Sprintf("probe-%d-%d", p, n)
		if topics.Partition([]byte(run), s.partitions) == p {
			return run
		}
	}
}

// heartbeatProbes sends a waking event to every partition every interval
// until ctx ends, without waiting for replies.
func (s *stage) heartbeatProbes(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for p := range s.partitions {
			ev := workload.Marker(s.probeRun(p), now)
			ev.ID = fmt.Sprintf("heartbeat-probe-%d-%d", p, i)
			if rec, err := s.record(s.names.AgentEvents(), &ev); err == nil {
				s.producer.Produce(ctx, rec, nil)
			}
		}
	}
}

// probe produces to topic one waking event per partition and waits for
// their wakes: then every partition is owned and served.
func (s *stage) probe(ctx context.Context, topic string) error {
	var keys []string
	now := time.Now()
	for p := range s.partitions {
		run := s.probeRun(p)
		ev := workload.Marker(run, now)
		ev.ID = fmt.Sprintf("probe-%d", p)
		if topic == s.names.HumanInput() {
			// An id of its own: after the agent lane's probe of the same
			// run, the same id would be a duplicate, applied never.
			ev.ID = fmt.Sprintf("probe-human-%d", p)
			ev.Type, ev.AgentID, ev.Source = topics.TypeInput, "human:bench", "/bench"
			ev.Data = &topics.Input{InputKind: "steer", Text: "probe"}
		}
		k := key(run, ev.ID)
		s.tr.sent(k, now)
		keys = append(keys, k)
		rec, err := s.record(topic, &ev)
		if err != nil {
			return err
		}
		if err := s.producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("%s: producing a probe: %w", s.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return s.reader.waitFor(ctx, "the probes' wakes (every partition served)", func() bool {
		s.tr.mu.Lock()
		defer s.tr.mu.Unlock()
		for _, k := range keys {
			if _, waiting := s.tr.pending[k]; waiting {
				return false
			}
		}
		return true
	})
}

// resetMeasures starts the measurement afresh (after warm-up and probes).
func (s *stage) resetMeasures() {
	s.tr.mu.Lock()
	for i := range s.tr.e2e {
		s.tr.e2e[i].Reset()
		s.tr.fromSched[i].Reset()
		s.tr.matched[i] = 0
	}
	s.tr.readBeforeAck = 0
	s.tr.mu.Unlock()
	s.reader.mu.Lock()
	s.reader.wakes = [2]int64{}
	s.reader.truncated = 0
	s.reader.snapBytes.Reset()
	s.reader.mu.Unlock()
}

// record encodes ev for topic, in its run's partition. It leaves out
// topics.EventRecord's validation (a decode of the encoding), which would
// double the harness's CPU per event: the generator's events are checked
// against the contract by the harness's own test.
func (s *stage) record(topic string, ev *topics.Event) (*kgo.Record, error) {
	v, err := ev.MarshalJSON()
	if err != nil {
		return nil, err
	}
	key := []byte(ev.RunID)
	return &kgo.Record{Topic: topic, Key: key, Value: v, Partition: topics.Partition(key, s.partitions),
		Headers: []kgo.RecordHeader{{Key: topics.HeaderContentType, Value: []byte(topics.ContentTypeCloudEvents)}}}, nil
}

// send produces ev without waiting, tracking its latency to its wake when
// it wakes the run. sched is when it was due.
func (s *stage) send(ctx context.Context, ev *topics.Event, sched time.Time) error {
	rec, err := s.record(s.names.AgentEvents(), ev)
	if err != nil {
		return err
	}
	k := ""
	if s.latency && Wakes(ev) {
		k = key(ev.RunID, ev.ID)
		s.tr.sent(k, sched)
	}
	s.sent.Add(1)
	run, id := ev.RunID, ev.ID
	s.producer.Produce(ctx, rec, func(rec *kgo.Record, err error) {
		now := time.Now()
		if err != nil {
			s.sendErrs.Add(1)
			s.firstErr.CompareAndSwap(nil, &err)
			if k != "" {
				s.tr.failed(k)
			}
			return
		}
		s.acked.Add(1)
		s.lastAck.Store(now.UnixNano())
		if k != "" {
			s.tr.acked(k, now)
		}
		if s.onAck != nil {
			s.onAck(run, id, rec)
		}
	})
	return nil
}

func (s *stage) sendErr() error {
	if p := s.firstErr.Load(); p != nil {
		return fmt.Errorf("%s: producing: %w (%d sends failed)", s.name, *p, s.sendErrs.Load())
	}
	return nil
}

// openLoop sends src's events at rate per second for d: each event is due
// at its place in a fixed schedule and carries that time; a send never
// waits for an earlier one's acknowledgement. A send that falls behind its
// schedule is counted and its delay recorded, and its latency is also
// measured from when it was due, so the sender's own delays cannot hide
// latency (coordinated omission).
func (s *stage) openLoop(ctx context.Context, src *workload.Mix, rate float64, d time.Duration) error {
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	n := int64(float64(d.Seconds()) * rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i := int64(0); i < n; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 100*time.Microsecond {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		lag := time.Since(due)
		s.mu.Lock()
		record(s.publishDelay, lag.Microseconds())
		if lag > lateAfter {
			s.late++
		}
		s.mu.Unlock()
		ev, ok := src.Next(due)
		if !ok {
			return errors.New("the traffic ended before the scenario")
		}
		if err := s.send(ctx, &ev, due); err != nil {
			return err
		}
		if err := s.sendErr(); err != nil {
			return err
		}
		if err := s.died(); err != nil {
			return err
		}
	}
	return s.producer.Flush(ctx)
}

// closedLoop sends src's events as fast as the broker takes them (a send
// waits only when the producer's buffer of unacknowledged records is full),
// up to limit events when limit is positive, else until src ends. It
// returns how many it sent.
func (s *stage) closedLoop(ctx context.Context, src *workload.Mix, limit int) (int, error) {
	n := 0
	for limit <= 0 || n < limit {
		now := time.Now()
		ev, ok := src.Next(now)
		if !ok {
			break
		}
		if err := s.send(ctx, &ev, now); err != nil {
			return n, err
		}
		n++
		if n%10_000 == 0 {
			if err := s.sendErr(); err != nil {
				return n, err
			}
			if err := s.died(); err != nil {
				return n, err
			}
		}
	}
	if err := s.producer.Flush(ctx); err != nil {
		return n, err
	}
	return n, s.sendErr()
}

// died reports a projector instance that exited without being asked to.
func (s *stage) died() error {
	for _, p := range s.procs {
		if err := p.died(); err != nil {
			return err
		}
	}
	return nil
}

// startGateway starts a conductor gateway in this process on loopback,
// with a bench token and its rate limit out of the way.
func (s *stage) startGateway(ctx context.Context) error {
	tokens := filepath.Join(s.h.work, s.name+"-tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"`+benchToken+`": {"sub": "bench", "runs": ["*"], "sessions": ["*"]}}`), 0o600); err != nil {
		return err
	}
	gw, err := gateway.New(ctx, gateway.Config{Kafka: s.h.kafka, Names: s.names,
		ProjectorGroup: s.group, TokenFile: tokens, RatePerSecond: 1e9, RateBurst: 1 << 30,
		PreAuthRatePerSecond: 1e9, PreAuthBurst: 1 << 30, Logger: s.h.quiet})
	if err != nil {
		return fmt.Errorf("%s: starting the gateway: %w", s.name, err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gw.Close()
		return err
	}
	s.gw, s.gwURL, s.gwDone = gw, "http://"+lis.Addr().String(), make(chan struct{})
	s.gwSrv = &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { defer close(s.gwDone); _ = s.gwSrv.Serve(lis) }()
	return nil
}

const benchToken = "canopy-bench-token"

// humanInputs POSTs human inputs to the gateway at rate per second until
// ctx ends, each into a run pick chooses, open loop: each request is sent
// at its time on its own, at most 64 at once (one due while 64 are
// outstanding is counted late and skipped). Each input's latency is
// tracked from the gateway's 202 (the append) to its priority wake.
func (s *stage) humanInputs(ctx context.Context, rate float64, pick func() string) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	interval := time.Duration(float64(time.Second) / rate)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		timer.Reset(time.Until(due))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		run := pick()
		if run == "" {
			continue
		}
		s.mu.Lock()
		record(s.publishDelay, time.Since(due).Microseconds())
		s.mu.Unlock()
		select {
		case sem <- struct{}{}:
		default:
			s.mu.Lock()
			s.humanLate++
			s.mu.Unlock()
			continue
		}
		text := fmt.Sprintf("%s%d", humanTag, i)
		k := key(run, text)
		s.tr.sent(k, due)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.postInput(ctx, client, run, text); err != nil {
				s.tr.failed(k)
				if ctx.Err() == nil {
					s.mu.Lock()
					s.humanErrs++
					s.mu.Unlock()
				}
				return
			}
			s.tr.acked(k, time.Now())
		}()
	}
}

func (s *stage) postInput(ctx context.Context, client *http.Client, run, text string) error {
	body := fmt.Sprintf(`{"input_kind":"steer","text":%q}`, text)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.gwURL+"/v1/runs/"+run+"/input", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("gateway answered %s", resp.Status)
	}
	return nil
}

// heapProfiles writes each running instance's heap profile to dir
// (<stage>-i<n>.heap.pprof): what it holds at the stage's end, before it
// is stopped, which is where the scenarios leave the most state.
func (s *stage) heapProfiles(dir string) error {
	client := &http.Client{Timeout: 30 * time.Second}
	var errs []error
	for i, p := range s.procs {
		if p.died() != nil {
			continue
		}
		addr, err := p.httpAddr()
		if err == nil {
			err = fetchTo(client, "http://"+addr+"/debug/pprof/heap", filepath.Join(dir, fmt.Sprintf("%s-i%d.heap.pprof", s.name, i)))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s-i%d: heap profile: %w", s.name, i, err))
		}
	}
	return errors.Join(errs...)
}

// fetchTo writes the body of a GET of url to path.
func fetchTo(client *http.Client, url, path string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// close stops everything the stage started: the projectors (SIGTERM, then
// SIGKILL), the gateway, the reader and the producer; then deletes the
// stage's topics, so that the embedded broker gives their memory back.
func (s *stage) close() error {
	var errs []error
	if s.sampler != nil {
		s.sampler.close()
	}
	if d := s.h.cfg.ProfileDir; d != "" {
		if err := s.heapProfiles(d); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range s.procs {
		if err := p.stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if s.gwSrv != nil {
		s.gw.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.gwSrv.Shutdown(ctx)
		cancel()
		<-s.gwDone
		s.gw.Close()
	}
	if s.reader != nil {
		s.reader.close()
	}
	if s.producer != nil {
		s.producer.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := slices.Collect(func(yield func(string) bool) {
		for _, t := range s.names.Specs(1) {
			if !yield(t.Name) {
				return
			}
		}
	})
	if _, err := s.h.adm.DeleteTopics(ctx, all...); err != nil {
		errs = append(errs, fmt.Errorf("%s: deleting its topics: %w", s.name, err))
	}
	return errors.Join(errs...)
}
