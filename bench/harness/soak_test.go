package harness

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestParseMetrics reads Prometheus's text format as the projector serves
// it: comments skipped, label sets summed by name, exponents read.
func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP go_memstats_heap_inuse_bytes Number of heap bytes that are in use.
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1.2345e+08
canopy_projector_consumer_lag_records{partition="0",topic="a"} 3
canopy_projector_consumer_lag_records{partition="1",topic="a b}"} 4

process_resident_memory_bytes 4.2e+07 1700000000000
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"go_memstats_heap_inuse_bytes": 1.2345e8, "canopy_projector_consumer_lag_records": 7, "process_resident_memory_bytes": 4.2e7}
	if len(m) != len(want) {
		t.Fatalf("parsed %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if _, err := parseMetrics(strings.NewReader("a{b=\"c\"\n")); err == nil {
		t.Error("unclosed labels: no error")
	}
}

// TestSoakTargets: the growth verdicts look at the last third of the sends
// only (not the warm-up, not the drain), the largest sample against the
// third's first; the RSS verdict at every sample.
func TestSoakTargets(t *testing.T) {
	const mib = 1 << 20
	var xs []soakSample
	for i := range 10 {
		x := soakSample{at: time.Duration(i) * time.Second, rss: 100 * mib, pebble: int64(10+10*i) * mib, changelog: 50 * mib, changelogOK: true}
		if i >= 6 { // the last third: 6 s to 9 s
			x.rss = 105 * mib
		}
		xs = append(xs, x)
	}
	xs = append(xs, soakSample{at: 12 * time.Second, drain: true, rss: 600 * mib, changelog: 500 * mib, changelogOK: true})
	ts := soakTargets(xs, 9*time.Second, 0, 512*mib)
	if len(ts) != 7 {
		t.Fatalf("%d targets: %+v", len(ts), ts)
	}
	find := func(prefix string) Target {
		for _, tg := range ts {
			if strings.HasPrefix(tg.Name, prefix) {
				return tg
			}
		}
		t.Fatalf("no target %q in %+v", prefix, ts)
		return Target{}
	}
	// RSS: 105 MiB throughout the last third (its step up is before it).
	if tg := find("projector RSS, last third"); !tg.Met || tg.Measured != "1.00x" {
		t.Errorf("RSS growth: %+v, want met at 1.00x", tg)
	}
	// Pebble: 70 MiB at 6 s to 100 MiB at 9 s: 1.43x, a miss.
	if tg := find("Pebble bytes, last third"); tg.Met || tg.Measured != "1.43x" {
		t.Errorf("Pebble growth: %+v, want missed at 1.43x", tg)
	}
	// The trend says the same: flat RSS, Pebble on a line from 70 to 100.
	if tg := find("projector RSS, last third of the sends: trend"); !tg.Met || tg.Measured != "1.00x" {
		t.Errorf("RSS trend: %+v, want met at 1.00x", tg)
	}
	if tg := find("Pebble bytes, last third of the sends: trend"); tg.Met || tg.Measured != "1.43x" {
		t.Errorf("Pebble trend: %+v, want missed at 1.43x", tg)
	}
	// The changelog's jump is in the drain: not counted.
	if tg := find("changelog bytes, last third"); !tg.Met || tg.Measured != "1.00x" {
		t.Errorf("changelog growth: %+v, want met at 1.00x", tg)
	}
	// The RSS limit is checked throughout, drain included.
	if tg := find("projector RSS, largest sample"); tg.Met || tg.Measured != "600 MiB" {
		t.Errorf("RSS against the limit: %+v, want 600 MiB, missed", tg)
	}
}

// TestSoakTrend: a sawtooth (a changelog compacted now and then) whose
// first sample falls at a foot has a largest/first ratio far over the
// limit and a flat trend; a steady climb has both.
func TestSoakTrend(t *testing.T) {
	get := func(x soakSample) (int64, bool) { return x.changelog, true }
	var saw, climb []soakSample
	for i := range 30 {
		saw = append(saw, soakSample{at: time.Duration(i) * time.Second, changelog: int64(90 + 30*(i%3))})
	}
	for i := range 12 {
		climb = append(climb, soakSample{at: time.Duration(i) * time.Second, changelog: int64(100 + 5*i)})
	}
	if largest, first := 150.0, 90.0; largest/first <= soakGrowthLimit {
		t.Fatal("the sawtooth no longer exceeds the limit by its largest sample")
	}
	if s, e := trend(saw, get); e/s > soakGrowthLimit || e/s < 1/soakGrowthLimit {
		t.Errorf("sawtooth: trend %.1f to %.1f, want flat within %.2fx", s, e, soakGrowthLimit)
	}
	if s, e := trend(climb, get); s != 100 || e != 155 {
		t.Errorf("climb: trend %.1f to %.1f, want 100 to 155", s, e)
	}
}

// TestSoakTombstones: soak's changelog keeps tombstones three times the
// projector's retention (at least 10 s), and they really go: the embedded
// broker's compaction, which soak runs, drops the changelog's tombstones
// older than that and keeps the younger ones and every live value.
func TestSoakTombstones(t *testing.T) {
	for _, c := range []struct{ retention, want time.Duration }{
		{20 * time.Second, time.Minute}, {time.Minute, 3 * time.Minute}, {time.Second, 10 * time.Second},
	} {
		if got := soakTombstones(c.retention); got != c.want {
			t.Errorf("soakTombstones(%v) = %v, want %v", c.retention, got, c.want)
		}
	}

	h := &Harness{cfg: Config{Partitions: 1, WorkDir: t.TempDir(), Progress: io.Discard}, began: time.Now()}
	defer h.close()
	if err := h.open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	window := soakTombstones(time.Second)
	s, err := h.newStage(ctx, "soak", topics.TombstoneRetention(window))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	topic := s.names.Changelog()
	rcs, err := h.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, cfg := range rc.Configs {
		if cfg.Value != nil {
			got[cfg.Key] = *cfg.Value
		}
	}
	if got["delete.retention.ms"] != "10000" || got["segment.ms"] != "10000" {
		t.Errorf("the changelog's delete.retention.ms %q, segment.ms %q; want 10000 both", got["delete.retention.ms"], got["segment.ms"])
	}

	// Tombstones written before the window and within it, a live value,
	// and a last batch (which compaction never touches), each produced
	// on its own, as batches of their own.
	now := time.Now()
	recs := []*kgo.Record{
		{Key: []byte("old-1"), Timestamp: now.Add(-window - time.Minute)},
		{Key: []byte("old-2"), Timestamp: now.Add(-window - time.Second)},
		{Key: []byte("young"), Timestamp: now.Add(-window + 5*time.Second)},
		{Key: []byte("live"), Value: []byte("v"), Timestamp: now.Add(-time.Hour)},
		{Key: []byte("last"), Value: []byte("v"), Timestamp: now},
	}
	for _, r := range recs {
		r.Topic = topic
		if err := s.producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	h.cluster.Compact()

	cl, err := kgo.NewClient(h.kafka.Opts(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var keys []string
	for !slices.Contains(keys, "last") {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("reading the changelog: %v (so far %v)", err, keys)
		}
		fs.EachRecord(func(r *kgo.Record) { keys = append(keys, string(r.Key)) })
	}
	if want := []string{"young", "live", "last"}; !slices.Equal(keys, want) {
		t.Errorf("after compaction the changelog holds %v, want %v: tombstones older than %v gone, the rest kept", keys, want, window)
	}
}
