package projection

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Store keeps one partition's runs and consumed offsets in a Pebble database
// that several partitions may share. Key layout, under the partition prefix
// 'p' + partition (4 bytes, big endian):
//
//	'o'                        next offset to consume per input topic (JSON)
//	'w'                        the next human input offset whose wake is not yet published
//	                           (8 bytes, big endian): see WokenKey
//	'd' run                    the run's next timer due time (8 bytes, ms)
//	'r' run 0x00 'm'           run meta (JSON)
//	'r' run 0x00 'n' agent     node (binary, versioned: binrecord.go; JSON from earlier builds is read)
//	'r' run 0x00 'q' request   open request (JSON)
//	'r' run 0x00 'c' handle    active correlation handle's last activity (8 bytes)
//	'r' run 0x00 'p' plan      plan (JSON)
//	'r' run 0x00 'j' seq       a journal chunk: the entries (event id, history fields) of the
//	                           run's events applied by one commit, from its seq-th (8 bytes
//	                           big endian), binary and versioned (journal.go); deleted once
//	                           older than Config.HistorySize and Config.DedupeWindow
//	'r' run 0x00 'e' event     (earlier encoding) an applied event id; deleted when its run
//	                           is next committed
//	'r' run 0x00 'h' seq       (earlier encoding) one history entry, JSON; turned into a
//	                           journal chunk when its run is next committed
//	'k'                        changelog checkpoint (Pebble only, see Checkpoint)
//
// Identifiers never contain 0x00 (the contract forbids control characters),
// so the separator is unambiguous.
//
// Every key but the checkpoint is state: a commit's Changes list the state
// keys it sets or deletes, relative to the partition prefix, in the order
// written, the offsets key last. That list is what the changelog topic
// carries, so that replaying the changelog into an empty store rebuilds it
// (see internal/changelog).
type Store struct {
	db     *pebble.DB
	prefix []byte
}

// ErrStore wraps every storage failure: the projection cannot go on without
// its state, so callers stop and let a restart resume from the last commit.
var ErrStore = errors.New("projection: store")

// NewStore returns the store of partition in db.
func NewStore(db *pebble.DB, partition int32) *Store {
	p := []byte{'p', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(p[1:], uint32(partition))
	return &Store{db: db, prefix: p}
}

// OffsetsKey is the relative key of the consumed offsets. A commit writes it
// last, so in the changelog it closes each commit's records: records after
// the last one are a commit that did not complete.
var OffsetsKey = []byte{'o'}

var checkpointKey = []byte{'k'}

// WokenKey is the relative key of the priority path's watermark: the offset
// of the first human input record whose wake is not yet published. The
// projector publishes human input's wakes in transactions of their own,
// ahead of the commit that carries the input's state change and offset,
// and writes this key in the same transaction as the wakes: a new owner
// that applies such an input again (its offset not yet committed) knows
// its wake is out and does not publish it twice. It stands outside the
// commits OffsetsKey closes (internal/changelog reads it wherever it is).
var WokenKey = []byte{'w'}

// WokenChange is the change that sets WokenKey to next.
func WokenChange(next int64) Change {
	v := make([]byte, 8)
	binary.BigEndian.PutUint64(v, uint64(next))
	return Change{Key: WokenKey, Value: v}
}

// Woken returns the priority path's watermark (see WokenKey); ok is false
// when no human input's wake was ever published from this partition.
func (s *Store) Woken() (next int64, ok bool, err error) {
	v, ok, err := s.Get(WokenKey)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: woken watermark of %d bytes, want 8", ErrStore, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

func (s *Store) abs(rel []byte) []byte {
	k := make([]byte, 0, len(s.prefix)+len(rel))
	return append(append(k, s.prefix...), rel...)
}

func rel(parts ...[]byte) []byte {
	var k []byte
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

func dueKey(run string) []byte { return rel([]byte{'d'}, []byte(run)) }
func runKey(run string, kind byte, id string) []byte {
	return rel([]byte{'r'}, []byte(run), []byte{0, kind}, []byte(id))
}

// Change is one state key a commit set (Value, possibly empty) or deleted
// (Delete), the key relative to the partition prefix.
type Change struct {
	Key, Value []byte
	Delete     bool
}

// Changes are a commit's state changes, in the order they were made.
type Changes []Change

func (c *Changes) set(k, v []byte) {
	if v == nil {
		v = []byte{} // a set, never to be read as a delete (a changelog tombstone)
	}
	*c = append(*c, Change{Key: k, Value: v})
}
func (c *Changes) del(k []byte) { *c = append(*c, Change{Key: k, Delete: true}) }

// Checkpoint is how far into the changelog a store is: Next is the offset of
// the first changelog record not in it; At is when that was written (Unix
// ms), so that a checkpoint too old to trust (deleted keys' tombstones
// may have been compacted away since) can be told from a fresh one.
type Checkpoint struct {
	Next, At int64
}

// Offsets returns the next offset to consume of every topic this partition
// has committed.
func (s *Store) Offsets() (map[string]int64, error) {
	out := make(map[string]int64)
	v, ok, err := s.Get(OffsetsKey)
	if err != nil || !ok {
		return out, err
	}
	if err := json.Unmarshal(v, &out); err != nil {
		return nil, fmt.Errorf("%w: offsets: %v", ErrStore, err)
	}
	return out, nil
}

// Get returns the value of a relative key.
func (s *Store) Get(key []byte) (value []byte, ok bool, err error) {
	v, closer, err := s.db.Get(s.abs(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrStore, err)
	}
	v = append([]byte{}, v...)
	closer.Close()
	return v, true, nil
}

// Checkpoint returns the store's changelog checkpoint; ok is false when it
// has none (it never committed or restored).
func (s *Store) Checkpoint() (cp Checkpoint, ok bool, err error) {
	v, ok, err := s.Get(checkpointKey)
	if err != nil || !ok {
		return cp, false, err
	}
	if len(v) != 16 {
		return cp, false, fmt.Errorf("%w: checkpoint: %d bytes", ErrStore, len(v))
	}
	return Checkpoint{Next: int64(binary.BigEndian.Uint64(v)), At: int64(binary.BigEndian.Uint64(v[8:]))}, true, nil
}

// Empty reports whether the store holds no key of its partition.
func (s *Store) Empty() (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: s.prefix, UpperBound: prefixEnd(s.prefix)})
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrStore, err)
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return false, fmt.Errorf("%w: %v", ErrStore, err)
	}
	return empty, nil
}

// Write applies changes and, when cp is not nil, the checkpoint, in one
// Pebble batch; sync makes it durable before Write returns. Restoring from
// the changelog and committing a processed batch both come here.
func (s *Store) Write(changes Changes, cp *Checkpoint, sync bool) error {
	// Sized up front: growing a commit's batch as it fills was a tenth of
	// the projector's allocated bytes (BenchmarkEventPath).
	size := 64
	for _, c := range changes {
		size += len(s.prefix) + len(c.Key) + len(c.Value) + 16 // a record's kind and varints
	}
	b := s.db.NewBatchWithSize(size)
	defer b.Close()
	var key []byte // the batch copies keys: one buffer serves them all
	for _, c := range changes {
		key = append(append(key[:0], s.prefix...), c.Key...)
		var err error
		if c.Delete {
			err = b.Delete(key, nil)
		} else {
			err = b.Set(key, c.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	if cp != nil {
		var v [16]byte
		binary.BigEndian.PutUint64(v[:], uint64(cp.Next))
		binary.BigEndian.PutUint64(v[8:], uint64(cp.At))
		if err := b.Set(s.abs(checkpointKey), v[:], nil); err != nil {
			return fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if err := b.Commit(opt); err != nil {
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	return nil
}

// Wipe deletes everything of the partition, checkpoint included: what a
// store that cannot be trusted is reset to before a full restore.
func (s *Store) Wipe() error {
	if err := s.db.DeleteRange(s.prefix, prefixEnd(s.prefix), pebble.Sync); err != nil {
		return fmt.Errorf("%w: wipe: %v", ErrStore, err)
	}
	return nil
}

// scan calls f with every key under prefix (without the prefix) and value.
func (s *Store) scan(prefix []byte, f func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = f(it.Key()[len(prefix):], v)
		}
		if err != nil {
			it.Close()
			return fmt.Errorf("%w: %w", ErrStore, err) // the callback's error stays matchable
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	return nil
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// dues returns every run's next timer.
func (s *Store) dues() (map[string]int64, error) {
	out := make(map[string]int64)
	err := s.scan(s.abs([]byte{'d'}), func(k, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("due of %q: %d bytes", k, len(v))
		}
		out[string(k)] = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	return out, err
}

// loadRun reads a run; ok is false when the store has none. A run stored in
// the earlier encoding (an 'e' key per applied id, an 'h' key per history
// entry) comes back with those keys to delete and its history entries as
// its journal to write, at its next commit.
func (s *Store) loadRun(id string, cfg *Config) (r *Run, ok bool, err error) {
	r = newRun(id)
	r.dirty = newDirt()
	r.store = s
	prefix := s.abs(rel([]byte{'r'}, []byte(id), []byte{0}))
	var meta *metaRecord
	var expiredAt int64
	var nodes []*node
	hot := max(cfg.MaxHotNodesPerRun, 1)
	var entries, legacy []HistoryEntry
	err = s.scan(prefix, func(k, v []byte) error {
		if len(k) == 0 {
			return fmt.Errorf("empty run key")
		}
		kind, rest := k[0], string(k[1:])
		switch kind {
		case 'm':
			var err error
			meta, err = decodeMeta(v)
			if err != nil {
				return fmt.Errorf("run meta: %w", err)
			}
		case 'n':
			nr, err := decodeNode(v)
			if err != nil {
				return fmt.Errorf("node %q: %w", rest, err)
			}
			n := nr.node()
			r.index(n)
			r.nodes[n.AgentID] = nil
			if len(nodes) < hot {
				// The rest are read back when needed (Run.get): keys
				// come in agent id order, so which stay is arbitrary
				// but deterministic, and what the run uses next soon
				// replaces them.
				nodes = append(nodes, n)
			}
		case 'q':
			var q requestRecord
			if err := json.Unmarshal(v, &q); err != nil {
				return fmt.Errorf("request %q: %v", rest, err)
			}
			r.requests[rest] = &request{id: rest, agentID: q.AgentID, expires: fromMs(q.Expires), dedupeKey: q.DedupeKey}
			if q.Expires != 0 {
				r.requestDue.ReplaceOrInsert(timed{q.Expires, rest})
			}
		case 'c':
			at := int64(binary.BigEndian.Uint64(v))
			r.corrAt[rest] = at
			r.corrActive.ReplaceOrInsert(timed{at, rest})
		case 'p':
			var pr planRecord
			if err := json.Unmarshal(v, &pr); err != nil {
				return fmt.Errorf("plan %q: %v", rest, err)
			}
			pl := &Plan{PlanID: rest, AgentID: pr.AgentID, BandCount: pr.BandCount, Replan: pr.Replan,
				CreatedAt: fromMs(pr.CreatedAt), Bands: make(map[int]*Band)}
			for i := range pr.Bands {
				b := pr.Bands[i]
				pl.Bands[b.Index] = &b
			}
			r.plans[rest] = pl
		case 'j':
			if len(rest) != 8 {
				return fmt.Errorf("journal key of %d bytes", len(rest))
			}
			first := int64(binary.BigEndian.Uint64([]byte(rest)))
			es, err := decodeJournal(v, first)
			if err != nil {
				return fmt.Errorf("run %q: %w", id, err)
			}
			if len(es) > 0 {
				// Keys come in seq order: chunks are oldest first.
				entries = append(entries, es...)
				r.chunks = append(r.chunks, chunkRef{first, es[len(es)-1].Seq})
			}
		case 'x': // the run expired (retention.go): its marker
			if len(v) != 8 {
				return fmt.Errorf("expiry marker of %d bytes", len(v))
			}
			expiredAt = int64(binary.BigEndian.Uint64(v))
		case 'e': // earlier encoding: dedupe now keeps ids in the journal
			r.dirty.legacy = append(r.dirty.legacy, runKey(id, 'e', rest))
		case 'h': // earlier encoding: one JSON history entry per key
			if len(rest) != 8 {
				return fmt.Errorf("history key of %d bytes", len(rest))
			}
			var hr historyRecord
			if err := json.Unmarshal(v, &hr); err != nil {
				return fmt.Errorf("history %x: %v", rest, err)
			}
			legacy = append(legacy, hr.entry(int64(binary.BigEndian.Uint64([]byte(rest)))))
			r.dirty.legacy = append(r.dirty.legacy, runKey(id, 'h', rest))
		}
		return nil
	})
	if err == nil && meta == nil && expiredAt != 0 {
		err = &ExpiredError{RunID: id, At: time.UnixMilli(expiredAt)}
	}
	if err != nil || meta == nil {
		return nil, false, err
	}
	r.seq, r.clock = meta.Seq, fromMs(meta.Clock)
	r.sessionID, r.threadID, r.root = meta.SessionID, meta.ThreadID, meta.Root
	r.lastProgressWake = fromMs(meta.LastProgressWake)
	r.planOrder, r.diagnostics = meta.PlanOrder, meta.Diagnostics
	for _, n := range nodes {
		r.nodes[n.AgentID] = n
	}
	r.resident = len(nodes)
	if root := r.root; root != "" {
		r.get(root) // the root is always in memory (Run.trim)
		if r.nodeErr != nil {
			return nil, false, r.nodeErr
		}
	}
	// The scan gave the earlier encoding's entries ('h') before the
	// journal's ('j'): both in seq order, and the former all older.
	entries = append(legacy, entries...)
	r.loadJournal(entries, cfg)
	// An earlier encoding's entries become the run's first journal chunk.
	r.dirty.journal = legacy
	return r, true, nil
}

// loadNode reads one node of a run.
func (s *Store) loadNode(run, id string) (*node, bool, error) {
	v, ok, err := s.Get(runKey(run, 'n', id))
	if err != nil || !ok {
		return nil, ok, err
	}
	nr, err := decodeNode(v)
	if err != nil {
		return nil, false, fmt.Errorf("%w: node %q of run %q: %v", ErrStore, id, run, err)
	}
	return nr.node(), true, nil
}

// index counts a node read from the store among the run's nodes and enters
// it in the run's indexes; whether it stays in memory is the caller's
// choice.
func (r *Run) index(n *node) {
	id := n.AgentID
	if n.created && n.depth < 0 && n.ParentAgentID != "" {
		r.awaitParent(n.ParentAgentID, id)
	}
	r.stats.ByStatus.Add(n.Status, 1)
	if isUrgent(n.Status) {
		r.urgent.ReplaceOrInsert(timed{n.StatusUpdatedAt.UnixMilli(), id})
	}
	r.signals.ReplaceOrInsert(timed{n.LastSignalAt.UnixMilli(), id})
	if !n.LeaseExpiresAt.IsZero() {
		k := timed{n.LeaseExpiresAt.UnixMilli(), id}
		r.leases.ReplaceOrInsert(k)
		if n.overdue {
			r.stats.OverdueLeases++
		} else {
			r.leaseDue.ReplaceOrInsert(k)
		}
	}
	if c := n.LastCorrelationID; c != "" {
		r.byCorr.ReplaceOrInsert(corrNode{c, id})
	}
	if w := &n.watchdog; w.Dispatched {
		if w.Status != "" {
			r.wdCount[w.Status]++
		}
		if !w.ExpectedBy.IsZero() && w.CompletionReceivedAt.IsZero() && !w.wasSuspect {
			r.dispatchDue.ReplaceOrInsert(timed{w.ExpectedBy.UnixMilli(), id})
		}
		if !w.graceDue.IsZero() {
			r.graceDue.ReplaceOrInsert(timed{w.graceDue.UnixMilli(), id})
		}
	}
}

// dirt records what changed in a run since its last commit.
type dirt struct {
	meta     bool
	nodes    map[string]struct{}
	requests map[string]struct{}
	handles  map[string]struct{}
	plans    map[string]struct{}
	// journal are the entries applied since the last commit (journal.go);
	// legacy the keys of the earlier encoding to delete.
	journal []HistoryEntry
	legacy  [][]byte
}

func newDirt() *dirt {
	return &dirt{nodes: map[string]struct{}{}, requests: map[string]struct{}{}, handles: map[string]struct{}{}, plans: map[string]struct{}{}}
}

func (d *dirt) empty() bool {
	return !d.meta && len(d.nodes) == 0 && len(d.requests) == 0 && len(d.handles) == 0 && len(d.plans) == 0 &&
		len(d.journal) == 0 && len(d.legacy) == 0
}

// write adds the run's changes to c and clears them; keep is how many
// journal entries the run's windows need (Config.journalKeep).
func (s *Store) write(c *Changes, r *Run, keep int64) error {
	d := r.dirty
	if d == nil || d.empty() {
		return nil
	}
	put := func(k []byte, v any) error {
		enc, err := json.Marshal(v)
		if err != nil {
			return err
		}
		c.set(k, enc)
		return nil
	}
	if d.meta {
		m := metaRecord{Seq: r.seq, Clock: ms(r.clock), SessionID: r.sessionID, ThreadID: r.threadID, Root: r.root,
			LastProgressWake: ms(r.lastProgressWake), PlanOrder: r.planOrder, Diagnostics: r.diagnostics}
		c.set(runKey(r.id, 'm', ""), encodeMeta(nil, &m))
	}
	for id := range d.nodes {
		// A changed node stays in memory until written (Run.trim).
		if n := r.nodes[id]; n != nil {
			rec := n.record()
			c.set(runKey(r.id, 'n', id), encodeNode(nil, &rec))
		}
	}
	for id := range d.requests {
		k := runKey(r.id, 'q', id)
		if q, ok := r.requests[id]; ok {
			if err := put(k, requestRecord{AgentID: q.agentID, Expires: ms(q.expires), DedupeKey: q.dedupeKey}); err != nil {
				return err
			}
		} else {
			c.del(k)
		}
	}
	for id := range d.handles {
		k := runKey(r.id, 'c', id)
		if at, ok := r.corrAt[id]; ok {
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], uint64(at))
			c.set(k, v[:])
		} else {
			c.del(k)
		}
	}
	for id := range d.plans {
		if pl, ok := r.plans[id]; ok {
			pr := planRecord{AgentID: pl.AgentID, BandCount: pl.BandCount, Replan: pl.Replan, CreatedAt: ms(pl.CreatedAt)}
			for i := 0; i < maxBandsPerPlan; i++ {
				if band, ok := pl.Bands[i]; ok {
					pr.Bands = append(pr.Bands, *band)
				}
			}
			if err := put(runKey(r.id, 'p', id), pr); err != nil {
				return err
			}
		}
	}
	writeJournal(c, r, d, keep)
	r.dirty = newDirt()
	return nil
}

func putOffsets(c *Changes, offsets map[string]int64) error {
	v, err := json.Marshal(offsets) // sorted keys: the same offsets encode alike
	if err != nil {
		return err
	}
	c.set(OffsetsKey, v)
	return nil
}

func putDue(c *Changes, run string, due int64, ok bool) {
	if !ok {
		c.del(dueKey(run))
		return
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(due))
	c.set(dueKey(run), v[:])
}
