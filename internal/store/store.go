// Package store keeps projections' state in Pebble: Store is the
// projection.Storage of one partition, in a database that several
// partitions share. pkg/projection owns the encoding of runs and offsets
// (its Storage documents the key layout); this package owns where they go
// on disk and the changelog checkpoint beside them.
package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/canopy-dev/canopy/pkg/projection"
)

// Store is one partition's projection.Storage in a Pebble database. Its keys
// are the projection's, under the partition prefix 'p' + partition (4 bytes,
// big endian), and beside them:
//
//	'k'   the changelog checkpoint (Checkpoint): not state, so never in a
//	      commit's Changes nor in the changelog
//
// Every error wraps projection.ErrStore.
type Store struct {
	db     *pebble.DB
	prefix []byte
}

var _ projection.Storage = (*Store)(nil)

// New returns the store of partition in db.
func New(db *pebble.DB, partition int32) *Store {
	p := []byte{'p', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(p[1:], uint32(partition))
	return &Store{db: db, prefix: p}
}

var checkpointKey = []byte{'k'}

func (s *Store) abs(rel []byte) []byte {
	k := make([]byte, 0, len(s.prefix)+len(rel))
	return append(append(k, s.prefix...), rel...)
}

// Offsets returns the next offset to consume of every topic this partition
// has committed (projection.ReadOffsets).
func (s *Store) Offsets() (map[string]int64, error) { return projection.ReadOffsets(s) }

// Woken returns the priority path's watermark (projection.WokenKey); ok is
// false when no human input's wake was ever published from this partition.
func (s *Store) Woken() (next int64, ok bool, err error) { return projection.ReadWoken(s) }

// Journal returns the spans of run's stored journal chunks
// (projection.Journal).
func (s *Store) Journal(run string) ([]projection.JournalSpan, int, error) {
	return projection.Journal(s, run)
}

// Get returns the value of a relative key.
func (s *Store) Get(key []byte) (value []byte, ok bool, err error) {
	v, closer, err := s.db.Get(s.abs(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	v = append([]byte{}, v...)
	closer.Close()
	return v, true, nil
}

// Checkpoint returns the store's changelog checkpoint; ok is false when it
// has none (it never committed or restored).
func (s *Store) Checkpoint() (cp projection.Checkpoint, ok bool, err error) {
	v, ok, err := s.Get(checkpointKey)
	if err != nil || !ok {
		return cp, false, err
	}
	if len(v) != 16 {
		return cp, false, fmt.Errorf("%w: checkpoint: %d bytes", projection.ErrStore, len(v))
	}
	return projection.Checkpoint{Next: int64(binary.BigEndian.Uint64(v)), At: int64(binary.BigEndian.Uint64(v[8:]))}, true, nil
}

// Empty reports whether the store holds no key of its partition.
func (s *Store) Empty() (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: s.prefix, UpperBound: prefixEnd(s.prefix)})
	if err != nil {
		return false, fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	empty := !it.First()
	if err := it.Close(); err != nil {
		return false, fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	return empty, nil
}

// Write applies changes and, when cp is not nil, the checkpoint, in one
// Pebble batch; sync makes it durable before Write returns. Restoring from
// the changelog and committing a processed batch both come here.
func (s *Store) Write(changes projection.Changes, cp *projection.Checkpoint, sync bool) error {
	// Sized up front: growing a commit's batch as it fills was a tenth of
	// the projector's allocated bytes (BenchmarkEventPath).
	size := 64
	for _, c := range changes {
		size += len(s.prefix) + len(c.Key) + len(c.Value) + 16 // a record's kind and varints
	}
	b := s.db.NewBatchWithSize(size)
	defer b.Close()
	var key []byte // the batch copies keys: one buffer serves them all
	for _, c := range changes {
		key = append(append(key[:0], s.prefix...), c.Key...)
		var err error
		if c.Delete {
			err = b.Delete(key, nil)
		} else {
			err = b.Set(key, c.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", projection.ErrStore, err)
		}
	}
	if cp != nil {
		var v [16]byte
		binary.BigEndian.PutUint64(v[:], uint64(cp.Next))
		binary.BigEndian.PutUint64(v[8:], uint64(cp.At))
		if err := b.Set(s.abs(checkpointKey), v[:], nil); err != nil {
			return fmt.Errorf("%w: %w", projection.ErrStore, err)
		}
	}
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if err := b.Commit(opt); err != nil {
		return fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	return nil
}

// Wipe deletes everything of the partition, checkpoint included: what a
// store that cannot be trusted is reset to before a full restore.
func (s *Store) Wipe() error {
	if err := s.db.DeleteRange(s.prefix, prefixEnd(s.prefix), pebble.Sync); err != nil {
		return fmt.Errorf("%w: wipe: %w", projection.ErrStore, err)
	}
	return nil
}

// Scan calls f with every key under the relative prefix (without it) and
// its value, in key order; both are valid only during the call.
func (s *Store) Scan(prefix []byte, f func(k, v []byte) error) error {
	prefix = s.abs(prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = f(it.Key()[len(prefix):], v)
		}
		if err != nil {
			it.Close()
			return fmt.Errorf("%w: %w", projection.ErrStore, err) // the callback's error stays matchable
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	return nil
}

// SeekGE returns the first relative key at or after key, a copy.
func (s *Store) SeekGE(key []byte) ([]byte, bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: s.abs(key), UpperBound: prefixEnd(s.prefix)})
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	var first []byte
	ok := it.First()
	if ok {
		first = append([]byte(nil), it.Key()[len(s.prefix):]...)
	}
	if err := it.Close(); err != nil {
		return nil, false, fmt.Errorf("%w: %w", projection.ErrStore, err)
	}
	return first, ok, nil
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
