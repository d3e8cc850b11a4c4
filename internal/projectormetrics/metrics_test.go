package projectormetrics_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/projectormetrics"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// TestHistogramsAreNativeToo: every canopy histogram is exposed with
// native buckets (a schema and spans, what a Prometheus with native
// histograms stores) as well as its classic buckets (what one without
// stores). The dashboards' quantile queries read either.
func TestHistogramsAreNativeToo(t *testing.T) {
	reg := telemetry.NewRegistry()
	pm, err := projectormetrics.NewProjectorMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	gm, err := telemetry.NewGatewayMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := telemetry.NewWakeObserver(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One observation in each histogram, through the hooks the parts call.
	ev := "ev-1"
	pm.WakeCommitted(context.Background(), projector.CommittedWake{
		Wake:  &topics.Wake{Lane: topics.LaneNormal, Triggers: []topics.Trigger{{Kind: topics.TriggerResult, EventID: &ev}}},
		Build: 300 * time.Microsecond, FromRecord: true, Lag: 40 * time.Millisecond})
	pm.Committed(0, 5*time.Millisecond, nil)
	pm.Restored(0, changelog.Result{Records: 10, Elapsed: 2 * time.Second}, nil)
	gm.Request("/v1/runs/{run_id}/input", "POST", 202, 3*time.Millisecond)
	obs.WakeReceived(context.Background(), wake.Received{Lane: topics.LaneNormal, AgeMs: 12})

	var seen []string
	for name, f := range gather(t, reg) {
		if f.GetType().String() != "HISTOGRAM" || !strings.HasPrefix(name, telemetry.Namespace+"_") {
			continue
		}
		seen = append(seen, name)
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue // a lane or route not observed: nothing to bucket
			}
			if h.Schema == nil || len(h.GetPositiveSpan()) == 0 && h.GetZeroCount() == 0 {
				t.Errorf("%s%v: no native buckets (schema %v, %d spans, zero count %d)", name, m.GetLabel(), h.Schema, len(h.GetPositiveSpan()), h.GetZeroCount())
			}
			if len(h.GetBucket()) == 0 {
				t.Errorf("%s%v: no classic buckets", name, m.GetLabel())
			}
		}
	}
	for _, want := range []string{"canopy_snapshot_build_seconds", "canopy_snapshot_size_bytes", "canopy_snapshot_nodes",
		"canopy_projector_wake_lag_seconds", "canopy_projector_commit_seconds", "canopy_projector_restore_seconds",
		"canopy_gateway_request_duration_seconds", "canopy_conductor_snapshot_age_seconds"} {
		if !slices.Contains(seen, want) {
			t.Errorf("histogram %s not exposed (exposed: %v)", want, seen)
		}
	}
}
