// Package projector is canopy's stream processor: a member of the projector
// consumer group that owns some partitions of the agent events topic (and the
// same partitions of the human input topic), projects every record into its
// partition's Pebble-backed projection, and publishes the wakes it raises.
//
// Goroutines, each started and waited for by Run:
//   - the group poller fetches agent events and hands each partition's
//     records to that partition's worker;
//   - the human poller fetches the human input partitions that follow the
//     group's assignment, on a client of their own so that human input is
//     never queued behind an agent backlog;
//   - one worker per owned partition owns that partition's projection: it
//     projects, publishes wakes, and commits state and offsets to Pebble.
//
// A partition's owner starts by fencing the partition's previous writer (by
// initialising the partition's transactional producer) and restoring its
// Pebble state from the changelog (internal/changelog), before it consumes a
// record. Each batch it processes is then one Kafka transaction: the wakes,
// dead letters, reroutes, the changelog records of every state change and
// the consumed offsets (the changelog's last record of the batch). Pebble is
// written after the transaction commits: it is a cache of the committed
// state, checked against the changelog whenever a partition is taken on.
// With Config.AtLeastOnce the same records are produced without a
// transaction, acknowledged before Pebble is written.
//
// A failure the projector cannot go past (a transaction that does not
// commit, a fenced producer, a storage error) stops Run with an error; a Supervisor
// starts a fresh instance, which resumes from what was committed.
package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
)

// Projector is one projector instance.
type Projector struct {
	cfg        Config
	log        *slog.Logger
	db         *pebble.DB
	group      *kgo.Client // agent events, member of the group
	human      *kgo.Client // human input, partitions follow the group's
	prod       *kgo.Client // at least once: wakes, dead letters, reroutes, changelog
	common     []kgo.Opt   // Config.Kafka.Opts(), for the clients made after New (a partition's producers, its restore)
	partitions int32
	// agentTopic, humanTopic and changelogTopic are Config.Names' topics,
	// named once: the worker compares and produces to them for every
	// record and commit, and Names builds each name anew.
	agentTopic, humanTopic, changelogTopic string
	// trust is how old a checkpoint may be and still be resumed from:
	// half the changelog's delete.retention.ms (checkpointTrust).
	trust time.Duration
	// limits are the record limits of the topics the projector writes,
	// as read at New (limits.go); not changed after.
	limits  map[string]int
	standby *standby // nil unless Config.Standby
	// gate pauses the partitions' bulk work while one of them has human
	// input on its way (gate.go).
	gate *gate

	// gov pauses the agent intake while the heap is short of memory
	// (intake.go); owning counts the workers, for each one's share of
	// Config.MaxQueuedBytes.
	gov    *governor
	owning atomic.Int64

	mu      sync.Mutex
	workers map[int32]*worker
	// closing is set, under mu, once shutdown has stopped the workers: a
	// rebalance after that must not start a worker on a closing database.
	// stopped are the partitions it stopped, in order (held).
	closing bool
	stopped []int32
	failed  chan error // a worker that cannot go on reports here
	// progress tracks the records the partitions wait on (progress.go),
	// shared with the other instances of a Supervisor.
	progress *progress
	// ready is closed once New has set every field: the group client starts
	// joining as soon as it is created, and its callbacks wait for this.
	ready chan struct{}
	// running is true while Run consumes, for Ready; joined once the group
	// first gave this instance an assignment (empty or not), for a
	// Supervisor's held.
	running, joined atomic.Bool
	// lost is set when the group client lost its session at generation
	// lostGen, until a later generation (watchGroup).
	lost    atomic.Bool
	lostGen atomic.Int64
	// alive is when watchGroup last ran (unix nanoseconds), and
	// uncertainUntil until when reads are refused after a pause of the
	// process (sessionUncertain).
	alive, uncertainUntil atomic.Int64
	// groupClosed is closed once the group client has closed, which may
	// go on in the background after Run returned (closeClients).
	groupClosed chan struct{}

	// stats count what the instance did (status.go), read through Status;
	// hooks reports to stats, then to Config.Hooks.
	stats stats
	hooks Hooks
}

// New validates cfg, opens the state, connects to Kafka and checks that the
// topics are co-partitioned. It consumes nothing until Run.
func New(ctx context.Context, cfg Config) (*Projector, error) {
	cfg, err := cfg.prepare()
	if err != nil {
		return nil, err
	}
	return newInstance(ctx, cfg)
}

// newInstance makes an instance of a prepared Config (Config.prepare), in
// steps: open the state, connect, check the topics and their limits, then
// the consumers, the group client last. A step that fails closes what the
// steps before it opened.
func newInstance(ctx context.Context, cfg Config) (*Projector, error) {
	p := &Projector{cfg: cfg, log: cfg.Logger, workers: make(map[int32]*worker), failed: make(chan error, 1),
		ready: make(chan struct{}), progress: cfg.progress, common: cfg.Kafka.Opts(),
		agentTopic: cfg.Names.AgentEvents(), humanTopic: cfg.Names.HumanInput(), changelogTopic: cfg.Names.Changelog()}
	p.gov = newGovernor(p)
	p.gate = newGate(&p.stats.GatePauses, &p.stats.GatePausedNanos)
	p.hooks = tee{&p.stats, cfg.Hooks}

	db, err := openState(cfg, cfg.Now())
	if err != nil {
		return nil, err
	}
	p.db = db
	adm, err := p.connect()
	if err == nil {
		err = p.checkTopics(ctx, adm)
	}
	if err == nil {
		err = p.startConsumers(ctx)
	}
	if err != nil {
		p.closeClients()
		db.Close()
		return nil, err
	}
	close(p.ready)
	return p, nil
}

// connect makes the instance's first client, the producer of its wakes,
// dead letters, reroutes and (at least once) changelog records, whose
// connection also carries the admin requests of New.
func (p *Projector) connect() (*kadm.Client, error) {
	var err error
	p.prod, err = kgo.NewClient(p.clientOpts("producer", kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytesFn(p.batchLimit))...)
	if err != nil {
		return nil, fmt.Errorf("projector: producer: %w", err)
	}
	return kadm.NewClient(p.prod), nil
}

// clientOpts are the options of one of the instance's clients made in New:
// the connection's, its client id and role's Kafka hooks, then its own.
func (p *Projector) clientOpts(role string, own ...kgo.Opt) []kgo.Opt {
	return p.cfg.Kafka.Opts(append([]kgo.Opt{kgo.ClientID(p.cfg.ClientID), kgo.WithHooks(p.cfg.KafkaHooks(role)...)}, own...)...)
}

// checkTopics checks what the instance cannot run without, so that it
// refuses to start rather than fail later: the topics exist and are
// co-partitioned (their partition count is the instance's), and the topics
// it writes take records as large as it writes (limits.go); and reads how
// long a checkpoint may be trusted (checkpointTrust).
func (p *Projector) checkTopics(ctx context.Context, adm *kadm.Client) error {
	var err error
	if p.partitions, err = cluster.CheckTopics(ctx, adm, p.cfg.Names); err != nil {
		return err
	}
	if err := p.checkRecordLimits(ctx, adm); err != nil {
		return err
	}
	p.trust = checkpointTrust(ctx, adm, p.cfg.Names, p.log)
	return nil
}

// startConsumers makes the consumers: the standby replicas' (with
// Config.Standby), the human input's, and the group member's last, which
// starts joining the group at once.
func (p *Projector) startConsumers(ctx context.Context) error {
	var err error
	if p.cfg.Standby {
		if p.standby, err = newStandby(p); err != nil {
			return err
		}
	}
	// The human client before the group's: the group's assignment
	// callback uses it, and may run before NewClient returns the group
	// client. Its fetches wait at most 100ms for data: partitions are added
	// one by one as their restores finish, and a partition added while a
	// fetch is out is first fetched when that fetch returns.
	if p.human, err = kgo.NewClient(p.clientOpts("human", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{}),
		kgo.FetchMaxWait(100*time.Millisecond))...); err != nil {
		return fmt.Errorf("projector: human input consumer: %w", err)
	}
	if p.group, err = kgo.NewClient(p.groupOpts(ctx)...); err != nil {
		return fmt.Errorf("projector: group consumer: %w", err)
	}
	return nil
}

// groupOpts are the group member's options: it consumes the agent events
// topic, with the group's callbacks (assigned, revoked, adjustOffsets).
func (p *Projector) groupOpts(ctx context.Context) []kgo.Opt {
	cfg := p.cfg
	opts := p.clientOpts("group",
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Names.AgentEvents()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.WithHooks(groupHook{p}),
		kgo.HeartbeatInterval(cfg.SessionTimeout/6),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A partition paused for a full queue (worker.enqueue) and resumed
		// is fetched again only once the fetch already out for the others
		// returns: with franz-go's default of 5 s, a backlog drains in bursts
		// separated by that wait whenever the other partitions have caught
		// up (BenchmarkProjector: 31k events/s at 5 s, 78k at 100 ms). New
		// data still returns at once; an idle instance asks every 100 ms.
		kgo.FetchMaxWait(100*time.Millisecond),
		// A fetch's records join the queues (Config.MaxQueuedBytes): one
		// fetch buffered, compressed, must not hold more than a share of
		// them (franz-go's default is 50 MiB).
		kgo.FetchMaxBytes(int32(min(cfg.MaxQueuedBytes/8, 50<<20))),
		kgo.FetchMaxPartitionBytes(fetchPartitionBytes(cfg.MaxQueuedBytes)),
		kgo.OnPartitionsAssigned(p.assigned),
		kgo.OnPartitionsRevoked(p.revoked),
		kgo.OnPartitionsLost(p.revoked),
		kgo.AdjustFetchOffsetsFn(p.adjustOffsets),
	)
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if cfg.GroupProtocol == GroupProtocolConsumer {
		// KIP-848: the cooperative-sticky balancer above is a sticky one,
		// which franz-go requires to speak the new protocol; against a
		// broker without it (before Kafka 4.0) the client falls back to
		// the classic protocol.
		opts = append(opts, kgo.ServerSideBalancer())
		if err := setGroupSession(ctx, p.prod, cfg.Group, cfg.SessionTimeout); err != nil {
			p.log.Warn("the group's session timeout is the broker's (group.consumer.session.timeout.ms), not -session-timeout",
				"err", err)
		}
	}
	if cfg.AdvertiseAddr != "" {
		// The member's client id carries where it answers: see
		// cluster.Assignment. (A later kgo.ClientID wins.)
		opts = append(opts, kgo.ClientID(cfg.ClientID+cluster.AdvertiseSep+cfg.AdvertiseAddr))
	}
	return opts
}

// Partitions is the partition count of the co-partitioned topics.
func (p *Projector) Partitions() int32 { return p.partitions }

// CheckpointTrust is how old a partition's Pebble checkpoint may be and
// still be resumed from (changelog.Config.MaxCheckpointAge): half the
// changelog topic's delete.retention.ms, as the broker said at New.
func (p *Projector) CheckpointTrust() time.Duration { return p.trust }

// Owned returns the partitions this instance owns now, in order: assigned
// to it by the group and restored (a partition still restoring is not
// served yet).
func (p *Projector) Owned() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int32, 0, len(p.workers))
	for part, w := range p.workers {
		select {
		case <-w.ready:
			out = append(out, part)
		default:
		}
	}
	slices.Sort(out)
	return out
}

// Run consumes until ctx is done or a worker fails, then shuts down in
// order. It returns nil after a clean shutdown.
func (p *Projector) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.running.Store(true)
	defer p.running.Store(false)
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); p.pollGroup(ctx) }()
	go func() { defer wg.Done(); p.pollHuman(ctx) }()
	go func() { defer wg.Done(); p.watchGroup(ctx) }()
	go func() { defer wg.Done(); p.gov.run(ctx) }()
	if p.standby != nil {
		wg.Add(1)
		go func() { defer wg.Done(); p.standby.run(ctx) }()
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-p.failed:
		p.log.Error("projector stopping", "err", err)
	}
	// Shutdown, in order:
	// 1. stop polling and the standby replicas (they see ctx done);
	cancel()
	wg.Wait()
	// 2. each worker finishes its batch, publishes its wakes, commits to Pebble;
	p.stopAll()
	// 3. leave the group, so the partitions move at once rather than after
	//    the session timeout, and close the other clients;
	p.closeClients()
	// 4. close the state last: nothing writes to it any more.
	if cerr := p.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("projector: closing state: %w", cerr)
	}
	return err
}

func (p *Projector) closeClients() {
	if p.standby != nil {
		p.standby.close()
	}
	if p.group != nil {
		// Closing the group client leaves the group, and waits for the
		// leave: a coordinator that never answers the member's pending
		// JoinGroup (seen with kfake after a member was fenced mid
		// rebalance) would hold the shutdown for the rebalance timeout or
		// longer. A stopping instance must not hang on the broker: past a
		// session timeout the close goes on in the background (the group
		// drops the member by its session timeout anyway).
		closed := make(chan struct{})
		p.mu.Lock()
		p.groupClosed = closed
		p.mu.Unlock()
		go func() { defer close(closed); p.group.Close() }()
		t := time.NewTimer(p.cfg.SessionTimeout + 2*time.Second)
		select {
		case <-closed:
		case <-t.C:
			p.log.Warn("leaving the consumer group is taking too long; going on without waiting", "waited", p.cfg.SessionTimeout+2*time.Second)
		}
		t.Stop()
	}
	for _, c := range []*kgo.Client{p.human, p.prod} {
		if c != nil {
			c.Close()
		}
	}
}

func (p *Projector) fail(err error) {
	select {
	case p.failed <- err:
	default:
	}
}

// pollGroup fetches agent events and hands them to their partitions' workers.
func (p *Projector) pollGroup(ctx context.Context) {
	for {
		fs := p.group.PollRecords(ctx, 10000)
		if ctx.Err() != nil {
			p.group.AllowRebalance()
			return
		}
		fs.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("fetch error", "topic", t, "partition", part, "err", err)
			}
		})
		p.dispatch(fs, false)
		p.group.AllowRebalance()
	}
}

// pollHuman fetches human input and hands it to the partitions' workers.
func (p *Projector) pollHuman(ctx context.Context) {
	for {
		fs := p.human.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		p.dispatch(fs, true)
	}
}

func (p *Projector) dispatch(fs kgo.Fetches, human bool) {
	fetched, now := time.Now(), p.cfg.Now()
	topic := 0
	if human {
		topic = 1
	}
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		p.mu.Lock()
		w := p.workers[fp.Partition]
		p.mu.Unlock()
		if w == nil {
			return // revoked meanwhile: the next owner reads them from its offsets
		}
		select {
		case <-w.ready:
			p.tookOver(w) // once per worker; adjustOffsets did for the agent lane
		default:
		}
		// Before the worker can commit them.
		p.progress.fetched(fp.Partition, topic, fp.Records[0].Offset, fp.Records[len(fp.Records)-1].Offset+1, fp.HighWatermark, now)
		if human {
			tlog(fp.Partition, "h.dispatched")
		}
		w.enqueue(batch{records: fp.Records, highWatermark: fp.HighWatermark, fetched: fetched}, human)
	})
}

// assigned starts the owner of each newly assigned partition. Each restores
// its partition in its own goroutine: partitions that stay keep flowing, and
// the group's heartbeats go on, while others are restored.
func (p *Projector) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	<-p.ready
	p.joined.Store(true)
	parts := assigned[p.cfg.Names.AgentEvents()]
	for _, part := range parts {
		if err := p.startWorker(part); err != nil {
			p.fail(err)
			return
		}
	}
	if len(parts) > 0 {
		p.hooks.Assigned(parts)
		p.log.Info("partitions assigned", "partitions", parts)
	}
}

// adjustOffsets starts each assigned agent partition where its restored state
// ends, not where the group's committed offsets are: the state and its
// offsets were committed together, in the changelog. It waits for the
// restores; ctx ends when the group begins another rebalance, and the client
// then asks again.
func (p *Projector) adjustOffsets(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	<-p.ready
	topic := p.cfg.Names.AgentEvents()
	for part := range offs[topic] {
		p.mu.Lock()
		w := p.workers[part]
		p.mu.Unlock()
		if w == nil {
			continue // revoked meanwhile, or shutting down
		}
		select {
		case <-w.ready:
		case <-w.done:
			continue // failed or stopped: the projector is going down
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.tookOver(w)
		if next, ok := w.start[topic]; ok {
			offs[topic][part] = kgo.NewOffset().At(next).WithEpoch(-1)
		} else {
			offs[topic][part] = kgo.NewOffset().AtStart()
		}
	}
	return offs, nil
}

// revoked stops the owners of revoked or lost partitions: each finishes and
// commits its batch, so the next owner starts where it ended.
func (p *Projector) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	<-p.ready
	parts := revoked[p.cfg.Names.AgentEvents()]
	if len(parts) == 0 {
		return
	}
	p.mu.Lock()
	closing := p.closing
	p.mu.Unlock()
	if !closing {
		// They leave the process; at shutdown (the group client's last
		// revocation) they stay the Supervisor's until its next instance.
		p.progress.released(parts)
	}
	for _, part := range parts {
		p.mu.Lock()
		w := p.workers[part]
		delete(p.workers, part)
		p.owning.Store(int64(len(p.workers)))
		p.mu.Unlock()
		if w != nil {
			w.stop()
		}
	}
	// After the owners stopped: their human input must not flow to a next
	// owner of the partition in this process before it has restored.
	p.human.RemoveConsumePartitions(map[string][]int32{p.cfg.Names.HumanInput(): parts})
	if p.standby != nil {
		p.standby.track(parts)
	}
	p.hooks.Revoked(parts)
	p.log.Info("partitions revoked", "partitions", parts)
}

// startWorker starts the owner of a partition, unless the projector is
// shutting down. mu is held throughout, so that shutdown waits for a start in
// progress and then stops what it started.
func (p *Projector) startWorker(part int32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return nil
	}
	if p.standby != nil {
		// The standby replica of the partition stops writing its store
		// before the owner restores it.
		p.standby.release(part)
	}
	w, err := newWorker(p, part)
	if err != nil {
		return err
	}
	p.workers[part] = w
	p.owning.Store(int64(len(p.workers)))
	go w.run()
	return nil
}
func (p *Projector) stopAll() {
	p.mu.Lock()
	p.closing = true
	p.stopped = slices.Sorted(maps.Keys(p.workers))
	ws := make([]*worker, 0, len(p.workers))
	for part, w := range p.workers {
		ws = append(ws, w)
		delete(p.workers, part)
	}
	p.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
}
