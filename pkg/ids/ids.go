// Package ids derives canopy's deterministic ids: the wake id (of a whole
// wake, or of each part of a split one), the ids of a wake's snapshots, the
// id of a conductor's acknowledgement and the id of an input sent with an
// Idempotency-Key. Each is a ULID (the contract's
// convention) that the same inputs give on every instance and every replay,
// which is what lets a consumer drop duplicates by id. They are part of the
// contract: changing how any of them is derived changes ids already in
// Kafka, so ids_test.go pins each.
package ids

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"

	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Derive is a ULID with time ms (at most ulid.MaxTime) and entropy from a
// SHA-256 of parts, each length-prefixed so that no two part lists hash
// alike.
func Derive(ms uint64, parts ...string) ulid.ULID {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return stamp(min(ms, ulid.MaxTime()), sum[:])
}

// Wake is the deterministic id of the wake for triggers of run at seq (the
// run's applied event count when the wake is built): a ULID whose time is the
// newest trigger's and whose entropy is a hash of the run, the seq and the
// triggers. Two wakes with one id therefore have the same triggers and the
// same state behind their snapshots.
func Wake(run string, seq int64, trigs []topics.Trigger) ulid.ULID {
	ms, parts := wakeParts(make([]string, 0, 2+len(trigs)), run, seq, trigs)
	return Derive(ms, parts...)
}

// WakePart is the deterministic id of part number of count (from 1) of a
// wake split because its triggers did not fit one (docs/CONTRACT.md "Wake
// size"): the triggers are the part's. Like Wake, a ULID whose time is the
// newest of its triggers', with entropy from a hash of what Wake hashes and
// the part's number and count, so that no part has the id of another part,
// or of a wake that was not split.
func WakePart(run string, seq int64, trigs []topics.Trigger, number, count int) ulid.ULID {
	parts := make([]string, 0, 3+len(trigs))
	// First, before the run id: a wake's first part is its run id, which
	// holds no control character, so no wake's parts begin like this.
	parts = append(parts, "\x00part "+strconv.Itoa(number)+"/"+strconv.Itoa(count))
	ms, parts := wakeParts(parts, run, seq, trigs)
	return Derive(ms, parts...)
}

// wakeParts appends to parts what a wake id hashes of the run, the seq and
// the triggers, and returns the newest trigger's time.
func wakeParts(parts []string, run string, seq int64, trigs []topics.Trigger) (uint64, []string) {
	var ms int64
	parts = append(parts, run, strconv.FormatInt(seq, 10))
	for _, t := range trigs {
		ms = max(ms, t.At.UnixMilli())
		ev, corr, detail := "", "", ""
		if t.EventID != nil {
			ev = *t.EventID
		}
		if t.CorrelationID != nil {
			corr = *t.CorrelationID
		}
		if t.Detail != nil {
			detail = *t.Detail
		}
		parts = append(parts, string(t.Kind)+"\x1f"+ev+"\x1f"+t.AgentID+"\x1f"+corr+"\x1f"+detail+"\x1f"+t.At.String())
	}
	return uint64(max(ms, 0)), parts
}

// Ack is the id of the conductor.wake_received event that source sends to
// acknowledge the wake wakeID: a ULID with time ms (the wake's own, so the
// same id whenever it is acknowledged) and entropy from a hash of the source
// and the wake id. Acknowledging a redelivered wake again is a duplicate the
// projector applies once.
func Ack(ms uint64, source, wakeID string) ulid.ULID {
	sum := sha256.Sum256([]byte("conductor.wake_received\x00" + source + "\x00" + wakeID))
	return stamp(ms, sum[:])
}

// Input is the event id of an input sent with an Idempotency-Key, from who
// sent it (subject), for which run, under which key: every gateway instance
// derives the same id, so a retry that reaches another instance produces a
// duplicate the projector applies once. All of its 128 bits, time included,
// come from a hash of the three.
func Input(subject, run, key string) ulid.ULID {
	h := sha256.New()
	for _, s := range []string{subject, run, key} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var id ulid.ULID
	copy(id[:], h.Sum(nil))
	return id
}

// stamp is the ULID with time ms and entropy the first 10 bytes of sum; a
// time past ulid.MaxTime leaves the time bits zero.
func stamp(ms uint64, sum []byte) ulid.ULID {
	var id ulid.ULID
	_ = id.SetTime(ms)
	_ = id.SetEntropy(sum[:10])
	return id
}
