package snapshot

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// CachingTree is a Tree that keeps a Cache for the builder. Build then
// reuses, for every node that has not changed since a build that included
// it, the digest and its encoding made then: a wake encodes its envelope
// and the nodes that changed, not all of its nodes.
//
// Build reads and writes the cache, so a CachingTree must not be built from
// two goroutines at once (a projection's run has one owner anyway).
type CachingTree interface {
	Tree
	// DigestCache returns the tree's cache, the same one at every call.
	DigestCache() *Cache
}

// Cache keeps, between builds of one tree, each recently included node's
// digest and its JSON encoding. The zero Cache is empty and ready to use.
//
// An entry is used only if the node still holds every fact the digest was
// made from (digestEnc.matches compares them all), under the same string
// cut and dedupe-key bound. So the tree need not tell the cache when a node
// changes, and a change it forgot to tell could not serve a stale digest.
// lease_remaining_ms, the one part of a digest that depends on the wake
// rather than the node, is left out of the cached encoding and written at
// each build.
//
// It holds at most cacheSize(max_nodes) nodes (97 at the default 64),
// evicting by the clock algorithm, so its memory does not grow with the
// run: about 1 KB per node held (a 480-byte digestEnc, its encoding of 300
// to 550 bytes, a 40-byte slot and its map entry), under 100 KB per run at
// the default limits. Nothing of it is persisted; a run loaded from the
// store starts with an empty cache.
type Cache struct {
	slots map[string]*slot
	// clock holds the slots in the order the eviction hand visits them.
	clock []*slot
	hand  int
	// gen counts builds: a slot marked with the current gen is a
	// candidate of the build under way, which must neither be evicted nor
	// be added twice.
	gen uint64
}

// Len is the number of nodes the cache holds, each about 1 KB: for an
// estimate of the memory of the tree that keeps it.
func (c *Cache) Len() int { return len(c.clock) }

// slot is one node's place in the cache.
type slot struct {
	id  string
	gen uint64
	// used: read since the eviction hand last passed.
	used bool
	// evicted: e is the digest of the node the slot held before the hand
	// evicted it, kept only for its memory (slot.mem), never reused.
	evicted bool
	e       *digestEnc // nil until a build made one that can be reused
}

// mem returns the memory the next digest kept in s may encode in: that
// of the digest it replaces, which no build reads once replaced (a
// digest's encoding, unlike its fields, never leaves the builder).
func (s *slot) mem() []byte {
	if s.e == nil {
		return nil
	}
	return s.e.enc
}

// cached returns the digest s holds for its node, nil if none.
func (s *slot) cached() *digestEnc {
	if s.evicted {
		return nil
	}
	return s.e
}

// cacheSize is how many nodes a cache keeps under a max_nodes bound: the
// nodes of the last snapshot and room for those that change from one wake
// to the next (the nodes the wake refers to, newly signalled ones).
func cacheSize(maxNodes int) int { return maxNodes + maxNodes/2 + 1 }

// begin starts a build that includes at most maxNodes nodes.
func (c *Cache) begin(maxNodes int) {
	c.gen++
	if c.slots == nil {
		c.slots = make(map[string]*slot)
	}
	// Fewer max_nodes than the last build had: shrink to the new size.
	for size := cacheSize(maxNodes); len(c.clock) > size; {
		i := c.victim()
		delete(c.slots, c.clock[i].id)
		last := len(c.clock) - 1
		c.clock[i], c.clock[last] = c.clock[last], nil
		c.clock = c.clock[:last]
	}
}

// candidate returns the slot of node id for the build under way and
// whether the node is a candidate of this build already.
func (c *Cache) candidate(id string, maxNodes int) (*slot, bool) {
	s, ok := c.slots[id]
	if !ok {
		s = c.insert(id, maxNodes)
	} else if s.gen == c.gen {
		return s, true
	}
	s.gen, s.used = c.gen, true
	return s, false
}

// insert adds a slot for id. When the cache is full, the new slot takes
// the place, and the memory, of one the hand finds unused since it last
// passed.
func (c *Cache) insert(id string, maxNodes int) *slot {
	if len(c.clock) < cacheSize(maxNodes) {
		s := &slot{id: id}
		c.clock = append(c.clock, s)
		c.slots[id] = s
		return s
	}
	i := c.victim()
	s := c.clock[i]
	delete(c.slots, s.id)
	*s = slot{id: id, evicted: true, e: s.e} // no candidate of this build points to it
	c.slots[id] = s
	c.hand = i + 1
	return s
}

// victim moves the hand to a slot that may be evicted, clearing the used
// marks it passes, and returns its index: the clock algorithm. A slot
// marked with the build under way is never one. A build marks at most
// max_nodes slots and the cache holds more, so the hand finds one within
// two turns.
func (c *Cache) victim() int {
	for {
		if c.hand >= len(c.clock) {
			c.hand = 0
		}
		s := c.clock[c.hand]
		if s.gen != c.gen && !s.used {
			return c.hand
		}
		s.used = false
		c.hand++
	}
}

// digestEnc is a node's digest under a string cut and a dedupe-key bound,
// with its JSON encoding. Its digest is immutable once made: snapshots
// that Build returned share the digest's pointers, so a node that changed
// gets a new digestEnc rather than an update of its old one. Its encoding
// only the builder reads, so the digest that replaces it in a cache slot
// takes that memory over (slot.mem). Its size is 480 bytes plus its
// encoding (some 300 to 550 bytes at the default limits).
type digestEnc struct {
	// d's LeaseRemainingMs is nil: it depends on the wake's At, and each
	// build sets it.
	d topics.NodeDigest
	// enc is d's encoding, with lease_remaining_ms's value left out when
	// d has a lease: the value goes at remAt, or remAt is -1 and enc says
	// null.
	enc   []byte
	remAt int
	// cuts counts the strings cut. A digest with a cut string is never
	// reused (its string differs from the node's, so matches fails anyway).
	cuts         int
	cut, maxKeys int

	// What d's pointers point to: here rather than in allocations of
	// their own.
	strs  [7]string
	times [3]topics.Time
	kind  topics.SignalKind
	keys  [DefaultMaxDedupeKeys]string
}

// size is the length of the digest's encoding with lease remaining rem. The
// builder's budget takes it at widestRemainingMs, the encoding at the wake's
// value, which can only be shorter.
func (e *digestEnc) size(rem int64) int {
	if e.remAt < 0 {
		return len(e.enc)
	}
	return len(e.enc) + intLen(rem)
}

// appendTo appends the digest's encoding with lease remaining rem.
func (e *digestEnc) appendTo(dst []byte, rem int64) []byte {
	if e.remAt < 0 {
		return append(dst, e.enc...)
	}
	dst = append(dst, e.enc[:e.remAt]...)
	dst = strconv.AppendInt(dst, rem, 10)
	return append(dst, e.enc[e.remAt:]...)
}

// intLen is the length of v in decimal.
func intLen(v int64) int {
	n := 1
	u := uint64(v)
	if v < 0 {
		n++
		u = -u
	}
	for ; u >= 10; u /= 10 {
		n++
	}
	return n
}

// newDigestEnc makes n's digest under string cut cut and at most maxKeys
// dedupe keys, and encodes it, in *scratch first so that the encoding has
// one allocation of its exact size. A digest that cut no string (the one a
// cache keeps) is encoded in mem instead when it has room: memory the
// caller will not read again. A node the wire format cannot say (a time
// outside years 0000-9999) is an error wrapping ErrEncoding.
func newDigestEnc(n *Node, cut, maxKeys int, scratch *[]byte, mem []byte) (*digestEnc, error) {
	e := &digestEnc{cut: cut, maxKeys: maxKeys}
	e.digest(n)
	if e.cuts != 0 {
		mem = nil
	}
	if err := e.encode(scratch, mem); err != nil {
		return nil, err
	}
	return e, nil
}

// digest sets e.d to n's digest under e's string cut and at most
// e.maxKeys dedupe keys, its strings and times in e's own arrays, and
// counts the strings it cut in e.cuts.
func (e *digestEnc) digest(n *Node) {
	cut, maxKeys := e.cut, e.maxKeys
	// Ids are cut so as to stay distinct and matchable, text between
	// grapheme clusters (cut.go).
	str := func(s string, cutter func(string, int) (string, bool)) string {
		c, cutIt := cutter(s, cut)
		if cutIt {
			e.cuts++
		}
		return c
	}
	id := func(s string) string { return str(s, CutID) }
	nstr := 0
	ptr := func(s string, cutter func(string, int) (string, bool)) *string {
		if s == "" {
			return nil
		}
		e.strs[nstr] = str(s, cutter)
		nstr++
		return &e.strs[nstr-1]
	}
	ntime := 0
	timePtr := func(t topics.Time) *topics.Time {
		if t.IsZero() {
			return nil
		}
		e.times[ntime] = t
		ntime++
		return &e.times[ntime-1]
	}
	d := &e.d
	*d = topics.NodeDigest{
		AgentID:           id(n.AgentID),
		Role:              roleOf(*n),
		ParentAgentID:     ptr(n.ParentAgentID, CutID),
		Status:            statusOf(*n),
		StatusUpdatedAt:   timePtr(n.StatusUpdatedAt),
		ActiveRunID:       ptr(n.ActiveRunID, CutID),
		ActiveTaskID:      ptr(n.ActiveTaskID, CutID),
		Capability:        ptr(n.Capability, CutText),
		LastSignalAt:      timePtr(n.LastSignalAt),
		LastCorrelationID: ptr(n.LastCorrelationID, CutID),
		OpenRequestCount:  max(n.OpenRequestCount, 0),
		LastRequestKind:   ptr(n.LastRequestKind, CutText),
	}
	if n.LastSignalKind != "" {
		e.kind = n.LastSignalKind
		d.LastSignalKind = &e.kind
	}
	if !n.LeaseExpiresAt.IsZero() {
		d.LeaseOwner = ptr(n.LeaseOwner, CutID)
		d.LeaseExpiresAt = timePtr(n.LeaseExpiresAt)
	}
	keys := n.RecentDedupeKeys
	if len(keys) > maxKeys {
		keys = keys[:maxKeys]
	}
	// Never nil: no keys encode as [], not null. Full length and capacity,
	// so that nothing appended to one snapshot's keys reaches the cache.
	if len(keys) <= len(e.keys) {
		d.RecentRequestDedupeKeys = e.keys[:len(keys):len(keys)]
	} else {
		d.RecentRequestDedupeKeys = make([]string, len(keys))
	}
	for i, k := range keys {
		d.RecentRequestDedupeKeys[i] = id(k)
	}
}

// encode sets e.enc to e.d's encoding without lease_remaining_ms's value,
// and e.remAt to where that value goes (-1 without a lease), encoding in
// *scratch first so that e.enc is one allocation of its exact size, or
// mem's when it has room.
func (e *digestEnc) encode(scratch *[]byte, mem []byte) error {
	d := &e.d
	enc, err := d.AppendJSON((*scratch)[:0])
	if err != nil {
		return fmt.Errorf("%w: node %q: %w", ErrEncoding, d.AgentID, err)
	}
	*scratch = enc
	e.remAt = -1
	if d.LeaseExpiresAt != nil {
		// Encoded null (LeaseRemainingMs is nil), which is cut out. The key
		// cannot occur earlier: a '"' inside a string is escaped.
		const key = `,"lease_remaining_ms":`
		i := bytes.Index(enc, []byte(key+"null,"))
		if i < 0 {
			return fmt.Errorf("%w: no lease_remaining_ms in the encoding of node %q", ErrAccounting, d.AgentID)
		}
		e.remAt = i + len(key)
		enc = append(enc[:e.remAt], enc[e.remAt+len("null"):]...)
	}
	if cap(mem) >= len(enc) {
		e.enc = append(mem[:0], enc...)
	} else {
		e.enc = bytes.Clone(enc)
	}
	return nil
}

// matches reports whether e is the digest newDigestEnc(n, cut, maxKeys)
// would make, but for lease_remaining_ms: whether n still holds every fact
// e was made from. It compares every field of Node (TestCacheNeverStale
// changes each one), and is conservative: two times that are the same
// instant but not == (another location) do not match.
func (e *digestEnc) matches(n *Node, cut, maxKeys int) bool {
	d := &e.d
	if e.cut != cut || e.maxKeys != maxKeys || e.cuts != 0 {
		return false
	}
	if d.AgentID != n.AgentID || d.Role != roleOf(*n) || d.Status != statusOf(*n) ||
		d.OpenRequestCount != max(n.OpenRequestCount, 0) ||
		!strIs(d.ParentAgentID, n.ParentAgentID) || !timeIs(d.StatusUpdatedAt, n.StatusUpdatedAt) ||
		!strIs(d.ActiveRunID, n.ActiveRunID) || !strIs(d.ActiveTaskID, n.ActiveTaskID) ||
		!strIs(d.Capability, n.Capability) || !timeIs(d.LastSignalAt, n.LastSignalAt) ||
		!strIs(d.LastCorrelationID, n.LastCorrelationID) || !strIs(d.LastRequestKind, n.LastRequestKind) {
		return false
	}
	if (d.LastSignalKind == nil) != (n.LastSignalKind == "") || d.LastSignalKind != nil && *d.LastSignalKind != n.LastSignalKind {
		return false
	}
	// The owner is in the digest only with a lease.
	if !timeIs(d.LeaseExpiresAt, n.LeaseExpiresAt) || !n.LeaseExpiresAt.IsZero() && !strIs(d.LeaseOwner, n.LeaseOwner) {
		return false
	}
	keys := n.RecentDedupeKeys
	if len(keys) > maxKeys {
		keys = keys[:maxKeys]
	}
	if len(keys) != len(d.RecentRequestDedupeKeys) {
		return false
	}
	for i, k := range keys {
		if d.RecentRequestDedupeKeys[i] != k {
			return false
		}
	}
	return true
}

// nodeOf returns a node with the facts of digest d, which cut no string:
// the digest of nodeOf(d) at any cut is the node's own (TestNodeOfDigest).
// A candidate keeps its digest rather than its node, and a halved cut
// digests it again from this.
func nodeOf(d *topics.NodeDigest) *Node {
	n := &Node{
		AgentID:          d.AgentID,
		Role:             d.Role,
		Status:           d.Status,
		OpenRequestCount: d.OpenRequestCount,
		RecentDedupeKeys: d.RecentRequestDedupeKeys,
	}
	set := func(dst *string, p *string) {
		if p != nil {
			*dst = *p
		}
	}
	setTime := func(dst *topics.Time, p *topics.Time) {
		if p != nil {
			*dst = *p
		}
	}
	set(&n.ParentAgentID, d.ParentAgentID)
	setTime(&n.StatusUpdatedAt, d.StatusUpdatedAt)
	set(&n.LeaseOwner, d.LeaseOwner)
	setTime(&n.LeaseExpiresAt, d.LeaseExpiresAt)
	set(&n.ActiveRunID, d.ActiveRunID)
	set(&n.ActiveTaskID, d.ActiveTaskID)
	set(&n.Capability, d.Capability)
	if d.LastSignalKind != nil {
		n.LastSignalKind = *d.LastSignalKind
	}
	setTime(&n.LastSignalAt, d.LastSignalAt)
	set(&n.LastCorrelationID, d.LastCorrelationID)
	set(&n.LastRequestKind, d.LastRequestKind)
	return n
}

// strIs reports whether p is what the digest makes of s: nil for "".
func strIs(p *string, s string) bool {
	if p == nil {
		return s == ""
	}
	return *p == s
}

// timeIs reports whether p is what the digest makes of t: nil for the
// zero Time.
func timeIs(p *topics.Time, t topics.Time) bool {
	if p == nil {
		return t.IsZero()
	}
	return *p == t
}

func roleOf(n Node) topics.Role {
	if n.Role == "" {
		return topics.RoleUnknown
	}
	return n.Role
}
