package snapshot

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// widest are the widest encodings of the fields that may differ between two
// builds of one tree and wake: generated_at and snapshot_age_ms, which depend
// on the wall clock (as does stale, measured as false, the longer of its two
// values), and lease_remaining_ms, which depends on the wake's logical time.
// The byte budget is measured with them, so that the real values can only
// make the snapshot smaller, and the nodes it holds, their order and
// truncation_meta are the same at any clock. A Time always encodes to the
// same width.
var (
	widestGeneratedAt = topics.NewTime(lastTime)
	widestAgeMs       = int64(math.MaxInt64)
	// widestRemainingMs is the widest lease_remaining_ms: a lease that
	// expired at the first instant a Time encodes, at the last (16
	// characters, where an int64 takes 20).
	widestRemainingMs = -maxRemainingMs
)

// The first and last instants a topics.Time encodes (RFC 3339, years
// 0000-9999, milliseconds), and the most milliseconds between two of them.
var (
	firstTime      = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	lastTime       = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
	maxRemainingMs = lastTime.UnixMilli() - firstTime.UnixMilli()
)

// remainingMs is lease_remaining_ms: the milliseconds from the wake's
// logical time at to the lease's expiry, exact between any two times a
// snapshot can say (a time.Duration would stop at 292 years). A clock
// outside them, which no event time sets, is clamped, so that no value is
// wider than widestRemainingMs.
func remainingMs(expires, at topics.Time) int64 {
	return min(max(expires.UnixMilli()-at.UnixMilli(), -maxRemainingMs), maxRemainingMs)
}

// Build returns the snapshot of t for wake w under limits l, generated at
// now, and its encoded size. It reads at most l.MaxNodes candidates from each
// of t's rankings and never the whole tree.
//
// Which nodes fit the byte budget does not depend on now nor on w.At: the
// wall-clock fields and every lease_remaining_ms are counted at their widest
// encoding, so two builds of one tree and wake differ in those fields only.
// A node or a now that the wire format cannot say (a time outside years
// 0000-9999) is an error wrapping ErrEncoding, never a panic.
//
// When t is a CachingTree, Build reuses the digests and encodings of the
// nodes that did not change since a build that included them, and keeps
// those it makes: the bytes are the same either way. The snapshot's nodes
// then share their strings, times and keys with the cache, and with other
// snapshots of t: a caller must not modify what they point to (nothing
// does; a wake is published as it is built).
func Build(t Tree, w Wake, l Limits, now time.Time) (*topics.AgentTreeSnapshot, Info, error) {
	if err := l.Validate(); err != nil {
		return nil, Info{}, err
	}
	l = l.WithDefaults()
	var cache *Cache
	if ct, ok := t.(CachingTree); ok {
		cache = ct.DigestCache()
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	b := &builder{limits: l, cut: l.MaxStringLength, scratch: sc, nodes: w.Nodes}
	cands := b.candidates(t, w, cache)
	if b.err != nil {
		return nil, Info{}, b.err
	}
	stats := t.Stats()

	// The string cut is normally l.MaxStringLength. Only when even the root
	// and the summary cannot fit the byte budget (pathological ids of
	// multi-byte or escaped characters) is it halved until they do: the
	// snapshot stays within bounds and says, in cut_strings, that it cut.
	for {
		s, size, ok := b.fit(t, w, cands, stats)
		if b.err != nil {
			return nil, Info{}, b.err
		}
		// Not below 1: an id cut to nothing would be no id.
		if !ok && b.cut > 1 {
			b.cut /= 2
			b.cuts = 0
			continue
		}
		return b.finish(s, size, w, now)
	}
}

// candidate is a node the builder may include, as its digest at the usual
// string cut (Limits.MaxStringLength).
type candidate struct {
	e   *digestEnc
	rem int64 // lease_remaining_ms, when e has a lease
	// node is kept only when e cut a string, and so lost a fact that a
	// digest at a halved cut needs; else e holds every fact (nodeOf).
	node *Node
}

// candidates returns up to l.MaxNodes distinct nodes in inclusion order
// (seed 000 "Deterministic Truncation Policy"), each digested as it is
// read rather than copied: a node is some 300 bytes. With a cache, the
// nodes' slots mark which are candidates already, in place of a set of
// their own, and hold their digests from earlier builds.
func (b *builder) candidates(t Tree, w Wake, c *Cache) []candidate {
	max := b.limits.MaxNodes
	out := b.cands[:0]
	defer func() { b.cands = out }() // grown, for the next build
	var seen map[string]struct{}
	if c == nil {
		seen = make(map[string]struct{}, max)
	} else {
		c.begin(max)
	}
	add := func(n Node) bool {
		var s *slot
		if c != nil {
			var dup bool
			if s, dup = c.candidate(n.AgentID, max); dup {
				return len(out) < max
			}
		} else if _, dup := seen[n.AgentID]; dup {
			return len(out) < max
		} else {
			seen[n.AgentID] = struct{}{}
		}
		e, err := b.digest(&n, s)
		if err != nil {
			b.err = err
			return false
		}
		cd := candidate{e: e}
		if e.remAt >= 0 {
			cd.rem = remainingMs(n.LeaseExpiresAt, w.At)
		}
		if cd.e.cuts > 0 {
			cd.node = new(Node)
			*cd.node = n
		}
		out = append(out, cd)
		return len(out) < max
	}
	addAll := func(seq func(func(Node) bool)) bool {
		more := true
		seq(func(n Node) bool { more = add(n); return more })
		return more
	}
	// 1. The root conductor.
	if root, ok := t.Root(); ok && !add(root) {
		return out
	}
	// 2. Nodes the wake refers to, directly and by correlation.
	for _, id := range w.AgentIDs {
		if n, ok := t.Node(id); ok && !add(n) {
			return out
		}
	}
	for _, id := range w.CorrelationIDs {
		if !addAll(t.WithCorrelation(id)) {
			return out
		}
	}
	// 3. Blocked and failed; 4. leases nearest expiry; 5. newest signal.
	for _, seq := range []func(func(Node) bool){t.Urgent(), t.ByLeaseExpiry(), t.ByLastSignal()} {
		if !addAll(seq) {
			return out
		}
	}
	return out
}

type builder struct {
	limits Limits
	cut    int
	cuts   int   // strings cut by str so far
	err    error // a node or the envelope did not encode, or the accounting check failed
	*scratch
	// strs and ints back the envelope's and the digests' optional
	// fields, rather than an allocation each.
	strs []string
	ints []int64
	// nodes is the caller's Wake.Nodes.
	nodes func(n int) []topics.NodeDigest
}

// scratch is a build's working memory, none of which the snapshot it
// returns refers to. It is pooled rather than allocated at every build:
// allocations were a good part of a build's cost, counting their garbage
// collection.
type scratch struct {
	// buf takes the encodings the builder only measures: each new digest
	// and the envelopes.
	buf   []byte
	cands []candidate
	// encs are the candidates' digests at the builder's cut and rems their
	// lease remaining times (when they have a lease): the snapshot's nodes
	// are the first len(s.Nodes). sums[k] and cutSums[k] are the encoded
	// size, each lease_remaining_ms at its widest, and the strings cut of
	// the first k.
	encs          []*digestEnc
	rems          []int64
	sums, cutSums []int
	// handleCuts[i] counts the strings cut in the first i handles.
	handleCuts []int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// release returns s to the pool, but for the digests it points to and a
// rare huge scratch (of limits far above the defaults).
func (s *scratch) release() {
	clear(s.cands[:cap(s.cands)])
	clear(s.encs[:cap(s.encs)])
	if cap(s.buf) > 1<<20 || cap(s.cands) > 1<<14 || cap(s.handleCuts) > 1<<14 {
		return
	}
	scratchPool.Put(s)
}

// resize returns s with length n, reallocated if it is too short. Its
// contents are not cleared.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// slabbed returns a pointer to v in *slab, starting a new slab of n when it
// is full: pointers into a full slab stay valid (it stays reachable through
// them).
func slabbed[T any](slab *[]T, v T, n int) *T {
	if len(*slab) == cap(*slab) {
		*slab = make([]T, 0, n)
	}
	*slab = append(*slab, v)
	return &(*slab)[len(*slab)-1]
}

// fit builds the snapshot with as many candidates as the byte budget allows,
// and returns it with its size at the widest values (widestGeneratedAt,
// ...). ok is false when not even the envelope with the root fits, or b.err
// is set.
func (b *builder) fit(t Tree, w Wake, cands []candidate, stats Stats) (*topics.AgentTreeSnapshot, int, bool) {
	s, handles := b.envelope(t, w, stats)
	// The strings cut in the envelope, its handles aside: a dropped handle
	// is counted in omitted_correlation_handles, not in cut_strings.
	envCuts := b.cuts - b.handleCuts[len(handles)]
	if !b.digestAll(cands) {
		return s, 0, false
	}
	m := &sizer{b: b, s: s, stats: stats, handles: handles, envCuts: envCuts}

	// The most nodes that fit, dropping from the lowest rank; the envelope is
	// re-measured for each count because its counters change width. A digest
	// or a handle adds more bytes than the counters can lose (a digit or
	// two), so the size grows strictly with the nodes and with the handles,
	// and a binary search finds the same counts as trying every count from
	// the most down, in O(log) encodings of the envelope rather than
	// O(max_nodes x max_correlation_handles).
	minNodes := 0
	if s.RootAgentID != nil && len(cands) > 0 {
		minNodes = 1
	}
	// Handles give way only when not even the root fits with all of them:
	// drop them from the tail, then give up on this string length.
	nh := len(handles)
	if !m.fits(nh, minNodes) {
		if b.err != nil || !m.fits(0, minNodes) {
			return s, 0, false
		}
		nh = largest(0, nh-1, func(n int) bool { return m.fits(n, minNodes) })
	}
	k := largest(minNodes, len(cands), func(k int) bool { return m.fits(nh, k) })
	n := m.size(nh, k) // leaves s's counters set for nh handles and k nodes
	if !b.check(s, k, n) {
		return s, 0, false
	}
	b.place(s, k)
	return s, n, true
}

// envelope returns the snapshot without its nodes, and the handles of its
// summary (up to MaxCorrelationHandles, at the builder's cut). It leaves
// in b.handleCuts[i] the strings cut in the first i handles.
func (b *builder) envelope(t Tree, w Wake, stats Stats) (*topics.AgentTreeSnapshot, []string) {
	s := &topics.AgentTreeSnapshot{
		SnapshotID:   w.SnapshotID,
		GeneratedAt:  widestGeneratedAt,
		AsOfEventSeq: w.Seq,
		Scope: topics.Scope{
			RunID:     b.str(t.RunID()),
			SessionID: b.ptr(t.SessionID()),
			ThreadID:  b.ptr(t.ThreadID()),
		},
		SnapshotAgeMs: widestAgeMs,
	}
	if root, ok := t.Root(); ok {
		s.RootAgentID = b.ptr(root.AgentID)
	}
	handles := make([]string, 0, b.limits.MaxCorrelationHandles)
	before := b.cuts
	b.handleCuts = append(b.handleCuts[:0], 0)
	for h := range t.ActiveCorrelations() {
		handles = append(handles, b.str(h))
		b.handleCuts = append(b.handleCuts, b.cuts-before)
		if len(handles) == b.limits.MaxCorrelationHandles {
			break
		}
	}
	s.Summary = topics.Summary{
		NodeCountTotal:           stats.NodeCount,
		CountsByStatus:           stats.ByStatus,
		BlockedCount:             stats.ByStatus.Blocked,
		FailedCount:              stats.ByStatus.Failed,
		OverdueLeaseCount:        stats.OverdueLeases,
		ActiveCorrelationHandles: handles,
		OpenRequestCount:         stats.OpenRequests,
	}
	return s, handles
}

// digestAll puts each candidate's digest at the builder's cut in b.encs
// (digested again when the cut is not the usual one), its lease remaining
// time in b.rems, and, as sums over the first k candidates, their encoded
// size in b.sums[k] and the strings cut in them in b.cutSums[k]. It is
// false, with b.err set, when a digest does not encode.
func (b *builder) digestAll(cands []candidate) bool {
	b.encs = resize(b.encs, len(cands))
	b.rems = resize(b.rems, len(cands))
	b.sums = resize(b.sums, len(cands)+1)
	b.cutSums = resize(b.cutSums, len(cands)+1)
	sums, cutSums := b.sums, b.cutSums
	sums[0], cutSums[0] = 0, 0
	for i, c := range cands {
		e := c.e
		if b.cut != b.limits.MaxStringLength {
			n := c.node
			if n == nil {
				n = nodeOf(&e.d)
			}
			var err error
			if e, err = b.digest(n, nil); err != nil {
				b.err = err
				return false
			}
		}
		b.encs[i], b.rems[i] = e, c.rem
		// At its widest lease_remaining_ms, not c.rem: the wake's time
		// must not decide what fits.
		sums[i+1] = sums[i] + e.size(widestRemainingMs)
		cutSums[i+1] = cutSums[i] + e.cuts
	}
	return true
}

// sizer measures fit's snapshot with its first nh handles and first k
// candidates. The envelope is encoded once for each handle count tried
// (one, but when the handles do not fit): for other node counts only its
// counters change, and its size with them by their widths (counterWidth).
// The search tries some ten counts.
type sizer struct {
	b       *builder
	s       *topics.AgentTreeSnapshot
	stats   Stats
	handles []string
	envCuts int // the strings cut in the envelope, its handles aside
	bases   [16]envBase
	nbases  int
}

// envBase is the envelope's size less counterWidth, with nh handles.
type envBase struct{ nh, size int }

// size is the snapshot's encoded size with nh handles and k nodes, its
// counters set for them; math.MaxInt, with b.err set, when the envelope
// does not encode.
func (m *sizer) size(nh, k int) int {
	b, s := m.b, m.s
	s.Summary.ActiveCorrelationHandles = m.handles[:nh]
	b.account(s, k, m.stats, nh, m.envCuts+b.handleCuts[nh]+b.cutSums[k])
	i := 0
	for i < m.nbases && m.bases[i].nh != nh {
		i++
	}
	if i == m.nbases {
		env, err := b.envelopeSize(s)
		if err != nil {
			// Nothing fits; fit returns the error.
			b.err = err
			return math.MaxInt
		}
		i = min(m.nbases, len(m.bases)-1) // (the handle search tries a dozen at most)
		m.bases[i] = envBase{nh, env - counterWidth(s)}
		m.nbases = i + 1
	}
	n := m.bases[i].size + counterWidth(s) + b.sums[k]
	if k > 1 {
		n += k - 1
	}
	return n
}

// fits: the snapshot with nh handles and k nodes is within the byte budget.
func (m *sizer) fits(nh, k int) bool { return m.size(nh, k) <= m.b.limits.MaxBytes }

// largest returns the largest n in [lo, hi] with ok(n), given ok(lo).
func largest(lo, hi int, ok func(int) bool) int {
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// check encodes the envelope that size left for k nodes and is true when
// it is as measured (n bytes in all); else it sets b.err.
func (b *builder) check(s *topics.AgentTreeSnapshot, k, n int) bool {
	sums := b.sums
	env, err := b.envelopeSize(s)
	switch {
	case b.err != nil:
		return false
	case err != nil:
		b.err = err
		return false
	case env+sums[k]+max(k-1, 0) != n:
		// A field that changes with the node count and that counterWidth
		// misses: the search may have chosen wrong, and no snapshot is
		// better than a wrong one (the tests see this).
		b.err = fmt.Errorf("%w: envelope of %d bytes measured as %d", ErrAccounting, env, n-sums[k]-max(k-1, 0))
		return false
	}
	return true
}

// place gives s the first k candidates' digests as its nodes.
func (b *builder) place(s *topics.AgentTreeSnapshot, k int) {
	b.encs, b.rems = b.encs[:k], b.rems[:k]
	s.Nodes = nil
	if b.nodes != nil {
		s.Nodes = b.nodes(k)
	}
	if len(s.Nodes) != k {
		s.Nodes = make([]topics.NodeDigest, k)
	}
	for i, e := range b.encs {
		s.Nodes[i] = e.d
		if e.remAt >= 0 {
			s.Nodes[i].LeaseRemainingMs = slabbed(&b.ints, b.rems[i], k)
		}
	}
}

// digest returns n's digest at the builder's cut and its encoding: the one
// in slot s when the node has not changed since, else a new one, kept in s
// for the next build when it can be reused.
func (b *builder) digest(n *Node, s *slot) (*digestEnc, error) {
	maxKeys := b.limits.MaxDedupeKeys
	var mem []byte
	if s != nil {
		if c := s.cached(); c != nil && c.matches(n, b.cut, maxKeys) {
			return c, nil
		}
		// The digest this one replaces in s is in no candidate of this
		// build (a slot is a candidate once), and its encoding in no
		// snapshot: its memory takes the new encoding.
		mem = s.mem()
	}
	e, err := newDigestEnc(n, b.cut, maxKeys, &b.buf, mem)
	if err != nil {
		return nil, err
	}
	if s != nil && e.cuts == 0 {
		s.e, s.evicted = e, false // e is in mem, when it had room
	}
	return e, nil
}

// account fills the summary's and truncation_meta's counters for a snapshot
// that includes the first k candidates.
func (b *builder) account(s *topics.AgentTreeSnapshot, k int, stats Stats, handles, cuts int) {
	s.Summary.NodeCountIncluded = k
	omitted := stats.ByStatus
	for _, e := range b.encs[:k] {
		omitted.Add(e.d.Status, -1)
	}
	// A tree whose totals disagree with its nodes (never, from the
	// projection) must not produce negative counts.
	for _, st := range topics.Statuses {
		if c := omitted.Get(st); c < 0 {
			omitted.Add(st, -c)
		}
	}
	m := topics.TruncationMeta{
		OmittedCountTotal:         max(stats.NodeCount-k, 0),
		OmittedByStatus:           omitted,
		ByteBudget:                b.limits.MaxBytes,
		PolicyVersion:             PolicyVersion,
		OmittedCorrelationHandles: max(stats.ActiveCorrelations-handles, 0),
		CutStrings:                cuts,
	}
	s.TruncationMeta = m
	s.Truncated = m.OmittedCountTotal > 0 || m.OmittedCorrelationHandles > 0 || m.CutStrings > 0
}

// counterWidth is the encoded width of the envelope's fields that account
// sets: all that changes with the node count for a given handle count.
func counterWidth(s *topics.AgentTreeSnapshot) int {
	m := &s.TruncationMeta
	c := &m.OmittedByStatus
	n := len("false")
	if s.Truncated {
		n = len("true")
	}
	for _, v := range [...]int{s.Summary.NodeCountIncluded, m.OmittedCountTotal, m.OmittedCorrelationHandles, m.CutStrings,
		c.Idle, c.Running, c.Blocked, c.Failed, c.Completed, c.Unknown} {
		n += intLen(int64(v))
	}
	return n
}

// envelopeSize is the encoded size of s with an empty node list.
func (b *builder) envelopeSize(s *topics.AgentTreeSnapshot) (int, error) {
	nodes := s.Nodes
	s.Nodes = []topics.NodeDigest{}
	var err error
	b.buf, err = s.AppendJSON(b.buf[:0])
	s.Nodes = nodes
	if err != nil {
		return 0, fmt.Errorf("%w: the envelope: %w", ErrEncoding, err)
	}
	return len(b.buf), nil
}

// finish sets the wall-clock fields and checks the bound on the real bytes.
func (b *builder) finish(s *topics.AgentTreeSnapshot, measured int, w Wake, now time.Time) (*topics.AgentTreeSnapshot, Info, error) {
	src := w.Source
	if src.IsZero() {
		src = w.At
	}
	age := now.Sub(src.Std()).Milliseconds()
	if age < 0 {
		age = 0
	}
	s.GeneratedAt = topics.NewTime(now)
	s.SnapshotAgeMs = age
	s.Stale = time.Duration(age)*time.Millisecond > b.limits.StaleAfter
	if s.Nodes == nil {
		s.Nodes = []topics.NodeDigest{}
	}
	// Encoded to check the accounting and for the wake to splice in (it
	// is the caller's: not scratch), the nodes' encodings spliced in
	// rather than encoded again, into a buffer of the size measured or
	// the caller's (Wake.Buffer).
	room := max(w.Room, 0)
	var buf []byte
	if w.Buffer != nil {
		buf = w.Buffer(room + measured + 1)
	}
	if cap(buf) < room+measured+1 {
		buf = make([]byte, 0, room+measured+1)
	}
	framed, err := topics.AppendSnapshotJSON(buf[:room], s, b.appendNode)
	if err != nil {
		return nil, Info{}, fmt.Errorf("%w: %w", ErrEncoding, err)
	}
	enc := framed[room:]
	if len(enc) > b.limits.MaxBytes || len(enc) > measured {
		return nil, Info{}, fmt.Errorf("%w: encoded %d bytes, measured %d, budget %d", ErrAccounting, len(enc), measured, b.limits.MaxBytes)
	}
	return s, Info{
		Bytes:         len(enc),
		Encoded:       enc,
		Framed:        framed,
		NodesIncluded: len(s.Nodes),
		NodesOmitted:  s.TruncationMeta.OmittedCountTotal,
		Truncated:     s.Truncated,
		Stale:         s.Stale,
		AgeMs:         age,
		Cut:           b.cut,
	}, nil
}

// appendNode appends the encoding of the snapshot's node i.
func (b *builder) appendNode(dst []byte, i int) []byte {
	return b.encs[i].appendTo(dst, b.rems[i])
}

func statusOf(n Node) topics.Status {
	if n.Status == "" {
		return topics.StatusUnknown
	}
	return n.Status
}

// str cuts an id (the run, the session, the thread, the root, a handle) to
// the string bound as CutID does, counting cuts.
func (b *builder) str(s string) string {
	s, cut := CutID(s, b.cut)
	if cut {
		b.cuts++
	}
	return s
}

// ptr is str's result as a pointer, nil for "": the envelope's three
// optional strings share a slab.
func (b *builder) ptr(s string) *string {
	if s == "" {
		return nil
	}
	return slabbed(&b.strs, b.str(s), 3)
}
