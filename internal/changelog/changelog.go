// Package changelog carries a projector partition's state between instances.
//
// Every commit a projector makes is a list of key changes to its partition's
// Pebble store (internal/store; projection.Changes, the consumed offsets last). Records turns
// them into records of the compacted changelog topic, in the partition of
// the same number, key for key: compaction then keeps exactly the latest
// value of every key, which is the store. Restore brings a store up to date
// from that topic, from its own checkpoint onward when it has a trustworthy
// one, from the start otherwise.
//
// A commit's records end with the offsets key. With transactions every
// commit is atomic, so a read_committed reader never sees part of one. Without
// them an instance can die half way through producing a commit: Restore
// stops at the last offsets record and returns the keys written after it
// (the tail), and the new owner, before anything else, writes every tail key
// back to its restored value (Rollback) and closes that with an offsets
// record of its own. Whoever reads the log later replays the torn commit and
// its undoing in order, and ends in the right state.
//
// One key stands outside commits: the priority path's watermark
// (projection.WokenKey), which a partition's second producer writes in the
// transactions that publish human input's wakes, between or after the
// commits of the first. Restore applies it wherever it is, also after the
// last complete commit, and it is never part of a torn tail.
package changelog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// ErrRestore wraps every restore failure.
var ErrRestore = errors.New("changelog: restore")

// Records returns the changelog records of a commit's changes, in order: a
// deleted key is a tombstone (nil value).
func Records(topic string, partition int32, changes projection.Changes) []*kgo.Record {
	// One allocation for the commit's records, not one each: they live
	// and die together, with the commit's transaction.
	slab := make([]kgo.Record, len(changes))
	out := make([]*kgo.Record, len(changes))
	for i, c := range changes {
		r := &slab[i]
		r.Topic, r.Partition, r.Key = topic, partition, c.Key
		if !c.Delete {
			r.Value = c.Value
		}
		out[i] = r
	}
	return out
}

// Slab recycles the records of a lane's commits: Append takes them from
// room a commit before used, once Reset says that commit is done with
// them. A commit of a backlog carries thousands of changelog records, and
// making them anew for each was a sixteenth of the bytes a commit
// allocated (BenchmarkEventPath). The zero Slab is ready to use; it is not
// safe for concurrent use.
type Slab struct{ recs []kgo.Record }

// Append appends to dst the changelog records of changes, as Records
// makes them, from s's room. It never reuses a record handed out since
// the last Reset: with too little room left it takes new room, and the
// records out keep the old.
func (s *Slab) Append(dst []*kgo.Record, topic string, partition int32, changes projection.Changes) []*kgo.Record {
	if cap(s.recs)-len(s.recs) < len(changes) {
		s.recs = make([]kgo.Record, 0, max(len(changes), 2*cap(s.recs)))
	}
	start := len(s.recs)
	s.recs = s.recs[:start+len(changes)]
	for i, c := range changes {
		r := &s.recs[start+i]
		r.Topic, r.Partition, r.Key = topic, partition, c.Key
		if !c.Delete {
			r.Value = c.Value
		}
		dst = append(dst, r)
	}
	return dst
}

// Reset makes all of s's room free for the next Append: the records it
// handed out must no longer be in use (their transaction committed, the
// client done with them). Room grown past maxSlab records is let go.
func (s *Slab) Reset() {
	clear(s.recs) // the keys and values they point to
	if cap(s.recs) > maxSlab {
		s.recs = nil
		return
	}
	s.recs = s.recs[:0]
}

// maxSlab is the most records a Slab keeps room for across a Reset:
// about 2 MB, a commit of 10,000 changes.
const maxSlab = 10000

// Change is the state change a changelog record carries: Records inverted.
func Change(r *kgo.Record) projection.Change {
	return projection.Change{Key: r.Key, Value: r.Value, Delete: r.Value == nil}
}

// IsCommitEnd reports whether a changelog record closes a commit.
func IsCommitEnd(r *kgo.Record) bool { return string(r.Key) == string(projection.OffsetsKey) }

// IsWoken reports whether a changelog record is the priority path's
// watermark, which stands outside commits (see the package doc).
func IsWoken(r *kgo.Record) bool { return string(r.Key) == string(projection.WokenKey) }

// Config configures Restore.
type Config struct {
	// ClientOpts connect to the cluster (seed brokers, TLS, SASL). Required.
	ClientOpts []kgo.Opt
	// Topic is the changelog topic. Required.
	Topic string
	// Logger receives the progress lines; default discards them.
	Logger *slog.Logger
	// Progress, when set, is called after each batch written to Pebble with
	// the records restored so far and the records the restore reads at most.
	Progress func(partition int32, done, total int64)
	// BatchRecords is how many changelog records go into one Pebble batch;
	// default 20000.
	BatchRecords int
	// MaxCheckpointAge is how old a checkpoint may be and still be resumed
	// from; an older one is restored from scratch, because a tombstone the
	// store has not seen may have been compacted away since. It must be at
	// most half the changelog's delete.retention.ms: the projector reads
	// that from the topic at start and passes half of it. Default 12h,
	// half of topics.DefaultTombstoneRetention.
	MaxCheckpointAge time.Duration
	// Now is the wall clock; default time.Now.
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.BatchRecords <= 0 {
		c.BatchRecords = 20000
	}
	if c.MaxCheckpointAge <= 0 {
		c.MaxCheckpointAge = topics.DefaultTombstoneRetention / 2
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Result says what a restore did.
type Result struct {
	// From and To are the changelog offsets read, [From, To).
	From, To int64
	// Records is the count of changelog records written to the store.
	Records int64
	// Wiped is why the store was emptied before restoring, if it was.
	Wiped string
	// Tail holds the keys of a torn commit after the last complete one (see
	// the package doc); Rollback undoes them.
	Tail [][]byte
	// Elapsed is how long the restore took.
	Elapsed time.Duration
}

// Restore brings store, the state of one partition, up to the last complete
// commit in the changelog as committed now (read_committed). With
// transactions the caller must have fenced the partition's previous writer
// first, so that no transaction of it is left open. The store ends with a
// checkpoint at the end of that commit.
func Restore(ctx context.Context, cfg Config, partition int32, st *store.Store) (Result, error) {
	cfg.defaults()
	began := cfg.Now()
	res := Result{}
	fail := func(err error) (Result, error) {
		return res, fmt.Errorf("%w: %s partition %d: %w", ErrRestore, cfg.Topic, partition, err)
	}

	start, end, err := bounds(ctx, cfg, partition)
	if err != nil {
		return fail(err)
	}
	last, tail, woken, err := lastCommit(ctx, cfg, partition, start, end)
	if err != nil {
		return fail(err)
	}
	want := start // where the last complete commit ends
	if last >= 0 {
		want = last + 1
	}
	res.Tail = tail
	from, wiped, err := resumeFrom(cfg, st, start, want)
	if err != nil {
		return fail(err)
	}
	res.Wiped = wiped
	if wiped != "" {
		cfg.Logger.Warn("discarding partition state", "partition", partition, "reason", wiped)
		if err := st.Wipe(); err != nil {
			return fail(err)
		}
	}
	res.From, res.To = from, want
	total := want - from
	if total > 0 {
		cfg.Logger.Info("restoring partition from the changelog", "partition", partition, "from", from, "to", want)
	}
	if err := copyCommitted(ctx, cfg, partition, st, woken, &res); err != nil {
		return fail(err)
	}
	res.Elapsed = cfg.Now().Sub(began)
	if total > 0 {
		rate := float64(res.Records) / max(res.Elapsed.Seconds(), 1e-3)
		cfg.Logger.Info("restored partition from the changelog", "partition", partition, "records", res.Records,
			"elapsed", res.Elapsed.Round(time.Millisecond), "records_per_second", int64(rate), "tail", len(tail))
	}
	return res, nil
}

// resumeFrom returns the changelog offset from which st is restored to
// want, the end of the last complete commit: its checkpoint when st can be
// resumed, else start, the changelog's, with why st must be wiped first
// ("" when it is empty already).
func resumeFrom(cfg Config, st *store.Store, start, want int64) (from int64, wiped string, err error) {
	cp, ok, err := st.Checkpoint()
	if err != nil {
		return 0, "", err
	}
	now := cfg.Now()
	switch {
	case !ok:
		empty, err := st.Empty()
		if err != nil {
			return 0, "", err
		}
		if !empty {
			wiped = "state without a changelog checkpoint"
		}
	case cp.Next > want:
		wiped = fmt.Sprintf("state ahead of the changelog (checkpoint %d, last complete commit ends at %d)", cp.Next, want)
	case cp.Next < start:
		wiped = fmt.Sprintf("checkpoint %d is before the changelog's start %d", cp.Next, start)
	case cp.Next < want && now.Sub(time.UnixMilli(cp.At)) > cfg.MaxCheckpointAge:
		wiped = fmt.Sprintf("checkpoint written %v ago, more than %v", now.Sub(time.UnixMilli(cp.At)).Round(time.Second), cfg.MaxCheckpointAge)
	}
	if ok && wiped == "" {
		return cp.Next, "", nil
	}
	return start, wiped, nil
}

// copyCommitted writes the changelog's records [res.From, res.To) to st in
// batches of cfg.BatchRecords, each with its checkpoint, then woken (the
// priority path's watermark after the last complete commit, if any) and
// the final checkpoint, synced; it counts them in res.Records.
func copyCommitted(ctx context.Context, cfg Config, partition int32, st *store.Store, woken *kgo.Record, res *Result) error {
	total := res.To - res.From
	var batch projection.Changes
	flush := func(next int64) error {
		if err := st.Write(batch, &projection.Checkpoint{Next: next, At: cfg.Now().UnixMilli()}, false); err != nil {
			return err
		}
		res.Records += int64(len(batch))
		batch = batch[:0]
		if cfg.Progress != nil {
			cfg.Progress(partition, res.Records, total)
		}
		return nil
	}
	err := scan(ctx, cfg, partition, res.From, res.To, func(r *kgo.Record) error {
		batch = append(batch, Change(r))
		if len(batch) >= cfg.BatchRecords {
			return flush(r.Offset + 1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The priority path's watermark after the last complete commit is
	// committed state too (read_committed): applied, though the
	// checkpoint stays at the commit's end, where a later restore reads it
	// again.
	if woken != nil {
		batch = append(batch, Change(woken))
	}
	// The last write is synced and carries the final checkpoint, also when
	// nothing was read: a current store's checkpoint is thereby renewed.
	if err := st.Write(batch, &projection.Checkpoint{Next: res.To, At: cfg.Now().UnixMilli()}, true); err != nil {
		return err
	}
	res.Records += int64(len(batch))
	return nil
}

// Rollback returns the changes that undo a torn commit's tail: every tail
// key set back to its value in the (restored) store, or deleted when it has
// none, then the store's offsets, which close the undoing as a commit.
func Rollback(st *store.Store, tail [][]byte) (projection.Changes, error) {
	if len(tail) == 0 {
		return nil, nil
	}
	var out projection.Changes
	seen := make(map[string]bool, len(tail))
	for _, k := range tail {
		if seen[string(k)] || string(k) == string(projection.OffsetsKey) {
			continue
		}
		seen[string(k)] = true
		v, ok, err := st.Get(k)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, projection.Change{Key: k, Value: v})
		} else {
			out = append(out, projection.Change{Key: k, Delete: true})
		}
	}
	offs, ok, err := st.Get(projection.OffsetsKey)
	if err != nil {
		return nil, err
	}
	if !ok {
		offs = []byte("{}")
	}
	return append(out, projection.Change{Key: projection.OffsetsKey, Value: offs}), nil
}

// bounds returns the changelog partition's start offset and its last stable
// offset: the end of what is committed.
func bounds(ctx context.Context, cfg Config, partition int32) (start, end int64, err error) {
	cl, err := kgo.NewClient(cfg.ClientOpts...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("listing start offsets: %w", err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("listing committed offsets: %w", err)
	}
	s, ok := starts.Lookup(cfg.Topic, partition)
	e, ok2 := ends.Lookup(cfg.Topic, partition)
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("no partition %d", partition)
	}
	return s.Offset, e.Offset, nil
}

// lastCommit finds the offset of the last record that closes a commit before
// end (-1 if there is none), the keys written after it, and the last
// priority watermark record after it (nil if none), which is no part of the
// tail. It reads backwards in growing windows: the last commit is almost
// always near the end.
func lastCommit(ctx context.Context, cfg Config, partition int32, start, end int64) (int64, [][]byte, *kgo.Record, error) {
	for window := int64(4096); ; window *= 8 {
		lo := max(start, end-window)
		last := int64(-1)
		var tail [][]byte
		var woken *kgo.Record
		err := scan(ctx, cfg, partition, lo, end, func(r *kgo.Record) error {
			switch {
			case IsCommitEnd(r):
				last, tail, woken = r.Offset, tail[:0], nil
			case IsWoken(r):
				woken = r
			default:
				tail = append(tail, r.Key)
			}
			return nil
		})
		if err != nil {
			return 0, nil, nil, err
		}
		if last >= 0 || lo == start {
			return last, tail, woken, nil
		}
	}
}

// scan calls fn with every committed data record of [from, to), in order.
func scan(ctx context.Context, cfg Config, partition int32, from, to int64, fn func(*kgo.Record) error) error {
	if from >= to {
		return nil
	}
	opts := append(append([]kgo.Opt(nil), cfg.ClientOpts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) are kept so that every
		// offset up to the end is seen, however the log ends.
		kgo.KeepControlRecords(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("reading offsets [%d, %d): %w", from, to, ferr)
		}
		done := false
		var rerr error
		fs.EachRecord(func(r *kgo.Record) {
			if done || rerr != nil || r.Offset >= to {
				done = true
				return
			}
			if !r.Attrs.IsControl() {
				rerr = fn(r)
			}
			if r.Offset+1 >= to {
				done = true
			}
		})
		if rerr != nil {
			return rerr
		}
		if done {
			return nil
		}
	}
}
