package telemetry_test

import (
	"context"
	"io"
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

// TestSnapshotEventsShareTheirAttributes: a snapshot's three events, each
// with every attribute and its own name, are built in one array that does
// not reach the heap: a projector emits them for every wake. What slog
// allocates is not the events' to save: a record keeps five attributes
// inline and copies the others to a slice of its own, one per event.
func TestSnapshotEventsShareTheirAttributes(t *testing.T) {
	var buf testenv.Buffer
	events := telemetry.NewEvents(nil, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	m := telemetry.SnapshotMeta{SnapshotID: "snap-1", WakeID: "wake-1", RunID: "run-1", Lane: "normal", AsOfEventSeq: 7,
		NodesIncluded: 64, NodesOmitted: 3, Bytes: 23000, ByteBudget: 24000, PolicyVersion: "canopy.truncation.v1",
		Truncated: true, Stale: true}
	events.Snapshot(context.Background(), m)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	for i, name := range []string{telemetry.EventSnapshotGenerated, telemetry.EventSnapshotTruncated, telemetry.EventSnapshotStale} {
		for _, want := range []string{"snapshot_id=snap-1", "wake_id=wake-1", "run_id=run-1", "lane=normal", "as_of_event_seq=7",
			"nodes_included=64", "nodes_omitted=3", "bytes=23000", "byte_budget=24000", "truncated=true", "stale=true",
			"generation_ms=0", " event=" + name} {
			if !strings.Contains(lines[i], want) {
				t.Errorf("line %d lacks %q: %s", i, want, lines[i])
			}
		}
		if strings.Count(lines[i], " event=") != 1 {
			t.Errorf("line %d names its event more than once: %s", i, lines[i])
		}
	}
	// Against a handler that keeps nothing: slog's record slices alone.
	quiet := telemetry.NewEvents(nil, slog.New(discard{}), nil)
	if n := testing.AllocsPerRun(100, func() { quiet.Snapshot(context.Background(), m) }); n > 3 && !raceDetectorOn {
		t.Errorf("a snapshot's three events allocated %v times, want at most slog's 3", n)
	}
}

// discard is a slog.Handler that takes every record and keeps nothing.
type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return true }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }

// BenchmarkSnapshotEvents is the cost of a wake's snapshot events at the
// binaries' default level, through slog's text handler.
func BenchmarkSnapshotEvents(b *testing.B) {
	events := telemetry.NewEvents(nil, slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})), nil)
	m := telemetry.SnapshotMeta{SnapshotID: "01JM0000000000000000000000", WakeID: "01JM0000000000000000000001", RunID: "run-1",
		Lane: "normal", AsOfEventSeq: 7, NodesIncluded: 64, NodesOmitted: 136, Bytes: 23000, ByteBudget: 24000,
		PolicyVersion: "canopy.truncation.v1", Truncated: true}
	b.ReportAllocs()
	for b.Loop() {
		events.Snapshot(context.Background(), m)
	}
}
