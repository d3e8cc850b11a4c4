package telemetry

import (
	"net/http"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry is a registry with the Go runtime and process collectors and
// canopy_build_info, the base of every canopy binary's /metrics.
//
// Beside the Go collector's defaults it exports runtime/metrics' CPU
// classes of the whole process, of the GC and of idle time
// (go_cpu_classes_total_cpu_seconds_total, go_cpu_classes_gc_total_cpu_seconds_total,
// go_cpu_classes_idle_cpu_seconds_total): the GC's share of the CPU the
// process used, which the load harness reports per scenario. Only those:
// the full set would triple the exposition.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcCPURule)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(ReadBuild()))
	return reg
}

// gcCPURule picks the runtime/metrics CPU classes NewRegistry exports.
var gcCPURule = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/(total|idle|gc/total):cpu-seconds$`)}

// Handler serves reg's metrics on /metrics, in the text formats and, for a
// scraper that asks, the protobuf format that carries native histograms.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
}
