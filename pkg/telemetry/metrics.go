package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every canopy metric.
const Namespace = "canopy"

// HistogramOpts are the options of a canopy histogram: classic buckets and,
// for Prometheus servers that scrape them, native buckets too.
func HistogramOpts(subsystem, name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

// SecondsBuckets is the bucket layout of every canopy latency: 100µs to 30s.
var SecondsBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Register registers every collector on reg, and reports the first error.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
