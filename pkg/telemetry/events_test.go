package telemetry_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/telemetry"
)

// TestEventsAreInfoLines: at the binaries' default level (info) each of the
// projector's snapshot events is a log line, so that what a conductor was
// shown can be audited from the logs alone, without a collector.
func TestEventsAreInfoLines(t *testing.T) {
	var buf testenv.Buffer
	events := telemetry.NewEvents(nil, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	events.Snapshot(context.Background(), telemetry.SnapshotMeta{SnapshotID: "snap-1", WakeID: "wake-1", RunID: "run-1",
		NodesIncluded: 64, NodesOmitted: 3, Truncated: true, Stale: true})
	events.WakeReceived(context.Background(), telemetry.ReceivedMeta{SnapshotMeta: telemetry.SnapshotMeta{SnapshotID: "snap-1", WakeID: "wake-1", RunID: "run-1"}})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for _, name := range []string{telemetry.EventSnapshotGenerated, telemetry.EventSnapshotTruncated, telemetry.EventSnapshotStale, telemetry.EventWakeReceived} {
		found := false
		for _, l := range lines {
			if strings.Contains(l, "event="+name) {
				found = true
				if !strings.Contains(l, "level=INFO") || !strings.Contains(l, "snapshot_id=snap-1") {
					t.Errorf("%s: %s", name, l)
				}
			}
		}
		if !found {
			t.Errorf("no %s line at info level:\n%s", name, buf.String())
		}
	}
}
