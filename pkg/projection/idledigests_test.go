package projection

import (
	"bytes"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestIdleDigestsDropped checks that a run not woken for idleDigestCommits
// commits loses its digest cache, and its share of the footprint, while a
// run woken at every commit keeps its; and that the quiet run's next wake,
// built without a cache, has the bytes it would have had with one.
func TestIdleDigestsDropped(t *testing.T) {
	p, _ := New(Config{})
	ref, _ := New(Config{}) // never commits: keeps every cache
	events := workload.Generate(workload.Spec{Nodes: 200, Seed: 3})
	for _, run := range []string{"busy", "quiet"} {
		for i := range events {
			ev := events[i]
			ev.RunID = run
			p.Apply(&ev)
			ev = events[i]
			ev.RunID = run
			ref.Apply(&ev)
		}
	}
	wake := func(p *Projection, run string) Built {
		t.Helper()
		var b Pending
		b.Add(run, []topics.Trigger{{Kind: topics.TriggerStatusFailed, AgentID: "agent-00007", At: topics.NewTime(time.UnixMilli(1))}})
		built, err := p.Wakes(&b, time.Time{}, topics.Time{})
		if err != nil || len(built) != 1 {
			t.Fatalf("wake of %s: %d wakes, %v", run, len(built), err)
		}
		return built[0]
	}
	busy, _ := p.Run("busy")
	quiet, _ := p.Run("quiet")
	wake(p, "busy")
	wake(p, "quiet")
	wake(ref, "quiet")
	if busy.digests.Len() == 0 || quiet.digests.Len() == 0 {
		t.Fatalf("after a wake each, the caches hold %d and %d nodes", busy.digests.Len(), quiet.digests.Len())
	}
	withCache := p.HotBytes()
	for i := range 2 * idleDigestCommits {
		wake(p, "busy")
		if err := p.Commit(nil); err != nil {
			t.Fatal(err)
		}
		if i < idleDigestCommits-1 && quiet.digests.Len() == 0 {
			t.Fatalf("the quiet run's cache was dropped after %d commits", i+1)
		}
	}
	if quiet.digests.Len() != 0 {
		t.Fatalf("the quiet run still caches %d nodes after %d commits without a wake", quiet.digests.Len(), 2*idleDigestCommits)
	}
	if busy.digests.Len() == 0 {
		t.Fatal("the run woken at every commit lost its cache")
	}
	if got, want := p.HotBytes(), withCache-footprintDigest*int64(quietCached(ref)); got != want {
		t.Fatalf("footprint %d after the drop, want %d (%d less the quiet run's digests)", got, want, withCache)
	}
	if got, want := wake(p, "quiet"), wake(ref, "quiet"); !bytes.Equal(got.Info.Encoded, want.Info.Encoded) {
		t.Fatalf("the quiet run's wake without its cache differs from one with it:\n%s\n%s", got.Info.Encoded, want.Info.Encoded)
	}
}

// quietCached is how many nodes the quiet run of p caches.
func quietCached(p *Projection) int {
	r, _ := p.Run("quiet")
	return r.digests.Len()
}
