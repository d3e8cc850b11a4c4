package projector

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestHumanPreemptsMidChunk: human input is noticed between two agent
// records, not at the end of a chunk. The worker applies its
// agent backlog in chunks of 20,000 records; a human input produced while
// it is inside the first one is applied before the worker has applied
// 20,000 agent records (it stops where it stands and commits the input).
// Looking only between chunks, it would first apply the whole chunk. Then
// the backlog drains, every record applied once.
func TestHumanPreemptsMidChunk(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) { testHumanPreempts(t, b, 1) })
}

// TestOtherPartitionsPauseForHumanInput: while one partition's human input
// is on its way to its wake, the instance's other partitions pause their
// agent backlog (the gate), and resume: both backlogs drain, every record
// applied once. The embedded broker holds the EndTxn of the human input's
// partition's priority path for a second once the input is produced, so
// that the input is on its way for that long whatever the machine's speed
// (kfake only).
func TestOtherPartitionsPauseForHumanInput(t *testing.T) {
	testHumanPreempts(t, brokertest.NewKfake(t), 2)
}

// orderHooks counts the agent records applied before the first human input.
type orderHooks struct {
	NopHooks
	humanTopic string
	mu         sync.Mutex
	agent      int64
	before     int64 // agent records applied before the human input; -1 until it is
}

func (h *orderHooks) Consumed(topic string, _ topics.EventType, outcome Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case topic == h.humanTopic && h.before < 0:
		h.before = h.agent
	case topic != h.humanTopic && outcome == OutcomeApplied:
		h.agent++
	}
}

func testHumanPreempts(t *testing.T, b *brokertest.Broker, partitions int32) {
	const chunk = 20_000
	e := newEnvOn(t, b, partitions)
	var events []topics.Event
	var target string
	backlog := make([]int, partitions)
	// Each partition's backlog outlasts the human input's way to its wake
	// (held a second with more partitions than one), so that the others
	// are still applying when it comes, however fast the machine: with two
	// chunks a partition could drain before the input was fetched, and
	// then had nothing to pause (one run in ten). The race detector's
	// tenfold slower applying leaves two chunks plenty.
	chunks := 2
	if partitions > 1 && !raceDetectorOn {
		chunks = 6
	}
	for i := 0; ; i++ {
		run := fmt.Sprintf("backlog-%d", i)
		p := topics.Partition([]byte(run), partitions)
		if backlog[p] >= chunks*chunk {
			if done := func() bool {
				for _, n := range backlog {
					if n < chunks*chunk {
						return false
					}
				}
				return true
			}(); done {
				break
			}
			continue
		}
		evs := workload.Generate(workload.Spec{RunID: run, Nodes: 500, Seed: uint64(i + 1)})
		events = append(events, evs...)
		backlog[p] += len(evs)
		if p == 0 {
			target = run
		}
	}
	start := events[0].Time.Std()
	recs := make([]*kgo.Record, 0, 10_000)
	for i := range events {
		recs = append(recs, rawRecord(t, e.names.AgentEvents(), &events[i], partitions))
		if len(recs) == cap(recs) || i == len(events)-1 {
			e.produceRecords(recs...)
			recs = recs[:0]
		}
	}
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return start }
	cfg.Chunk, cfg.MaxBatch, cfg.MaxPending = chunk, chunk, 4*chunk
	hooks := &orderHooks{humanTopic: e.names.HumanInput(), before: -1}
	cfg.Hooks = hooks
	var hold atomic.Bool
	release := make(chan struct{})
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	if partitions > 1 {
		// The target's partition is 0: its priority path's transactions
		// end with a second's delay while hold is set.
		b.Cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			b.Cluster.KeepControl()
			if hold.Load() && strings.HasSuffix(req.(*kmsg.EndTxnRequest).TransactionalID, "-0-priority") {
				b.Cluster.SleepControl(func() {
					select {
					case <-release:
					case <-time.After(time.Second):
					}
				})
			}
			return nil, nil, false
		})
	}
	p, stop := e.start(cfg)
	defer stop()

	testenv.WaitFor(t, 60*time.Second, until(p, "the projector starts on the backlog", func() bool { return p.stats.Applied.Load() > 0 }))
	input := testEvent("human-input-1", target, "human", start, &topics.Input{InputID: "in-1", InputKind: "interrupt", Text: "stop"})
	hold.Store(true)
	e.produceRecords(rawRecord(t, e.names.HumanInput(), &input, partitions))
	e.reader(e.names.PriorityWakes()).until(30*time.Second, "the priority wake", func(rec *kgo.Record) bool {
		return decodeWake(t, rec).RunID == target
	})
	hold.Store(false)
	closeRelease()
	hooks.mu.Lock()
	before := hooks.before
	hooks.mu.Unlock()
	t.Logf("human input applied after %d agent records (chunks of %d); other partitions paused %d times for %v",
		before, chunk, p.stats.GatePauses.Load(), time.Duration(p.stats.GatePausedNanos.Load()))
	if partitions == 1 && before >= chunk {
		t.Errorf("the human input was applied after %d agent records: the worker finished its chunk of %d before looking at it", before, chunk)
	}
	if partitions > 1 && p.stats.GatePauses.Load() == 0 {
		t.Errorf("no other partition paused while the human input was on its way")
	}
	total := int64(len(events)) + 1
	testenv.WaitFor(t, 150*time.Second, until(p, "the backlog drains", func() bool { return p.stats.Applied.Load() >= total }))
	stop()
	if st := &p.stats; st.Records.Load() != total || st.Applied.Load() != total || st.Duplicates.Load() != 0 || st.PriorityWakes.Load() != 1 {
		t.Fatalf("after the drain: %s; want %d records all applied once, one priority wake", statsString(st), total)
	}
}
