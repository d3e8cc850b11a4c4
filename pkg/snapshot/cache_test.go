package snapshot_test

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// cachingTree is a refTree that keeps a digest cache, as a projection's run
// does: the same nodes, so every build of it must give the bytes the
// refTree gives.
type cachingTree struct {
	*refTree
	cache *snapshot.Cache
}

var _ snapshot.CachingTree = (*cachingTree)(nil)

func newCachingTree(t *refTree) *cachingTree { return &cachingTree{t, new(snapshot.Cache)} }

func (t *cachingTree) DigestCache() *snapshot.Cache { return t.cache }

// sameBuild fails unless building ct gives, byte for byte, the snapshot and
// the encoding of a build of its refTree without a cache.
func sameBuild(tb testing.TB, what string, ct *cachingTree, w snapshot.Wake, l snapshot.Limits, now time.Time) {
	tb.Helper()
	if w.Room == 0 {
		w.Room = 37 // room for a wake's envelope, as a projection's wake has
	}
	want, wantInfo, werr := snapshot.Build(ct.refTree, w, l, now)
	// The cached build encodes in a used buffer, as a projector that
	// recycles its wakes' buffers has it do: what was there must not show.
	used := bytes.Repeat([]byte{'x'}, max(w.Room, 0)+l.WithDefaults().MaxBytes+1)
	wc := w
	wc.Buffer = func(n int) []byte {
		if n > cap(used) {
			tb.Fatalf("%s: Build asks for a buffer of %d bytes, more than room and budget (%d)", what, n, cap(used))
		}
		return used[:0]
	}
	// And its nodes in a used slice, every field set to what no node has.
	junk := "junk"
	var usedNodes []topics.NodeDigest
	wc.Nodes = func(n int) []topics.NodeDigest {
		usedNodes = make([]topics.NodeDigest, n)
		for i := range usedNodes {
			usedNodes[i] = topics.NodeDigest{AgentID: junk, Role: topics.Role(junk), ParentAgentID: &junk, Status: topics.Status(junk),
				LeaseOwner: &junk, ActiveRunID: &junk, ActiveTaskID: &junk, Capability: &junk, LastCorrelationID: &junk,
				OpenRequestCount: 99, LastRequestKind: &junk, RecentRequestDedupeKeys: []string{junk}}
		}
		return usedNodes
	}
	got, gotInfo, gerr := snapshot.Build(ct, wc, l, now)
	if (werr == nil) != (gerr == nil) {
		tb.Fatalf("%s: with the cache error %v, without %v", what, gerr, werr)
	}
	if werr != nil {
		return
	}
	room := max(w.Room, 0)
	if &gotInfo.Framed[:1][0] != &used[0] || len(gotInfo.Framed) != room+len(gotInfo.Encoded) ||
		!bytes.Equal(gotInfo.Framed[room:], gotInfo.Encoded) || cap(gotInfo.Framed) <= len(gotInfo.Framed) {
		tb.Fatalf("%s: the build did not encode in the buffer given, after %d bytes of room with one to spare", what, room)
	}
	if len(wantInfo.Framed) != room+len(wantInfo.Encoded) {
		tb.Fatalf("%s: the uncached build left %d bytes of room, not %d", what, len(wantInfo.Framed)-len(wantInfo.Encoded), room)
	}
	gotInfo.Framed, wantInfo.Framed = nil, nil
	if len(got.Nodes) > 0 && &got.Nodes[0] != &usedNodes[0] {
		tb.Fatalf("%s: the build did not place its nodes in the slice given", what)
	}
	if !bytes.Equal(gotInfo.Encoded, wantInfo.Encoded) {
		tb.Fatalf("%s: the cached build's encoding differs from the uncached one's:\n%s", what, firstDiff(wantInfo.Encoded, gotInfo.Encoded))
	}
	if g, w := mustMarshal(tb, got), mustMarshal(tb, want); !bytes.Equal(g, w) {
		tb.Fatalf("%s: the cached build's snapshot differs from the uncached one's:\n%s", what, firstDiff(w, g))
	}
	if !bytes.Equal(gotInfo.Encoded, mustMarshal(tb, got)) {
		tb.Fatalf("%s: the cached build's Info.Encoded is not its snapshot's encoding", what)
	}
	if !reflect.DeepEqual(got, want) {
		tb.Fatalf("%s: the cached build's snapshot differs from the uncached one's in a way that encodes the same", what)
	}
	gotInfo.Encoded, wantInfo.Encoded = nil, nil
	if !reflect.DeepEqual(gotInfo, wantInfo) {
		tb.Fatalf("%s: info %+v, uncached %+v", what, gotInfo, wantInfo)
	}
}

// checkCached builds tree twice with a cache (filling it, then reading it),
// and once more for the wake 30 years on, and requires each to equal the
// build without one. buildAndCheck calls it, so every golden case, property
// test and fuzz input is built both ways.
func checkCached(tb testing.TB, tree *refTree, w snapshot.Wake, l snapshot.Limits, now time.Time) {
	tb.Helper()
	reads := tree.reads
	defer func() { tree.reads = reads }()
	ct := newCachingTree(tree)
	sameBuild(tb, "cold cache", ct, w, l, now)
	sameBuild(tb, "warm cache", ct, w, l, now)
	// The cached encodings leave lease_remaining_ms out: the same nodes at
	// another logical time must take that time's values.
	w.At = otherLogicalTimes(w.At)[3]
	sameBuild(tb, "warm cache, 30 years on", ct, w, l, now)
}

// staleTree has a root and workers with every fact set, a lease on every
// other one and a few dedupe keys, under a budget that holds them all.
func staleTree() *refTree {
	t := tree(conductor())
	t.Handles = handles(3, func(i int) topics.Time { return at(-i * 1000) })
	for i := range 12 {
		w := worker(fmt.Sprintf("w-%02d", i))
		w.Status = topics.StatusRunning
		w.StatusUpdatedAt = at(-5000 - i)
		w.ActiveRunID, w.ActiveTaskID, w.Capability = "run-1", fmt.Sprintf("task-%d", i), "web.search"
		w.LastSignalKind, w.LastSignalAt = topics.SignalProgress, at(-1000*(i+1))
		w.LastCorrelationID = "corr-1"
		w.OpenRequestCount, w.LastRequestKind = 2, "approval"
		w.RecentDedupeKeys = []string{"k1", "k2", "k3", "k4"}
		if i%2 == 0 {
			w.LeaseOwner, w.LeaseExpiresAt = "conductor", at(30000+i*1000)
		}
		t.Nodes = append(t.Nodes, w)
	}
	return t
}

// changed returns v changed: another string, time, count or kind.
func changed(v reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	switch x := v.Interface().(type) {
	case string:
		out.SetString(x + "-x")
	case topics.Role:
		out.SetString(string(topics.RoleAppAgent))
	case topics.Status:
		out.SetString(string(topics.StatusBlocked))
	case topics.SignalKind:
		out.SetString(string(topics.SignalHeartbeat))
	case topics.Time:
		if x.IsZero() {
			x = at(0)
		}
		out.Set(reflect.ValueOf(x.Add(time.Millisecond)))
	case int:
		out.SetInt(int64(x + 1))
	case []string:
		keys := append([]string{"k0"}, x...)
		out.Set(reflect.ValueOf(keys))
	default:
		panic(fmt.Sprintf("changed: a Node field of type %T: teach this test to change it", x))
	}
	return out
}

// TestCacheNeverStale changes each fact of a node between two builds of a
// tree that keeps a cache, and requires the second build to give what a
// build without a cache gives, byte for byte. The fields are found by
// reflection, so that a field added to Node is changed here too: a digest
// cached across a change of it would fail this test.
func TestCacheNeverStale(t *testing.T) {
	w := goldenWake()
	nodeType := reflect.TypeFor[snapshot.Node]()
	for f := range nodeType.NumField() {
		field := nodeType.Field(f)
		for _, i := range []int{0, 1, 2} { // the root, a worker with a lease, one without
			t.Run(fmt.Sprintf("%s/node-%d", field.Name, i), func(t *testing.T) {
				ct := newCachingTree(staleTree())
				sameBuild(t, "first build", ct, w, snapshot.Limits{}, fixedNow)
				v := reflect.ValueOf(&ct.Nodes[i]).Elem().Field(f)
				v.Set(changed(v))
				if field.Name == "AgentID" && i == 0 {
					ct.RootID = ct.Nodes[0].AgentID
				}
				sameBuild(t, "after the change", ct, w, snapshot.Limits{}, fixedNow)
				// And back: the digest from before the change must not
				// come back wrong either.
				ct2 := &cachingTree{staleTree(), ct.cache}
				sameBuild(t, "changed back", ct2, w, snapshot.Limits{}, fixedNow)
			})
		}
	}
	t.Run("a fact cleared", func(t *testing.T) {
		ct := newCachingTree(staleTree())
		sameBuild(t, "first build", ct, w, snapshot.Limits{}, fixedNow)
		for i := range ct.Nodes {
			n := &ct.Nodes[i]
			n.ParentAgentID, n.LeaseOwner, n.LeaseExpiresAt, n.LastSignalKind = "", "", topics.Time{}, ""
			n.RecentDedupeKeys, n.Role, n.Status, n.OpenRequestCount = nil, "", "", -1
		}
		sameBuild(t, "after clearing", ct, w, snapshot.Limits{}, fixedNow)
	})
}

// TestCacheAcrossWakes keeps one cache across wakes that differ in what
// the digests depend on besides the node: the wake's time (the lease
// remaining), the limits, and the string cut that a budget too small for
// the root halves.
func TestCacheAcrossWakes(t *testing.T) {
	t.Run("lease remaining follows the wake's time", func(t *testing.T) {
		ct := newCachingTree(staleTree())
		for _, ms := range []int{0, 1, 999, 1000, -20000, 30000, 31000, 9_000_000_000, -9_000_000_000, 0} {
			w := goldenWake()
			w.At = at(ms)
			ct.At = w.At
			sameBuild(t, fmt.Sprintf("at %+dms", ms), ct, w, snapshot.Limits{}, fixedNow)
		}
	})
	t.Run("limits", func(t *testing.T) {
		ct := newCachingTree(staleTree())
		for _, l := range []snapshot.Limits{{}, {MaxDedupeKeys: 1}, {MaxDedupeKeys: 4}, {MaxStringLength: 8}, {MaxNodes: 3},
			{MaxStringLength: 9, MaxDedupeKeys: 2}, {MaxBytes: snapshot.MinBytes}, {}} {
			sameBuild(t, fmt.Sprintf("limits %+v", l), ct, goldenWake(), l, fixedNow)
		}
	})
	t.Run("string cut halved", func(t *testing.T) {
		ct := newCachingTree(staleTree())
		l := snapshot.Limits{MaxBytes: snapshot.MinBytes}
		sameBuild(t, "usual cut", ct, goldenWake(), l, fixedNow)
		// Ids of escaped characters: the root no longer fits at 160
		// characters, and every string is cut shorter, the cached
		// workers' too.
		long := strings.Repeat("\u2028", 160)
		ct.Run, ct.Session, ct.Thread = long, long, long
		ct.Nodes[0].AgentID = "root" + long
		ct.RootID = ct.Nodes[0].AgentID
		for i := range ct.Nodes {
			ct.Nodes[i].ParentAgentID = ct.RootID
		}
		sameBuild(t, "halved cut", ct, goldenWake(), l, fixedNow)
		ct.Nodes[3].Capability = strings.Repeat("é", 200)
		sameBuild(t, "halved cut, a worker changed", ct, goldenWake(), l, fixedNow)
		ct.Run, ct.Session, ct.Thread = "run-1", "session-1", "thread-1"
		sameBuild(t, "usual cut again", ct, goldenWake(), l, fixedNow)
	})
	t.Run("more nodes than the cache holds", func(t *testing.T) {
		// The wake's nodes come second in the inclusion order: wakes that
		// refer to ever other nodes bring ever other candidates, and the
		// cache must evict without serving a wrong digest.
		ct := newCachingTree(flatTree(400))
		l := snapshot.Limits{MaxNodes: 8}
		for i := range 120 {
			w := goldenWake()
			w.AgentIDs = []string{fmt.Sprintf("w-%03d", (i*37)%399), fmt.Sprintf("w-%03d", (i*11)%399)}
			if i%7 == 0 {
				ct.Nodes[(i*13)%400].Capability += "x"
			}
			sameBuild(t, fmt.Sprintf("wake %d", i), ct, w, l, fixedNow)
		}
	})
}
