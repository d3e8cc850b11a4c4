package projection

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// A run's journal is what it keeps of its last applied events: each event's
// id and content hash (for Config.DedupeWindow: content.go) and its history
// entry (for Config.HistorySize). It is persisted in chunks under 'r' run
// 0x00 'j' seq (8 bytes, big endian: the seq of the chunk's first entry),
// each holding entries of consecutive seqs one commit applied: one chunk
// per run per commit, or several when the commit's entries of the run
// would make a record larger than MaxRecordBytes (long ids, thousands of
// events). A chunk is deleted once every entry of it is older than both
// windows; loading a run reads its chunks and keeps what the windows still
// hold. Never a key per event: a commit of 5,000 events writes about as
// many journal records as it has runs, to the Storage and to the changelog.

// journalVersion is the first byte of every chunk written: a build reads
// only the versions it knows, and says which it found otherwise. Version 1
// had no content hashes: its ids come back with hash 0, which any content
// repeats (a plain duplicate).
const (
	journalVersion   = 2
	journalVersionV1 = 1
)

// errJournalVersion is wrapped when a chunk has an encoding this build does
// not read (a newer canopy wrote it).
var errJournalVersion = errors.New("journal chunk of an unknown encoding version")

// journalEntry is a journal entry: the history entry and the hash of the
// applied event's content (0: unknown, from a version 1 chunk or an
// legacy encoding).
type journalEntry struct {
	HistoryEntry
	hash uint64
}

// chunkRef is a stored chunk: the seqs of its first and last entries.
type chunkRef struct{ first, last int64 }

func journalKey(run string, first int64) []byte { return appendJournalKey(nil, run, first) }

// appendJournalKey appends journalKey(run, first) to dst.
func appendJournalKey(dst []byte, run string, first int64) []byte {
	return binary.BigEndian.AppendUint64(appendRunKey(dst, run, 'j', ""), uint64(first))
}

// maxJournalBytes bounds a chunk's value: with its key (a run id at its
// longest), a record within MaxRecordBytes.
const maxJournalBytes = MaxRecordBytes - maxRunKeyBytes - 8

// journalBytes is at most the bytes a chunk of entries takes.
func journalBytes(entries []journalEntry) int {
	size := 1 + binary.MaxVarintLen64
	for i := range entries {
		size += entryBytes(&entries[i])
	}
	return size
}

// entryBytes is at most the bytes e takes in a chunk.
func entryBytes(e *journalEntry) int {
	n := 5*binary.MaxVarintLen64 + len(e.EventID) + len(e.Type) + len(e.AgentID) + 8 + binary.MaxVarintLen64
	if e.CorrelationID != nil {
		n += len(*e.CorrelationID)
	}
	if e.Status != nil {
		n += len(*e.Status)
	}
	return n
}

// encodeJournal appends to dst the encoding of entries (consecutive seqs,
// oldest first) as a chunk: the version, the count, then each entry's
// event id, content hash (8 bytes, big endian), type, agent id, time (Unix
// ms, zigzag varint), correlation id and status ("" for none), each string
// a uvarint length and its bytes.
func encodeJournal(dst []byte, entries []journalEntry) []byte {
	b := append(slices.Grow(dst, journalBytes(entries)), journalVersion)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for i := range entries {
		e := &entries[i]
		str(e.EventID)
		b = binary.BigEndian.AppendUint64(b, e.hash)
		str(e.Type)
		str(e.AgentID)
		b = binary.AppendVarint(b, ms(e.At))
		corr, status := "", ""
		if e.CorrelationID != nil {
			corr = *e.CorrelationID
		}
		if e.Status != nil {
			status = string(*e.Status)
		}
		str(corr)
		str(status)
	}
	return b
}

// decodeJournal decodes a chunk whose first entry has seq first.
func decodeJournal(v []byte, first int64) ([]journalEntry, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("empty journal chunk")
	}
	version := v[0]
	if version != journalVersion && version != journalVersionV1 {
		return nil, fmt.Errorf("%w: version %d, this build reads %d and %d (was the state written by a newer canopy?)",
			errJournalVersion, v[0], journalVersionV1, journalVersion)
	}
	v = v[1:]
	bad := func(what string) error {
		return fmt.Errorf("journal chunk at seq %d: truncated or corrupt %s", first, what)
	}
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)) {
		return nil, bad("count")
	}
	v = v[k:]
	str := func() (string, bool) {
		l, k := binary.Uvarint(v)
		if k <= 0 || l > uint64(len(v)-k) {
			return "", false
		}
		s := string(v[k : k+int(l)])
		v = v[k+int(l):]
		return s, true
	}
	out := make([]journalEntry, 0, n)
	for i := range int64(n) {
		e := journalEntry{HistoryEntry: HistoryEntry{Seq: first + i}}
		var ok bool
		if e.EventID, ok = str(); !ok {
			return nil, bad("event id")
		}
		if version >= 2 {
			if len(v) < 8 {
				return nil, bad("content hash")
			}
			e.hash = binary.BigEndian.Uint64(v)
			v = v[8:]
		}
		if e.Type, ok = str(); !ok {
			return nil, bad("type")
		}
		if e.AgentID, ok = str(); !ok {
			return nil, bad("agent id")
		}
		at, k := binary.Varint(v)
		if k <= 0 {
			return nil, bad("time")
		}
		v = v[k:]
		e.At = fromMs(at)
		corr, ok := str()
		if !ok {
			return nil, bad("correlation id")
		}
		status, ok := str()
		if !ok {
			return nil, bad("status")
		}
		e.CorrelationID = strPtr(corr)
		if status != "" {
			s := topics.Status(status)
			e.Status = &s
		}
		out = append(out, e)
	}
	if len(v) != 0 {
		return nil, bad("end (trailing bytes)")
	}
	return out, nil
}

// idWindow is a run's last applied event ids, oldest first from head once
// full, each with the hash of the content applied under it (0: unknown): an
// event whose id is here is a duplicate when its content hashes alike, a
// conflict otherwise (Config.DedupeWindow; content.go).
//
// An id is held as its 64-bit xxhash (idKey), as artifact ids are
// (activity.go), not as its string: a full window of 1,024 ids cost a run
// about 90 KB with the strings (the largest part of a busy run's memory).
// Two ids of one window alike by hash have odds of about n²/2^65 (3e-14 at
// 1,024): the odds the content hash already takes of telling a conflict
// from a duplicate. The journal keeps the ids themselves, so a restart
// rebuilds the window from them.
//
// The ids and their content hashes are a ring, and an open-addressed
// table (linear probing) of positions in it finds an id: 24 bytes an id
// at a full window of 1,024, where a map from id to content hash beside
// the ring took about 42, and neither holds a pointer for the collector
// to follow.
type idWindow struct {
	ring []idEntry
	head int
	// index holds ring positions + 1 (0: an empty slot), at the slot of
	// the id's hash or after it; its length is a power of two at least
	// twice the ring's capacity.
	index []uint32
}

// idEntry is an id of the window and the content hash it was applied with.
type idEntry struct{ key, hash uint64 }

// idKey is what idWindow holds of an event id.
func idKey(id string) uint64 { return xxhash.Sum64String(id) }

// lookup returns the content hash id was applied with, and whether it is
// in the window.
func (w *idWindow) lookup(id string) (hash uint64, ok bool) {
	if len(w.index) == 0 {
		return 0, false
	}
	k := idKey(id)
	mask := uint64(len(w.index) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		s := w.index[i]
		if s == 0 {
			return 0, false
		}
		if e := w.ring[s-1]; e.key == k {
			return e.hash, true
		}
	}
}

// age is how many ids were pushed after id (0: the newest), for an id in
// the window: a linear scan, for the rare conflict that asks.
func (w *idWindow) age(id string) int {
	n, k := len(w.ring), idKey(id)
	for i := range n {
		if w.ring[(w.head+i)%n].key == k {
			return n - 1 - i
		}
	}
	return -1
}

// push adds id with its content hash, forgetting the oldest when size are
// held. An id pushed again is found with its newest content hash, as long
// as any of its pushes is still in the window.
func (w *idWindow) push(id string, hash uint64, size int) {
	if size <= 0 {
		return
	}
	k := idKey(id)
	if len(w.ring) < size {
		if len(w.ring) == cap(w.ring) {
			// Grown by doubling up to size, not by append's rule, so
			// that a full window's ring is size entries.
			ring := make([]idEntry, len(w.ring), min(size, max(16, 2*cap(w.ring)))) // most runs are small
			copy(ring, w.ring)
			w.ring = ring
		}
		w.ring = append(w.ring, idEntry{k, hash})
		if want := indexSize(cap(w.ring)); len(w.index) < want {
			w.index = make([]uint32, want)
			for pos := range w.ring {
				w.place(w.ring[pos].key, pos)
			}
			return
		}
		w.place(k, len(w.ring)-1)
		return
	}
	w.unplace(w.ring[w.head].key, w.head)
	w.ring[w.head] = idEntry{k, hash}
	w.place(k, w.head)
	w.head = (w.head + 1) % len(w.ring)
}

// indexSize is the index's length for a ring of capacity n: the power of
// two from 2n, so that probes stay short.
func indexSize(n int) int {
	size := 32
	for size < 2*n {
		size *= 2
	}
	return size
}

// place indexes the ring's entry at pos, whose id is k; a slot of the same
// id, an older push of it, is taken over.
func (w *idWindow) place(k uint64, pos int) {
	mask := uint64(len(w.index) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		if s := w.index[i]; s == 0 || w.ring[s-1].key == k {
			w.index[i] = uint32(pos + 1)
			return
		}
	}
}

// unplace removes the ring position pos, whose id is k, from the index,
// where a newer push of k has not taken its slot over, and moves back the
// entries probed past it (linear probing's deletion, Knuth's Algorithm R),
// so that no lookup stops at the hole.
func (w *idWindow) unplace(k uint64, pos int) {
	mask := uint64(len(w.index) - 1)
	i := k & mask
	for ; w.index[i] != uint32(pos+1); i = (i + 1) & mask {
		if w.index[i] == 0 {
			return // taken over by a newer push of k
		}
	}
	for j := i; ; {
		j = (j + 1) & mask
		s := w.index[j]
		if s == 0 {
			break
		}
		// The entry at j may fill the hole at i unless its home slot
		// lies cyclically within (i, j].
		home := w.ring[s-1].key & mask
		if i <= j && (home <= i || home > j) || i > j && home <= i && home > j {
			w.index[i] = s
			i = j
		}
	}
	w.index[i] = 0
}

// journalKeep is how many of its last entries a run's journal must keep:
// enough for both windows.
func (c *Config) journalKeep() int64 { return int64(max(c.HistorySize, c.DedupeWindow)) }

// writeJournal adds the run's journal changes to c: the entries applied
// since the last commit (those still within the windows) as chunks of at
// most maxJournalBytes, and deletes of the chunks now wholly older than
// the windows, and of the keys of the legacy encoding (one per applied id
// and per history entry) a run loaded from it still had.
func writeJournal(c *Changes, s *store, r *Run, d *dirt, keep int64) {
	for _, k := range d.legacy {
		c.del(k)
	}
	j := d.journal
	if int64(len(j)) > keep {
		j = j[int64(len(j))-keep:]
	}
	for len(j) > 0 {
		n, size := 1, 1+binary.MaxVarintLen64+entryBytes(&j[0])
		for n < len(j) && size+entryBytes(&j[n]) <= maxJournalBytes {
			size += entryBytes(&j[n])
			n++
		}
		first, last := j[0].Seq, j[n-1].Seq
		chunk := j[:n]
		c.set(s.encode(maxRunKeyBytes+8, func(b []byte) []byte { return appendJournalKey(b, r.id, first) }),
			s.encode(size, func(b []byte) []byte { return encodeJournal(b, chunk) }))
		r.chunks = append(r.chunks, chunkRef{first, last})
		j = j[n:]
	}
	for len(r.chunks) > 0 && r.chunks[0].last <= r.seq-keep {
		c.del(journalKey(r.id, r.chunks[0].first))
		r.chunks = r.chunks[1:]
	}
}

// loadJournal fills a loaded run's windows from its journal entries (seq
// order, oldest first), keeping what the windows hold.
func (r *Run) loadJournal(entries []journalEntry, cfg *Config) {
	n := len(entries)
	for _, e := range entries[max(0, n-cfg.DedupeWindow):] {
		r.ids.push(e.EventID, e.hash, cfg.DedupeWindow)
	}
	if cfg.HistorySize > 0 {
		for _, e := range entries[max(0, n-cfg.HistorySize):] {
			r.hist.push(e.HistoryEntry, cfg.HistorySize)
		}
	}
}

// JournalSpan is a stored journal chunk of a run: the seqs of its first and
// last entries.
type JournalSpan struct{ First, Last int64 }

// Journal returns the spans of run's stored journal chunks in s, oldest
// first, and how many keys of the legacy encoding (per applied id, per
// history entry) the run still has: for checks and tools that look at a
// store.
func Journal(s Storage, run string) (spans []JournalSpan, legacy int, err error) {
	err = s.Scan(rel([]byte{'r'}, []byte(run), []byte{0}), func(k, v []byte) error {
		switch k[0] {
		case 'e', 'h':
			legacy++
		case 'j':
			if len(k) != 9 {
				return fmt.Errorf("journal key of %d bytes", len(k)-1)
			}
			first := int64(binary.BigEndian.Uint64(k[1:]))
			es, err := decodeJournal(v, first)
			if err != nil {
				return err
			}
			if len(es) > 0 {
				spans = append(spans, JournalSpan{first, es[len(es)-1].Seq})
			}
		}
		return nil
	})
	return spans, legacy, err
}
