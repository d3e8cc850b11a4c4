package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// The load of BenchmarkSSEFanout; the defaults are the load bench/RESULTS.md
// reports ("Wake streams").
var (
	sseStreams   = flag.Int("sse.streams", 1000, "BenchmarkSSEFanout: wake streams, split over two gateway instances")
	sseRuns      = flag.Int("sse.runs", 100, "BenchmarkSSEFanout: runs the streams watch")
	sseRate      = flag.Float64("sse.rate", 200, "BenchmarkSSEFanout: human inputs per second, through both gateways")
	sseDuration  = flag.Duration("sse.duration", 60*time.Second, "BenchmarkSSEFanout: how long inputs are sent")
	sseChurn     = flag.Int("sse.churn", 50, "BenchmarkSSEFanout: streams that reconnect with Last-Event-ID every 10s")
	ssePartition = flag.Int("sse.partitions", 4, "BenchmarkSSEFanout: partitions of every topic")
)

// BenchmarkSSEFanout: -sse.streams wake streams (default 1,000) of
// -sse.runs runs, split over two gateway instances, while -sse.rate human
// inputs/s (200) go through the gateways for -sse.duration (60s) to one
// projector on the embedded broker; every 10s -sse.churn streams reconnect
// with their Last-Event-ID. Checked: every stream receives every committed
// wake of its run from where it started, exactly once, in each lane's
// offset order, with as_of_event_seq growing (compared with the wake topics
// read afterwards). Reported: broker connections and Kafka clients per
// gateway instance, the process's RSS and Go heap per 1,000 streams (both
// ends of the streams live in this process), and the latency from an
// input's request to its wake on a stream. Run it with
//
//	go test -run '^$' -bench BenchmarkSSEFanout -benchtime 1x ./internal/gateway
func BenchmarkSSEFanout(b *testing.B) {
	for range b.N {
		benchSSE(b)
	}
}

// benchWake is a wake as a bench stream received it.
type benchWake struct {
	prio   bool
	offset int64 // its offset in its lane: the id's lane offset less one
	wakeID string
	seq    int64
}

// benchStream is one wake stream of the benchmark, across reconnections.
type benchStream struct {
	run   string
	gw    int
	mu    sync.Mutex
	start streamPos
	last  string // the last id, to reconnect with
	got   []benchWake
	kick  context.CancelFunc // ends the current connection: reconnect
	opens int
	drops int
}

func benchSSE(b *testing.B) {
	b.StopTimer()
	parts := int32(*ssePartition)
	e := newEnv(b, parts)
	cfg := e.config()
	cfg.RatePerSecond, cfg.RateBurst = 1e9, 1<<30
	cfg.PreAuthRatePerSecond, cfg.PreAuthBurst = 1e9, 1<<30
	cfg.MaxStreams, cfg.MaxStreamsPerSubject = *sseStreams, *sseStreams
	p, _ := e.projector("")
	testenv.WaitFor(b, 30*time.Second, testenv.Until("the projector owns every partition", func() bool { return len(p.Owned()) >= int(parts) }))
	var gws [2]*Gateway
	var srvs [2]*httptest.Server
	for i := range gws {
		gws[i], srvs[i] = e.gateway(cfg)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	runs := make([]string, *sseRuns)
	for i := range runs {
		runs[i] = fmt.Sprintf("run-%03d", i)
	}

	// Latency from an input's request to its wake on a stream; the input
	// is known by its text, which its wake's trigger carries.
	var sentAt sync.Map     // input text -> time.Time
	var acceptedAt sync.Map // event id -> struct{}
	var latMu sync.Mutex
	lat := hdrhistogram.New(1, 120_000_000, 3) // µs

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel()

	streams := make([]*benchStream, *sseStreams)
	opened := make(chan error, len(streams))
	open := func(from, to int) {
		for i := from; i < to; i++ {
			s := &benchStream{run: runs[i%len(runs)], gw: i % 2}
			streams[i] = s
			readers.Add(1)
			go func() {
				defer readers.Done()
				s.read(ctx, srvs[s.gw].URL, opened, &sentAt, func(d time.Duration) {
					latMu.Lock()
					_ = lat.RecordValue(max(d.Microseconds(), 1))
					latMu.Unlock()
				})
			}()
		}
		for range to - from {
			if err := <-opened; err != nil {
				b.Fatal(err)
			}
		}
		// Every stream is subscribed once the tails list it.
		testenv.WaitFor(b, 60*time.Second, func() error {
			n := 0
			for _, g := range gws {
				n += g.streams.subscribed()
			}
			if n != to {
				return fmt.Errorf("%d of %d streams subscribed", n, to)
			}
			return nil
		})
	}
	// A first few streams start every tail, so that what the rest add is
	// theirs alone.
	warm := min(len(streams), 2*len(runs), 40)
	open(0, warm)
	runtime.GC()
	rss0, heap0, gr0 := rssBytes(), liveBytes(), runtime.NumGoroutine()
	open(warm, len(streams))
	runtime.GC()
	rss1, heap1, gr1 := rssBytes(), liveBytes(), runtime.NumGoroutine()

	// Kafka clients and broker connections per instance, sampled each second.
	var maxConns, maxClients [2]atomic.Int64
	raise := func(m *atomic.Int64, v int64) {
		for old := m.Load(); v > old && !m.CompareAndSwap(old, v); old = m.Load() {
		}
	}
	sample := func() {
		for i, g := range gws {
			raise(&maxConns[i], g.kstats.conns.Load())
			raise(&maxClients[i], g.kstats.clients.Load())
		}
	}
	sample()
	var sampling sync.WaitGroup
	sampling.Add(1)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go func() {
		defer sampling.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
				sample()
			}
		}
	}()

	// Inputs, open loop: one every 1/rate, each by a worker of a pool.
	b.StartTimer()
	cpu0 := cpuTime()
	began := time.Now()
	var sent, failed atomic.Int64
	jobs := make(chan int, 1024)
	var senders sync.WaitGroup
	for range 16 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range jobs {
				run := runs[i%len(runs)]
				srv := srvs[i%2]
				text := fmt.Sprintf("input %d", i)
				sentAt.Store(text, time.Now())
				a, err := sendInput(hc, srv.URL, run, "message", text)
				if err != nil {
					failed.Add(1)
					continue
				}
				acceptedAt.Store(a.EventID, struct{}{})
				sent.Add(1)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	interval := time.Duration(float64(time.Second) / *sseRate)
	tick := time.NewTicker(interval)
	churn := time.NewTicker(10 * time.Second)
	end := time.After(*sseDuration)
	for i, done := 0, false; !done; {
		select {
		case <-tick.C:
			// On schedule: as many inputs as the time elapsed asks for.
			for due := int(time.Since(began).Seconds() * *sseRate); i < due; i++ {
				select {
				case jobs <- i:
				default:
					failed.Add(1) // the senders are behind: counted, not queued
				}
			}
		case <-churn.C:
			for range *sseChurn {
				s := streams[rng.IntN(len(streams))]
				s.mu.Lock()
				if s.kick != nil {
					s.kick()
				}
				s.mu.Unlock()
			}
		case <-end:
			done = true
		}
	}
	tick.Stop()
	churn.Stop()
	close(jobs)
	senders.Wait()
	sending := time.Since(began)
	cpu := cpuTime() - cpu0
	b.StopTimer()

	// The truth: the wake topics, once every accepted input has its wake.
	type truth struct {
		offset int64
		wakeID string
		seq    int64
	}
	var want map[string]map[bool][]truth // by run, by lane
	for deadline := time.Now().Add(120 * time.Second); ; {
		want = map[string]map[bool][]truth{}
		triggered := map[string]int{}
		for lane, topic := range map[bool]string{false: e.names.Wakes(), true: e.names.PriorityWakes()} {
			for _, r := range e.committed(topic) {
				var w wakeFields
				if err := json.Unmarshal(r.Value, &w); err != nil {
					b.Fatal(err)
				}
				if want[w.RunID] == nil {
					want[w.RunID] = map[bool][]truth{}
				}
				want[w.RunID][lane] = append(want[w.RunID][lane], truth{r.Offset, w.WakeID, w.Snapshot.Seq})
				for _, tr := range w.Triggers {
					if tr.EventID != nil {
						triggered[*tr.EventID]++
					}
				}
			}
		}
		missing := 0
		acceptedAt.Range(func(k, _ any) bool {
			if triggered[k.(string)] == 0 {
				missing++
			}
			return true
		})
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d accepted inputs have no wake after 120s", missing)
		}
		time.Sleep(500 * time.Millisecond) // polling the topics, which offer nothing to wait on
	}
	// Every stream receives every wake of its run from its start.
	expected := func(s *benchStream) (n int) {
		for lane, ws := range want[s.run] {
			for _, w := range ws {
				if w.offset >= *s.start.at(lane) {
					n++
				}
			}
		}
		return n
	}
	testenv.WaitEvery(b, 120*time.Second, 100*time.Millisecond, func() error {
		behind := 0
		for _, s := range streams {
			s.mu.Lock()
			if len(s.got) < expected(s) {
				behind++
			}
			s.mu.Unlock()
		}
		if behind > 0 {
			return fmt.Errorf("%d streams still lack wakes", behind)
		}
		return nil
	})
	stopSampling()
	sampling.Wait()
	cancel()
	readers.Wait()

	wakes, delivered, opens, drops := 0, 0, 0, 0
	for _, ws := range want {
		wakes += len(ws[false]) + len(ws[true])
	}
	for i, s := range streams {
		opens += s.opens
		drops += s.drops
		delivered += len(s.got)
		for lane := range 2 {
			prio := lane == 1
			var exp []truth
			for _, w := range want[s.run][prio] {
				if w.offset >= *s.start.at(prio) {
					exp = append(exp, w)
				}
			}
			var got []truth
			for _, w := range s.got {
				if w.prio == prio {
					got = append(got, truth{w.offset, w.wakeID, w.seq})
				}
			}
			if !slices.Equal(got, exp) {
				b.Fatalf("stream %d (%s, gateway %d, from %s): lane prio=%v received %d wakes, want %d: %v\nwant %v", i, s.run, s.gw, s.start, prio, len(got), len(exp), head(got), head(exp))
			}
			for j := 1; j < len(got); j++ {
				if got[j].seq <= got[j-1].seq {
					b.Fatalf("stream %d: as_of_event_seq %d after %d", i, got[j].seq, got[j-1].seq)
				}
			}
		}
	}
	q := func(p float64) float64 { return float64(lat.ValueAtQuantile(p)) / 1000 }
	perK := func(v int64) float64 { return float64(v) / float64(len(streams)-warm) * 1000 / (1 << 20) }
	b.ReportMetric(float64(sent.Load())/sending.Seconds(), "inputs/s")
	b.ReportMetric(float64(maxConns[0].Load()+maxConns[1].Load())/2, "conns/instance")
	b.ReportMetric(perK(rss1-rss0), "rss_MiB/1000streams")
	b.ReportMetric(q(50), "p50_wake_ms")
	b.ReportMetric(q(99), "p99_wake_ms")
	b.Logf("%d streams (%d runs, 2 gateway instances, %d partitions), %d inputs accepted in %v (%.0f/s; %d failed or late), %d wakes committed, %d delivered to streams, every one exactly once in lane order",
		len(streams), len(runs), parts, sent.Load(), sending.Round(time.Millisecond), float64(sent.Load())/sending.Seconds(), failed.Load(), wakes, delivered)
	b.Logf("reconnections with Last-Event-ID: %d (every 10s, %d streams picked at random); dropped for slowness: %d", opens-len(streams), *sseChurn, drops)
	for i, g := range gws {
		b.Logf("gateway %d: at most %d Kafka clients and %d broker connections open (%d dialled in all)", i, maxClients[i].Load(), maxConns[i].Load(), g.kstats.dials.Load())
	}
	b.Logf("process RSS %.0f MiB with %d streams, %.0f MiB with %d: %.1f MiB per 1,000 streams; Go heap objects and stacks %.1f MiB per 1,000; goroutines %d -> %d (both ends of every stream are in this process)",
		float64(rss0)/(1<<20), warm, float64(rss1)/(1<<20), len(streams), perK(rss1-rss0), perK(heap1-heap0), gr0, gr1)
	b.Logf("CPU of the whole process (broker, projector, both gateways, the stream clients, the senders) while inputs were sent: %.2f of %d cores", cpu.Seconds()/sending.Seconds(), runtime.NumCPU())
	b.Logf("input sent -> its wake on a stream: p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d samples)", q(50), q(99), float64(lat.Max())/1000, lat.TotalCount())
}

func head[T any](s []T) []T { return s[:min(len(s), 5)] }

// wakeFields are the fields of a wake the benchmark checks.
type wakeFields struct {
	WakeID   string `json:"wake_id"`
	RunID    string `json:"run_id"`
	Lane     string `json:"lane"`
	Triggers []struct {
		EventID *string `json:"event_id"`
		Input   *struct {
			Text string `json:"text"`
		} `json:"input"`
	} `json:"triggers"`
	Snapshot struct {
		Seq int64 `json:"as_of_event_seq"`
	} `json:"agent_tree_snapshot"`
}

// read keeps s's stream open, reconnecting with its last id when kicked or
// dropped, until ctx ends. The first open is reported on opened.
func (s *benchStream) read(ctx context.Context, base string, opened chan<- error, sentAt *sync.Map, record func(time.Duration)) {
	first := true
	for ctx.Err() == nil {
		cctx, kick := context.WithCancel(ctx)
		s.mu.Lock()
		s.kick, s.opens = kick, s.opens+1
		last := s.last
		s.mu.Unlock()
		err := s.once(cctx, base, last, func() {
			if first {
				first = false
				opened <- nil
			}
		}, sentAt, record)
		kick()
		if first {
			opened <- fmt.Errorf("stream of %s: %v", s.run, err)
			return
		}
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			// Refused (a cap, a broker hiccup): retry soon, not at once.
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
}

// once reads one connection of the stream.
//
// A stream is a raw connection read by one goroutine through 5 KiB of
// buffers, so that the client's side of the RSS figure stays small.
func (s *benchStream) once(ctx context.Context, base, last string, onOpen func(), sentAt *sync.Map, record func(time.Duration)) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := "GET /v1/runs/" + s.run + "/wakes HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer " + tokAll + "\r\n"
	if last != "" {
		req += "Last-Event-ID: " + last + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4<<10), nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	br := bufio.NewReaderSize(resp.Body, 1<<10)
	var name, id string
	var data, long []byte
	for {
		line, err := br.ReadSlice('\n')
		for err == bufio.ErrBufferFull { // a line longer than the buffer
			long = append(long[:0], line...)
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
			line = long
		}
		if err != nil {
			return err
		}
		switch {
		case len(line) == 1:
			switch name {
			case "open":
				s.mu.Lock()
				if s.last == "" {
					s.start.normal, s.start.priority, _ = ParseStreamPos(id)
					s.last = id
				}
				s.mu.Unlock()
				onOpen()
			case "wake":
				var w wakeFields
				if err := json.Unmarshal(data, &w); err != nil {
					return err
				}
				var pos streamPos
				pos.normal, pos.priority, _ = ParseStreamPos(id)
				prio := w.Lane == "priority"
				now := time.Now()
				for _, tr := range w.Triggers {
					if tr.Input != nil {
						if at, ok := sentAt.Load(tr.Input.Text); ok {
							record(now.Sub(at.(time.Time)))
						}
					}
				}
				s.mu.Lock()
				s.got = append(s.got, benchWake{prio: prio, offset: *pos.at(prio) - 1, wakeID: w.WakeID, seq: w.Snapshot.Seq})
				s.last = id
				s.mu.Unlock()
			case "dropped":
				s.mu.Lock()
				s.drops++
				s.mu.Unlock()
				return nil
			}
			name, id, data = "", "", data[:0]
		case strings.HasPrefix(string(line), "event: "):
			name = strings.TrimSpace(string(line[7:]))
		case strings.HasPrefix(string(line), "id: "):
			id = strings.TrimSpace(string(line[4:]))
		case strings.HasPrefix(string(line), "data: "):
			data = append(data, line[6:len(line)-1]...)
		}
	}
}

// subscribed is how many streams the instance's tails hand wakes to.
func (s *wakeStreams) subscribed() int {
	s.mu.Lock()
	ts := make([]*tail, 0, len(s.tails))
	for _, t := range s.tails {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	n := 0
	for _, t := range ts {
		t.mu.Lock()
		for _, m := range t.subs {
			n += len(m)
		}
		t.mu.Unlock()
	}
	return n
}

// cpuTime is the CPU time the process used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssBytes is the process's resident set size.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// liveBytes is the Go heap's live objects and the goroutines' stacks
// (after a GC).
func liveBytes() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}
