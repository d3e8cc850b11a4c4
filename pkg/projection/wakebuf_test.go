package projection

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestRecycleWakeBuffers checks that a wake is encoded in a buffer given
// back, its nodes placed in a slice given back, and comes out byte for byte
// as in new ones; that only buffers a wake could have come in are kept,
// and a bounded number of them; and that none are kept while memory is
// short.
func TestRecycleWakeBuffers(t *testing.T) {
	events := workload.Generate(workload.Spec{Nodes: 300, Seed: 7})
	fresh, _ := New(Config{})
	recycling, _ := New(Config{})
	var pf, pr Pending
	wakes, reused, reusedNodes := 0, 0, 0
	given, givenNodes := map[*byte]bool{}, map[*topics.NodeDigest]bool{}
	for i := range events {
		ev := events[i]
		trigs, _ := fresh.Apply(&ev)
		pf.Add(ev.RunID, trigs)
		ev = events[i]
		trigs, _ = recycling.Apply(&ev)
		pr.Add(ev.RunID, trigs)
		if i%50 != 49 {
			continue
		}
		want, err := fresh.Wakes(&pf, time.Time{}, topics.Time{})
		pf.Reset()
		if err != nil {
			t.Fatal(err)
		}
		got, err := recycling.Wakes(&pr, time.Time{}, topics.Time{})
		pr.Reset()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d wakes recycling, %d without", len(got), len(want))
		}
		for j := range got {
			wakes++
			if given[&got[j].Info.Framed[:1][0]] {
				reused++
			}
			if nodes := got[j].Wake.AgentTreeSnapshot.Nodes; len(nodes) > 0 && givenNodes[&nodes[:1][0]] {
				reusedNodes++
			}
			if !bytes.Equal(got[j].Info.Encoded, want[j].Info.Encoded) {
				t.Fatalf("wake %d: encoded in a used buffer, the snapshot differs:\n%s\n%s", j, got[j].Info.Encoded, want[j].Info.Encoded)
			}
			if !reflect.DeepEqual(got[j].Wake, want[j].Wake) {
				t.Fatalf("wake %d: built in used memory, the wake differs:\n%+v\n%+v", j, got[j].Wake, want[j].Wake)
			}
		}
		for j := range got {
			// Scribbled on, as a produce's bytes are not: none of it may
			// show in a later wake.
			framed := got[j].Info.Framed[:cap(got[j].Info.Framed)]
			for k := range framed {
				framed[k] = 'x'
			}
			given[&framed[0]] = true
			recycling.RecycleWakeBuffers([][]byte{framed})
			if nodes := got[j].Wake.AgentTreeSnapshot.Nodes; cap(nodes) > 0 {
				givenNodes[&nodes[:1][0]] = true
				recycling.RecycleWakeNodes(nodes)
				if nodes[:1][0].AgentID != "" {
					t.Fatal("a node slice given back still points to its digests")
				}
			}
		}
	}
	if wakes < 20 || reused < wakes/2 || reusedNodes < wakes/2 {
		t.Fatalf("of %d wakes, %d were encoded in a buffer given back and %d had their nodes in a slice given back", wakes, reused, reusedNodes)
	}

	budget := NewBudget(64 << 20)
	p, _ := New(Config{Memory: budget})
	size := p.wakeBufferSize()
	p.RecycleWakeBuffers([][]byte{make([]byte, 10), make([]byte, 0, size-1), make([]byte, 0, 2*size+1), nil})
	if len(p.wakeBufs) != 0 {
		t.Fatalf("kept %d buffers no wake is encoded in (too small or too large)", len(p.wakeBufs))
	}
	for range maxRecycledWakeBytes/size + 5 {
		p.RecycleWakeBuffers([][]byte{make([]byte, 0, size)})
	}
	if kept := len(p.wakeBufs); kept != maxRecycledWakeBytes/size || p.wakeBufBytes != kept*size {
		t.Fatalf("kept %d buffers (%d bytes), want the bound's %d", kept, p.wakeBufBytes, maxRecycledWakeBytes/size)
	}
	kept := len(p.wakeBufs)
	if b := p.wakeBuffer(size + 1); cap(b) < size+1 || len(p.wakeBufs) != kept {
		t.Fatalf("a wake larger than the buffers kept got %d bytes and took one (%d left of %d)", cap(b), len(p.wakeBufs), kept)
	}
	if b := p.wakeBuffer(size); cap(b) != size || len(p.wakeBufs) != kept-1 || p.wakeBufBytes != (kept-1)*size {
		t.Fatalf("a wake that fits got %d bytes, leaving %d buffers (%d bytes) of %d", cap(b), len(p.wakeBufs), p.wakeBufBytes, kept)
	}
	p.RecycleWakeNodes(make([]topics.NodeDigest, 0, p.cfg.Limits.MaxNodes+1))
	p.RecycleWakeNodes(nil)
	if len(p.wakeNodeSlices) != 0 {
		t.Fatalf("kept %d node slices larger than max_nodes or empty", len(p.wakeNodeSlices))
	}
	for range maxRecycledWakeNodes + 5 {
		p.RecycleWakeNodes(make([]topics.NodeDigest, 3, p.cfg.Limits.MaxNodes))
	}
	if len(p.wakeNodeSlices) != maxRecycledWakeNodes {
		t.Fatalf("kept %d node slices, want the bound %d", len(p.wakeNodeSlices), maxRecycledWakeNodes)
	}
	if n := p.wakeNodes(5); len(n) != 5 || len(p.wakeNodeSlices) != maxRecycledWakeNodes-1 {
		t.Fatalf("5 nodes got a slice of %d, leaving %d kept", len(n), len(p.wakeNodeSlices))
	}
	// While memory is short, what was kept is let go and nothing more is
	// kept.
	budget.SetLean(true)
	p.RecycleWakeBuffers([][]byte{make([]byte, 0, size)})
	p.RecycleWakeNodes(make([]topics.NodeDigest, 3, p.cfg.Limits.MaxNodes))
	if len(p.wakeBufs) != 0 || p.wakeBufBytes != 0 || len(p.wakeNodeSlices) != 0 {
		t.Fatalf("lean, the projection kept %d buffers (%d bytes) and %d node slices", len(p.wakeBufs), p.wakeBufBytes, len(p.wakeNodeSlices))
	}
}
