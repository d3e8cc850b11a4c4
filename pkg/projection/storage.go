package projection

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Storage is the ordered key-value storage a Projection opened on it (Open)
// keeps one partition's runs and consumed offsets in: the projection
// depends on this interface, not on a database, as Prometheus's promql
// depends on storage.Queryable rather than on its TSDB (internal/store
// implements it on Pebble). Keys are relative to the partition; the layout
// the projection writes:
//
//	'o'                        next offset to consume per input topic (JSON)
//	'w'                        the next human input offset whose wake is not yet published
//	                           (8 bytes, big endian): see WokenKey
//	'd' run                    the run's next timer due time (8 bytes, ms)
//	'r' run 0x00 'm'           run meta (JSON)
//	'r' run 0x00 'n' agent     node (binary, versioned: binrecord.go; JSON from earlier builds is read)
//	'r' run 0x00 'q' request   open request (JSON)
//	'r' run 0x00 'c' handle    active correlation handle's last activity (8 bytes)
//	'r' run 0x00 'p' plan      plan: its bands, without their steps (binary, versioned:
//	                           binrecord.go; JSON with the steps from earlier builds is read)
//	'r' run 0x00 's' plan 0x00 band chunk
//	                           up to 64 steps of a band of a plan (binary, versioned), by
//	                           band (1 byte) and which 64 of its steps (1 byte)
//	'r' run 0x00 'j' seq       a journal chunk: the entries (event id and content hash,
//	                           history fields) of run's events applied by one commit, from
//	                           its seq-th (8 bytes big endian), binary and versioned
//	                           (journal.go); deleted once older than Config.HistorySize and
//	                           Config.DedupeWindow
//	'r' run 0x00 'a'           the run's activity (activity.go): turns, calls, processes,
//	                           incidents, usage, limits... for the read model (JSON, bounded)
//	'r' run 0x00 'x'           the run expired (retention.go): when (8 bytes, ms)
//	'r' run 0x00 'e' event     (legacy encoding) an applied event id; deleted when its run
//	                           is next committed
//	'r' run 0x00 'h' seq       (legacy encoding) one history entry, JSON; turned into a
//	                           journal chunk when its run is next committed
//	(the storage's own)        changelog checkpoint (see Checkpoint), not state
//
// Identifiers never contain 0x00 (the contract forbids control characters),
// so the separator is unambiguous.
//
// Every key but the checkpoint is state: a commit's Changes list the state
// keys it sets or deletes, relative to the partition prefix, in the order
// written, the offsets key last; no change's key and value together pass
// MaxRecordBytes. That list is what the changelog topic
// carries, so that replaying the changelog into an empty store rebuilds it
// (see internal/changelog).
type Storage interface {
	// Get returns the value of key, or ok false when it has none. The
	// value is the caller's to keep.
	Get(key []byte) (value []byte, ok bool, err error)
	// Scan calls f with every key that starts with prefix, in key order,
	// the key without the prefix, and its value; both are valid only
	// during the call. An error of f ends the scan and is returned,
	// matchable (errors.Is).
	Scan(prefix []byte, f func(key, value []byte) error) error
	// SeekGE returns the first key at or after key, or ok false when there
	// is none; the key is the caller's to keep. Listing runs seeks from one
	// run's keys to the next, so that its cost is per run, not per key.
	SeekGE(key []byte) (first []byte, ok bool, err error)
	// Write applies changes in order and, when cp is not nil, records the
	// checkpoint, all at once; sync makes it durable before Write returns.
	// It keeps none of the changes' keys and values: the projection
	// encodes later commits in their memory.
	Write(changes Changes, cp *Checkpoint, sync bool) error
}

// store is the projection's view of its Storage: the runs' encoding
// (loadRun, write) over any Storage.
type store struct {
	kv Storage
	// journals are the journals of dirt that outgrew keptDirt, emptied by
	// their commit, for the next commit's runs to grow into
	// (growJournal); freeEntries is their room together, at most
	// maxFreeJournal. A backlog's commit gathers a few hundred entries per
	// run, and growing each run's journal again from keptDirt at every
	// commit was a tenth of the bytes a commit allocated
	// (BenchmarkEventPath). The projection's goroutine owns them.
	journals    [][]journalEntry
	freeEntries int
	// short is set while memory is not plentiful (the projection sheds
	// its digest caches, or its budget says so): no room is kept then.
	short bool
	// arena is where the commit being prepared encodes its changes'
	// keys and values, prepared the changes the last PrepareBetween
	// returned (arena.go); freeChunks and freeChanges are memory of
	// commits given back, for the next.
	arena       arena
	prepared    Changes
	freeChunks  [][]byte
	freeChanges Changes
	// wd holds the watchdog record of the node record being encoded
	// (node.record).
	wd wdRecord
}

// encode encodes one key or value of about n bytes, which fn appends to
// the slice it is given, in the arena of the commit being prepared.
func (s *store) encode(n int, fn func([]byte) []byte) []byte {
	return s.arena.keep(fn(s.arena.room(n, &s.freeChunks)))
}

// lean sets whether memory is short of plentiful: then the free journals
// are let go, and none is kept until it is not.
func (s *store) lean(short bool) {
	s.short = short
	if short {
		clear(s.journals)
		s.journals, s.freeEntries = s.journals[:0], 0
		clear(s.freeChunks)
		s.freeChunks, s.freeChanges = s.freeChunks[:0], nil
	}
}

// maxFreeJournal bounds the entries store.journals hold room for: a
// commit of Config.MaxBatch records (5,000 in the projector) fills about
// that many, so the next one finds most of its room here; about 850 KB.
const maxFreeJournal = 8192

// growJournal returns j's entries in a slice with more room, from the free
// journals when one has more than j, and gives j's own to them; else nil,
// and the caller's append grows j. The last freed goes first: the journals
// of one commit's busiest runs come back together.
func (s *store) growJournal(j []journalEntry) []journalEntry {
	for i := len(s.journals) - 1; i >= 0; i-- {
		f := s.journals[i]
		if cap(f) > cap(j) {
			last := len(s.journals) - 1
			s.journals[i], s.journals[last] = s.journals[last], nil
			s.journals = s.journals[:last]
			s.freeEntries -= cap(f)
			f = append(f, j...)
			s.freeJournal(j)
			return f
		}
	}
	return nil
}

// freeJournal empties j and keeps it for growJournal, within
// maxFreeJournal.
func (s *store) freeJournal(j []journalEntry) {
	clear(j) // its entries' strings
	if s.short || cap(j) <= keptDirt || s.freeEntries+cap(j) > maxFreeJournal {
		return
	}
	s.journals = append(s.journals, j[:0])
	s.freeEntries += cap(j)
}

// Get returns the value of a relative key.
func (s *store) Get(key []byte) ([]byte, bool, error) { return s.kv.Get(key) }

// scan calls f with every key under prefix (without the prefix) and value.
func (s *store) scan(prefix []byte, f func(k, v []byte) error) error { return s.kv.Scan(prefix, f) }

// ErrStore wraps every storage failure: the projection cannot go on without
// its state, so callers stop and let a restart resume from the last commit.
var ErrStore = errors.New("projection: store")

// OffsetsKey is the relative key of the consumed offsets. A commit writes it
// last, so in the changelog it closes each commit's records: records after
// the last one are a commit that did not complete.
var OffsetsKey = []byte{'o'}

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

func rel(parts ...[]byte) []byte {
	var k []byte
	for _, p := range parts {
		k = append(k, p...)
	}
	return k
}

func dueKey(run string) []byte { return rel([]byte{'d'}, []byte(run)) }
func runKey(run string, kind byte, id string) []byte {
	return appendRunKey(make([]byte, 0, len(run)+len(id)+3), run, kind, id)
}

// appendRunKey appends runKey(run, kind, id) to dst.
func appendRunKey(dst []byte, run string, kind byte, id string) []byte {
	dst = append(append(dst, 'r'), run...)
	return append(append(dst, 0, kind), id...)
}

// MaxRecordBytes bounds every change a commit makes: its key and value
// together are at most this many bytes, whatever the input, as long as
// the decoder accepted it. Each change is also a record of the changelog
// topic, produced in the commit's transaction, and a record over the
// producer's limit (franz-go's 1,000,012 bytes by default) or the topic's
// max.message.bytes (1,048,588 by default) would fail that commit every
// time; a quarter of those leaves room for the record's framing and for a
// smaller limit. What could grow with the input is split over several
// records (journal chunks, a plan's step records) or bounded (a node's
// open requests, a run's diagnostics): see docs/ARCHITECTURE.md "State".
const MaxRecordBytes = 256 << 10

// maxIDBytes is the most bytes an identifier of an event takes:
// topics.MaxIDLength characters of up to 4 bytes each (a bound in bytes is
// a quarter of it), so that the record bounds hold whichever the unit.
const maxIDBytes = 4 * topics.MaxIDLength

// maxRunKeyBytes is the most bytes of a run's key prefix ('r' run 0x00
// kind).
const maxRunKeyBytes = 3 + maxIDBytes

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

// ReadWoken returns the priority path's watermark (see WokenKey) of the
// partition in s; ok is false when no human input's wake was ever
// published from it.
func ReadWoken(s Storage) (next int64, ok bool, err error) {
	v, ok, err := s.Get(WokenKey)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("%w: woken watermark of %d bytes, want 8", ErrStore, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// ReadOffsets returns the next offset to consume of every topic the
// partition in s has committed.
func ReadOffsets(s Storage) (map[string]int64, error) {
	out := make(map[string]int64)
	v, ok, err := s.Get(OffsetsKey)
	if err != nil || !ok {
		return out, err
	}
	if err := json.Unmarshal(v, &out); err != nil {
		return nil, fmt.Errorf("%w: offsets: %w", ErrStore, err)
	}
	return out, nil
}

// dues returns every run's next timer.
func (s *store) dues() (map[string]int64, error) {
	out := make(map[string]int64)
	err := s.scan([]byte{'d'}, func(k, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("due of %q: %d bytes", k, len(v))
		}
		out[string(k)] = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	return out, err
}

// loadRun reads a run; ok is false when the store has none. A run stored in
// the legacy encoding (an 'e' key per applied id, an 'h' key per history
// entry) comes back with those keys to delete and its history entries as
// its journal to write, at its next commit.
func (s *store) loadRun(id string, cfg *Config) (r *Run, ok bool, err error) {
	l := &runLoad{r: newRun(id), id: id, hot: max(cfg.MaxHotNodesPerRun, 1)}
	l.r.dirty = newDirt()
	l.r.store = s
	err = s.scan(rel([]byte{'r'}, []byte(id), []byte{0}), l.key)
	if err == nil && l.meta == nil && l.expiredAt != 0 {
		err = &ExpiredError{RunID: id, At: time.UnixMilli(l.expiredAt)}
	}
	if err != nil || l.meta == nil {
		return nil, false, err
	}
	if err := l.finish(cfg); err != nil {
		return nil, false, err
	}
	return l.r, true, nil
}

// runLoad is what loadRun gathers while it scans a run's keys, in key
// order, for finish.
type runLoad struct {
	r   *Run
	id  string
	hot int // the most nodes read into memory (Config.MaxHotNodesPerRun)

	meta      *metaRecord
	expiredAt int64   // the expiry marker's time (Unix ms), when the run expired
	nodes     []*node // the nodes read into memory
	entries   []journalEntry
	legacy    []HistoryEntry // the legacy encoding's history ('h' keys)
}

// key reads one of the run's keys (its first byte the kind, the rest the
// key within the run) and its value.
func (l *runLoad) key(k, v []byte) error {
	if len(k) == 0 {
		return fmt.Errorf("empty run key")
	}
	r := l.r
	kind, rest := k[0], string(k[1:])
	switch kind {
	case 'm':
		var err error
		if l.meta, err = decodeMeta(v); err != nil {
			return fmt.Errorf("run meta: %w", err)
		}
	case 'n':
		return l.node(rest, v)
	case 'q':
		var q requestRecord
		if err := json.Unmarshal(v, &q); err != nil {
			return fmt.Errorf("request %q: %w", rest, err)
		}
		r.requests[rest] = &request{id: rest, agentID: q.AgentID, expires: fromMs(q.Expires), dedupeKey: q.DedupeKey, kind: q.Kind}
		if q.Expires != 0 {
			r.requestDue.ReplaceOrInsert(timed{q.Expires, rest})
		}
	case 'c':
		at := int64(binary.BigEndian.Uint64(v))
		r.corrAt[rest] = at
		r.corrActive.ReplaceOrInsert(timed{at, rest})
	case 'p':
		return l.plan(rest, v)
	case 'a':
		a, err := decodeActivity(v)
		if err != nil {
			return fmt.Errorf("run activity: %w", err)
		}
		r.act = a
	case 's':
		return l.steps(rest, v)
	case 'j':
		return l.journal(rest, v)
	case 'x': // the run expired (retention.go): its marker
		if len(v) != 8 {
			return fmt.Errorf("expiry marker of %d bytes", len(v))
		}
		l.expiredAt = int64(binary.BigEndian.Uint64(v))
	case 'e': // legacy encoding: an applied id, which the journal keeps instead
		r.dirty.legacy = append(r.dirty.legacy, runKey(l.id, 'e', rest))
	case 'h':
		return l.history(rest, v)
	}
	return nil
}

// node indexes a node record and keeps the node in memory while fewer
// than l.hot are.
func (l *runLoad) node(id string, v []byte) error {
	nr, err := decodeNode(v)
	if err != nil {
		return fmt.Errorf("node %q: %w", id, err)
	}
	n := nr.node()
	l.r.index(n)
	l.r.nodes[n.AgentID] = nil
	if len(l.nodes) < l.hot {
		// The rest are read back when needed (Run.get): keys come in
		// agent id order, so which stay is arbitrary but deterministic,
		// and what the run uses next soon replaces them.
		l.nodes = append(l.nodes, n)
	}
	return nil
}

// plan reads a plan's header, or a legacy plan record whose JSON holds its
// steps: the next commit writes that one as a header and step records.
func (l *runLoad) plan(id string, v []byte) error {
	r := l.r
	pl, legacy, err := decodePlan(id, v)
	if err != nil {
		return fmt.Errorf("plan %q: %w", id, err)
	}
	r.plans[id] = pl
	if legacy {
		r.mark('p', id)
		for i, b := range pl.Bands {
			for j := range b.Steps {
				r.markStep(id, i, j)
			}
		}
	}
	return nil
}

// steps reads a step record into its plan's band.
func (l *runLoad) steps(key string, v []byte) error {
	ref, ok := parseStepKey(key)
	if !ok {
		return fmt.Errorf("step key %q", key)
	}
	// Keys come in order: a plan's header ('p') before its steps, and
	// each band's step records in order.
	pl := l.r.plans[ref.plan]
	if pl == nil {
		return fmt.Errorf("steps of band %d of plan %q, which the run does not have", ref.band, ref.plan)
	}
	b := pl.band(ref.band)
	if ref.chunk*stepsPerRecord != len(b.Steps) {
		return fmt.Errorf("step record %d of band %d of plan %q follows %d steps", ref.chunk, ref.band, ref.plan, len(b.Steps))
	}
	steps, err := decodeSteps(v)
	if err != nil {
		return fmt.Errorf("plan %q: %w", ref.plan, err)
	}
	b.Steps = append(b.Steps, steps...)
	return nil
}

// journal reads a journal chunk, keyed by the seq of its first entry.
func (l *runLoad) journal(key string, v []byte) error {
	if len(key) != 8 {
		return fmt.Errorf("journal key of %d bytes", len(key))
	}
	first := int64(binary.BigEndian.Uint64([]byte(key)))
	es, err := decodeJournal(v, first)
	if err != nil {
		return fmt.Errorf("run %q: %w", l.id, err)
	}
	if len(es) > 0 {
		// Keys come in seq order: chunks are oldest first.
		l.entries = append(l.entries, es...)
		l.r.chunks = append(l.r.chunks, chunkRef{first, es[len(es)-1].Seq})
	}
	return nil
}

// history reads a legacy history entry, one JSON entry per key keyed by
// its seq, and marks the key to delete.
func (l *runLoad) history(key string, v []byte) error {
	if len(key) != 8 {
		return fmt.Errorf("history key of %d bytes", len(key))
	}
	var hr historyRecord
	if err := json.Unmarshal(v, &hr); err != nil {
		return fmt.Errorf("history %x: %w", key, err)
	}
	l.legacy = append(l.legacy, hr.entry(int64(binary.BigEndian.Uint64([]byte(key)))))
	l.r.dirty.legacy = append(l.r.dirty.legacy, runKey(l.id, 'h', key))
	return nil
}

// finish sets the run's fields from its meta record, its nodes in memory
// and its journal, once every key is read.
func (l *runLoad) finish(cfg *Config) error {
	r, meta := l.r, l.meta
	r.seq, r.clock, r.first = meta.Seq, fromMs(meta.Clock), fromMs(meta.First)
	r.sessionID, r.threadID, r.root = meta.SessionID, meta.ThreadID, meta.Root
	r.lastProgressWake = fromMs(meta.LastProgressWake)
	// Diagnostics over maxDiagnosticBytes (stored by builds without the
	// bound) are trimmed to it; a plan order in the meta record (ditto) is
	// read and dropped.
	r.diagnostics = meta.Diagnostics
	for i := range r.diagnostics {
		r.diagBytes += diagnosticBytes(&r.diagnostics[i])
	}
	r.trimDiagnostics()
	for _, n := range l.nodes {
		r.nodes[n.AgentID] = n
	}
	r.resident = len(l.nodes)
	if root := r.root; root != "" {
		r.get(root) // the root is always in memory (Run.trim)
		if r.nodeErr != nil {
			return r.nodeErr
		}
	}
	// The scan gave the legacy entries ('h') before the journal's ('j'):
	// both in seq order, and the former all older. Their contents are
	// unknown (hash 0).
	old := make([]journalEntry, len(l.legacy))
	for i, e := range l.legacy {
		old[i] = journalEntry{HistoryEntry: e}
	}
	r.loadJournal(append(old, l.entries...), cfg)
	// The legacy entries become the run's first journal chunks.
	r.dirty.journal = old
	return nil
}

// loadNode reads one node of a run.
func (s *store) loadNode(run, id string) (*node, bool, error) {
	v, ok, err := s.Get(runKey(run, 'n', id))
	if err != nil || !ok {
		return nil, ok, err
	}
	nr, err := decodeNode(v)
	if err != nil {
		return nil, false, fmt.Errorf("%w: node %q of run %q: %w", ErrStore, id, run, err)
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
	// steps are the step records with steps added, or gone with their
	// plan created again (binrecord.go).
	steps map[stepRef]struct{}
	// journal are the entries applied since the last commit (journal.go);
	// legacy the keys of the legacy encoding to delete.
	journal []journalEntry
	legacy  [][]byte
	// activity: the run's activity changed (activity.go).
	activity bool
}

func newDirt() *dirt { return &dirt{} }

// addTo adds k to the set *m, making it on first use: a run that is not
// changing holds no maps.
func addTo[K comparable](m *map[K]struct{}, k K) {
	if *m == nil {
		*m = make(map[K]struct{})
	}
	(*m)[k] = struct{}{}
}

// keptDirt is the most entries a set or the journal of dirt keeps its room
// for when it is reset.
const keptDirt = 64

// reset empties d for the next commit. A set or journal that stayed small
// keeps its room, so that a run changing in every commit does not make
// its maps again each time (they were most of the allocations a commit
// made per run); a burst's large ones are dropped, so that a run does not
// hold them for the rest of its life.
// A large journal goes to s's free journals (growJournal).
func (d *dirt) reset(s *store) {
	d.meta, d.activity, d.legacy = false, false, nil
	resetSet(&d.nodes)
	resetSet(&d.requests)
	resetSet(&d.handles)
	resetSet(&d.plans)
	resetSet(&d.steps)
	if cap(d.journal) > keptDirt {
		s.freeJournal(d.journal)
		d.journal = nil
	} else {
		clear(d.journal) // its entries' strings
		d.journal = d.journal[:0]
	}
}

func resetSet[K comparable](m *map[K]struct{}) {
	if len(*m) > keptDirt {
		*m = nil
	} else {
		clear(*m)
	}
}

func (d *dirt) empty() bool {
	return !d.meta && !d.activity && len(d.nodes) == 0 && len(d.requests) == 0 && len(d.handles) == 0 && len(d.plans) == 0 &&
		len(d.steps) == 0 && len(d.journal) == 0 && len(d.legacy) == 0
}

// nodeHint is about the most bytes a node's or a run meta's record takes,
// for the arena to have room for (a larger one is allocated on its own).
const nodeHint = 2048

// write adds the run's changes to c and clears them; keep is how many
// journal entries the run's windows need (Config.journalKeep).
func (s *store) write(c *Changes, r *Run, keep int64) error {
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
			LastProgressWake: ms(r.lastProgressWake), First: ms(r.first), Diagnostics: r.diagnostics}
		c.set(s.encode(maxRunKeyBytes, func(b []byte) []byte { return appendRunKey(b, r.id, 'm', "") }),
			s.encode(nodeHint, func(b []byte) []byte { return encodeMeta(b, &m) }))
	}
	for id := range d.nodes {
		// A changed node stays in memory until written (Run.trim).
		if n := r.nodes[id]; n != nil {
			rec := n.record(&s.wd)
			c.set(s.encode(maxRunKeyBytes+len(id), func(b []byte) []byte { return appendRunKey(b, r.id, 'n', id) }),
				s.encode(nodeHint, func(b []byte) []byte { return encodeNode(b, &rec) }))
		}
	}
	for id := range d.requests {
		k := runKey(r.id, 'q', id)
		if q, ok := r.requests[id]; ok {
			if err := put(k, requestRecord{AgentID: q.agentID, Expires: ms(q.expires), DedupeKey: q.dedupeKey, Kind: q.kind}); err != nil {
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
			c.set(runKey(r.id, 'p', id), encodePlan(nil, pl))
		}
	}
	for ref := range d.steps {
		// Steps the plan no longer has (it was created again) are deleted.
		if pl := r.plans[ref.plan]; pl != nil {
			if b := pl.Bands[ref.band]; b != nil {
				if steps := b.stepsOf(ref); len(steps) > 0 {
					c.set(stepKey(r.id, ref), encodeSteps(nil, steps))
					continue
				}
			}
		}
		c.del(stepKey(r.id, ref))
	}
	if d.activity && r.act != nil {
		enc, err := encodeActivity(r.act)
		if err != nil {
			return err
		}
		c.set(runKey(r.id, 'a', ""), enc)
	}
	writeJournal(c, s, r, d, keep)
	d.reset(s)
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
