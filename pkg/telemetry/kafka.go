package telemetry

import (
	"errors"
	"sync"

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
		return []kgo.Hook{kprom.NewMetrics(Namespace+"_kafka", kprom.Registerer(r),
			kprom.WithStaticLabel(prometheus.Labels{"client": role}),
			// Records and batches per topic, not per broker: what the
			// dashboards ask, at a cardinality that does not grow with the
			// cluster.
			kprom.FetchAndProduceDetail(kprom.ByTopic, kprom.Records, kprom.Batches, kprom.UncompressedBytes, kprom.ConsistentNaming))}
	}
}

// clientRegisterer is the prometheus.Registerer of KafkaHooks: the newest
// client's collector wins a name, and only the collectors it registered
// itself can be unregistered through it.
type clientRegisterer struct {
	reg prometheus.Registerer

	mu   sync.Mutex
	live map[prometheus.Collector]struct{} // registered through r and not displaced
}

// Register registers c, unregistering an equal collector that an earlier
// client registered through r.
func (r *clientRegisterer) Register(c prometheus.Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
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
	if _, ok := r.live[c]; !ok {
		return false
	}
	delete(r.live, c)
	return r.reg.Unregister(c)
}
