package snapshot_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	uax29 "github.com/clipperhouse/uax29/v2/graphemes"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// This file holds the properties every snapshot must have, checked against
// the refTree oracle. Golden tests and FuzzBuild run them on every tree.

// widestGeneratedAt, math.MaxInt64, stale=false and widestRemainingMs are
// the widest encoding of the wall-clock fields: the builder measures its byte
// budget with them.
var widestGeneratedAt = topics.NewTime(time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC))

// widestRemainingMs is the widest lease_remaining_ms: a lease that expired at
// 0000-01-01T00:00:00.000Z, at 9999-12-31T23:59:59.999Z (3,652,425 days
// less a millisecond). TestWidestRemainingMs checks that no two times a
// snapshot can say are further apart.
const widestRemainingMs = -(3652425*86_400_000 - 1)

// wallClockFree returns s with the wall-clock fields at their widest: what
// the builder's byte budget is measured on, and what two builds of the same
// tree and wake must agree on byte for byte, at any clock and logical time.
func wallClockFree(s topics.AgentTreeSnapshot) topics.AgentTreeSnapshot {
	s.GeneratedAt = widestGeneratedAt
	s.SnapshotAgeMs = math.MaxInt64
	s.Stale = false
	s.Nodes = slices.Clone(s.Nodes)
	for i := range s.Nodes {
		if s.Nodes[i].LeaseRemainingMs != nil {
			s.Nodes[i].LeaseRemainingMs = ptrTo(int64(widestRemainingMs))
		}
	}
	return s
}

func ptrTo[T any](v T) *T { return &v }

// remainingMs is lease_remaining_ms: the milliseconds from at to expires,
// exact (a time.Duration stops at 292 years).
func remainingMs(expires, at topics.Time) int64 { return expires.UnixMilli() - at.UnixMilli() }

func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := topics.Marshal(v)
	if err != nil {
		tb.Fatalf("marshal: %v", err)
	}
	return b
}

// cutter cuts strings to cut characters and counts the strings it cut:
// ids (str, ptr) to a prefix, "~" and 8 hex digits of their SHA-256, text
// (textPtr) to a prefix, both between grapheme clusters (docs/CONTRACT.md
// "Cuts"; refCutID and refCutText, an implementation of the rule of the
// test's own).
type cutter struct {
	cut  int
	cuts int
}

func (c *cutter) str(s string) string {
	if len([]rune(s)) <= c.cut {
		return s
	}
	c.cuts++
	return refCutID(s, c.cut)
}

func (c *cutter) ptr(s string) *string {
	if s == "" {
		return nil
	}
	v := c.str(s)
	return &v
}

func (c *cutter) textPtr(s string) *string {
	if s == "" {
		return nil
	}
	if len([]rune(s)) > c.cut {
		c.cuts++
		s = refCutText(s, c.cut)
	}
	return &s
}

// refCutText is s cut to at most n code points, whole grapheme clusters.
func refCutText(s string, n int) string {
	var b strings.Builder
	count := 0
	for _, cl := range graphemes(s) {
		k := len([]rune(cl))
		if count+k > n {
			break
		}
		b.WriteString(cl)
		count += k
	}
	return b.String()
}

// graphemes splits s into its grapheme clusters.
func graphemes(s string) []string {
	var out []string
	g := uax29.FromString(s)
	for g.Next() {
		out = append(out, g.Value())
	}
	return out
}

// refCutID is an id longer than n code points as canopy cuts it.
func refCutID(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	h := fmt.Sprintf("%x", sum)
	if n < 10 {
		return h[:n]
	}
	return refCutText(s, n-9) + "~" + h[:8]
}

func timePtr(t topics.Time) *topics.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// refDigest is the digest seed 000 asks for node n, with strings cut by c.
func refDigest(n snapshot.Node, at topics.Time, maxKeys int, c *cutter) topics.NodeDigest {
	d := topics.NodeDigest{
		AgentID:           c.str(n.AgentID),
		Role:              n.Role,
		ParentAgentID:     c.ptr(n.ParentAgentID),
		Status:            refStatus(n),
		StatusUpdatedAt:   timePtr(n.StatusUpdatedAt),
		ActiveRunID:       c.ptr(n.ActiveRunID),
		ActiveTaskID:      c.ptr(n.ActiveTaskID),
		Capability:        c.textPtr(n.Capability),
		LastSignalAt:      timePtr(n.LastSignalAt),
		LastCorrelationID: c.ptr(n.LastCorrelationID),
		OpenRequestCount:  max(n.OpenRequestCount, 0),
		LastRequestKind:   c.textPtr(n.LastRequestKind),
	}
	if d.Role == "" {
		d.Role = topics.RoleUnknown
	}
	if n.LastSignalKind != "" {
		k := n.LastSignalKind
		d.LastSignalKind = &k
	}
	if !n.LeaseExpiresAt.IsZero() {
		d.LeaseOwner = c.ptr(n.LeaseOwner)
		d.LeaseExpiresAt = timePtr(n.LeaseExpiresAt)
		d.LeaseRemainingMs = ptrTo(remainingMs(n.LeaseExpiresAt, at))
	}
	d.RecentRequestDedupeKeys = []string{}
	for i, k := range n.RecentDedupeKeys {
		if i == maxKeys {
			break
		}
		d.RecentRequestDedupeKeys = append(d.RecentRequestDedupeKeys, c.str(k))
	}
	return d
}

// oracle knows what the snapshot of one tree, wake and limits must be.
type oracle struct {
	tree    *refTree
	wake    snapshot.Wake
	limits  snapshot.Limits // with defaults
	ranking []snapshot.Node // the whole inclusion order
	handles []string        // every active handle, ranked
	counts  topics.StatusCounts
	root    *snapshot.Node
	// cuts is the sequence of string cuts the builder may fall back to:
	// MaxStringLength, then halved down to 0.
	cuts []int
}

func newOracle(t *refTree, w snapshot.Wake, l snapshot.Limits) *oracle {
	o := &oracle{tree: t, wake: w, limits: l.WithDefaults(), ranking: t.ranking(w), handles: t.handles()}
	for _, n := range t.Nodes {
		o.counts.Add(refStatus(n), 1)
	}
	if r, ok := t.Root(); ok {
		o.root = &r
	}
	for c := o.limits.MaxStringLength; ; c /= 2 {
		o.cuts = append(o.cuts, c)
		if c == 0 {
			break
		}
	}
	return o
}

// minNodes is the fewest nodes a snapshot may have: the root, if any.
func (o *oracle) minNodes() int {
	if o.root != nil {
		return 1
	}
	return 0
}

// snapshot is the snapshot that includes the first k nodes of the ranking and
// the first nh handles, with strings cut to cut characters and the wall-clock
// fields at their widest.
func (o *oracle) snapshot(cut, nh, k int) *topics.AgentTreeSnapshot {
	c := &cutter{cut: cut}
	t, w := o.tree, o.wake
	s := &topics.AgentTreeSnapshot{
		SnapshotID:   w.SnapshotID,
		AsOfEventSeq: w.Seq,
		Scope:        topics.Scope{RunID: c.str(t.Run), SessionID: c.ptr(t.Session), ThreadID: c.ptr(t.Thread)},
		Nodes:        []topics.NodeDigest{},
	}
	if o.root != nil {
		s.RootAgentID = c.ptr(o.root.AgentID)
	}
	handles := []string{}
	for _, h := range o.handles[:nh] {
		handles = append(handles, c.str(h))
	}
	included := topics.StatusCounts{}
	for _, n := range o.ranking[:k] {
		s.Nodes = append(s.Nodes, refDigest(n, w.At, o.limits.MaxDedupeKeys, c))
		included.Add(refStatus(n), 1)
	}
	stats := t.Stats()
	s.Summary = topics.Summary{
		NodeCountTotal:           len(t.Nodes),
		NodeCountIncluded:        k,
		CountsByStatus:           o.counts,
		BlockedCount:             o.counts.Blocked,
		FailedCount:              o.counts.Failed,
		OverdueLeaseCount:        stats.OverdueLeases,
		ActiveCorrelationHandles: handles,
		OpenRequestCount:         stats.OpenRequests,
	}
	omitted := o.counts
	for _, st := range topics.Statuses {
		omitted.Add(st, -included.Get(st))
	}
	s.TruncationMeta = topics.TruncationMeta{
		OmittedCountTotal:         len(t.Nodes) - k,
		OmittedByStatus:           omitted,
		ByteBudget:                o.limits.MaxBytes,
		PolicyVersion:             snapshot.PolicyVersion,
		OmittedCorrelationHandles: len(o.handles) - nh,
		CutStrings:                c.cuts,
	}
	s.Truncated = len(t.Nodes) > k || len(o.handles) > nh || c.cuts > 0
	*s = wallClockFree(*s)
	return s
}

func (o *oracle) size(tb testing.TB, cut, nh, k int) int {
	return len(mustMarshal(tb, o.snapshot(cut, nh, k)))
}

// buildAndCheck builds the snapshot of tree for w under l at now, checks every
// property and returns it with its encoding.
func buildAndCheck(tb testing.TB, tree *refTree, w snapshot.Wake, l snapshot.Limits, now time.Time) (*topics.AgentTreeSnapshot, snapshot.Info, []byte) {
	tb.Helper()
	tree.reads = nil
	s, info, err := snapshot.Build(tree, w, l, now)
	if err != nil {
		tb.Fatalf("Build: %v", err)
	}
	reads := tree.reads
	enc := mustMarshal(tb, s)
	if !bytes.Equal(info.Encoded, enc) {
		tb.Fatalf("Info.Encoded is not the snapshot's encoding:\n%s", firstDiff(enc, info.Encoded))
	}
	o := newOracle(tree, w, l)
	checkReads(tb, o, reads)
	checkSnapshot(tb, o, now, s, info, enc)
	checkDeterminism(tb, o, now, enc)
	checkCached(tb, tree, w, l, now)
	return s, info, enc
}

// checkReads checks that the builder read candidates bounded by the limits,
// never the whole tree.
func checkReads(tb testing.TB, o *oracle, reads map[string]int) {
	tb.Helper()
	l := o.limits
	bound := map[string]int{
		"Node":               len(o.wake.AgentIDs),
		"WithCorrelation":    l.MaxNodes * len(o.wake.CorrelationIDs),
		"Urgent":             l.MaxNodes,
		"ByLeaseExpiry":      l.MaxNodes,
		"ByLastSignal":       l.MaxNodes,
		"ActiveCorrelations": l.MaxCorrelationHandles * len(o.cuts),
	}
	for what, n := range reads {
		if b, ok := bound[what]; !ok || n > b {
			tb.Errorf("builder read %d from %s, bound %d: it must not scan the tree", n, what, b)
		}
	}
}

func checkSnapshot(tb testing.TB, o *oracle, now time.Time, s *topics.AgentTreeSnapshot, info snapshot.Info, enc []byte) {
	tb.Helper()
	l, t, w := o.limits, o.tree, o.wake

	// Bounds.
	if len(enc) > l.MaxBytes {
		tb.Errorf("encoded %d bytes, budget %d", len(enc), l.MaxBytes)
	}
	worst := wallClockFree(*s)
	if n := len(mustMarshal(tb, &worst)); n > l.MaxBytes {
		tb.Errorf("with the widest wall-clock fields the snapshot is %d bytes, budget %d: the wall clock could change what is included", n, l.MaxBytes)
	}
	if len(s.Nodes) > l.MaxNodes {
		tb.Errorf("%d nodes, max %d", len(s.Nodes), l.MaxNodes)
	}
	for i, d := range s.Nodes {
		if len(d.RecentRequestDedupeKeys) > l.MaxDedupeKeys {
			tb.Errorf("node %d: %d dedupe keys, max %d", i, len(d.RecentRequestDedupeKeys), l.MaxDedupeKeys)
		}
	}
	if n := len(s.Summary.ActiveCorrelationHandles); n > l.MaxCorrelationHandles {
		tb.Errorf("%d correlation handles, max %d", n, l.MaxCorrelationHandles)
	}
	checkWire(tb, enc, l.MaxStringLength)
	if info.Bytes != len(enc) || info.NodesIncluded != len(s.Nodes) || info.NodesOmitted != s.TruncationMeta.OmittedCountTotal ||
		info.Truncated != s.Truncated || info.Stale != s.Stale || info.AgeMs != s.SnapshotAgeMs {
		tb.Errorf("Info %+v disagrees with the snapshot (%d bytes)", info, len(enc))
	}

	// The root first.
	if o.root != nil {
		if len(s.Nodes) == 0 || s.RootAgentID == nil || s.Nodes[0].AgentID != *s.RootAgentID || !isCutOf(s.Nodes[0].AgentID, o.root.AgentID) {
			tb.Errorf("tree has root %q: want it first and as root_agent_id, got root_agent_id %v, %d nodes", o.root.AgentID, str(s.RootAgentID), len(s.Nodes))
		}
	} else if s.RootAgentID != nil {
		tb.Errorf("tree has no root, snapshot has root_agent_id %q", *s.RootAgentID)
	}

	// The summary counts the whole tree.
	sum := s.Summary
	if sum.NodeCountTotal != len(t.Nodes) || sum.CountsByStatus != o.counts || sum.CountsByStatus.Total() != len(t.Nodes) ||
		sum.BlockedCount != o.counts.Blocked || sum.FailedCount != o.counts.Failed {
		tb.Errorf("summary %+v does not count the whole tree: %d nodes, %+v", sum, len(t.Nodes), o.counts)
	}
	overdue, open := 0, 0
	for _, n := range t.Nodes {
		if !n.LeaseExpiresAt.IsZero() && !n.LeaseExpiresAt.After(t.At) {
			overdue++
		}
		open += max(n.OpenRequestCount, 0)
	}
	if sum.OverdueLeaseCount != overdue || sum.OpenRequestCount != open {
		tb.Errorf("summary overdue %d, open requests %d; tree has %d, %d", sum.OverdueLeaseCount, sum.OpenRequestCount, overdue, open)
	}
	if sum.NodeCountIncluded != len(s.Nodes) {
		tb.Errorf("node_count_included %d, %d nodes", sum.NodeCountIncluded, len(s.Nodes))
	}

	// Truncation is visible and adds up.
	m := s.TruncationMeta
	included := topics.StatusCounts{}
	for _, d := range s.Nodes {
		included.Add(d.Status, 1)
	}
	var back topics.StatusCounts
	for _, st := range topics.Statuses {
		back.Add(st, included.Get(st)+m.OmittedByStatus.Get(st))
	}
	if back != sum.CountsByStatus {
		tb.Errorf("omitted_by_status %+v + included %+v != counts_by_status %+v", m.OmittedByStatus, included, sum.CountsByStatus)
	}
	if m.OmittedCountTotal != len(t.Nodes)-len(s.Nodes) {
		tb.Errorf("omitted_count_total %d, want %d", m.OmittedCountTotal, len(t.Nodes)-len(s.Nodes))
	}
	if m.OmittedCorrelationHandles != len(o.handles)-len(sum.ActiveCorrelationHandles) {
		tb.Errorf("omitted_correlation_handles %d, want %d", m.OmittedCorrelationHandles, len(o.handles)-len(sum.ActiveCorrelationHandles))
	}
	if want := m.OmittedCountTotal > 0 || m.OmittedCorrelationHandles > 0 || m.CutStrings > 0; s.Truncated != want {
		tb.Errorf("truncated %v, want %v (meta %+v)", s.Truncated, want, m)
	}
	if m.ByteBudget != l.MaxBytes || m.PolicyVersion != snapshot.PolicyVersion {
		tb.Errorf("byte_budget %d policy %q, want %d %q", m.ByteBudget, m.PolicyVersion, l.MaxBytes, snapshot.PolicyVersion)
	}

	// Inclusion order: a prefix of the oracle's ranking.
	if len(s.Nodes) > len(o.ranking) {
		tb.Fatalf("%d nodes, the tree ranks only %d", len(s.Nodes), len(o.ranking))
	}
	for i, d := range s.Nodes {
		n := o.ranking[i]
		if !isCutOf(d.AgentID, n.AgentID) {
			tb.Errorf("node %d is %q, want %q (ranking %s)", i, d.AgentID, n.AgentID, ids(o.ranking, len(s.Nodes)+1))
			break
		}
		// Nulls and unknowns: never a default that looks like a fact.
		if n.LeaseExpiresAt.IsZero() && (d.LeaseOwner != nil || d.LeaseExpiresAt != nil || d.LeaseRemainingMs != nil) {
			tb.Errorf("node %q holds no lease but has lease fields", n.AgentID)
		}
		// The oracle's comparison sees every lease_remaining_ms at its
		// widest: the real one is checked here.
		if !n.LeaseExpiresAt.IsZero() && (d.LeaseRemainingMs == nil || *d.LeaseRemainingMs != remainingMs(n.LeaseExpiresAt, w.At)) {
			tb.Errorf("node %q: lease_remaining_ms %v, want %d (expires %v, wake at %v)", n.AgentID, d.LeaseRemainingMs, remainingMs(n.LeaseExpiresAt, w.At), n.LeaseExpiresAt, w.At)
		}
		if n.Status == "" && d.Status != topics.StatusUnknown {
			tb.Errorf("node %q has no status, digest says %q", n.AgentID, d.Status)
		}
	}

	// Freshness.
	src := w.Source
	if src.IsZero() {
		src = w.At
	}
	age := max(now.Sub(src.Std()).Milliseconds(), 0)
	if s.SnapshotAgeMs != age || s.Stale != (time.Duration(age)*time.Millisecond > l.StaleAfter) {
		tb.Errorf("age %d stale %v; want age %d, stale after %v", s.SnapshotAgeMs, s.Stale, age, l.StaleAfter)
	}
	if !s.GeneratedAt.Std().Equal(topics.NewTime(now).Std()) {
		tb.Errorf("generated_at %v, now %v", s.GeneratedAt, now)
	}

	checkAgainstOracle(tb, o, s)
}

// checkAgainstOracle compares the snapshot with the oracle's snapshot of the
// same shape (string cut, handles, nodes) byte for byte, then checks that the
// shape is the largest the byte budget allows: one more node (or handle, or a
// longer cut) would not fit.
func checkAgainstOracle(tb testing.TB, o *oracle, s *topics.AgentTreeSnapshot) {
	tb.Helper()
	l := o.limits
	worst := wallClockFree(*s)
	got := mustMarshal(tb, &worst)
	k, nh := len(s.Nodes), len(s.Summary.ActiveCorrelationHandles)
	if nh > len(o.handles) || k > len(o.ranking) {
		tb.Fatalf("%d handles of %d, %d nodes of %d", nh, len(o.handles), k, len(o.ranking))
	}
	ci := -1
	for i, cut := range o.cuts {
		if bytes.Equal(got, mustMarshal(tb, o.snapshot(cut, nh, k))) {
			ci = i
			break
		}
	}
	if ci < 0 {
		// Show the difference from the oracle's snapshot that agrees longest.
		best, bestLine := 0, -1
		for i, cut := range o.cuts {
			if line := diffLine(mustMarshal(tb, o.snapshot(cut, nh, k)), got); line > bestLine {
				best, bestLine = i, line
			}
		}
		want := mustMarshal(tb, o.snapshot(o.cuts[best], nh, k))
		tb.Fatalf("snapshot differs from the oracle's (cut %d, %d handles, %d nodes):\n%s", o.cuts[best], nh, k, firstDiff(want, got))
	}
	cut, min := o.cuts[ci], o.minNodes()
	if k < min {
		tb.Errorf("%d nodes: the root is missing", k)
	}
	if k < l.MaxNodes && k < len(o.ranking) {
		if n := o.size(tb, cut, nh, k+1); n <= l.MaxBytes {
			tb.Errorf("%d nodes included, but %d would fit (%d bytes, budget %d)", k, k+1, n, l.MaxBytes)
		}
	}
	if nh < l.MaxCorrelationHandles && nh < len(o.handles) {
		// Handles give way only when not even the root fits with them
		// (the space they free may then admit more nodes).
		if n := o.size(tb, cut, nh+1, min); n <= l.MaxBytes {
			tb.Errorf("%d handles included, but %d would fit (%d bytes, budget %d)", nh, nh+1, n, l.MaxBytes)
		}
	}
	if ci > 0 {
		prev := o.cuts[ci-1]
		if n := o.size(tb, prev, 0, min); n <= l.MaxBytes {
			tb.Errorf("strings cut to %d characters, but at %d the root fits (%d bytes, budget %d)", cut, prev, n, l.MaxBytes)
		}
	}
}

// checkDeterminism builds again, at the same and at other wall clocks, and
// for the same wake at other logical times (replay's -now, which advances a
// run's clock without changing its wake id): the bytes must be the same but
// for the wall-clock fields, each node's lease_remaining_ms among them.
func checkDeterminism(tb testing.TB, o *oracle, now time.Time, enc []byte) {
	tb.Helper()
	build := func(w snapshot.Wake, at time.Time) *topics.AgentTreeSnapshot {
		s, _, err := snapshot.Build(o.tree, w, o.limits, at)
		if err != nil {
			tb.Fatalf("Build again at %v, wake at %v: %v", at, w.At, err)
		}
		return s
	}
	again := func(at time.Time) *topics.AgentTreeSnapshot { return build(o.wake, at) }
	if b := mustMarshal(tb, again(now)); !bytes.Equal(b, enc) {
		tb.Errorf("built twice at the same time, the bytes differ:\n%s", firstDiff(enc, b))
	}
	var first topics.AgentTreeSnapshot
	if err := json.Unmarshal(enc, &first); err != nil {
		tb.Fatal(err)
	}
	zero := func(s topics.AgentTreeSnapshot) []byte {
		s.GeneratedAt, s.SnapshotAgeMs, s.Stale = topics.Time{}, 0, false
		s.Nodes = slices.Clone(s.Nodes)
		for i := range s.Nodes {
			if s.Nodes[i].LeaseRemainingMs != nil {
				s.Nodes[i].LeaseRemainingMs = ptrTo(int64(0))
			}
		}
		return mustMarshal(tb, &s)
	}
	want := zero(first)
	for _, at := range []time.Time{now.Add(time.Hour + 7*time.Millisecond), now.Add(-time.Hour), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)} {
		if b := zero(*again(at)); !bytes.Equal(b, want) {
			tb.Errorf("built at %v, the snapshot differs beyond the wall-clock fields:\n%s", at, firstDiff(want, b))
		}
	}
	for _, at := range otherLogicalTimes(o.wake.At) {
		w := o.wake
		w.At = at
		if b := zero(*build(w, now)); !bytes.Equal(b, want) {
			tb.Errorf("built for the wake at %v rather than %v, the snapshot differs beyond the wall-clock fields:\n%s", at, o.wake.At, firstDiff(want, b))
		}
	}
}

// otherLogicalTimes are times for the wake of logical time at to be built at
// instead, years apart and at the ends of the years a snapshot can say.
func otherLogicalTimes(at topics.Time) []topics.Time {
	if at.IsZero() {
		at = topics.NewTime(fuzzBase)
	}
	return []topics.Time{
		topics.NewTime(at.Std().Add(-time.Hour)),
		topics.NewTime(at.Std().Add(time.Millisecond)),
		topics.NewTime(at.Std().AddDate(3, 0, 0)),
		topics.NewTime(at.Std().AddDate(30, 0, 0)),
		topics.NewTime(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)),
		topics.NewTime(time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)),
	}
}

// notFreeText are the keys whose values are enums, timestamps or the
// snapshot's own ULID, not the free text and producer-chosen ids that
// max_string_length bounds. snapshot_id is the projection's fixed-width
// identifier (seed 000: "ULID/UUID"); the builder copies it unchanged, since
// cutting it (max_string_length may be as low as 8) would make it ambiguous.
var notFreeText = map[string]bool{
	"generated_at": true, "status_updated_at": true, "lease_expires_at": true, "last_signal_at": true,
	"role": true, "status": true, "last_signal_kind": true, "policy_version": true, "snapshot_id": true,
}

// The fields seed 000 requires, which must always be present.
var (
	envelopeKeys = []string{"snapshot_id", "generated_at", "as_of_event_seq", "root_agent_id", "scope", "nodes",
		"summary", "truncated", "truncation_meta", "stale", "snapshot_age_ms"}
	scopeKeys = []string{"run_id", "session_id", "thread_id"}
	nodeKeys  = []string{"agent_id", "role", "parent_agent_id", "status", "status_updated_at", "lease_owner",
		"lease_expires_at", "lease_remaining_ms", "active_run_id", "active_task_id", "capability",
		"last_signal_kind", "last_signal_at", "last_correlation_id", "open_request_count", "last_request_kind",
		"recent_request_dedupe_keys"}
	summaryKeys = []string{"node_count_total", "node_count_included", "counts_by_status", "blocked_count",
		"failed_count", "overdue_lease_count", "active_correlation_handles", "open_request_count"}
	countKeys = []string{"idle", "running", "blocked", "failed", "completed", "unknown"}
	metaKeys  = []string{"omitted_count_total", "omitted_by_status", "byte_budget", "policy_version"}
)

// checkWire checks the encoding as a consumer sees it: strict decoding (alone
// and inside a wake, through topics.DecodeWake), every required field present,
// lists never null, every free-text string within maxLen characters, and
// the same bytes when re-encoded.
func checkWire(tb testing.TB, enc []byte, maxLen int) {
	tb.Helper()
	var s topics.AgentTreeSnapshot
	dec := json.NewDecoder(bytes.NewReader(enc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		tb.Fatalf("strict decoding: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		tb.Fatalf("trailing data after the snapshot")
	}
	if b := mustMarshal(tb, &s); !bytes.Equal(b, enc) {
		tb.Errorf("decoded and re-encoded, the bytes differ:\n%s", firstDiff(enc, b))
	}
	wake := topics.Wake{WakeID: "wake-1", SchemaVersion: topics.WakeSchemaVersion, RunID: "run-1", Lane: topics.LaneNormal,
		Triggers: []topics.Trigger{}, AgentTreeSnapshot: s}
	decoded, err := topics.DecodeWake(mustMarshal(tb, &wake))
	if err != nil {
		tb.Fatalf("DecodeWake refuses the snapshot: %v", err)
	}
	if b := mustMarshal(tb, &decoded.AgentTreeSnapshot); !bytes.Equal(b, enc) {
		tb.Errorf("through DecodeWake, the bytes differ:\n%s", firstDiff(enc, b))
	}

	var raw map[string]any
	if err := json.Unmarshal(enc, &raw); err != nil {
		tb.Fatal(err)
	}
	has := func(where string, obj any, keys []string) map[string]any {
		m, ok := obj.(map[string]any)
		if !ok {
			tb.Errorf("%s is %T, want an object", where, obj)
			return nil
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				tb.Errorf("%s lacks %q", where, k)
			}
		}
		return m
	}
	has("snapshot", raw, envelopeKeys)
	has("scope", raw["scope"], scopeKeys)
	sum := has("summary", raw["summary"], summaryKeys)
	has("counts_by_status", sum["counts_by_status"], countKeys)
	meta := has("truncation_meta", raw["truncation_meta"], metaKeys)
	has("omitted_by_status", meta["omitted_by_status"], countKeys)
	if _, ok := sum["active_correlation_handles"].([]any); !ok {
		tb.Errorf("active_correlation_handles is %v, want a list", sum["active_correlation_handles"])
	}
	nodes, ok := raw["nodes"].([]any)
	if !ok {
		tb.Fatalf("nodes is %v, want a list", raw["nodes"])
	}
	for i, n := range nodes {
		m := has(fmt.Sprintf("nodes[%d]", i), n, nodeKeys)
		if _, ok := m["recent_request_dedupe_keys"].([]any); !ok {
			tb.Errorf("nodes[%d].recent_request_dedupe_keys is %v, want a list", i, m["recent_request_dedupe_keys"])
		}
	}
	walkStrings(raw, "", func(key, path, v string) {
		if !notFreeText[key] && utf8.RuneCountInString(v) > maxLen {
			tb.Errorf("%s is %d characters, max %d", path, utf8.RuneCountInString(v), maxLen)
		}
	})
}

// walkStrings calls f for every string value in v with the key it is under.
func walkStrings(v any, path string, f func(key, path, v string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok {
				f(k, path+"."+k, s)
			} else {
				walkStrings(e, path+"."+k, f)
			}
		}
	case []any:
		key := path[strings.LastIndexByte(path, '.')+1:]
		for i, e := range v {
			if s, ok := e.(string); ok {
				f(key, fmt.Sprintf("%s[%d]", path, i), s)
			} else {
				walkStrings(e, fmt.Sprintf("%s[%d]", path, i), f)
			}
		}
	}
}

// isCutOf reports whether p is the id s, or s cut as an id at some bound:
// a prefix of it on a character boundary, "~" and the first 8 hex digits of
// its SHA-256; or, under 10 characters, just the first digits of those.
func isCutOf(p, s string) bool {
	if p == s {
		return true
	}
	h := fmt.Sprintf("%x", sha256.Sum256([]byte(s)))
	if len(p) >= 9 && p[len(p)-9] == '~' && p[len(p)-8:] == h[:8] {
		prefix := p[:len(p)-9]
		return strings.HasPrefix(s, prefix) && (len(prefix) == len(s) || utf8.RuneStart(s[len(prefix)]))
	}
	return len(p) < 10 && strings.HasPrefix(h, p)
}

func str(p *string) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *p)
}

func ids(ns []snapshot.Node, n int) string {
	var b strings.Builder
	for i, x := range ns {
		if i == n {
			b.WriteString(" ...")
			break
		}
		fmt.Fprintf(&b, " %q", x.AgentID)
	}
	return "[" + strings.TrimSpace(b.String()) + "]"
}

// diffLine is the first line at which the indented encodings differ, or -1.
func diffLine(want, got []byte) int {
	al, bl := strings.Split(string(indent(want)), "\n"), strings.Split(string(indent(got)), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		if i >= len(al) || i >= len(bl) || al[i] != bl[i] {
			return i
		}
	}
	return -1
}

// firstDiff shows where two encodings first differ, indented for reading.
func firstDiff(want, got []byte) string {
	a, b := indent(want), indent(got)
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			lo := max(i-3, 0)
			ctx := strings.Join(al[lo:i], "\n")
			return fmt.Sprintf("line %d:\n%s\n- want %s\n+ got  %s", i+1, ctx, x, y)
		}
	}
	return "(equal)"
}

// indent is the readable form of an encoding, as golden files store it.
func indent(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return b
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}
