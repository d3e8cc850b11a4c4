package snapshot_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the builder's output")

// t0 is the wake's logical time in every golden case, and fixedNow the wall
// clock: snapshots are 5.25s old unless a case says otherwise.
var (
	t0       = time.Date(2026, 2, 14, 10, 40, 0, 0, time.UTC)
	fixedNow = t0.Add(5250 * time.Millisecond)
)

// at is t0 plus ms milliseconds.
func at(ms int) topics.Time { return topics.NewTime(t0.Add(time.Duration(ms) * time.Millisecond)) }

func goldenWake() snapshot.Wake {
	return snapshot.Wake{SnapshotID: "01JM2Q4X7Z8K3V5N6P9R0S1T2U", Seq: 42, At: at(0)}
}

func conductor() snapshot.Node {
	return snapshot.Node{AgentID: "conductor", Role: topics.RoleConductor, Status: topics.StatusRunning,
		StatusUpdatedAt: at(-600000), ActiveRunID: "run-1", LastSignalKind: topics.SignalInput, LastSignalAt: at(-1000)}
}

func worker(id string) snapshot.Node {
	return snapshot.Node{AgentID: id, Role: topics.RoleWorker, ParentAgentID: "conductor", Status: topics.StatusIdle,
		StatusUpdatedAt: at(-300000)}
}

func tree(nodes ...snapshot.Node) *refTree {
	return &refTree{Run: "run-1", Session: "session-1", Thread: "thread-1", RootID: "conductor", Nodes: nodes, At: at(0)}
}

// flatTree is the conductor and n-1 workers w-000..., each signalled a second
// before the previous one, so that their rank is their number.
func flatTree(n int) *refTree {
	t := tree(conductor())
	statuses := []topics.Status{topics.StatusIdle, topics.StatusRunning, topics.StatusCompleted}
	for i := range n - 1 {
		w := worker(fmt.Sprintf("w-%03d", i))
		w.Status = statuses[i%3]
		w.LastSignalKind = topics.SignalProgress
		w.LastSignalAt = at(-2000 - 1000*i)
		t.Nodes = append(t.Nodes, w)
	}
	return t
}

func handles(n int, at func(i int) topics.Time) []refHandle {
	hs := make([]refHandle, n)
	for i := range hs {
		hs[i] = refHandle{ID: fmt.Sprintf("corr-%03d", i), At: at(i)}
	}
	return hs
}

func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("dedupe-%04d", n-i) // newest first
	}
	return ks
}

type goldenCase struct {
	name   string
	tree   *refTree
	wake   snapshot.Wake
	limits snapshot.Limits
	now    time.Time
	// check asserts what the case is about, beyond the common properties.
	check func(t *testing.T, s *topics.AgentTreeSnapshot, enc []byte)
}

func agentIDs(s *topics.AgentTreeSnapshot) []string {
	out := make([]string, len(s.Nodes))
	for i, d := range s.Nodes {
		out[i] = d.AgentID
	}
	return out
}

func wantIDs(t *testing.T, s *topics.AgentTreeSnapshot, want ...string) {
	t.Helper()
	if got := agentIDs(s); !slices.Equal(got, want) {
		t.Errorf("nodes %q\n want %q", got, want)
	}
}

func wantTruncation(t *testing.T, s *topics.AgentTreeSnapshot, truncated bool, omittedNodes, omittedHandles, cut int) {
	t.Helper()
	m := s.TruncationMeta
	if s.Truncated != truncated || m.OmittedCountTotal != omittedNodes || m.OmittedCorrelationHandles != omittedHandles || m.CutStrings != cut {
		t.Errorf("truncated %v, omitted %d nodes %d handles, %d cut; want %v, %d, %d, %d",
			s.Truncated, m.OmittedCountTotal, m.OmittedCorrelationHandles, m.CutStrings, truncated, omittedNodes, omittedHandles, cut)
	}
}

// widestSize is the size the builder budgets for: the snapshot with its
// wall-clock fields at their widest.
func widestSize(t *testing.T, s *topics.AgentTreeSnapshot) int {
	w := wallClockFree(*s)
	return len(mustMarshal(t, &w))
}

// budgetTree is a tree of long-named workers whose complete snapshot measures
// exactly 24000+over bytes under the default limits: the capabilities of the
// last-ranked workers are padded to make up the difference.
func budgetTree(tb testing.TB, over int) *refTree {
	measure := func(t *refTree) int {
		o := newOracle(t, goldenWake(), snapshot.Limits{})
		return o.size(tb, snapshot.DefaultMaxStringLength, len(o.handles), len(o.ranking))
	}
	want := snapshot.DefaultMaxBytes + over
	n := 1
	for measure(budgetNodes(n+1, 0)) <= want {
		n++
	}
	t := budgetNodes(n, want-measure(budgetNodes(n, 0)))
	if got := measure(t); got != want {
		tb.Fatalf("budget tree measures %d bytes, want %d", got, want)
	}
	return t
}

// budgetNodes is the conductor and n workers, the last-ranked worker last;
// pad characters are added to the workers' capabilities, from the last.
func budgetNodes(n, pad int) *refTree {
	t := tree(conductor())
	t.Handles = handles(3, func(i int) topics.Time { return at(-i * 1000) })
	for i := range n {
		w := worker(fmt.Sprintf("worker-%02d-%s", i, strings.Repeat("long-agent-id-", 10)))
		w.Status = topics.StatusRunning
		w.LastSignalKind = topics.SignalHeartbeat
		w.LastSignalAt = at(-1000 * (i + 2))
		if i%2 == 0 {
			w.LeaseOwner, w.LeaseExpiresAt = "conductor", at(60000+i*1000)
		}
		w.ActiveTaskID = fmt.Sprintf("task-%02d", i)
		w.Capability = "c"
		t.Nodes = append(t.Nodes, w)
	}
	for i := len(t.Nodes) - 1; i > 0 && pad > 0; i-- {
		p := min(pad, 150)
		t.Nodes[i].Capability += strings.Repeat("x", p)
		pad -= p
	}
	return t
}

// longNode has every free-text field n characters long, each of a different
// script.
func longNode(n int) snapshot.Node {
	w := worker(strings.Repeat("a", n))
	w.ParentAgentID = strings.Repeat("p", n)
	w.Status = topics.StatusRunning
	w.LeaseOwner, w.LeaseExpiresAt = strings.Repeat("ö", n), at(30000)
	w.ActiveRunID = strings.Repeat("r", n)
	w.ActiveTaskID = strings.Repeat("世", n)
	w.Capability = strings.Repeat("é", n)
	w.LastCorrelationID = strings.Repeat("😀", n)
	w.LastSignalKind, w.LastSignalAt = topics.SignalRequest, at(-1000)
	w.OpenRequestCount, w.LastRequestKind = 1, strings.Repeat("k", n)
	w.RecentDedupeKeys = []string{strings.Repeat("\u2028", n), strings.Repeat(`"\`, n)[:n]}
	return w
}

func goldenCases(tb testing.TB) []goldenCase {
	var cases []goldenCase
	add := func(c goldenCase) { cases = append(cases, c) }

	// Small: the root and three workers, under the default limits.
	{
		t := tree(conductor())
		w1 := worker("worker-1")
		w1.Status, w1.StatusUpdatedAt = topics.StatusRunning, at(-30000)
		w1.LeaseOwner, w1.LeaseExpiresAt = "conductor", at(25000)
		w1.ActiveRunID, w1.ActiveTaskID, w1.Capability = "run-1", "task-1", "web.search"
		w1.LastSignalKind, w1.LastSignalAt, w1.LastCorrelationID = topics.SignalHeartbeat, at(-2000), "corr-1"
		w2 := worker("worker-2")
		w2.Role = topics.RoleAppAgent
		w2.Status, w2.StatusUpdatedAt = topics.StatusBlocked, at(-5000)
		w2.LastSignalKind, w2.LastSignalAt, w2.LastCorrelationID = topics.SignalRequest, at(-5000), "corr-2"
		w2.OpenRequestCount, w2.LastRequestKind, w2.RecentDedupeKeys = 1, "approval", []string{"dk-2", "dk-1"}
		w3 := worker("worker-3")
		w3.Status, w3.StatusUpdatedAt = topics.StatusCompleted, at(-9000)
		w3.LastSignalKind, w3.LastSignalAt = topics.SignalResult, at(-9000)
		t.Nodes = append(t.Nodes, w3, w1, w2)
		t.Handles = []refHandle{{"corr-2", at(-5000)}, {"corr-1", at(-2000)}}
		add(goldenCase{name: "small", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			wantIDs(t, s, "conductor", "worker-2", "worker-1", "worker-3")
			wantTruncation(t, s, false, 0, 0, 0)
			if h := s.Summary.ActiveCorrelationHandles; !slices.Equal(h, []string{"corr-1", "corr-2"}) {
				t.Errorf("handles %q", h)
			}
			if d := s.Nodes[2]; d.LeaseRemainingMs == nil || *d.LeaseRemainingMs != 25000 {
				t.Errorf("worker-1 lease_remaining_ms %v, want 25000", d.LeaseRemainingMs)
			}
			if s.Summary.BlockedCount != 1 || s.Summary.OpenRequestCount != 1 || s.Stale || s.SnapshotAgeMs != 5250 {
				t.Errorf("summary %+v stale %v age %d", s.Summary, s.Stale, s.SnapshotAgeMs)
			}
		}})
	}

	// Exactly at and just over max_nodes, with a byte budget that does not bind.
	big := snapshot.Limits{MaxBytes: 1 << 20}
	add(goldenCase{name: "nodes_64", tree: flatTree(64), limits: big, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
		if len(s.Nodes) != 64 {
			t.Errorf("%d nodes, want all 64", len(s.Nodes))
		}
		wantTruncation(t, s, false, 0, 0, 0)
	}})
	add(goldenCase{name: "nodes_65", tree: flatTree(65), limits: big, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
		if len(s.Nodes) != 64 || s.Nodes[63].AgentID != "w-062" {
			t.Errorf("%d nodes, last %q; want 64, the oldest signal w-063 left out", len(s.Nodes), s.Nodes[len(s.Nodes)-1].AgentID)
		}
		wantTruncation(t, s, true, 1, 0, 0)
		if s.TruncationMeta.OmittedByStatus != (topics.StatusCounts{Idle: 1}) {
			t.Errorf("omitted_by_status %+v, want one idle", s.TruncationMeta.OmittedByStatus)
		}
	}})
	// Under the default limits 64 digests do not fit 24000 bytes: the byte
	// budget binds before max_nodes does.
	add(goldenCase{name: "nodes_64_default_limits", tree: flatTree(64), check: func(t *testing.T, s *topics.AgentTreeSnapshot, enc []byte) {
		if len(s.Nodes) >= 64 || !s.Truncated || len(enc) > snapshot.DefaultMaxBytes {
			t.Errorf("%d nodes, %d bytes, truncated %v; want fewer than 64 within 24000 bytes", len(s.Nodes), len(enc), s.Truncated)
		}
		if widestSize(t, s)+390 <= snapshot.DefaultMaxBytes {
			t.Errorf("measured %d bytes: room for another node", widestSize(t, s))
		}
	}})

	// Dedupe keys: 3 and 4 against the default bound of 3.
	for _, n := range []int{3, 4} {
		t := tree(conductor())
		w := worker("worker-1")
		w.OpenRequestCount, w.LastRequestKind, w.RecentDedupeKeys = n, "tool_call", keys(n)
		t.Nodes = append(t.Nodes, w)
		add(goldenCase{name: fmt.Sprintf("dedupe_keys_%d", n), tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			if got := s.Nodes[1].RecentRequestDedupeKeys; !slices.Equal(got, keys(n)[:3]) {
				t.Errorf("dedupe keys %q, want the newest three", got)
			}
			// Keeping the newest keys is the field's definition, not a truncation.
			wantTruncation(t, s, false, 0, 0, 0)
		}})
	}

	// Correlation handles: 20 and 21 against the default bound of 20; the
	// even ones tie in time, so the handle breaks the tie.
	for _, n := range []int{20, 21} {
		t := tree(conductor(), worker("worker-1"))
		t.Handles = handles(n, func(i int) topics.Time { return at(-1000 * (i / 2)) })
		slices.Reverse(t.Handles)
		add(goldenCase{name: fmt.Sprintf("handles_%d", n), tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			h := s.Summary.ActiveCorrelationHandles
			if len(h) != 20 || h[0] != "corr-000" || h[1] != "corr-001" || h[19] != "corr-019" {
				t.Errorf("handles %q, want corr-000 to corr-019", h)
			}
			wantTruncation(t, s, n > 20, 0, n-20, 0)
		}})
	}

	// The byte budget: a snapshot measuring exactly 24000 bytes, and one
	// measuring 24001, which must drop its last-ranked node.
	{
		t := budgetTree(tb, 0)
		n := len(t.Nodes)
		add(goldenCase{name: "bytes_24000", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, enc []byte) {
			if n := widestSize(t, s); n != snapshot.DefaultMaxBytes {
				t.Errorf("measures %d bytes, want exactly %d", n, snapshot.DefaultMaxBytes)
			}
			if len(s.Nodes) != n || len(enc) > snapshot.DefaultMaxBytes {
				t.Errorf("%d bytes, %d nodes: want all %d", len(enc), len(s.Nodes), n)
			}
			wantTruncation(t, s, false, 0, 0, 0)
		}})
	}
	{
		t := budgetTree(tb, 1)
		n := len(t.Nodes)
		add(goldenCase{name: "bytes_24001", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, enc []byte) {
			if len(s.Nodes) != n-1 {
				t.Errorf("%d nodes of %d, want the last-ranked one left out", len(s.Nodes), n)
			}
			wantTruncation(t, s, true, 1, 0, 0)
		}})
	}

	// Strings of exactly max_string_length characters, and one more: ASCII,
	// two-, three- and four-byte runes, and escaped characters.
	for _, n := range []int{160, 161} {
		t := tree(conductor(), longNode(n))
		t.Run, t.Session = strings.Repeat("R", n), strings.Repeat("ß", n)
		t.Handles = []refHandle{{strings.Repeat("h", n), at(0)}}
		src := longNode(n)
		add(goldenCase{name: fmt.Sprintf("strings_%d", n), tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			d := s.Nodes[1]
			// Ids are cut to stay distinct and matchable; the two text
			// fields, capability and last_request_kind, to a prefix.
			for _, f := range []struct {
				got, src string
				text     bool
			}{
				{d.AgentID, src.AgentID, false}, {*d.ParentAgentID, src.ParentAgentID, false}, {*d.LeaseOwner, src.LeaseOwner, false},
				{*d.ActiveRunID, src.ActiveRunID, false}, {*d.ActiveTaskID, src.ActiveTaskID, false}, {*d.Capability, src.Capability, true},
				{*d.LastCorrelationID, src.LastCorrelationID, false}, {*d.LastRequestKind, src.LastRequestKind, true},
				{d.RecentRequestDedupeKeys[0], src.RecentDedupeKeys[0], false}, {d.RecentRequestDedupeKeys[1], src.RecentDedupeKeys[1], false},
				{s.Scope.RunID, strings.Repeat("R", n), false}, {*s.Scope.SessionID, strings.Repeat("ß", n), false},
				{s.Summary.ActiveCorrelationHandles[0], strings.Repeat("h", n), false},
			} {
				want := f.src
				switch {
				case len([]rune(f.src)) <= 160:
				case f.text:
					want = refCutText(f.src, 160)
				default:
					want = refCutID(f.src, 160)
				}
				if f.got != want || len([]rune(f.got)) > 160 {
					t.Errorf("%q, want %q: at most 160 characters", f.got, want)
				}
			}
			if n == 160 {
				wantTruncation(t, s, false, 0, 0, 0)
			} else {
				wantTruncation(t, s, true, 0, 0, 13)
			}
		}})
	}

	// Multi-byte runes, grapheme clusters and escapes straddling the cut:
	// the cut is by characters (code points) and between grapheme clusters,
	// never inside one. An id keeps 151 characters of itself before its
	// "~" and hash, text 160.
	{
		a := func(n int) string { return strings.Repeat("a", n) }
		w := worker(a(150) + "世界" + a(9))
		w.ParentAgentID = "conductor"
		w.ActiveRunID = a(150) + "😀😀" + a(9)
		w.ActiveTaskID = a(150) + "e\u0301x" + a(9)
		w.Capability = a(159) + "e\u0301"
		w.LastCorrelationID = a(150) + "👩‍👩‍👧" + a(9)
		w.LastRequestKind = a(150) + strings.Repeat("\u2028", 11)
		w.LeaseOwner, w.LeaseExpiresAt = a(148)+`"\"\\`+a(9), at(1)
		w.RecentDedupeKeys = []string{strings.Repeat("日本語", 54), strings.Repeat("🇺🇳", 81), a(150) + "\x01\x02" + a(9)}
		t := tree(conductor(), w)
		hash := func(s string) string { return "~" + fmt.Sprintf("%x", sha256.Sum256([]byte(s)))[:8] }
		want := map[string]string{
			"agent_id":            a(150) + "世" + hash(w.AgentID),
			"active_run_id":       a(150) + "😀" + hash(w.ActiveRunID),
			"active_task_id":      a(150) + hash(w.ActiveTaskID), // é is two code points: not split
			"capability":          a(159),                        // nor here
			"last_correlation_id": a(150) + hash(w.LastCorrelationID),
			"last_request_kind":   a(150) + strings.Repeat("\u2028", 10),
			"lease_owner":         a(148) + `"\"` + hash(w.LeaseOwner),
			"key0":                strings.Repeat("日本語", 50) + "日" + hash(w.RecentDedupeKeys[0]),
			"key1":                strings.Repeat("🇺🇳", 75) + hash(w.RecentDedupeKeys[1]), // a flag is two code points
			"key2":                a(150) + "\x01" + hash(w.RecentDedupeKeys[2]),
		}
		add(goldenCase{name: "cut_non_ascii", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			d := s.Nodes[1]
			got := map[string]string{
				"agent_id": d.AgentID, "active_run_id": *d.ActiveRunID, "active_task_id": *d.ActiveTaskID,
				"capability": *d.Capability, "last_correlation_id": *d.LastCorrelationID,
				"last_request_kind": *d.LastRequestKind, "lease_owner": *d.LeaseOwner,
				"key0": d.RecentRequestDedupeKeys[0], "key1": d.RecentRequestDedupeKeys[1], "key2": d.RecentRequestDedupeKeys[2],
			}
			for k, v := range want {
				if got[k] != v || !utf8.ValidString(got[k]) {
					t.Errorf("%s = %q\n want %q", k, got[k], v)
				}
			}
			wantTruncation(t, s, true, 0, 0, 10)
		}})
	}

	// Far over every bound.
	{
		t := tree(conductor())
		for i := 1; i < 10000; i++ {
			w := worker(fmt.Sprintf("w-%05d", i))
			switch {
			case i%997 == 0:
				w.Status, w.StatusUpdatedAt = topics.StatusFailed, at(-1000*(i%7))
			case i%991 == 0:
				w.Status, w.StatusUpdatedAt = topics.StatusBlocked, at(-1000*(i%5))
			case i%3 == 0:
				w.Status = topics.StatusRunning
			case i%3 == 1:
				w.Status = topics.StatusCompleted
			}
			if i%50 == 0 {
				w.LeaseOwner, w.LeaseExpiresAt = "conductor", at(1000*(i%400)-30000)
			}
			if i%4 != 0 {
				w.LastSignalKind, w.LastSignalAt = topics.SignalProgress, at(-100*(i*7919%1000))
			}
			t.Nodes = append(t.Nodes, w)
		}
		t.Handles = handles(40, func(i int) topics.Time { return at(-i) })
		wake := goldenWake()
		wake.AgentIDs = []string{"w-09999"}
		add(goldenCase{name: "far_10000_nodes", tree: t, wake: wake, check: func(t *testing.T, s *topics.AgentTreeSnapshot, enc []byte) {
			if len(s.Nodes) > 64 || s.Summary.NodeCountTotal != 10000 || s.TruncationMeta.OmittedCountTotal != 10000-len(s.Nodes) {
				t.Errorf("%d nodes of %d, %d omitted", len(s.Nodes), s.Summary.NodeCountTotal, s.TruncationMeta.OmittedCountTotal)
			}
			if s.Nodes[1].AgentID != "w-09999" || s.Nodes[2].Status != topics.StatusFailed && s.Nodes[2].Status != topics.StatusBlocked {
				t.Errorf("nodes %q: want the wake's node, then the urgent ones", agentIDs(s)[:4])
			}
			wantTruncation(t, s, true, 10000-len(s.Nodes), 20, 0)
		}})
	}
	{
		t := tree(conductor(), worker("worker-1"))
		t.Handles = handles(500, func(i int) topics.Time { return at(-1000 * (i % 50)) })
		add(goldenCase{name: "far_500_handles", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			h := s.Summary.ActiveCorrelationHandles
			if len(h) != 20 || h[0] != "corr-000" || h[1] != "corr-050" || h[10] != "corr-001" {
				t.Errorf("handles %q: want the newest 20, ties by handle", h)
			}
			wantTruncation(t, s, true, 0, 480, 0)
		}})
	}
	{
		t := tree(conductor())
		w := worker("worker-1")
		w.OpenRequestCount, w.LastRequestKind, w.RecentDedupeKeys = 2000, "tool_call", keys(2000)
		t.Nodes = append(t.Nodes, w)
		add(goldenCase{name: "far_2000_dedupe_keys", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			if got := s.Nodes[1].RecentRequestDedupeKeys; !slices.Equal(got, []string{"dedupe-2000", "dedupe-1999", "dedupe-1998"}) {
				t.Errorf("dedupe keys %q", got)
			}
		}})
	}

	// The highest limits for nodes and handles, on a tree far over them: the
	// default byte budget drops all but the root and some of the handles.
	add(goldenCase{name: "limits_at_maximum", tree: maxTree(), limits: maxLimits, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
		if len(s.Nodes) != 1 || len(s.Summary.ActiveCorrelationHandles) >= 1000 {
			t.Errorf("%d nodes, %d handles; want the root and the handles that fit", len(s.Nodes), len(s.Summary.ActiveCorrelationHandles))
		}
		wantTruncation(t, s, true, 9999, 1000-len(s.Summary.ActiveCorrelationHandles), 0)
	}})

	// Ties everywhere: equal timestamps in every ranking, so that the agent
	// id alone decides; the slice is in no particular order. The expected
	// order is written out by hand from seed 000, as a check on the oracle.
	{
		same := at(-1000)
		t := tree()
		for _, id := range []string{"m", "b", "k", "conductor", "a", "z", "c", "y", "l", "x", "B", "é"} {
			n := worker(id)
			n.StatusUpdatedAt, n.LastSignalAt, n.LastSignalKind = same, same, topics.SignalProgress
			switch id {
			case "conductor":
				n = conductor()
				n.StatusUpdatedAt, n.LastSignalAt = same, same
			case "m", "b", "é":
				n.Status = topics.StatusBlocked
			case "k", "B":
				n.Status = topics.StatusFailed
			case "z", "a", "y":
				n.LeaseOwner, n.LeaseExpiresAt = "conductor", same
			case "x", "l":
				n.LastSignalAt, n.LastSignalKind = topics.Time{}, ""
			}
			t.Nodes = append(t.Nodes, n)
		}
		t.Handles = []refHandle{{"h-b", same}, {"h-c", same}, {"h-a", same}}
		add(goldenCase{name: "ties", tree: t, limits: snapshot.Limits{MaxNodes: 11}, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			// root; urgent by id (byte order: "B" < "b" < ... < "é"); leases
			// by id; the rest by id; never signalled (l, x) last.
			wantIDs(t, s, "conductor", "B", "b", "k", "m", "é", "a", "y", "z", "c", "l")
			if h := s.Summary.ActiveCorrelationHandles; !slices.Equal(h, []string{"h-a", "h-b", "h-c"}) {
				t.Errorf("handles %q", h)
			}
			wantTruncation(t, s, true, 1, 0, 0)
		}})
	}

	// No root yet; a node with no facts at all shows nulls and unknowns.
	{
		t := tree()
		t.RootID, t.Session, t.Thread = "", "", ""
		bare := snapshot.Node{AgentID: "bare"}
		w := worker("worker-1")
		w.Status, w.StatusUpdatedAt = topics.StatusFailed, at(-100)
		w.LastSignalKind, w.LastSignalAt = topics.SignalFailed, at(-100)
		t.Nodes = append(t.Nodes, bare, w)
		add(goldenCase{name: "no_root", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, enc []byte) {
			wantIDs(t, s, "worker-1", "bare")
			d := s.Nodes[1]
			if s.RootAgentID != nil || s.Scope.SessionID != nil || s.Scope.ThreadID != nil || d.Status != topics.StatusUnknown ||
				d.Role != topics.RoleUnknown || d.ParentAgentID != nil || d.StatusUpdatedAt != nil || d.LeaseOwner != nil ||
				d.LeaseExpiresAt != nil || d.LeaseRemainingMs != nil || d.LastSignalKind != nil || d.LastSignalAt != nil {
				t.Errorf("want nulls and unknowns, got %s", indent(enc))
			}
			if s.Summary.CountsByStatus != (topics.StatusCounts{Failed: 1, Unknown: 1}) {
				t.Errorf("counts %+v", s.Summary.CountsByStatus)
			}
		}})
	}

	// An empty tree: the envelope alone.
	{
		t := &refTree{Run: "run-empty", At: at(0)}
		add(goldenCase{name: "empty", tree: t, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			if s.RootAgentID != nil || len(s.Nodes) != 0 || s.Summary.NodeCountTotal != 0 {
				t.Errorf("want an empty snapshot")
			}
			wantTruncation(t, s, false, 0, 0, 0)
		}})
	}

	// The wake refers to agents (one unknown, one the root, one twice) and to
	// correlation ids (one matching nothing); max_nodes cuts the ranking.
	{
		t := tree(conductor())
		for i := range 10 {
			w := worker(fmt.Sprintf("w-%d", i))
			w.LastSignalKind, w.LastSignalAt = topics.SignalProgress, at(-1000*i)
			switch i {
			case 2, 9:
				w.LastCorrelationID = "corr-b"
			case 5:
				w.LastCorrelationID = "corr-a"
			case 8:
				w.Status, w.StatusUpdatedAt = topics.StatusBlocked, at(-50)
			}
			t.Nodes = append(t.Nodes, w)
		}
		wake := goldenWake()
		wake.AgentIDs = []string{"w-7", "missing", "w-3", "conductor", "w-7"}
		wake.CorrelationIDs = []string{"corr-b", "corr-none", "corr-a"}
		add(goldenCase{name: "wake_refs", tree: t, wake: wake, limits: snapshot.Limits{MaxNodes: 8}, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			wantIDs(t, s, "conductor", "w-7", "w-3", "w-2", "w-9", "w-5", "w-8", "w-0")
			wantTruncation(t, s, true, 3, 0, 0)
		}})
	}

	// Stale: the projection's source is a minute behind the wake.
	{
		t := tree(conductor(), worker("worker-1"))
		wake := goldenWake()
		wake.Source = at(-60000)
		add(goldenCase{name: "stale", tree: t, wake: wake, check: func(t *testing.T, s *topics.AgentTreeSnapshot, _ []byte) {
			if !s.Stale || s.SnapshotAgeMs != 65250 {
				t.Errorf("stale %v age %d, want true 65250", s.Stale, s.SnapshotAgeMs)
			}
		}})
	}

	// The smallest byte budget with ids of escaped characters: the root
	// does not fit at 160 characters, so strings are cut shorter and the
	// handles dropped; the snapshot says so.
	{
		long := strings.Repeat("\u2028", 160)
		root := conductor()
		root.AgentID, root.ActiveRunID, root.Capability = "root"+long, long, long
		root.LeaseOwner, root.LeaseExpiresAt = long, at(1000)
		root.LastCorrelationID, root.LastRequestKind = long, long
		root.RecentDedupeKeys = []string{long, long, long}
		t := tree(root, worker("worker-1"))
		t.RootID, t.Run = root.AgentID, long
		t.Handles = handles(20, func(i int) topics.Time { return at(-i) })
		for i := range t.Handles {
			t.Handles[i].ID += long
		}
		add(goldenCase{name: "tiny_budget", tree: t, limits: snapshot.Limits{MaxBytes: snapshot.MinBytes}, check: func(t *testing.T, s *topics.AgentTreeSnapshot, enc []byte) {
			if utf8.RuneCountInString(s.Nodes[0].AgentID) >= 160 || s.TruncationMeta.CutStrings == 0 || !s.Truncated || len(enc) > snapshot.MinBytes {
				t.Errorf("root id %d characters, %d cut, %d bytes", utf8.RuneCountInString(s.Nodes[0].AgentID), s.TruncationMeta.CutStrings, len(enc))
			}
		}})
	}

	for i := range cases {
		if cases[i].wake.SnapshotID == "" {
			w := goldenWake()
			w.AgentIDs, w.CorrelationIDs, w.Source = cases[i].wake.AgentIDs, cases[i].wake.CorrelationIDs, cases[i].wake.Source
			cases[i].wake = w
		}
		if cases[i].now.IsZero() {
			cases[i].now = fixedNow
		}
	}
	return cases
}

// TestGolden builds each case's snapshot, checks every property and the
// case's own assertions, and compares the bytes with testdata/golden. The
// golden files are indented for review; run `go test ./pkg/snapshot -update`
// to rewrite them.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			s, _, enc := buildAndCheck(t, tc.tree, tc.wake, tc.limits, tc.now)
			tc.check(t, s, enc)
			compareGolden(t, filepath.Join("testdata", "golden", tc.name+".json"), enc)
		})
	}
}

func compareGolden(t *testing.T, path string, enc []byte) {
	t.Helper()
	got := indent(enc)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	stored, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/snapshot -update)", err)
	}
	// The stored file is indented; compacting it must give the exact bytes
	// the builder encoded (indenting never touches string contents).
	var compact bytes.Buffer
	if err := json.Compact(&compact, stored); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !bytes.Equal(compact.Bytes(), enc) {
		t.Errorf("%s differs from the builder's output (run go test ./pkg/snapshot -update if intended):\n%s", path, firstDiff(compact.Bytes(), enc))
	}
}

// TestGoldenFilesHaveCases finds golden files no case writes any more.
func TestGoldenFilesHaveCases(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range goldenCases(t) {
		if names[tc.name] {
			t.Errorf("two cases named %q", tc.name)
		}
		names[tc.name] = true
	}
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".json"); !names[name] {
			t.Errorf("%s: no golden case %q", f, name)
		}
	}
}
