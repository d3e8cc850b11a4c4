package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canopy-dev/canopy/pkg/wake"
)

// WakeObserver implements wake.Observer for a conductor: it emits
// conductor.wake.received and, given a registry, counts received wakes and
// their age at receipt.
type WakeObserver struct {
	events   *Events
	received *prometheus.CounterVec
	stale    *prometheus.CounterVec
	age      *prometheus.HistogramVec
}

// NewWakeObserver emits through events (nil: none) and registers the
// conductor's metrics on reg (nil: none).
func NewWakeObserver(reg prometheus.Registerer, events *Events) (*WakeObserver, error) {
	o := &WakeObserver{
		events: events,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "conductor", Name: "wakes_received_total",
			Help: "Wakes delivered to the conductor's handler (duplicates dropped), by lane."}, []string{"lane"}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "conductor", Name: "stale_wakes_received_total",
			Help: "Wakes whose snapshot was stale at receipt, by lane."}, []string{"lane"}),
		age: prometheus.NewHistogramVec(HistogramOpts("conductor", "snapshot_age_seconds",
			"Age of each delivered wake's snapshot at receipt, by lane.", SecondsBuckets), []string{"lane"}),
	}
	if reg != nil {
		if err := Register(reg, o.received, o.stale, o.age); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// WakeReceived counts the wake and emits conductor.wake.received, tied to
// ctx's span (the wake's process span).
func (o *WakeObserver) WakeReceived(ctx context.Context, r wake.Received) {
	lane := string(r.Lane)
	o.received.WithLabelValues(lane).Inc()
	o.age.WithLabelValues(lane).Observe(float64(r.AgeMs) / 1000)
	if r.Stale {
		o.stale.WithLabelValues(lane).Inc()
	}
	if o.events != nil {
		o.events.WakeReceived(ctx, ReceivedMeta{
			SnapshotMeta: SnapshotMeta{
				SnapshotID: r.SnapshotID, WakeID: r.WakeID, RunID: r.RunID, Lane: r.Lane, AsOfEventSeq: r.AsOfEventSeq,
				NodesIncluded: r.NodesIncluded, NodesOmitted: r.NodesOmitted, Bytes: r.Bytes, PolicyVersion: r.PolicyVersion,
				Truncated: r.Truncated, Stale: r.Stale, Age: time.Duration(r.AgeMs) * time.Millisecond,
			},
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		})
	}
}
