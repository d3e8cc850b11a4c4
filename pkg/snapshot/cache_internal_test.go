package snapshot

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// randomNode has each fact set or not, of strings plain, long, multi-byte
// or escaped.
func randomNode(rng *rand.Rand, i int) Node {
	strs := []string{"", "a", "worker-7", "é漢🙂", "\u2028\"\\\x01", strings.Repeat("x", 170), strings.Repeat("é", 90)}
	str := func() string { return strs[rng.IntN(len(strs))] }
	tm := func() topics.Time {
		if rng.IntN(3) == 0 {
			return topics.Time{}
		}
		return topics.UnixMilliTime(1771065600000 + rng.Int64N(1e9) - 5e8)
	}
	n := Node{
		AgentID:           fmt.Sprintf("n%d%s", i, str()),
		Role:              []topics.Role{"", topics.RoleWorker, topics.RoleConductor}[rng.IntN(3)],
		ParentAgentID:     str(),
		Status:            []topics.Status{"", topics.StatusRunning, topics.StatusBlocked}[rng.IntN(3)],
		StatusUpdatedAt:   tm(),
		LeaseOwner:        str(),
		LeaseExpiresAt:    tm(),
		ActiveRunID:       str(),
		ActiveTaskID:      str(),
		Capability:        str(),
		LastSignalKind:    []topics.SignalKind{"", topics.SignalProgress}[rng.IntN(2)],
		LastSignalAt:      tm(),
		LastCorrelationID: str(),
		OpenRequestCount:  rng.IntN(5) - 1,
		LastRequestKind:   str(),
	}
	for range rng.IntN(6) {
		n.RecentDedupeKeys = append(n.RecentDedupeKeys, str())
	}
	return n
}

func mustDigestEnc(t *testing.T, n *Node, cut, maxKeys int, scratch *[]byte) *digestEnc {
	t.Helper()
	e, err := newDigestEnc(n, cut, maxKeys, scratch, nil)
	if err != nil {
		t.Fatalf("node %+v: %v", n, err)
	}
	return e
}

// TestNodeOfDigest: a candidate keeps its digest at the usual cut, not its
// node, and a halved cut digests nodeOf(digest) again; that must be the
// node's own digest at that cut. And a digest matches its own node.
func TestNodeOfDigest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var scratch []byte
	for i := range 3000 {
		n := randomNode(rng, i)
		maxKeys := 1 + rng.IntN(4)
		e := mustDigestEnc(t, &n, DefaultMaxStringLength, maxKeys, &scratch)
		if !e.matches(&n, DefaultMaxStringLength, maxKeys) != (e.cuts > 0) {
			t.Fatalf("node %+v: matches its own digest %v, cut %d strings", n, !(e.cuts > 0), e.cuts)
		}
		if e.matches(&n, DefaultMaxStringLength/2, maxKeys) || e.matches(&n, DefaultMaxStringLength, maxKeys+1) {
			t.Fatalf("node %+v: its digest matches at another cut or bound", n)
		}
		if e.cuts > 0 {
			continue
		}
		for cut := DefaultMaxStringLength; cut >= 0; cut /= 2 {
			want := mustDigestEnc(t, &n, cut, maxKeys, &scratch)
			got := mustDigestEnc(t, nodeOf(&e.d), cut, maxKeys, &scratch)
			if !reflect.DeepEqual(got.d, want.d) || !bytes.Equal(got.enc, want.enc) || got.cuts != want.cuts || got.remAt != want.remAt {
				t.Fatalf("node %+v at cut %d: from its digest %+v, want %+v", n, cut, got, want)
			}
			if cut == 0 {
				break
			}
		}
	}
}

var edgeInts = []int64{0, -1, 1, 9, 10, -9, -10, 99, 100, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}

// TestDigestEncEncoding: the cached encoding, with lease remaining written
// in, is the digest's own encoding (what AppendJSON gives).
func TestDigestEncEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var scratch []byte
	for i := range 3000 {
		n := randomNode(rng, i)
		e := mustDigestEnc(t, &n, 8+rng.IntN(200), 1+rng.IntN(64), &scratch)
		d := e.d
		rem := rng.Int64() >> rng.IntN(64)
		if rng.IntN(2) == 0 {
			rem = -rem
		}
		if i < len(edgeInts) {
			rem = edgeInts[i]
		}
		if e.remAt >= 0 {
			d.LeaseRemainingMs = &rem
		}
		want, err := d.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.appendTo([]byte("pre"), rem); !bytes.Equal(got, append([]byte("pre"), want...)) || e.size(rem) != len(want) {
			t.Fatalf("node %+v: cached encoding %q (size %d), want %q", n, got[3:], e.size(rem), want)
		}
		if (e.remAt >= 0) != !n.LeaseExpiresAt.IsZero() {
			t.Fatalf("node %+v: remAt %d", n, e.remAt)
		}
	}
}

// TestCacheBounded: however many nodes pass through it, a cache holds at
// most cacheSize(max_nodes) of them, and never evicts one of the build
// under way (which would let a node in twice).
func TestCacheBounded(t *testing.T) {
	var c Cache
	rng := rand.New(rand.NewPCG(5, 6))
	for build := range 2000 {
		maxNodes := []int{64, 64, 64, 8, 1, 200}[build/400+rng.IntN(2)]
		c.begin(maxNodes)
		seen := map[string]*slot{}
		for range 1 + rng.IntN(maxNodes) {
			id := fmt.Sprint(rng.IntN(300))
			s, dup := c.candidate(id, maxNodes)
			if prev, ok := seen[id]; dup != ok || ok && prev != s {
				t.Fatalf("build %d: node %s dup %v, seen %v", build, id, dup, ok)
			}
			seen[id] = s
			if s.id != id {
				t.Fatalf("build %d: slot of %s is %s's", build, id, s.id)
			}
		}
		if len(c.slots) != c.Len() || c.Len() > max(cacheSize(maxNodes), len(seen)) {
			t.Fatalf("build %d at max_nodes %d: %d slots, %d in the clock, bound %d", build, maxNodes, len(c.slots), len(c.clock), cacheSize(maxNodes))
		}
		for id, s := range seen {
			if c.slots[id] != s {
				t.Fatalf("build %d: a candidate's slot was evicted", build)
			}
		}
	}
}

// TestCacheEntrySize pins what a cached node costs, as the Cache doc says:
// the entry's struct, its encoding (some 300 to 550 bytes) and its slot.
func TestCacheEntrySize(t *testing.T) {
	if s := unsafe.Sizeof(digestEnc{}); s > 480 {
		t.Errorf("digestEnc is %d bytes, the doc says 480", s)
	}
	if s := unsafe.Sizeof(slot{}); s > 48 {
		t.Errorf("slot is %d bytes", s)
	}
	n := Node{AgentID: "agent-00042", Role: topics.RoleWorker, ParentAgentID: "agent-00007", Status: topics.StatusRunning,
		StatusUpdatedAt: topics.NewTime(time.Now()), LeaseOwner: "conductor", LeaseExpiresAt: topics.NewTime(time.Now()),
		ActiveRunID: "run-1", ActiveTaskID: "task-00042", Capability: "web.search", LastSignalKind: topics.SignalProgress,
		LastSignalAt: topics.NewTime(time.Now()), LastCorrelationID: "corr-00042", OpenRequestCount: 1,
		LastRequestKind: "approval", RecentDedupeKeys: []string{"dedupe-1", "dedupe-2", "dedupe-3"}}
	var scratch []byte
	e := mustDigestEnc(t, &n, DefaultMaxStringLength, DefaultMaxDedupeKeys, &scratch)
	t.Logf("digestEnc %d bytes, slot %d, encoding %d: %s", unsafe.Sizeof(digestEnc{}), unsafe.Sizeof(slot{}), len(e.enc), e.enc)
	if len(e.enc) > 550 {
		t.Errorf("a typical digest encodes to %d bytes", len(e.enc))
	}
}

// TestIntLen: the widths the builder adds up are strconv's.
func TestIntLen(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	vs := append([]int64(nil), edgeInts...)
	for range 1000 {
		vs = append(vs, rng.Int64()>>rng.IntN(64), -(rng.Int64() >> rng.IntN(64)))
	}
	for _, v := range vs {
		if got, want := intLen(v), len(strconv.FormatInt(v, 10)); got != want {
			t.Fatalf("intLen(%d) = %d, want %d", v, got, want)
		}
	}
}

// TestDigestTakesOverReplacedMemory: a node that changed is digested in
// the memory of the digest it replaces in its slot, and a slot the hand
// evicted lends its memory to the next node's digest without ever giving
// that node the evicted one. A digest that cut a string, which no slot
// keeps, leaves the slot's digest whole.
func TestDigestTakesOverReplacedMemory(t *testing.T) {
	b := &builder{limits: Limits{}.WithDefaults(), scratch: new(scratch)}
	b.cut = b.limits.MaxStringLength
	var c Cache
	n := Node{AgentID: "worker-1", Status: topics.StatusRunning, Capability: "web.search", ActiveTaskID: "task-1"}
	digest := func(n Node, want string) *digestEnc {
		t.Helper()
		c.begin(1)
		s, _ := c.candidate(n.AgentID, 1)
		e, err := b.digest(&n, s)
		if err != nil {
			t.Fatal(err)
		}
		fresh := mustDigestEnc(t, &n, b.cut, b.limits.MaxDedupeKeys, new([]byte))
		if !bytes.Equal(e.enc, fresh.enc) || e.remAt != fresh.remAt {
			t.Fatalf("%s: digest %s, want %s", want, e.enc, fresh.enc)
		}
		return e
	}
	first := digest(n, "first")
	if again := digest(n, "unchanged"); again != first {
		t.Fatal("an unchanged node was digested again")
	}
	n.ActiveTaskID = "task-2"
	second := digest(n, "changed")
	if second == first || &second.enc[0] != &first.enc[0] {
		t.Fatal("a changed node's digest was not encoded in the memory of the one it replaced")
	}
	// Cut strings: the slot keeps its digest, whose memory the cut one
	// must not take.
	long := n
	long.Capability = strings.Repeat("x", b.limits.MaxStringLength+10)
	kept := append([]byte(nil), second.enc...)
	if cut := digest(long, "cut"); cut.cuts == 0 || &cut.enc[0] == &second.enc[0] {
		t.Fatalf("a digest with %d cut strings took its slot's memory", cut.cuts)
	}
	if !bytes.Equal(second.enc, kept) || c.slots[n.AgentID].cached() != second {
		t.Fatal("a cut digest changed its slot's")
	}
	// Eviction: max_nodes 1 keeps cacheSize(1) = 2 slots; a third node
	// evicts one, and is digested in its memory, as itself.
	c.begin(1)
	other := Node{AgentID: "worker-2", Status: topics.StatusBlocked}
	digest(other, "other")
	c.begin(1)
	third := Node{AgentID: "worker-3", Status: topics.StatusFailed, Capability: "web.search"}
	s, _ := c.candidate(third.AgentID, 1)
	if !s.evicted || s.cached() != nil {
		t.Fatalf("the third node's slot: evicted %v, cached %v", s.evicted, s.cached() != nil)
	}
	mem := &s.mem()[0]
	e, err := b.digest(&third, s)
	if err != nil {
		t.Fatal(err)
	}
	if &e.enc[0] != mem || s.cached() != e || s.evicted {
		t.Fatal("the evicted slot's memory was not taken over by its new node's digest")
	}
	if fresh := mustDigestEnc(t, &third, b.cut, b.limits.MaxDedupeKeys, new([]byte)); !bytes.Equal(e.enc, fresh.enc) {
		t.Fatalf("digest %s, want %s", e.enc, fresh.enc)
	}
}
