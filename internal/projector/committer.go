package projector

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/pkg/projection"
)

// A partition's commits. Each of its two lanes has a committer: the agent
// lane's carries the state changes, the consumed offsets and the normal
// wakes; the priority path's (priority.go) only human input's wakes and
// the priority watermark. A commit is prepared by the worker (publish,
// publishPriority) and carried out on a goroutine of its own while the
// worker applies on: produce everything in one transaction, end it (abort
// on any failure), then make it durable in Pebble. One commit per lane is
// in flight at a time (one transaction at a time per producer), and the
// worker reaps it (settle, settlePriority) before it prepares the next.
// This file is where a commit is begun, ended and aborted.

// commitJob is one commit: built and prepared by the worker, carried out by
// its lane's committer, and reaped by the worker, which then counts its
// wakes.
type commitJob struct {
	// out is what the commit produces: its wakes, dead letters and
	// reroutes first, then, from logAt, its changelog records, the last of
	// which closes the commit in the changelog.
	out     []*kgo.Record
	logAt   int
	changes projection.Changes
	built   []projection.Built
	// bufs are the buffers of its wakes' encodings, and mem the memory
	// its changes are encoded in, given back to the projection once the
	// commit succeeded (worker.settle).
	bufs    [][]byte
	mem     *projection.ChangeMemory
	spans   []trace.Span
	origins map[string]origin
	// records are the input records the commit carries the offsets of,
	// applied again if it fails (poison.go).
	records []applied
	// marks are the human input records a priority commit carries;
	// builtAt is when its wakes were built and waitedAt when the commit
	// before it was reaped (telemetry: PriorityStages). woken is the
	// priority path's watermark a priority commit sets.
	marks             []humanMark
	builtAt, waitedAt time.Time
	woken             int64
	// Set by the committer before done closes: the error, the commit's
	// time on the projector's clock (Config.Now), and when the produce
	// and the whole commit ended (for the priority path's stages).
	err                 error
	committedAt         time.Time
	produced, committed time.Time
	done                chan struct{}
}

// release lets go of what j produced and wrote, once its commit is done
// either way: its records (a commit's wakes, up to 24 KB each, its dead
// letters and changelog records) and its state changes (the encoding of
// every node it changed). Under a backlog the worker reaps a commit a
// whole commit cycle after it ended, and the live heap is what paces the
// collector near the memory limit, so they are garbage from here, not from
// then. What reap and reported read stays: the wakes, their spans, the
// input records for a rewind. The record slice itself is kept for the
// next commit (recycle).
func (j *commitJob) release() {
	clear(j.out)
	j.changes = nil
}

// end ends the spans of a commit's wakes.
func (j *commitJob) end() {
	for _, s := range j.spans {
		if s != nil {
			s.End()
		}
	}
}

// committer carries out one lane's commits of a partition, and keeps what
// the lane's next commit gathers meanwhile. The worker's goroutine owns
// everything but finished, which the commit's goroutine sets.
type committer struct {
	p    *Projector
	part int32
	// what names the lane in errors: "" for the agent lane.
	what string
	// prod is the lane's producer: its own transactional producer, or the
	// projector's shared one at least once (txn false).
	prod *kgo.Client
	txn  bool

	// pending are the triggers applied since the lane's last commit was
	// prepared, origins each run's earliest triggering record (for the
	// wake's lag and its trace's parent); late are triggers gathered while
	// pending's wakes are built, for the same commit (publish).
	pending, late projection.Pending
	origins       map[string]origin
	// out are the records the next commit produces besides its wakes and
	// its changelog (dead letters, reroutes), spare the slice of the last
	// one reaped, for reuse; marks time the human input the next
	// (priority) commit carries.
	out, spare []*kgo.Record
	marks      []humanMark
	// slab holds the changelog records of the lane's commits: recycle
	// frees them with the commit that carried them, once it succeeded
	// (a failed one's records may still be in the client's hands).
	slab changelog.Slab

	// inflight is the commit being carried out, if any; finished is set by
	// its goroutine once it is done, so that the worker can see it between
	// two records (preempted).
	inflight *commitJob
	finished atomic.Bool
	// pebble orders the two lanes' Pebble writes, and is held only for
	// them; priority marks the priority path's committer; unwritten,
	// shared by the partition's two committers, counts the priority
	// commits whose watermark record may be in the changelog and not yet
	// in Pebble (see newCommitters). write makes a committed job's changes
	// durable in Pebble.
	pebble    *sync.Mutex
	priority  bool
	unwritten *atomic.Int64
	write     func(j *commitJob) error
}

// newCommitters returns a partition's two committers. Their Pebble writes
// take turns (pebble), and a checkpoint never passes a watermark record
// that Pebble does not have, so that a restore from that checkpoint
// cannot miss it:
//
//   - a priority commit counts itself in unwritten before it produces, and
//     uncounts itself once its watermark is in Pebble;
//   - an agent commit writes its checkpoint only if, after its transaction
//     ended, no priority commit is counted. A priority commit counted
//     later produces after that transaction, so its records come after
//     the checkpoint's offset. While one is counted the agent commit
//     writes its state changes and leaves the checkpoint where it was: a
//     restore replays from there, a little more than it would have.
//
// A priority commit that fails stays counted until the rewind's restore
// (reopen) has read the changelog to its end. The priority commit does not
// hold the lock while it produces: it would wait, before producing a human
// input's wake, for the agent commit's Pebble write, which under a backlog
// carries thousands of records.
func newCommitters(p *Projector, part int32, agent, prio *kgo.Client, w *worker) (*committer, *committer) {
	pebble, unwritten := new(sync.Mutex), &w.unwritten
	a := &committer{p: p, part: part, prod: agent, txn: !p.cfg.AtLeastOnce, origins: make(map[string]origin), pebble: pebble, unwritten: unwritten,
		write: func(j *commitJob) error {
			if unwritten.Load() > 0 {
				return w.store.Write(j.changes, nil, false)
			}
			end := j.out[len(j.out)-1]
			return w.proj.Write(j.changes, &projection.Checkpoint{Next: end.Offset + 1, At: p.cfg.Now().UnixMilli()})
		}}
	// Not synced: the changelog has it (as the agent lane's Write).
	q := &committer{p: p, part: part, what: "priority ", prod: prio, txn: !p.cfg.AtLeastOnce, origins: make(map[string]origin),
		pebble: pebble, unwritten: unwritten, priority: true, write: func(j *commitJob) error { return w.store.Write(j.changes, nil, false) }}
	return a, q
}

// start carries j out on a goroutine of its own.
func (c *committer) start(j *commitJob) {
	c.inflight = j
	go func() {
		c.commit(j)
		c.finished.Store(true)
		close(j.done)
	}()
}

// done is closed when the commit in flight is done; nil (never ready) when
// none is.
func (c *committer) done() <-chan struct{} {
	if c.inflight == nil {
		return nil
	}
	return c.inflight.done
}

// take waits for the commit in flight and returns it, nil when none is.
func (c *committer) take() *commitJob {
	j := c.inflight
	if j == nil {
		return nil
	}
	c.inflight = nil
	<-j.done
	c.finished.Store(false)
	return j
}

// recycle keeps a reaped job's record slice (emptied when the commit
// ended: release), and the room of its changelog records, for the next
// commit: j committed, and the client is done with its records.
// While memory is not plentiful (the governor's lean) the room is let go
// instead.
func (c *committer) recycle(j *commitJob) {
	c.spare = j.out[:0]
	if c.p.gov != nil && c.p.gov.lean.Load() {
		c.slab = changelog.Slab{}
		return
	}
	c.slab.Reset()
}

// commit carries j out, on the goroutine start starts (or on the worker's,
// when nothing else runs: a restore's rollback): it produces j.out, in one
// transaction (at least once: what the commit publishes, then, once that is
// acknowledged, its changelog records, so that a failure between leaves no
// end of the commit in the changelog and the next owner publishes again),
// and then makes its changes durable in Pebble. It touches only the
// producer, which no one else uses meanwhile, the store, and the job. On
// error the projection no longer matches what Kafka has: the worker
// rewinds or stops when it reaps the job.
func (c *committer) commit(j *commitJob) {
	ctx, cancel := context.WithTimeout(context.Background(), c.p.cfg.TransactionTimeout)
	defer cancel()
	began := time.Now()
	tag := c.tag()
	tlog(c.part, tag+"commit")
	if c.priority {
		// Counted before producing: an agent commit whose produce ends
		// after this does not move its checkpoint past the watermark
		// record until Pebble has it (newCommitters).
		c.unwritten.Add(1)
		tlog(c.part, tag+"counted")
	}
	j.err = c.produce(ctx, j)
	tlog(c.part, tag+"ended")
	if j.err == nil {
		c.pebble.Lock()
		tlog(c.part, tag+"writing")
		j.err = c.write(j)
		tlog(c.part, tag+"written")
		c.pebble.Unlock()
	}
	if c.priority && j.err == nil {
		// In Pebble (a failed commit keeps its count until the rewind's
		// restore has every record of the changelog: reopen).
		c.unwritten.Add(-1)
	}
	j.release()
	j.committedAt, j.committed = c.p.cfg.Now(), time.Now()
	c.p.hooks.Committed(c.part, time.Since(began), j.err)
}

// produce produces j's records, ending the transaction they are in, and
// aborting it on any failure.
func (c *committer) produce(ctx context.Context, j *commitJob) error {
	if !c.txn {
		if j.logAt > 0 {
			if err := c.blame(c.produceSync(ctx, j.out[:j.logAt])); err != nil {
				return fmt.Errorf("producing the %scommit's wakes: %w", c.what, err)
			}
		}
		j.produced = time.Now()
		if err := c.produceSync(ctx, j.out[j.logAt:]).FirstErr(); err != nil {
			return fmt.Errorf("producing the %scommit's changelog: %w", c.what, err)
		}
		return nil
	}
	if err := c.prod.BeginTransaction(); err != nil {
		return fmt.Errorf("beginning a %stransaction: %w", c.what, err)
	}
	tlog(c.part, c.tag()+"begun")
	err := c.blame(c.produceSync(ctx, j.out))
	j.produced = time.Now()
	tlog(c.part, c.tag()+"produced")
	how := kgo.TryCommit
	if err != nil {
		how = kgo.TryAbort
	}
	if eerr := c.prod.EndTransaction(ctx, how); eerr != nil {
		if err == nil {
			return fmt.Errorf("committing the %stransaction: %w", c.what, eerr)
		}
		// Not abortable: the producer cannot go on (poison.go).
		return &fatalError{fmt.Errorf("producing: %w; aborting the %stransaction: %w", err, c.what, eerr)}
	}
	if err != nil {
		return fmt.Errorf("producing the %stransaction: %w", c.what, err)
	}
	return nil
}

// produceSync is kgo's ProduceSync keeping only the records that failed,
// in the order they failed: all the committer reads (FirstErr, blame).
// ProduceSync's result for every record, a slice the length of the
// commit, was 2% of what steady's projector allocated.
func (c *committer) produceSync(ctx context.Context, rs []*kgo.Record) kgo.ProduceResults {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed kgo.ProduceResults
	)
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			failed = append(failed, kgo.ProduceResult{Record: r, Err: err})
			mu.Unlock()
		}
		wg.Done()
	}
	wg.Add(len(rs))
	for _, r := range rs {
		c.prod.Produce(ctx, r, promise)
	}
	wg.Wait()
	return failed
}

// blame returns the first error of a produce, naming the run whose wake
// to blame when the failure is one the input may cause (poison.go): of
// the wakes that failed, the largest, since a record too large is the
// likeliest of a batch's failures to be its own. A rewind needs the run
// when no input record is there to blame (a wake of timers alone).
func (c *committer) blame(results kgo.ProduceResults) error {
	var first error
	var worst *kgo.Record
	names := c.p.cfg.Names
	for _, r := range results {
		if r.Err == nil {
			continue
		}
		if first == nil {
			first = r.Err
		}
		if t := r.Record.Topic; (t == names.Wakes() || t == names.PriorityWakes()) && (worst == nil || len(r.Record.Value) > len(worst.Value)) {
			worst = r.Record
		}
	}
	if worst != nil && poisonable(first) {
		return &poisonError{err: first, run: string(worst.Key)}
	}
	return first
}

// tag names the lane in the trace's notes (tlog): "h." for the priority
// path's commits, "a." for the agent lane's.
func (c *committer) tag() string {
	if c.priority {
		return "h."
	}
	return "a."
}
