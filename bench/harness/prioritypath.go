package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/canopy-dev/canopy/internal/projector"
)

// The priority path as the projector sees it: the stages of
// each human input record, read from the projector's histogram
// canopy_projector_priority_stage_seconds, and the agent lane's drain rate
// with and without human input, read from its records_consumed_total.

// scrapeFamilies reads a /metrics page into its metric families. It asks
// for the page uncompressed: the harness scrapes a projector every second
// or so over loopback, and a gzip writer for each scrape (about 1.3 MB)
// was 2% of what a projector allocated in the priority scenario, load the
// measurement put on what it measured.
func scrapeFamilies(ctx context.Context, client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseFamilies(resp.Body)
}

// parseFamilies reads Prometheus's text format into its metric families.
func parseFamilies(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// label returns a metric's value of label name.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// stageFigures are one stage's observations: how many, their mean, and
// their p99 as Prometheus's histogram_quantile estimates it from the
// classic buckets (linear within a bucket).
type stageFigures struct {
	Stage   string  `json:"stage"`
	Count   uint64  `json:"count"`
	MeanMs  float64 `json:"meanMs"`
	P99Ms   float64 `json:"p99Ms"`
	P99From string  `json:"p99Bucket"` // the bucket the p99 fell in, "le"
}

// stages reads the priority path's stages from families, in the
// projector's order.
func stages(families map[string]*dto.MetricFamily) []stageFigures {
	f := families["canopy_projector_priority_stage_seconds"]
	if f == nil {
		return nil
	}
	var out []stageFigures
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		if h == nil || h.GetSampleCount() == 0 {
			continue
		}
		sf := stageFigures{Stage: label(m, "stage"), Count: h.GetSampleCount(), MeanMs: 1000 * h.GetSampleSum() / float64(h.GetSampleCount())}
		sf.P99Ms, sf.P99From = bucketQuantile(0.99, h)
		out = append(out, sf)
	}
	rank := func(name string) int {
		for s := range projector.NumPriorityStages {
			if s.String() == name {
				return int(s)
			}
		}
		return int(projector.NumPriorityStages)
	}
	slices.SortFunc(out, func(a, b stageFigures) int { return rank(a.Stage) - rank(b.Stage) })
	return out
}

// bucketQuantile is histogram_quantile over a classic histogram, in ms.
func bucketQuantile(q float64, h *dto.Histogram) (float64, string) {
	rank := q * float64(h.GetSampleCount())
	var prevUpper float64
	var prevCount uint64
	for _, b := range h.GetBucket() {
		if float64(b.GetCumulativeCount()) >= rank {
			upper := b.GetUpperBound()
			if math.IsInf(upper, 1) {
				return 1000 * prevUpper, "+Inf"
			}
			in := float64(b.GetCumulativeCount() - prevCount)
			frac := 1.0
			if in > 0 {
				frac = (rank - float64(prevCount)) / in
			}
			return 1000 * (prevUpper + (upper-prevUpper)*frac), fmt.Sprintf("%gms", 1000*upper)
		}
		prevUpper, prevCount = b.GetUpperBound(), b.GetCumulativeCount()
	}
	return 1000 * prevUpper, "+Inf"
}

// stagesNote says where a human input's time went, stage by stage.
func stagesNote(ss []stageFigures) string {
	if len(ss) == 0 {
		return "the projector reported no priority path stages"
	}
	parts := make([]string, 0, len(ss))
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("%s %.2f / %.1f", s.Stage, s.MeanMs, s.P99Ms))
	}
	return fmt.Sprintf("the priority path inside the projector, stage by stage (mean / p99 ms, the p99 from the histogram's buckets; %d records): %s",
		ss[0].Count, strings.Join(parts, ", "))
}

// drainMeter samples the projector's agent records consumed, to compare
// the agent lane's drain rate while human input is sent with the rate while
// none is (the target: within 10%).
type drainMeter struct {
	url    string
	topic  string
	client *http.Client
	// on says whether human input is being sent at a time.
	on func(time.Time) bool

	mu      sync.Mutex
	last    float64
	lastAt  time.Time
	records [2]float64 // off, on
	seconds [2]float64
	err     error
}

// sample adds the records consumed since the last sample to the window
// (with or without human input) the interval's midpoint falls in.
func (d *drainMeter) sample(ctx context.Context) {
	fams, err := scrapeFamilies(ctx, d.client, d.url)
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		if d.err == nil && ctx.Err() == nil {
			d.err = err
		}
		return
	}
	n := consumedIn(fams, d.topic)
	if !d.lastAt.IsZero() {
		i := 0
		if d.on(d.lastAt.Add(now.Sub(d.lastAt) / 2)) {
			i = 1
		}
		d.records[i] += n - d.last
		d.seconds[i] += now.Sub(d.lastAt).Seconds()
	}
	d.last, d.lastAt = n, now
}

// run samples every interval until ctx ends.
func (d *drainMeter) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		d.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rates returns the drain rates without and with human input, in records
// per second (0 when a window had no time).
func (d *drainMeter) rates() (off, on float64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seconds[0] > 0 {
		off = d.records[0] / d.seconds[0]
	}
	if d.seconds[1] > 0 {
		on = d.records[1] / d.seconds[1]
	}
	return off, on, d.err
}

// consumed reads the records of topic a projector has consumed, from its
// /metrics at url (canopy_projector_records_consumed_total).
func consumed(ctx context.Context, client *http.Client, url, topic string) (float64, error) {
	fams, err := scrapeFamilies(ctx, client, url)
	if err != nil {
		return 0, err
	}
	return consumedIn(fams, topic), nil
}

// consumedIn is canopy_projector_records_consumed_total of topic in fams.
func consumedIn(fams map[string]*dto.MetricFamily, topic string) float64 {
	var n float64
	if f := fams["canopy_projector_records_consumed_total"]; f != nil {
		for _, m := range f.GetMetric() {
			if label(m, "topic") == topic {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
