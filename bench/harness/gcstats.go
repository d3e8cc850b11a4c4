package harness

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The projector's Go runtime, from its /metrics (pkg/telemetry's
// registry): the GC's share of the CPU it used, from runtime/metrics' CPU
// classes, and its heap in use.
const (
	metricCPUTotal = "go_cpu_classes_total_cpu_seconds_total"
	metricCPUIdle  = "go_cpu_classes_idle_cpu_seconds_total"
	metricCPUGC    = "go_cpu_classes_gc_total_cpu_seconds_total"
	metricHeap     = "go_memstats_heap_inuse_bytes"
	// metricMemoryLimit is the projector's -memory-limit.
	metricMemoryLimit = "canopy_projector_memory_limit_bytes"
	// metricThrottles and metricThrottled count the pauses of the
	// projector's agent intake for memory, and their time (its governor:
	// internal/projector/intake.go).
	metricThrottles = "canopy_projector_intake_throttles_total"
	metricThrottled = "canopy_projector_intake_throttled_seconds_total"
)

// errNoRuntime is a projector's /metrics without the runtime figures.
var errNoRuntime = fmt.Errorf("harness: no %s, %s, %s or %s in the projector's /metrics", metricCPUTotal, metricCPUIdle, metricCPUGC, metricHeap)

// runtimeSample is one projector's runtime figures at one time: its GC CPU
// and the CPU it used (the runtime's total, GOMAXPROCS over the wall
// clock, less idle), in seconds since it started, and its heap in use.
type runtimeSample struct {
	gc, used, heap float64
	// limit is its -memory-limit (canopy_projector_memory_limit_bytes), 0
	// when it does not say.
	limit float64
	// throttles and throttled are the pauses of its intake for memory
	// since it started, and their seconds; 0 when it does not say.
	throttles, throttled float64
}

// runtimeFigures reads a runtimeSample from a projector's metric
// families; false when one of them is missing.
func runtimeFigures(fams map[string]*dto.MetricFamily) (runtimeSample, bool) {
	v := func(name string) (float64, bool) {
		f, ok := fams[name]
		if !ok || len(f.GetMetric()) != 1 {
			return 0, false
		}
		m := f.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
		return 0, false
	}
	total, ok1 := v(metricCPUTotal)
	idle, ok2 := v(metricCPUIdle)
	gc, ok3 := v(metricCPUGC)
	heap, ok4 := v(metricHeap)
	limit, _ := v(metricMemoryLimit)
	throttles, _ := v(metricThrottles)
	throttled, _ := v(metricThrottled)
	return runtimeSample{gc: gc, used: total - idle, heap: heap, limit: limit, throttles: throttles, throttled: throttled},
		ok1 && ok2 && ok3 && ok4
}

// throttling is how many times the projectors paused their agent intake
// for memory between their first and last samples (an instance without a
// first sample, from its start), and for how many seconds in all. A pause
// still on at the last sample counts once its end is counted, at the
// next sample.
func throttling(first, last map[*proc]runtimeSample) (pauses, seconds float64) {
	for p, l := range last {
		f := first[p]
		pauses += l.throttles - f.throttles
		seconds += l.throttled - f.throttled
	}
	return pauses, seconds
}

// gcShare is the GC's share of the CPU the projectors used between their
// first and last samples (an instance without a first sample, from its
// start): a killed instance counts up to its last sample. 0 when they used
// none. The runtime updates its CPU classes at the end of each GC, so the
// window is, in effect, from the first GC after the first sample to the
// last GC before the last.
func gcShare(first, last map[*proc]runtimeSample) float64 {
	var gc, used float64
	for p, l := range last {
		f := first[p]
		gc += l.gc - f.gc
		used += l.used - f.used
	}
	if used <= 0 {
		return 0
	}
	return gc / used
}

// runtimeEvery is how often, in the sampler's one-second ticks, it scrapes
// the projectors' /metrics: often enough for the heap's peak at the
// scenarios' scale, seldom enough not to load the projectors.
const runtimeEvery = 5

// sampleRuntime scrapes every running projector's /metrics; it returns
// their total heap in use, and records their GC figures.
func (sm *sampler) sampleRuntime() float64 {
	sm.mu.Lock()
	procs := append([]*proc(nil), sm.s.procs...)
	sm.mu.Unlock()
	client := &http.Client{Timeout: 2 * time.Second}
	var heap float64
	got := map[*proc]runtimeSample{}
	for _, p := range procs {
		if p.hasExited() {
			continue
		}
		addr, err := p.httpAddr()
		if err != nil {
			sm.noteRuntimeErr(err)
			continue
		}
		fams, err := scrapeFamilies(context.Background(), client, "http://"+addr+"/metrics")
		if err != nil {
			if !p.hasExited() {
				sm.noteRuntimeErr(err)
			}
			continue
		}
		rs, ok := runtimeFigures(fams)
		if !ok {
			sm.noteRuntimeErr(errNoRuntime)
			continue
		}
		got[p] = rs
		heap += rs.heap
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for p, rs := range got {
		if _, ok := sm.firstRT[p]; !ok {
			sm.firstRT[p] = rs
		}
		sm.lastRT[p] = rs
	}
	sm.heapMax = max(sm.heapMax, heap)
	for _, rs := range got {
		sm.memLimit = max(sm.memLimit, rs.limit)
	}
	return heap
}

func (sm *sampler) noteRuntimeErr(err error) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.runtimeErr == nil {
		sm.runtimeErr = err
	}
}
