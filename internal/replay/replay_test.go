package replay_test

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jsonl encodes events one a line, as `projector replay` reads them.
func jsonl(t *testing.T, events []topics.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	for i := range events {
		enc, err := events[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(enc)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestReplayWritesEveryPart: the events whose one record raises more
// triggers than a wake holds (a chain of 20,000 nodes created leaf-first:
// 19,996 guard triggers, once a 2.8 MB line; 8,000 leases falling due
// together: once a 1 MB line) come out of replay as wakes of at most
// DefaultMaxWakeBytes and DefaultMaxWakeTriggers each, every trigger in
// exactly one of them and in order, numbered parts with ids of their own;
// and in any batching, the same lines.
func TestReplayWritesEveryPart(t *testing.T) {
	leases, _ := workload.Burst{RunID: "run-leases", Nodes: 8000, Owner: "pool-of-workers-in-eu-west-1"}.LeasesDueTogether()
	for _, c := range []struct {
		name     string
		events   []topics.Event
		triggers int
		kind     topics.TriggerKind
	}{
		{"chain created leaf-first", workload.Burst{RunID: "run-chain"}.LeafFirstChain(), 20_000 - projection.DefaultMaxDepth, topics.TriggerGuard},
		{"leases falling due together", leases, 8000, topics.TriggerLeaseExpired},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := jsonl(t, c.events)
			var out, errs bytes.Buffer
			st, err := replay.Run(bytes.NewReader(in), &out, &errs, replay.Options{})
			if err != nil || errs.Len() > 0 || st.Applied != len(c.events) {
				t.Fatalf("replay: %+v, %v\n%s", st, err, errs.String())
			}
			var trigs []topics.Trigger
			ids := map[string]bool{}
			sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
			sc.Buffer(nil, 4<<20)
			n := 0
			for sc.Scan() {
				n++
				line := sc.Bytes()
				w, err := topics.DecodeWake(line)
				if err != nil {
					t.Fatalf("wake %d: %v", n, err)
				}
				if len(line) > projection.DefaultMaxWakeBytes || len(w.Triggers) > projection.DefaultMaxWakeTriggers {
					t.Errorf("wake %d: %d bytes and %d triggers, over %d and %d", n, len(line), len(w.Triggers), projection.DefaultMaxWakeBytes, projection.DefaultMaxWakeTriggers)
				}
				if ids[w.WakeID] {
					t.Errorf("wake %d: id %s again", n, w.WakeID)
				}
				ids[w.WakeID] = true
				if w.Part == nil || w.Part.Number != n || w.Part.Count != st.Wakes {
					t.Errorf("wake %d of %d: part %+v", n, st.Wakes, w.Part)
				}
				trigs = append(trigs, w.Triggers...)
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			if want := (c.triggers + projection.DefaultMaxWakeTriggers - 1) / projection.DefaultMaxWakeTriggers; n != want || st.Wakes != n {
				t.Errorf("%d wakes (%d counted), want %d", n, st.Wakes, want)
			}
			if len(trigs) != c.triggers {
				t.Fatalf("%d triggers in the wakes, %d raised", len(trigs), c.triggers)
			}
			for i, tr := range trigs {
				// The chain's guards from agent-00005 down, the leases from agent-00001.
				want := fmt.Sprintf("agent-%05d", i+1+len(c.events)-1-c.triggers)
				if c.kind == topics.TriggerLeaseExpired {
					want = fmt.Sprintf("agent-%05d", i+1)
				}
				if tr.Kind != c.kind || tr.AgentID != want {
					t.Fatalf("trigger %d: %s %s, want %s %s", i, tr.Kind, tr.AgentID, c.kind, want)
				}
			}
			// One batch of everything, the same wakes: only the last
			// record raises triggers, and the split depends on nothing else.
			var all bytes.Buffer
			if _, err := replay.Run(bytes.NewReader(in), &all, &errs, replay.Options{Batch: len(c.events)}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(all.Bytes(), out.Bytes()) {
				t.Error("replayed in one batch, other wakes")
			}
		})
	}
}
