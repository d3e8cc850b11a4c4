package projection

import (
	"bytes"
	"testing"

	"github.com/canopy-dev/canopy/internal/workload"
)

// TestArena checks that values appended to an arena's room are written in
// its chunk, one after the other and each with its capacity cut to its
// length (an append to one cannot reach the next); that one which outgrew
// its room, or is too large for any, is allocated on its own and takes no
// room; and that chunks come from the free list first.
func TestArena(t *testing.T) {
	var a arena
	given := make([]byte, 7, arenaChunk)
	free := [][]byte{given}
	x := a.keep(append(a.room(10, &free), "first"...))
	y := a.keep(append(a.room(10, &free), "second"...))
	if len(free) != 0 || len(a.chunks) != 1 || &a.chunks[0][:1][0] != &given[0] {
		t.Fatalf("the arena did not take its chunk from the free list (%d chunks, %d free)", len(a.chunks), len(free))
	}
	if string(x) != "first" || string(y) != "second" || cap(x) != len(x) || cap(y) != len(y) {
		t.Fatalf("kept %q (cap %d) and %q (cap %d)", x, cap(x), y, cap(y))
	}
	if &y[0] != &a.chunks[0][len(x)] || string(a.chunks[0]) != "firstsecond" {
		t.Fatalf("the values are not one after the other in the chunk: %q", a.chunks[0])
	}
	_ = append(x, "XX"...) // a caller's append must not reach y
	if string(y) != "second" {
		t.Fatalf("an append to the first value changed the second: %q", y)
	}
	// Outgrowing its room: the append allocates, and the arena keeps its
	// free space for the next value.
	room := a.room(1, &free)
	big := a.keep(append(room, bytes.Repeat([]byte{'b'}, cap(room)+1)...))
	if len(a.chunks[0]) != len("firstsecond") || &big[0] == &a.chunks[0][:cap(a.chunks[0])][len(a.chunks[0])] {
		t.Fatalf("a value that outgrew its room took %d bytes of the chunk", len(a.chunks[0])-len("firstsecond"))
	}
	if r := a.room(arenaMaxValue+1, &free); r != nil {
		t.Fatalf("room for a value over arenaMaxValue: %d bytes", cap(r))
	}
	// Too little room left: a new chunk.
	a.chunks[0] = a.chunks[0][:arenaChunk-5]
	z := a.keep(append(a.room(10, &free), "third"...))
	if len(a.chunks) != 2 || &z[0] != &a.chunks[1][0] {
		t.Fatalf("10 bytes in a chunk with 5 free: %d chunks", len(a.chunks))
	}
}

// TestChangeMemoryRecycled commits two store-backed projections the same
// events, one giving each commit's memory back after scribbling on it (as
// a commit's next reuse does) and one never, and requires the same changes
// at every commit, and that the first's commits reuse the memory.
func TestChangeMemoryRecycled(t *testing.T) {
	recycling, err := Open(Config{}, newMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Open(Config{}, newMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	events := workload.Generate(workload.Spec{Nodes: 300, Seed: 5})
	reused := 0
	var lastChunks [][]byte
	for i := range events {
		for _, p := range []*Projection{recycling, plain} {
			ev := events[i]
			p.Apply(&ev)
		}
		if i%40 != 39 {
			continue
		}
		offsets := map[string]int64{"t": int64(i)}
		got, err := recycling.Prepare(offsets)
		if err != nil {
			t.Fatal(err)
		}
		mem := recycling.TakeChangeMemory()
		for _, c := range mem.chunks {
			for _, old := range lastChunks {
				if &c[:1][0] == &old[:1][0] {
					reused++
				}
			}
		}
		want, err := plain.Prepare(offsets)
		if err != nil {
			t.Fatal(err)
		}
		// The same keys set to the same values, or deleted (the order of
		// a run's node changes is the map's).
		g, w := applied(got), applied(want)
		if len(g) != len(w) {
			t.Fatalf("commit at %d: %d keys changed recycling, %d without", i, len(g), len(w))
		}
		for k, v := range w {
			if gv, ok := g[k]; !ok || gv != v {
				t.Fatalf("commit at %d: %q is %x recycling (present %v), %x without", i, k, gv, ok, v)
			}
		}
		if err := recycling.Finish(got, nil); err != nil {
			t.Fatal(err)
		}
		if err := plain.Finish(want, nil); err != nil {
			t.Fatal(err)
		}
		lastChunks = mem.chunks
		for _, c := range mem.chunks {
			c = c[:cap(c)]
			for k := range c {
				c[k] = 0xee
			}
		}
		recycling.RecycleChangeMemory(mem)
	}
	if reused == 0 {
		t.Fatal("no commit encoded its changes in memory given back")
	}
}

// applied is what changes leave in a store, by key: each key's last value,
// or "deleted".
func applied(changes Changes) map[string]string {
	m := map[string]string{}
	for _, c := range changes {
		if c.Delete {
			m[string(c.Key)] = "deleted"
		} else {
			m[string(c.Key)] = string(c.Value)
		}
	}
	return m
}

// TestChangeMemoryLean checks that no commit memory is kept while memory is
// short.
func TestChangeMemoryLean(t *testing.T) {
	budget := NewBudget(64 << 20)
	budget.SetLean(true)
	p, err := Open(Config{Memory: budget}, newMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range workload.Generate(workload.Spec{Nodes: 50, Seed: 2}) {
		p.Apply(&ev)
	}
	c, err := p.Prepare(map[string]int64{"t": 1})
	if err != nil {
		t.Fatal(err)
	}
	mem := p.TakeChangeMemory()
	if len(mem.chunks) == 0 {
		t.Fatal("the commit encoded nothing in its arena")
	}
	if err := p.Finish(c, nil); err != nil {
		t.Fatal(err)
	}
	p.RecycleChangeMemory(mem)
	if len(p.store.freeChunks) != 0 || p.store.freeChanges != nil {
		t.Fatalf("lean, the projection kept %d chunks and a change slice of %d", len(p.store.freeChunks), cap(p.store.freeChanges))
	}
}
