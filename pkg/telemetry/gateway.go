package telemetry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// GatewayMetrics implements gateway.Hooks: requests by route, method and
// status, and their durations by route; the redactions of human input
// (Redactions).
type GatewayMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	*Redactions
}

// NewGatewayMetrics registers the gateway's metrics on reg, the series of
// canopy_redactions_total of each of redactionRules (its redaction
// policy's rules) among them.
func NewGatewayMetrics(reg prometheus.Registerer, redactionRules []string) (*GatewayMetrics, error) {
	red, err := NewRedactions(reg, redactionRules)
	if err != nil {
		return nil, err
	}
	m := &GatewayMetrics{Redactions: red,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "gateway", Name: "requests_total",
			Help: "HTTP requests served, by route pattern (\"\" for none), method (GET, POST, HEAD, OPTIONS, PUT, DELETE, PATCH or _OTHER) and status code."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(HistogramOpts("gateway", "request_duration_seconds",
			"Time to serve an HTTP request, by route pattern; a wake stream counts when it ends.", SecondsBuckets), []string{"route"}),
	}
	return m, Register(reg, m.requests, m.duration)
}

// Request counts one request.
func (m *GatewayMetrics) Request(route, method string, status int, took time.Duration) {
	if route == "/" {
		route = "" // the catch-all is "no such route"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(took.Seconds())
}
