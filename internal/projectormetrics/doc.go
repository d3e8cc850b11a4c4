// Package projectormetrics adapts what the projector reports through its
// hooks (projector.Hooks) to Prometheus metrics and pkg/telemetry's
// snapshot events, as franz-go's kprom plugin adapts kgo's hooks: the
// adapter depends on the core, never the reverse. It is internal because
// the hooks are; pkg/telemetry holds what a conductor needs.
package projectormetrics
