package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Redactions counts what redaction (pkg/redact) replaced, by rule:
// canopy_redactions_total{rule}. The projector and the gateway both count
// into it; in one process (canopy-dev) they share its series.
type Redactions struct {
	c *prometheus.CounterVec
}

// NewRedactions registers canopy_redactions_total on reg, or takes the one
// registered there already, and makes the series of rules (a policy's
// Rules: the built-in ones and the operator's), so that each shows from 0
// and increase() sees its first count.
func NewRedactions(reg prometheus.Registerer, rules []string) (*Redactions, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "redactions_total",
		Help: "Secrets replaced in events' free text before anything was made of them (docs/CONTRACT.md \"Redaction\"), by rule: " +
			"a built-in rule, an operator's pattern, field:<field> for an operator's field rule, or overflow."}, []string{"rule"})
	if err := reg.Register(c); err != nil {
		are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
		if !ok {
			return nil, err
		}
		if c, ok = are.ExistingCollector.(*prometheus.CounterVec); !ok {
			return nil, err
		}
	}
	for _, r := range rules {
		c.WithLabelValues(r)
	}
	return &Redactions{c: c}, nil
}

// Redacted counts one replacement by rule.
func (r *Redactions) Redacted(rule string) { r.c.WithLabelValues(rule).Inc() }
