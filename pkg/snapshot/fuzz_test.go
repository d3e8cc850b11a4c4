package snapshot_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// FuzzBuild decodes the fuzz input into a tree, a wake, limits and a time,
// builds the snapshot and checks every property of properties_test.go.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte("root + three workers"))
	f.Add([]byte{0x7f, 0xff, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte("\xe0\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("ties ties ties ties ties ties ties ties"))
	f.Add([]byte("\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8\xc8"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := decodeFuzz(data)
		if err := in.limits.Validate(); err != nil {
			s, _, berr := snapshot.Build(in.tree, in.wake, in.limits, in.now)
			if !errors.Is(berr, snapshot.ErrInvalidLimits) || s != nil {
				t.Fatalf("limits %+v are invalid (%v), Build returned %v, %v", in.limits, err, s, berr)
			}
			return
		}
		buildAndCheck(t, in.tree, in.wake, in.limits, in.now)
	})
}

type fuzzInput struct {
	tree   *refTree
	wake   snapshot.Wake
	limits snapshot.Limits
	now    time.Time
}

// fuzzSource reads choices from the fuzz input and, once it is used up, from
// a generator seeded by it, so that a short input still makes a large tree.
type fuzzSource struct {
	b   []byte
	rng *rand.Rand
}

func (s *fuzzSource) byte() byte {
	if len(s.b) > 0 {
		c := s.b[0]
		s.b = s.b[1:]
		return c
	}
	return byte(s.rng.Uint32())
}

// intn returns a number in [0, n).
func (s *fuzzSource) intn(n int) int {
	switch {
	case n <= 1:
		return 0
	case n <= 256:
		return int(s.byte()) % n
	default:
		return (int(s.byte())<<8 | int(s.byte())) % n
	}
}

func pick[T any](s *fuzzSource, xs ...T) T { return xs[s.intn(len(xs))] }

// fuzzAlphabet has ASCII, multi-byte runes (2, 3 and 4 bytes, a combining
// mark, a ZWJ sequence) and characters JSON must escape, so that cutting by
// characters and measuring in bytes both matter.
var fuzzAlphabet = []string{
	"a", "b", "c", "z", "0", "7", "-", "_", ".", ":", "/",
	"é", "ß", "世", "界", "😀", "👩‍👩‍👧", "\u0301",
	`"`, `\`, "\u2028", "\u2029", "\x01", "\n", "\t", "<", "&", " ",
}

var fuzzBase = time.Date(2026, 2, 14, 10, 40, 0, 0, time.UTC)

func (s *fuzzSource) str(long bool) string {
	var n int
	switch c := s.byte(); {
	case c < 16:
		return ""
	case c < 200 || !long:
		n = 1 + int(c)%12
	default:
		n = 100 + s.intn(240)
	}
	var out []rune
	if n > 12 {
		// Long strings repeat a short pattern so they cost few input bytes.
		pat := []rune(s.str(false) + pick(s, fuzzAlphabet...))
		for len(out) < n {
			out = append(out, pat...)
		}
		return string(out[:n])
	}
	for range n {
		out = append(out, []rune(fuzzAlphabet[s.intn(len(fuzzAlphabet))])...)
	}
	return string(out)
}

// time returns a time from a few values, so that ties are common, now and
// then no time at all, or one at either end of the years JSON can carry.
func (s *fuzzSource) time() topics.Time {
	switch c := s.intn(10); c {
	case 0:
		return topics.Time{}
	case 7:
		return topics.NewTime(fuzzBase.Add(time.Duration(s.intn(100000)) * time.Millisecond))
	case 8:
		return topics.NewTime(pick(s, time.Date(1, 1, 1, 0, 0, 0, 1e6, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)))
	default:
		return topics.NewTime(fuzzBase.Add(time.Duration(c-3) * time.Second))
	}
}

func decodeFuzz(data []byte) fuzzInput {
	h := fnv.New64a()
	h.Write(data)
	s := &fuzzSource{b: data, rng: rand.New(rand.NewPCG(h.Sum64(), uint64(len(data))))}

	// Limits within Validate's ranges (zero meaning the default), and now
	// and then out of them.
	var l snapshot.Limits
	l.MaxNodes = pick(s, 0, 1+s.intn(8), 1+s.intn(80), 10000)
	l.MaxDedupeKeys = pick(s, 0, 1, 2, 3, 4, 64)
	l.MaxCorrelationHandles = pick(s, 0, 1, 1+s.intn(25), 1000)
	l.MaxBytes = pick(s, 0, snapshot.MinBytes, snapshot.MinBytes+s.intn(4000), snapshot.MinBytes+s.intn(60000))
	l.MaxStringLength = pick(s, 0, 8, 8+s.intn(24), 8+s.intn(300))
	l.StaleAfter = pick(s, 0, time.Millisecond, time.Duration(s.intn(20000))*time.Millisecond)
	if s.intn(64) == 0 {
		switch s.intn(5) {
		case 0:
			l.MaxNodes = -1
		case 1:
			l.MaxBytes = snapshot.MinBytes - 1
		case 2:
			l.MaxStringLength = 7
		case 3:
			l.MaxDedupeKeys = 65
		case 4:
			l.StaleAfter = -time.Nanosecond
		}
	}

	t := &refTree{Run: s.str(true), Session: s.str(true), Thread: s.str(true), At: s.time()}
	if t.Run == "" {
		t.Run = "run"
	}
	var nNodes int
	switch c := s.byte(); {
	case c < 128:
		nNodes = s.intn(12)
	case c < 224:
		nNodes = s.intn(80)
	default:
		nNodes = s.intn(301)
	}
	corr := []string{"c1", "c2", "c3", s.str(true)}
	seen := map[string]bool{}
	for i := range nNodes {
		id := s.str(s.intn(8) == 0)
		if id == "" || seen[id] {
			id = fmt.Sprintf("%sn%d", id, i)
		}
		seen[id] = true
		n := snapshot.Node{
			AgentID:         id,
			Role:            pick(s, "", topics.RoleConductor, topics.RoleWorker, topics.RoleAppAgent, topics.RoleUIAgent, topics.RoleSystemActor, topics.RoleHumanInterface),
			Status:          pick(s, "", topics.StatusIdle, topics.StatusRunning, topics.StatusBlocked, topics.StatusFailed, topics.StatusCompleted),
			StatusUpdatedAt: s.time(),
			LastSignalKind:  pick(s, "", topics.SignalProgress, topics.SignalResult, topics.SignalFailed, topics.SignalRequest, topics.SignalHeartbeat, topics.SignalInput),
			LastSignalAt:    s.time(),
		}
		if i > 0 && s.intn(2) == 0 {
			n.ParentAgentID = t.Nodes[s.intn(i)].AgentID
		} else if s.intn(4) == 0 {
			n.ParentAgentID = s.str(true)
		}
		if s.intn(3) == 0 {
			n.LeaseExpiresAt = s.time()
			n.LeaseOwner = s.str(true)
		}
		if s.intn(2) == 0 {
			n.ActiveRunID, n.ActiveTaskID, n.Capability = s.str(true), s.str(true), s.str(true)
		}
		if s.intn(2) == 0 {
			n.LastCorrelationID = pick(s, corr...)
		}
		n.OpenRequestCount = pick(s, 0, 0, 1, 2, 1_000_000)
		if n.OpenRequestCount > 0 {
			n.LastRequestKind = s.str(true)
		}
		for range pick(s, 0, 0, 1, 3, 4, 5, 70) {
			n.RecentDedupeKeys = append(n.RecentDedupeKeys, s.str(true))
		}
		t.Nodes = append(t.Nodes, n)
	}
	if nNodes > 0 && s.intn(4) != 0 {
		t.RootID = t.Nodes[s.intn(nNodes)].AgentID
	} else if s.intn(2) == 0 {
		t.RootID = "absent-root" // the root is known by id, its node not yet
	}
	hseen := map[string]bool{}
	for i := range pick(s, 0, s.intn(4), s.intn(30), s.intn(600)) {
		id := s.str(s.intn(4) == 0)
		if id == "" || hseen[id] {
			id = fmt.Sprintf("%sh%d", id, i)
		}
		hseen[id] = true
		t.Handles = append(t.Handles, refHandle{ID: id, At: s.time()})
	}

	// The snapshot id is the projection's ULID (or a UUID), never free text.
	w := snapshot.Wake{
		SnapshotID: pick(s, "01JM2Q4X7Z8K3V5N6P9R0S1T2U", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "0f8fad5b-d9cb-469f-a165-70867728950e", ""),
		Seq:        int64(pick(s, 0, s.intn(1<<16), 1<<62)),
		At:         t.At,
	}
	if s.intn(2) == 0 {
		w.Source = s.time()
	}
	for range s.intn(5) {
		if nNodes > 0 && s.intn(4) != 0 {
			w.AgentIDs = append(w.AgentIDs, t.Nodes[s.intn(nNodes)].AgentID)
		} else {
			w.AgentIDs = append(w.AgentIDs, s.str(false))
		}
	}
	for range s.intn(4) {
		w.CorrelationIDs = append(w.CorrelationIDs, pick(s, corr...))
	}
	now := fuzzBase.Add(time.Duration(s.intn(40000)-10000) * time.Millisecond)
	return fuzzInput{tree: t, wake: w, limits: l, now: now}
}
