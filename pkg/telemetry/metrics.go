package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every canopy metric.
const Namespace = "canopy"

// histogram makes a histogram with classic buckets and, for Prometheus
// servers that scrape them, native buckets too.
func histogram(subsystem, name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  160,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

// Bucket layouts: latencies from 100µs to 30s, sizes from 256 B to 1 MiB.
var (
	secondsBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	bytesBuckets   = prometheus.ExponentialBuckets(256, 2, 13)
	nodesBuckets   = []float64{1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256}
)

// register registers every collector on reg, and reports the first error.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
