package projector

import (
	"bytes"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestWakesMatchReplay: events produced to a real broker come out as the wakes
// replay computes for them, with the same ids and snapshot content.
func TestWakesMatchReplay(t *testing.T) { brokertest.Run(t, testWakesMatchReplay) }

func testWakesMatchReplay(t *testing.T, b *brokertest.Broker) {
	e := newEnvOn(t, b, 4)
	var events []topics.Event
	for i, run := range []string{"run-a", "run-b", "run-c"} {
		events = append(events, workload.Generate(workload.Spec{RunID: run, Nodes: 12, Seed: uint64(i + 1)})...)
	}
	// Replay's reference, one event per batch as the projector sees them
	// when they trickle in one record at a time.
	var file bytes.Buffer
	for i := range events {
		b, _ := events[i].MarshalJSON()
		file.Write(b)
		file.WriteByte('\n')
	}
	var ref bytes.Buffer
	if _, err := replay.Run(bytes.NewReader(file.Bytes()), &ref, &bytes.Buffer{}, replay.Options{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]*topics.Wake{}
	for _, line := range bytes.Split(bytes.TrimSpace(ref.Bytes()), []byte("\n")) {
		w, err := topics.DecodeWake(line)
		if err != nil {
			t.Fatal(err)
		}
		want[w.WakeID] = w
	}

	cfg := e.config(t.TempDir())
	// The wall clock stands just after the events, so no timer is due: the
	// replay without -now fires none either.
	end := events[len(events)-1].Time.Std()
	cfg.Now = func() time.Time { return end }
	p, _ := e.start(cfg)
	for i := range events {
		e.produce(e.names.AgentEvents(), events[i])
		// One record per batch, as replay sees them: the next is produced
		// only once this one is consumed, so none pile up into one fetch.
		testenv.WaitFor(t, 30*time.Second, until(p, "event consumed", func() bool { return p.stats.Records.Load() == int64(i+1) }))
	}
	got := 0
	matched := 0
	e.wakes().until(60*time.Second, func(w *topics.Wake) bool {
		got++
		if ref, ok := want[w.WakeID]; ok {
			matched++
			a, b := ref.AgentTreeSnapshot, w.AgentTreeSnapshot
			a.GeneratedAt, b.GeneratedAt, a.SnapshotAgeMs, b.SnapshotAgeMs, a.Stale, b.Stale = topics.Time{}, topics.Time{}, 0, 0, false, false
			ea, _ := topics.Marshal(a)
			eb, _ := topics.Marshal(b)
			if !bytes.Equal(ea, eb) {
				t.Fatalf("wake %s: snapshot differs from replay:\nreplay: %s\nlive:   %s", w.WakeID, ea, eb)
			}
		}
		return p.stats.Applied.Load() == int64(len(events)) && int64(got) >= p.stats.Wakes.Load()
	})
	// Records fetched together are one batch, coalesced into one wake with an
	// id of its own; most arrive alone here and must match replay exactly.
	if matched < len(want)/2 {
		t.Fatalf("only %d of %d replay wakes came out live (%d live wakes)", matched, len(want), got)
	}
}
