package projection

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// uncached is a run without its digest cache (only snapshot.Tree's methods
// are promoted): the builder digests and encodes every node anew.
type uncached struct{ snapshot.Tree }

// TestDigestCacheMatchesUncached replays generated runs (nodes blocking,
// failing, leasing, requesting, signalling) and builds a snapshot after
// every few events, as wakes do, both from the run, whose cache carries
// digests from build to build while its nodes change and its clock (the
// wakes' At, against which leases are measured) moves, and from the run
// without its cache. They must be the same bytes.
func TestDigestCacheMatchesUncached(t *testing.T) {
	for _, size := range []int{30, 300} {
		t.Run(fmt.Sprintf("nodes=%d", size), func(t *testing.T) {
			p, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			events := workload.Generate(workload.Spec{Nodes: size, Seed: 7, BlockedShare: 0.2, FailedShare: 0.1,
				RunningShare: 0.3, RequestShare: 0.3})
			builds := 0
			for i := range events {
				ev := &events[i]
				p.Apply(ev)
				if i%3 != 0 && i != len(events)-1 {
					continue
				}
				r, _ := p.Run(ev.RunID)
				w := snapshot.Wake{SnapshotID: "01JM0000000000000000000000", Seq: r.Seq(), At: r.Clock(), AgentIDs: []string{ev.AgentID}}
				if ev.CorrelationID != "" {
					w.CorrelationIDs = []string{ev.CorrelationID}
				}
				limits := []snapshot.Limits{{}}
				if i%30 == 0 {
					// Other limits now and then: the cache must not serve
					// digests made under the ones before.
					limits = append(limits, snapshot.Limits{MaxNodes: 16, MaxDedupeKeys: 1, MaxStringLength: 9}, snapshot.Limits{})
				}
				for _, l := range limits {
					want, wantInfo, err := snapshot.Build(uncached{r}, w, l, r.Clock().Std())
					if err != nil {
						t.Fatal(err)
					}
					got, gotInfo, err := snapshot.Build(r, w, l, r.Clock().Std())
					if err != nil {
						t.Fatal(err)
					}
					builds++
					if !bytes.Equal(gotInfo.Encoded, wantInfo.Encoded) {
						t.Fatalf("event %d, limits %+v: the cached snapshot differs:\n got  %s\n want %s", i, l, gotInfo.Encoded, wantInfo.Encoded)
					}
					if g, w := mustMarshal(t, got), mustMarshal(t, want); !bytes.Equal(g, w) || !bytes.Equal(g, gotInfo.Encoded) {
						t.Fatalf("event %d, limits %+v: the cached snapshot's struct differs from its encoding or the uncached one", i, l)
					}
				}
			}
			if r, _ := p.Run(events[0].RunID); r.DigestCache() == nil || builds < len(events)/3 {
				t.Fatalf("%d builds", builds)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := topics.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
