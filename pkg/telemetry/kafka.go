package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// KafkaHooks returns a function giving each Kafka client kprom's hooks
// (franz-go's Prometheus plugin: connections, bytes, request latencies,
// buffered records) on reg, under canopy_kafka_*, labelled with the client's
// role. It fits projector.KafkaHooks. A kprom.Metrics registers its
// collectors when its client is created and unregisters them when it
// closes, so each client gets its own.
func KafkaHooks(reg prometheus.Registerer) func(role string) []kgo.Hook {
	return func(role string) []kgo.Hook {
		return []kgo.Hook{kprom.NewMetrics(Namespace+"_kafka", kprom.Registerer(reg),
			kprom.WithStaticLabel(prometheus.Labels{"client": role}),
			// Records and batches per topic, not per broker: what the
			// dashboards ask, at a cardinality that does not grow with the
			// cluster.
			kprom.FetchAndProduceDetail(kprom.ByTopic, kprom.Records, kprom.Batches, kprom.UncompressedBytes, kprom.ConsistentNaming))}
	}
}
