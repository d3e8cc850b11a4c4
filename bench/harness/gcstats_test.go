package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/canopy-dev/canopy/pkg/telemetry"
)

// TestRuntimeFigures reads the GC's CPU and the heap from the exposition of
// the registry every projector serves on /metrics, as the harness scrapes
// it, and the GC's share from two samples.
func TestRuntimeFigures(t *testing.T) {
	reg := telemetry.NewRegistry()
	expose := func() runtimeSample {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, f := range fams {
			if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
				t.Fatal(err)
			}
		}
		parsed, err := parseFamilies(&b)
		if err != nil {
			t.Fatal(err)
		}
		rs, ok := runtimeFigures(parsed)
		if !ok {
			t.Fatalf("no runtime figures in the exposition:\n%s", b.String())
		}
		return rs
	}
	first := expose()
	// Work and collections between the samples, so that the GC's CPU
	// grows and the process's too.
	var keep [][]byte
	for i := range 2000 {
		keep = append(keep, make([]byte, 64<<10))
		if i%200 == 0 {
			runtime.GC()
		}
	}
	runtime.KeepAlive(keep)
	last := expose()
	if last.heap <= 0 || last.gc <= first.gc || last.used <= first.used || last.gc > last.used {
		t.Fatalf("samples %+v then %+v: want a heap, the GC's CPU and the CPU used growing, the GC's within the CPU used", first, last)
	}
	p := &proc{}
	share := gcShare(map[*proc]runtimeSample{p: first}, map[*proc]runtimeSample{p: last})
	if share <= 0 || share > 1 {
		t.Fatalf("GC share %v, want in (0, 1]", share)
	}
	if s := gcShare(map[*proc]runtimeSample{}, map[*proc]runtimeSample{p: last}); s != last.gc/last.used {
		t.Errorf("an instance without a first sample counts from its start: got %v, want %v", s, last.gc/last.used)
	}
}

// TestScrapeUncompressed scrapes a registry served as a projector serves
// it: the page comes uncompressed, so that the scrape does not make the
// projector allocate a gzip writer, and it parses.
func TestScrapeUncompressed(t *testing.T) {
	reg := telemetry.NewRegistry()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	var encodings []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metrics.ServeHTTP(w, r)
		encodings = append(encodings, w.Header().Get("Content-Encoding"))
	}))
	defer srv.Close()
	fams, err := scrapeFamilies(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := runtimeFigures(fams); !ok {
		t.Fatalf("no runtime figures in %d families", len(fams))
	}
	if len(encodings) != 1 || encodings[0] != "" {
		t.Fatalf("served with Content-Encoding %q, want the page uncompressed", encodings)
	}
}

// TestThrottling reads the projector's intake pauses for memory from its
// exposition and counts those of the window: the difference between the
// first and last samples, or since the start for an instance without a
// first sample.
func TestThrottling(t *testing.T) {
	sample := func(pauses, seconds float64) runtimeSample {
		t.Helper()
		page := fmt.Sprintf(`# TYPE go_cpu_classes_total_cpu_seconds_total counter
go_cpu_classes_total_cpu_seconds_total 10
# TYPE go_cpu_classes_idle_cpu_seconds_total counter
go_cpu_classes_idle_cpu_seconds_total 1
# TYPE go_cpu_classes_gc_total_cpu_seconds_total counter
go_cpu_classes_gc_total_cpu_seconds_total 2
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1e+08
# TYPE canopy_projector_intake_throttles_total counter
canopy_projector_intake_throttles_total %v
# TYPE canopy_projector_intake_throttled_seconds_total counter
canopy_projector_intake_throttled_seconds_total %v
`, pauses, seconds)
		fams, err := parseFamilies(strings.NewReader(page))
		if err != nil {
			t.Fatal(err)
		}
		rs, ok := runtimeFigures(fams)
		if !ok {
			t.Fatalf("no runtime figures in:\n%s", page)
		}
		return rs
	}
	a, b := &proc{}, &proc{}
	first := map[*proc]runtimeSample{a: sample(3, 1.5)}
	last := map[*proc]runtimeSample{a: sample(7, 4.25), b: sample(2, 0.5)}
	if n, s := throttling(first, last); n != 6 || s != 3.25 {
		t.Errorf("throttling = %v pauses, %v s; want 6 and 3.25 (4 and 2.75 of the window, and 2 and 0.5 of an instance started in it)", n, s)
	}
}
