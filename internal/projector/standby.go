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
//
// Only the goroutine in run tells the client which partitions to fetch,
// between two polls. track and release change the replicas at once and
// leave the client's side to run: so no poll's records can reach a replica
// tracked after the poll began. (When track and release called the client
// themselves, records of a poll that returned just before a release could be
// applied to the replica a track made after it, starting at its checkpoint:
// records from the middle of a commit, with its first part missing, and the
// checkpoint then moved past them.)
type standby struct {
	p  *Projector
	cl *kgo.Client

	// mu is held while a poll's records are written, and by release and
	// track: once release returns, nothing more is written to the
	// partition's store until it is tracked again.
	mu       sync.Mutex
	replicas map[int32]*replica
	// pending are the partitions whose fetching run must restart (at
	// their replica's next offset) or stop (no replica) before its next
	// poll; interrupt ends the poll in progress, so that it does soon.
	pending   map[int32]bool
	interrupt context.CancelFunc
	// polled, set by tests only, is called after each poll returns,
	// before its records are applied.
	polled func(kgo.Fetches)
}

// replica is the standby state of one partition.
type replica struct {
	store *store.Store
	next  int64              // next changelog offset expected
	buf   projection.Changes // the commit being read, written when it ends
	// fetching is set by run once the client fetches the partition from
	// next: records of a poll that began before are not the replica's.
	fetching bool
}

func newStandby(p *Projector) (*standby, error) {
	cl, err := kgo.NewClient(append(p.common[:len(p.common):len(p.common)], kgo.WithHooks(p.cfg.KafkaHooks("standby")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, fmt.Errorf("projector: standby consumer: %w", err)
	}
	s := &standby{p: p, cl: cl, replicas: make(map[int32]*replica), pending: make(map[int32]bool)}
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
		if ok {
			r.next = cp.Next
		}
		s.replicas[part] = r
		s.pending[part] = true
	}
	s.wake()
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
	s.pending[part] = true
	s.wake()
}

// wake ends the poll in progress, if any, so that run applies what is
// pending. mu is held.
func (s *standby) wake() {
	if s.interrupt != nil {
		s.interrupt()
	}
}

// refetch makes the client fetch what the replicas want: every pending
// partition stops being fetched (dropping what the client has buffered of
// it) and, if it has a replica, is fetched again from the replica's next
// offset. mu is held, and no poll is in progress.
func (s *standby) refetch() {
	if len(s.pending) == 0 {
		return
	}
	topic := s.p.cfg.Names.Changelog()
	removes := make([]int32, 0, len(s.pending))
	adds := make(map[int32]kgo.Offset)
	for part := range s.pending {
		removes = append(removes, part)
		if r := s.replicas[part]; r != nil {
			off := kgo.NewOffset().AtStart()
			if r.next > 0 {
				off = kgo.NewOffset().At(r.next)
			}
			adds[part] = off
			r.fetching = true
		}
	}
	clear(s.pending)
	s.cl.RemoveConsumePartitions(map[string][]int32{topic: removes})
	if len(adds) > 0 {
		s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: adds})
	}
}

// run applies what the changelog brings until ctx ends.
func (s *standby) run(ctx context.Context) {
	for {
		s.mu.Lock()
		s.refetch()
		pollCtx, interrupt := context.WithCancel(ctx)
		s.interrupt = interrupt
		s.mu.Unlock()
		fs := s.cl.PollFetches(pollCtx)
		interrupt()
		if ctx.Err() != nil {
			return
		}
		if s.polled != nil {
			s.polled(fs)
		}
		fs.EachError(func(_ string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				s.p.log.Warn("standby fetch error", "partition", part, "err", err)
			}
		})
		s.mu.Lock()
		s.interrupt = nil
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			r := s.replicas[fp.Partition]
			if r == nil || !r.fetching {
				return // released, or tracked again, meanwhile: not its records
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
					s.pending[fp.Partition] = true
					return
				}
				s.p.stats.StandbyRecords.Add(int64(len(r.buf)))
				r.buf = r.buf[:0]
			}
		})
		s.mu.Unlock()
	}
}

func (s *standby) close() { s.cl.Close() }
