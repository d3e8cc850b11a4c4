package telemetry

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// kafkaMetrics is kprom's hooks but for the two it calls for every batch
// fetched or produced, which count into kprom's own counters without
// kprom's cost: kprom makes a label map for each batch and looks each
// counter up by it, which was 2.7% of what a projector under steady load
// allocated. The counters, their names and labels are kprom's.
type kafkaMetrics struct {
	*kprom.Metrics
	batches *batchCounters
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (k kafkaMetrics) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	if t := k.batches.of(topic); t != nil {
		t.fetchBatches.Inc()
		t.fetchRecords.Add(float64(m.NumRecords))
		t.fetchBytes.Add(float64(m.UncompressedBytes))
	}
}

// OnProduceBatchWritten implements kgo.HookProduceBatchWritten.
func (k kafkaMetrics) OnProduceBatchWritten(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.ProduceBatchMetrics) {
	if t := k.batches.of(topic); t != nil {
		t.produceBatches.Inc()
		t.produceRecords.Add(float64(m.NumRecords))
		t.produceBytes.Add(float64(m.UncompressedBytes))
	}
}

// The per-topic counters kprom makes with KafkaHooks' options (ByTopic,
// Records, Batches, UncompressedBytes, ConsistentNaming), by the suffix of
// their names.
const (
	fetchBatchesName   = "_fetch_batches_total"
	fetchRecordsName   = "_fetch_records_total"
	fetchBytesName     = "_fetch_uncompressed_bytes_total"
	produceBatchesName = "_produce_batches_total"
	produceRecordsName = "_produce_records_total"
	produceBytesName   = "_produce_uncompressed_bytes_total"
)

// batchCounters is the prometheus.Registerer of one client's kprom.Metrics:
// it passes every collector on to reg, and keeps the counter vectors of
// the batch metrics as kprom registers them, with each topic's counters
// once looked up.
type batchCounters struct {
	reg prometheus.Registerer

	mu     sync.RWMutex
	vecs   map[string]*prometheus.CounterVec // by name suffix
	topics map[string]*topicCounters
}

// topicCounters are one topic's batch counters.
type topicCounters struct {
	fetchBatches, fetchRecords, fetchBytes       prometheus.Counter
	produceBatches, produceRecords, produceBytes prometheus.Counter
}

// Register implements prometheus.Registerer.
func (b *batchCounters) Register(c prometheus.Collector) error {
	if err := b.reg.Register(c); err != nil {
		return err
	}
	if v, ok := c.(*prometheus.CounterVec); ok {
		if name, ok := descName(c); ok {
			for _, suffix := range []string{fetchBatchesName, fetchRecordsName, fetchBytesName, produceBatchesName, produceRecordsName, produceBytesName} {
				if strings.HasSuffix(name, suffix) {
					b.mu.Lock()
					if b.vecs == nil {
						b.vecs = make(map[string]*prometheus.CounterVec)
					}
					b.vecs[suffix] = v
					b.topics = nil // counters of an earlier registration
					b.mu.Unlock()
				}
			}
		}
	}
	return nil
}

// MustRegister implements prometheus.Registerer.
func (b *batchCounters) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := b.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister implements prometheus.Registerer.
func (b *batchCounters) Unregister(c prometheus.Collector) bool { return b.reg.Unregister(c) }

// of returns topic's counters, nil until kprom has registered all six.
func (b *batchCounters) of(topic string) *topicCounters {
	b.mu.RLock()
	t := b.topics[topic]
	b.mu.RUnlock()
	if t != nil {
		return t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t = b.topics[topic]; t != nil {
		return t
	}
	if len(b.vecs) < 6 {
		return nil
	}
	c := func(suffix string) prometheus.Counter { return b.vecs[suffix].WithLabelValues(topic) }
	t = &topicCounters{
		fetchBatches: c(fetchBatchesName), fetchRecords: c(fetchRecordsName), fetchBytes: c(fetchBytesName),
		produceBatches: c(produceBatchesName), produceRecords: c(produceRecordsName), produceBytes: c(produceBytesName),
	}
	if b.topics == nil {
		b.topics = make(map[string]*topicCounters)
	}
	b.topics[topic] = t
	return t
}

// descName is the name of the one metric c describes; false when it
// describes none or several.
func descName(c prometheus.Collector) (string, bool) {
	descs := make(chan *prometheus.Desc, 4)
	go func() { c.Describe(descs); close(descs) }()
	var name string
	n := 0
	for d := range descs {
		n++
		// Desc exposes its name only through String: fqName: "...".
		s := d.String()
		i := strings.Index(s, `fqName: "`)
		if i < 0 {
			continue
		}
		s = s[i+len(`fqName: "`):]
		if j := strings.IndexByte(s, '"'); j >= 0 {
			name = s[:j]
		}
	}
	return name, n == 1 && name != ""
}
