package ids

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestGolden pins each derivation: the ids below are the ones canopy
// produced before the derivations moved here, and ids are part of the
// contract (a consumer de-duplicates by them across versions).
func TestGolden(t *testing.T) {
	ev, corr, det := "01JEVENT", "corr-1", "detail"
	trigs := []topics.Trigger{
		{Kind: topics.TriggerResult, AgentID: "agent-1", At: topics.NewTime(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)), EventID: &ev, CorrelationID: &corr, Detail: &det},
		{Kind: topics.TriggerCompleted, AgentID: "agent-2", At: topics.NewTime(time.Date(2026, 2, 14, 10, 0, 1, 500e6, time.UTC))},
	}
	wakeULID := ulid.MustParseStrict("01KARZ3NDEKTSV4RRFFQ69G5FA")
	at := uint64(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC).UnixMilli())
	before1970 := time.Date(1960, 2, 14, 10, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range []struct {
		name string
		got  ulid.ULID
		want string
	}{
		{"Wake", Wake("run-1", 42, trigs), "01KHDSFKPW9PAS3N1TPD1AE3EA"},
		{"Wake without triggers", Wake("run-1", 0, nil), "0000000000VW351G1BTP213FC2"},
		{"WakePart 1/2", WakePart("run-1", 42, trigs[:1], 1, 2), "01KHDSFJ80X1CS4Z8A43F7KS1M"},
		{"WakePart 2/2", WakePart("run-1", 42, trigs[1:], 2, 2), "01KHDSFKPW5HMW6W22R5JVMCMH"},
		{"Ack at the wake's time", Ack(wakeULID.Time(), "/conductor", "01KARZ3NDEKTSV4RRFFQ69G5FA"), "01KARZ3NDEAEZF7EAV2WEKRJ1M"},
		{"Ack at its own time", Ack(at, "/conductor", "not-a-ulid"), "01KHDSFJ80S4TS5JY7VVDHGA74"},
		{"Ack before 1970", Ack(uint64(before1970), "/conductor", "not-a-ulid"), "0000000000S4TS5JY7VVDHGA74"},
		{"Input", Input("bob", "run-1", "key-1"), "53ZDH4RE73J77GG1JTYBR6R8TH"},
	} {
		if c.got.String() != c.want {
			t.Errorf("%s: %s, want %s", c.name, c.got, c.want)
		}
	}
	if got := Derive(ulid.MaxTime()+1, "x").Time(); got != ulid.MaxTime() {
		t.Errorf("Derive past the last ULID time: time %d, want ulid.MaxTime", got)
	}
}

// TestWakePartIsItsOwn: a part's id differs from the id of the same
// triggers unsplit and from every other part number and count, and its
// time is its newest trigger's, as a wake id's.
func TestWakePartIsItsOwn(t *testing.T) {
	at := topics.NewTime(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC))
	trigs := []topics.Trigger{{Kind: topics.TriggerGuard, AgentID: "n5", At: at}, {Kind: topics.TriggerGuard, AgentID: "n6", At: at.Add(time.Second)}}
	seen := map[ulid.ULID]string{Wake("run-1", 7, trigs): "the whole wake"}
	for _, p := range [][2]int{{1, 2}, {2, 2}, {1, 3}, {2, 3}, {3, 3}, {12, 21}, {21, 12}} {
		id := WakePart("run-1", 7, trigs, p[0], p[1])
		name := fmt.Sprintf("part %d/%d", p[0], p[1])
		if other, ok := seen[id]; ok {
			t.Errorf("%s has the id of %s: %s", name, other, id)
		}
		seen[id] = name
		if id.Time() != uint64(at.Add(time.Second).UnixMilli()) {
			t.Errorf("%s: time %d, want its newest trigger's", name, id.Time())
		}
	}
	if a, b := WakePart("run-1", 7, trigs, 1, 2), WakePart("run-1", 7, slices.Clone(trigs), 1, 2); a != b {
		t.Error("WakePart is not deterministic")
	}
	if WakePart("run-1", 7, trigs, 1, 2) == WakePart("run-1", 8, trigs, 1, 2) || WakePart("run-1", 7, trigs, 1, 2) == WakePart("run-1", 7, trigs[:1], 1, 2) {
		t.Error("WakePart does not depend on the seq or the triggers")
	}
}
