package snapshot

import (
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// widest are the wall-clock values of the widest encoding: the byte budget is
// measured with them so that the real values can only make the snapshot
// smaller. A Time always encodes to the same width.
var (
	widestGeneratedAt = topics.NewTime(time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC))
	widestAgeMs       = int64(math.MaxInt64)
)

// Build returns the snapshot of t for wake w under limits l, generated at
// now, and its encoded size. It reads at most l.MaxNodes candidates from each
// of t's rankings and never the whole tree.
func Build(t Tree, w Wake, l Limits, now time.Time) (*topics.AgentTreeSnapshot, Info, error) {
	if err := l.Validate(); err != nil {
		return nil, Info{}, err
	}
	l = l.WithDefaults()
	cands := candidates(t, w, l.MaxNodes)
	stats := t.Stats()

	// The string cut is normally l.MaxStringLength. Only when even the root
	// and the summary cannot fit the byte budget (pathological ids of
	// multi-byte or escaped characters) is it halved until they do: the
	// snapshot stays within bounds and says, in cut_strings, that it cut.
	for cut := l.MaxStringLength; ; cut /= 2 {
		b := builder{limits: l, cut: cut}
		s, size, ok := b.fit(t, w, cands, stats)
		if !ok && cut > 0 {
			continue
		}
		return b.finish(s, size, w, now)
	}
}

// candidates returns up to max distinct nodes in inclusion order (seed 000
// "Deterministic Truncation Policy").
func candidates(t Tree, w Wake, max int) []Node {
	out := make([]Node, 0, max)
	seen := make(map[string]struct{}, max)
	add := func(n Node) bool {
		if _, dup := seen[n.AgentID]; !dup {
			seen[n.AgentID] = struct{}{}
			out = append(out, n)
		}
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
	cuts   int // strings cut by str so far
	// buf is scratch for the encodings the builder only measures: every
	// candidate digest and each envelope the binary search tries are
	// appended to it in turn rather than each allocated anew.
	buf []byte
	// strs, times and ints back the digests' optional fields: a digest
	// has up to a dozen pointers, and allocating each on its own was most
	// of a build's allocations (BenchmarkBuild).
	strs  []string
	times []topics.Time
	ints  []int64
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

// fit builds the snapshot with as many candidates as the byte budget allows.
// ok is false when not even the envelope with the root fits.
func (b *builder) fit(t Tree, w Wake, cands []Node, stats Stats) (*topics.AgentTreeSnapshot, int, bool) {
	l := b.limits
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
	handles := make([]string, 0, l.MaxCorrelationHandles)
	handleCuts := make([]int, 0, l.MaxCorrelationHandles) // strings cut in each handle: 0 or 1
	for h := range t.ActiveCorrelations() {
		before := b.cuts
		handles = append(handles, b.str(h))
		handleCuts = append(handleCuts, b.cuts-before)
		if len(handles) == l.MaxCorrelationHandles {
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

	envCuts := b.cuts
	digests := make([]topics.NodeDigest, len(cands))
	sizes := make([]int, len(cands))    // encoded size of each digest
	nodeCuts := make([]int, len(cands)) // strings cut in each digest
	for i, n := range cands {
		before := b.cuts
		digests[i] = b.digest(n, w.At)
		nodeCuts[i] = b.cuts - before
		var err error
		if b.buf, err = digests[i].AppendJSON(b.buf[:0]); err != nil {
			// Digests hold only strings, ints and valid times.
			panic(fmt.Sprintf("snapshot: encoding a digest: %v", err))
		}
		sizes[i] = len(b.buf)
	}

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
	sums := make([]int, len(cands)+1) // sums[k], cutSums[k]: of the first k digests
	cutSums := make([]int, len(cands)+1)
	for i := range cands {
		sums[i+1] = sums[i] + sizes[i]
		cutSums[i+1] = cutSums[i] + nodeCuts[i]
	}
	handleCutSums := make([]int, len(handles)+1)
	for i, c := range handleCuts {
		handleCutSums[i+1] = handleCutSums[i] + c
	}
	envCuts -= handleCutSums[len(handles)]
	size := func(nh, k int) int {
		// A dropped handle is counted in omitted_correlation_handles, not
		// in cut_strings.
		s.Summary.ActiveCorrelationHandles = handles[:nh]
		b.account(s, cands[:k], stats, nh, envCuts+handleCutSums[nh]+cutSums[k])
		n := b.envelopeSize(s) + sums[k]
		if k > 1 {
			n += k - 1
		}
		return n
	}
	fits := func(nh, k int) bool { return size(nh, k) <= l.MaxBytes }
	// largest returns the largest n in [lo, hi] with ok(n), given ok(lo).
	largest := func(lo, hi int, ok func(int) bool) int {
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

	// Handles give way only when not even the root fits with all of them:
	// drop them from the tail, then give up on this string length.
	nh := len(handles)
	if !fits(nh, minNodes) {
		if !fits(0, minNodes) {
			return s, 0, false
		}
		nh = largest(0, nh-1, func(n int) bool { return fits(n, minNodes) })
	}
	k := largest(minNodes, len(cands), func(k int) bool { return fits(nh, k) })
	n := size(nh, k) // leaves s's counters set for nh handles and k nodes
	s.Nodes = digests[:k]
	return s, n, true
}

// account fills the summary's and truncation_meta's counters for a snapshot
// that includes nodes.
func (b *builder) account(s *topics.AgentTreeSnapshot, nodes []Node, stats Stats, handles, cuts int) {
	s.Summary.NodeCountIncluded = len(nodes)
	omitted := stats.ByStatus
	for _, n := range nodes {
		omitted.Add(statusOf(n), -1)
	}
	// A tree whose totals disagree with its nodes (never, from the
	// projection) must not produce negative counts.
	for _, st := range topics.Statuses {
		if c := omitted.Get(st); c < 0 {
			omitted.Add(st, -c)
		}
	}
	m := topics.TruncationMeta{
		OmittedCountTotal:         max(stats.NodeCount-len(nodes), 0),
		OmittedByStatus:           omitted,
		ByteBudget:                b.limits.MaxBytes,
		PolicyVersion:             PolicyVersion,
		OmittedCorrelationHandles: max(stats.ActiveCorrelations-handles, 0),
		CutStrings:                cuts,
	}
	s.TruncationMeta = m
	s.Truncated = m.OmittedCountTotal > 0 || m.OmittedCorrelationHandles > 0 || m.CutStrings > 0
}

// envelopeSize is the encoded size of s with an empty node list.
func (b *builder) envelopeSize(s *topics.AgentTreeSnapshot) int {
	nodes := s.Nodes
	s.Nodes = []topics.NodeDigest{}
	var err error
	b.buf, err = s.AppendJSON(b.buf[:0])
	s.Nodes = nodes
	if err != nil {
		panic(fmt.Sprintf("snapshot: encoding the envelope: %v", err))
	}
	return len(b.buf)
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
	// Encoded to check the accounting, not to keep: into the scratch
	// buffer, grown at once to the size the encoding should have.
	enc, err := s.AppendJSON(slices.Grow(b.buf[:0], measured))
	b.buf = enc
	if err != nil {
		return nil, Info{}, fmt.Errorf("snapshot: encoding: %w", err)
	}
	if len(enc) > b.limits.MaxBytes || len(enc) > measured {
		return nil, Info{}, fmt.Errorf("snapshot: encoded %d bytes, measured %d, budget %d: the byte accounting is wrong", len(enc), measured, b.limits.MaxBytes)
	}
	return s, Info{
		Bytes:         len(enc),
		Encoded:       enc,
		NodesIncluded: len(s.Nodes),
		NodesOmitted:  s.TruncationMeta.OmittedCountTotal,
		Truncated:     s.Truncated,
		Stale:         s.Stale,
		AgeMs:         age,
	}, nil
}

func (b *builder) digest(n Node, at topics.Time) topics.NodeDigest {
	d := topics.NodeDigest{
		AgentID:           b.str(n.AgentID),
		Role:              n.Role,
		ParentAgentID:     b.ptr(n.ParentAgentID),
		Status:            statusOf(n),
		StatusUpdatedAt:   b.timePtr(n.StatusUpdatedAt),
		ActiveRunID:       b.ptr(n.ActiveRunID),
		ActiveTaskID:      b.ptr(n.ActiveTaskID),
		Capability:        b.ptr(n.Capability),
		LastSignalAt:      b.timePtr(n.LastSignalAt),
		LastCorrelationID: b.ptr(n.LastCorrelationID),
		OpenRequestCount:  max(n.OpenRequestCount, 0),
		LastRequestKind:   b.ptr(n.LastRequestKind),
	}
	if d.Role == "" {
		d.Role = topics.RoleUnknown
	}
	if n.LastSignalKind != "" {
		k := n.LastSignalKind
		d.LastSignalKind = &k // a few kinds: not worth a slab of its own type
	}
	if !n.LeaseExpiresAt.IsZero() {
		d.LeaseOwner = b.ptr(n.LeaseOwner)
		d.LeaseExpiresAt = b.timePtr(n.LeaseExpiresAt)
		d.LeaseRemainingMs = slabbed(&b.ints, n.LeaseExpiresAt.Sub(at).Milliseconds(), b.limits.MaxNodes)
	}
	keys := n.RecentDedupeKeys
	if len(keys) > b.limits.MaxDedupeKeys {
		keys = keys[:b.limits.MaxDedupeKeys]
	}
	// The keys share the string slab too: a slice of it, full length and
	// capacity, so that nothing appended to one digest's keys can reach
	// another's.
	if b.strs == nil || len(b.strs)+len(keys) > cap(b.strs) { // never nil: no keys encode as []
		b.strs = make([]string, 0, max(len(keys), 8*b.limits.MaxNodes))
	}
	start := len(b.strs)
	for _, k := range keys {
		b.strs = append(b.strs, b.str(k))
	}
	d.RecentRequestDedupeKeys = b.strs[start:len(b.strs):len(b.strs)]
	return d
}

func statusOf(n Node) topics.Status {
	if n.Status == "" {
		return topics.StatusUnknown
	}
	return n.Status
}

// str cuts s to the string bound, on a character boundary, counting cuts.
func (b *builder) str(s string) string {
	if len(s) <= b.cut || utf8.RuneCountInString(s) <= b.cut {
		return s
	}
	b.cuts++
	i, n := 0, 0
	for n < b.cut {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
		n++
	}
	return s[:i]
}

func (b *builder) ptr(s string) *string {
	if s == "" {
		return nil
	}
	return slabbed(&b.strs, b.str(s), 8*b.limits.MaxNodes)
}

func (b *builder) timePtr(t topics.Time) *topics.Time {
	if t.IsZero() {
		return nil
	}
	return slabbed(&b.times, t, 3*b.limits.MaxNodes)
}
