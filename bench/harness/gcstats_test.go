package harness

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
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
