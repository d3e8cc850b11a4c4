package harness

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// sampler follows a stage once a second: the rates of the last second
// (published, projected, wakes by lane), the projectors' CPU and memory
// from /proc, the harness's own (the embedded broker and the load), and the
// machine's utilisation. It prints a progress line every ProgressEvery.
type sampler struct {
	s     *stage
	began time.Time
	stop  chan struct{}
	done  chan struct{}

	mu          sync.Mutex
	publish     []float64
	consume     []float64
	wakes       [2][]float64
	rssMax      int64 // the largest sum of the projectors' RSS seen
	firstCPU    map[*proc]time.Duration
	lastCPU     map[*proc]time.Duration
	selfCPU0    time.Duration
	busy0, tot0 int64
	// The projectors' runtime figures from their /metrics (gcstats.go):
	// each one's first and last sample, the largest total heap in use
	// seen, and the first scrape that failed.
	firstRT, lastRT map[*proc]runtimeSample
	heapMax         float64
	memLimit        float64 // the largest -memory-limit of the projectors
	runtimeErr      error
	final           samplerStats
}

// samplerStats is what a sampler measured over its whole window.
type samplerStats struct {
	elapsed time.Duration
	// projectorCPU is the projectors' CPU over the window, in cores.
	projectorCPU float64
	// projectorRSS is the largest total RSS of the projectors seen.
	projectorRSS int64
	// harnessCPU is this process's CPU (embedded broker, load, reader).
	harnessCPU float64
	// machineBusy is the machine's utilisation over the window, 0 to 1.
	machineBusy float64
	// gcShare is the GC's share of the projectors' CPU over the window;
	// heap and heapMax their total heap in use at the end and the largest
	// seen; runtimeErr the first failed scrape of their /metrics.
	gcShare       float64
	heap, heapMax float64
	// memLimit is the projectors' -memory-limit, 0 when they did not say.
	memLimit   float64
	runtimeErr error
	// throttles and throttled are the pauses of the projectors' intake
	// for memory over the window, and their seconds (throttling).
	throttles, throttled float64
}

func (s *stage) startSampler() {
	sm := &sampler{s: s, began: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
		firstCPU: map[*proc]time.Duration{}, lastCPU: map[*proc]time.Duration{},
		firstRT: map[*proc]runtimeSample{}, lastRT: map[*proc]runtimeSample{}}
	sm.sampleProcs()
	sm.sampleRuntime()
	if self, err := sampleProc(os.Getpid()); err == nil {
		sm.selfCPU0 = self.cpu
	}
	sm.busy0, sm.tot0, _ = machineCPU()
	s.sampler = sm
	go sm.run()
}

func (sm *sampler) run() {
	defer close(sm.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastSent, lastProjected := sm.s.acked.Load(), sm.s.reader.stats().projected
	lastWakes := sm.s.reader.stats().wakes
	last := time.Now()
	lastPrint := last
	ticks := 0
	// sample appends the rates since the last sample; the last one, at
	// close, is over less than a second and scaled to one.
	sample := func() readerStats {
		acked, rs := sm.s.acked.Load(), sm.s.reader.stats()
		per := time.Since(last).Seconds()
		last = time.Now()
		sm.mu.Lock()
		sm.publish = append(sm.publish, float64(acked-lastSent)/per)
		sm.consume = append(sm.consume, float64(rs.projected-lastProjected)/per)
		for l := range rs.wakes {
			sm.wakes[l] = append(sm.wakes[l], float64(rs.wakes[l]-lastWakes[l])/per)
		}
		sm.mu.Unlock()
		lastSent, lastProjected, lastWakes = acked, rs.projected, rs.wakes
		return rs
	}
	for {
		select {
		case <-sm.stop:
			// A stub of less than 100 ms would be mostly noise, unless it
			// is the whole window (a fast closed loop): a window has at
			// least one sample.
			sm.mu.Lock()
			none := len(sm.publish) == 0
			sm.mu.Unlock()
			if none || time.Since(last) > 100*time.Millisecond {
				sample()
			}
			return
		case <-tick.C:
		}
		rs := sample()
		rss := sm.sampleProcs()
		if ticks++; ticks%runtimeEvery == 0 {
			sm.sampleRuntime()
		}
		if time.Since(lastPrint) >= sm.s.h.cfg.ProgressEvery-100*time.Millisecond {
			lastPrint = time.Now()
			sm.progress(rs, rss)
		}
	}
}

// sampleProcs samples every running projector; it returns their total RSS.
func (sm *sampler) sampleProcs() int64 {
	var rss int64
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, p := range sm.s.procs {
		if p.hasExited() {
			continue
		}
		ps, err := sampleProc(p.pid())
		if err != nil {
			continue // it exited between the check and the read
		}
		if _, ok := sm.firstCPU[p]; !ok {
			sm.firstCPU[p] = ps.cpu
		}
		sm.lastCPU[p] = ps.cpu
		rss += ps.rss
	}
	sm.rssMax = max(sm.rssMax, rss)
	return rss
}

func (sm *sampler) progress(rs readerStats, rss int64) {
	n := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return v[len(v)-1]
	}
	sm.s.tr.mu.Lock()
	p99n := float64(sm.s.tr.e2e[laneNormal].ValueAtQuantile(99)) / 1000
	p99p := float64(sm.s.tr.e2e[lanePriority].ValueAtQuantile(99)) / 1000
	sm.s.tr.mu.Unlock()
	sm.mu.Lock()
	line := fmt.Sprintf("%-9s %5.0fs  sent %9d (%7.0f/s)  projected %9d (%7.0f/s)  wakes %7d normal %5d priority  e2e p99 %6.1f ms normal %6.1f ms priority  rss %4d MB\n",
		sm.s.name, time.Since(sm.began).Seconds(), sm.s.acked.Load(), n(sm.publish), rs.projected, n(sm.consume),
		rs.wakes[laneNormal], rs.wakes[lanePriority], p99n, p99p, rss>>20)
	sm.mu.Unlock()
	fmt.Fprint(sm.s.h.cfg.Progress, line)
}

// close stops the sampler and computes its window's figures.
func (sm *sampler) close() samplerStats {
	select {
	case <-sm.stop:
		return sm.final
	default:
	}
	close(sm.stop)
	<-sm.done
	sm.sampleProcs()
	heap := sm.sampleRuntime()
	el := time.Since(sm.began)
	sm.mu.Lock()
	defer sm.mu.Unlock()
	var cpu time.Duration
	for p, last := range sm.lastCPU {
		cpu += last - sm.firstCPU[p]
	}
	st := samplerStats{elapsed: el, projectorCPU: cpu.Seconds() / el.Seconds(), projectorRSS: sm.rssMax}
	if self, err := sampleProc(os.Getpid()); err == nil {
		st.harnessCPU = (self.cpu - sm.selfCPU0).Seconds() / el.Seconds()
	}
	if busy, tot, err := machineCPU(); err == nil && tot > sm.tot0 {
		st.machineBusy = float64(busy-sm.busy0) / float64(tot-sm.tot0)
	}
	st.gcShare, st.heap, st.heapMax, st.runtimeErr = gcShare(sm.firstRT, sm.lastRT), heap, sm.heapMax, sm.runtimeErr
	st.throttles, st.throttled = throttling(sm.firstRT, sm.lastRT)
	st.memLimit = sm.memLimit
	sm.final = st
	return st
}
