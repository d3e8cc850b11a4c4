package ids

import (
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
