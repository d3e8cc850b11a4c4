package telemetry

import (
	"errors"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// KafkaHooks returns a function giving each Kafka client kprom's hooks
// (franz-go's Prometheus plugin: connections, bytes, request latencies,
// buffered records) on reg, under canopy_kafka_*, labelled with the client's
// role. It fits projector.KafkaHooks. A kprom.Metrics registers its
// collectors when its client is created and unregisters them when it
// closes, so each client gets its own.
//
// A client may be created while an earlier client of the same role is still
// closing: a projector instance that failed is replaced while its group
// client's leave goes on in the background. kprom registers with
// MustRegister, so the newer client's collectors take the place of the
// older one's (its counters restart, which Prometheus reads as a reset),
// and the older client's late unregistering is ignored rather than taking
// the newer one's metrics with it.
func KafkaHooks(reg prometheus.Registerer) func(role string) []kgo.Hook {
	r := &clientRegisterer{reg: reg, live: make(map[prometheus.Collector]struct{})}
	return func(role string) []kgo.Hook {
		batches := &batchCounters{reg: r}
		m := kprom.NewMetrics(Namespace+"_kafka", kprom.Registerer(batches),
			kprom.WithStaticLabel(prometheus.Labels{"client": role}),
			// Records and batches per topic, not per broker: what the
			// dashboards ask, at a cardinality that does not grow with the
			// cluster. kafkaMetrics counts them (kafkabatch.go).
			kprom.FetchAndProduceDetail(kprom.ByTopic, kprom.Records, kprom.Batches, kprom.UncompressedBytes, kprom.ConsistentNaming))
		return []kgo.Hook{kafkaMetrics{Metrics: m, batches: batches}}
	}
}

// clientRegisterer is the prometheus.Registerer of KafkaHooks: the newest
// client's collector wins a name, and only the collectors it registered
// itself can be unregistered through it. It also renames kprom's buffered
// records gauges (below).
type clientRegisterer struct {
	reg prometheus.Registerer

	mu      sync.Mutex
	live    map[prometheus.Collector]struct{}             // registered through r and not displaced
	renamed map[prometheus.Collector]prometheus.Collector // kprom's collector -> what r registered for it
}

// Register registers c, unregistering an equal collector that an earlier
// client registered through r.
func (r *clientRegisterer) Register(c prometheus.Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	orig := c
	if g, ok := renameGauge(c); ok {
		c = g
	}
	err := r.reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if _, ours := r.live[are.ExistingCollector]; ours {
			r.reg.Unregister(are.ExistingCollector)
			delete(r.live, are.ExistingCollector)
			err = r.reg.Register(c)
		}
	}
	if err != nil {
		return err
	}
	r.live[c] = struct{}{}
	if c != orig {
		if r.renamed == nil {
			r.renamed = make(map[prometheus.Collector]prometheus.Collector)
		}
		r.renamed[orig] = c
	}
	return nil
}

// MustRegister registers each collector and panics on an error other than a
// displaced earlier client's, as prometheus.Registry does: such an error is
// a programming mistake (two metrics of one name with different labels), not
// something a running client can cause.
func (r *clientRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c if it is still the registered collector of its
// name, and reports whether it was.
func (r *clientRegisterer) Unregister(c prometheus.Collector) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.renamed[c]; ok {
		delete(r.renamed, c)
		c = g
	}
	if _, ok := r.live[c]; !ok {
		return false
	}
	delete(r.live, c)
	return r.reg.Unregister(c)
}

// renameGauge gives kprom's buffered records gauges
// (*_buffered_produce_records_total, *_buffered_fetch_records_total) a
// gauge's name, without the counter suffix _total, which makes promtool
// check metrics fail and PromQL users reach for rate(): c is served as
// canopy_kafka_buffered_produce_records and
// canopy_kafka_buffered_fetch_records. Any other collector is left alone.
func renameGauge(c prometheus.Collector) (prometheus.Collector, bool) {
	name, ok := descName(c)
	if !ok || !strings.Contains(name, "_buffered_") || !strings.HasSuffix(name, "_records_total") {
		return nil, false
	}
	return &gaugeRename{c: c, name: strings.TrimSuffix(name, "_total")}, true
}

// gaugeRename serves the one gauge c collects under name, with the gauge's
// labels.
type gaugeRename struct {
	c    prometheus.Collector
	name string

	once sync.Once
	desc *prometheus.Desc
}

// collect reads c's gauge.
func (g *gaugeRename) collect() (float64, prometheus.Labels, bool) {
	ms := make(chan prometheus.Metric, 1)
	go func() { g.c.Collect(ms); close(ms) }()
	var (
		v      float64
		labels prometheus.Labels
		ok     bool
	)
	for m := range ms {
		var d dto.Metric
		if m.Write(&d) != nil || d.Gauge == nil {
			continue
		}
		v, labels, ok = d.Gauge.GetValue(), prometheus.Labels{}, true
		for _, l := range d.Label {
			labels[l.GetName()] = l.GetValue()
		}
	}
	return v, labels, ok
}

// describe builds the renamed Desc, with c's labels as constant labels, the
// first time it is needed.
func (g *gaugeRename) describe() *prometheus.Desc {
	g.once.Do(func() {
		_, labels, _ := g.collect()
		what := "produced"
		if strings.Contains(g.name, "_fetch_") {
			what = "consumed"
		}
		g.desc = prometheus.NewDesc(g.name, "Records buffered within the client ready to be "+what, nil, labels)
	})
	return g.desc
}

// Describe implements prometheus.Collector.
func (g *gaugeRename) Describe(ch chan<- *prometheus.Desc) { ch <- g.describe() }

// Collect implements prometheus.Collector.
func (g *gaugeRename) Collect(ch chan<- prometheus.Metric) {
	desc := g.describe()
	if v, _, ok := g.collect(); ok {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
}
