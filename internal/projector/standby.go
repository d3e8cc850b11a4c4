package projector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/pkg/projection"
)

// standby keeps a warm copy of every partition the instance does not own:
// it tails those partitions of the changelog (read_committed) into Pebble,
// one complete commit at a time, so that when one of them is assigned here
// its restore reads only what was committed since.
type standby struct {
	p  *Projector
	cl *kgo.Client

	// mu is held while a poll's records are written, and by release and
	// track: once release returns, nothing more is written to the
	// partition's store until it is tracked again.
	mu       sync.Mutex
	replicas map[int32]*replica
}

// replica is the standby state of one partition.
type replica struct {
	store *store.Store
	next  int64              // next changelog offset expected
	buf   projection.Changes // the commit being read, written when it ends
}

func newStandby(p *Projector) (*standby, error) {
	cl, err := kgo.NewClient(append(p.common[:len(p.common):len(p.common)], kgo.WithHooks(p.cfg.KafkaHooks("standby")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, fmt.Errorf("projector: standby consumer: %w", err)
	}
	s := &standby{p: p, cl: cl, replicas: make(map[int32]*replica)}
	all := make([]int32, p.partitions)
	for i := range all {
		all[i] = int32(i)
	}
	s.track(all)
	return s, nil
}

// track starts following partitions from their stores' checkpoints.
func (s *standby) track(parts []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	adds := make(map[int32]kgo.Offset)
	for _, part := range parts {
		if _, ok := s.replicas[part]; ok {
			continue
		}
		r := &replica{store: store.New(s.p.db, part)}
		cp, ok, err := r.store.Checkpoint()
		if age := s.p.cfg.Now().Sub(time.UnixMilli(cp.At)); err == nil && ok && age > s.p.trust {
			// A checkpoint older than the restore trusts: a tombstone
			// it has not seen may be gone from the changelog, and
			// reading on from it would give the store a fresh
			// checkpoint the restore would trust. Start it over.
			s.p.log.Info("standby replica starts from scratch", "partition", part,
				"reason", fmt.Sprintf("checkpoint written %v ago, more than %v", age.Round(time.Second), s.p.trust))
			ok = false
		}
		if err == nil && !ok {
			// A store without a checkpoint is not from the changelog:
			// start it over.
			var empty bool
			if empty, err = r.store.Empty(); err == nil && !empty {
				err = r.store.Wipe()
			}
		}
		if err != nil {
			s.p.log.Warn("standby replica not started", "partition", part, "err", err)
			continue
		}
		off := kgo.NewOffset().AtStart()
		if ok {
			off, r.next = kgo.NewOffset().At(cp.Next), cp.Next
		}
		s.replicas[part] = r
		adds[part] = off
	}
	if len(adds) > 0 {
		s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{s.p.cfg.Names.Changelog(): adds})
	}
}

// release stops following a partition; its store is left at the last
// complete commit read.
func (s *standby) release(part int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.replicas[part]; !ok {
		return
	}
	delete(s.replicas, part)
	s.cl.RemoveConsumePartitions(map[string][]int32{s.p.cfg.Names.Changelog(): {part}})
}

// run applies what the changelog brings until ctx ends.
func (s *standby) run(ctx context.Context) {
	for {
		fs := s.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(_ string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				s.p.log.Warn("standby fetch error", "partition", part, "err", err)
			}
		})
		s.mu.Lock()
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			r := s.replicas[fp.Partition]
			if r == nil {
				return // released meanwhile
			}
			for _, rec := range fp.Records {
				if rec.Offset < r.next {
					continue // fetched before the partition was tracked again
				}
				r.next = rec.Offset + 1
				r.buf = append(r.buf, changelog.Change(rec))
				if !changelog.IsCommitEnd(rec) {
					continue
				}
				cp := projection.Checkpoint{Next: rec.Offset + 1, At: s.p.cfg.Now().UnixMilli()}
				if err := r.store.Write(r.buf, &cp, false); err != nil {
					s.p.log.Warn("standby replica stopped", "partition", fp.Partition, "err", err)
					delete(s.replicas, fp.Partition)
					s.cl.RemoveConsumePartitions(map[string][]int32{s.p.cfg.Names.Changelog(): {fp.Partition}})
					return
				}
				s.p.Stats.StandbyRecords.Add(int64(len(r.buf)))
				r.buf = r.buf[:0]
			}
		})
		s.mu.Unlock()
	}
}

func (s *standby) close() { s.cl.Close() }
