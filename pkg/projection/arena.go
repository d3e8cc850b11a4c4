package projection

// A commit encodes the state of every node, journal and meta it changed:
// in the bench's steady state a fifth of what the projector allocated,
// every byte of it garbage once the commit is in the changelog and in
// Pebble. So the keys and values of a commit's changes are encoded in the
// chunks of an arena, which the caller hands back (RecycleChangeMemory)
// once the commit succeeded, and the next commits encode in them again.

// arenaChunk is the size of an arena's chunks; a value larger than
// arenaMaxValue is allocated on its own, so that a chunk is not left
// mostly empty by one.
const (
	arenaChunk    = 64 << 10
	arenaMaxValue = arenaChunk / 4
)

// maxFreeArenaChunks bounds the chunks a projection keeps for its next
// commits: a commit of a partition caught up with its input takes one or
// a few, one of a backlog's thousands of records about a dozen; 2 MiB.
const maxFreeArenaChunks = 32

// arena is where one commit's changes are encoded.
type arena struct {
	// chunks are those the commit uses, the last the one being filled.
	chunks [][]byte
}

// room returns the arena's free space for one key or value of about n
// bytes, as an empty slice to append it to: the append writes in the
// arena when the value fits, else allocates as any append does. Pass the
// result to keep. n larger than arenaMaxValue gets no room (nil).
func (a *arena) room(n int, free *[][]byte) []byte {
	if n > arenaMaxValue {
		return nil
	}
	if k := len(a.chunks); k > 0 {
		if c := a.chunks[k-1]; cap(c)-len(c) >= n {
			return c[len(c):len(c):cap(c)]
		}
	}
	c, ok := takeLast(free, 0)
	if !ok {
		c = make([]byte, 0, arenaChunk)
	}
	a.chunks = append(a.chunks, c)
	return c
}

// keep returns v, appended to what room returned, with its capacity cut
// to its length, and takes its bytes from the arena's free space when it
// was written there (a value that outgrew its room was not: it is the
// append's own allocation).
func (a *arena) keep(v []byte) []byte {
	if k := len(a.chunks); k > 0 && len(v) > 0 {
		c := a.chunks[k-1]
		if free := c[len(c):cap(c)]; len(free) > 0 && cap(v) == len(free) && &v[0] == &free[0] {
			a.chunks[k-1] = c[:len(c)+len(v)]
		}
	}
	return v[:len(v):len(v)]
}

// ChangeMemory is the memory a commit's changes are encoded in, taken from
// the projection that prepared them (TakeChangeMemory) and given back to
// it once nothing refers to the changes any more (RecycleChangeMemory).
type ChangeMemory struct {
	chunks  [][]byte
	changes Changes
}

// TakeChangeMemory returns the memory of the changes the last
// PrepareBetween returned, which the projection will not use again until
// it is given back. A caller that does not take it lets it be collected
// with the changes.
func (p *Projection) TakeChangeMemory() *ChangeMemory {
	if p.store == nil {
		return nil
	}
	m := &ChangeMemory{chunks: p.store.arena.chunks, changes: p.store.prepared}
	p.store.arena.chunks, p.store.prepared = nil, nil
	return m
}

// RecycleChangeMemory gives back the memory of a commit's changes once
// the commit succeeded and nothing reads them any more: they are in the
// changelog's records, whose produce finished, and in the store. The next
// commits encode their changes in it, so memory given back while something
// still reads it would see that change under it. While memory is short
// (the budget's lean) it is let go instead.
func (p *Projection) RecycleChangeMemory(m *ChangeMemory) {
	s := p.store
	if m == nil || s == nil || p.lean() {
		return
	}
	for _, c := range m.chunks {
		if len(s.freeChunks) == maxFreeArenaChunks {
			break
		}
		if cap(c) == arenaChunk {
			s.freeChunks = append(s.freeChunks, c[:0])
		}
	}
	if cap(m.changes) > cap(s.freeChanges) && cap(m.changes) <= maxFreeChanges {
		clear(m.changes[:cap(m.changes)])
		s.freeChanges = m.changes[:0]
	}
	m.chunks, m.changes = nil, nil
}

// maxFreeChanges bounds the change slice kept for the next commit: a
// backlog's commit of thousands of records changes about as many keys.
const maxFreeChanges = 16384
