package projector

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/changelog"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// restoreHooks keeps the result of every restore.
type restoreHooks struct {
	NopHooks
	mu  sync.Mutex
	res []changelog.Result
}

func (h *restoreHooks) Restored(_ int32, res changelog.Result, err error) {
	if err == nil {
		h.mu.Lock()
		h.res = append(h.res, res)
		h.mu.Unlock()
	}
}

func (h *restoreHooks) first() (changelog.Result, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.res) == 0 {
		return changelog.Result{}, false
	}
	return h.res[0], true
}

// TestCheckpointTrustFollowsTheTopic: a projector trusts a Pebble
// checkpoint for half the changelog topic's delete.retention.ms as the
// broker has it, here 10 minutes (created so by CreateTopics): a store
// whose checkpoint is 4 minutes old is resumed from it, one 6 minutes old
// is wiped and restored from the changelog's start, though both are well
// within the default window (12 h).
func TestCheckpointTrustFollowsTheTopic(t *testing.T) {
	brokertest.Run(t, testCheckpointTrustFollowsTheTopic)
}

func testCheckpointTrustFollowsTheTopic(t *testing.T, b *brokertest.Broker) {
	prefix := b.Prefix(t, "trust")
	e := &env{t: t, broker: b, brokers: b.Addrs, names: topics.Names{Prefix: prefix, Version: 1}, group: "g-" + prefix}
	var err error
	if e.client, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.client.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(e.client)
	if err := cluster.CreateTopics(ctx, adm, e.names, 1, 1, topics.TombstoneRetention(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if d, err := cluster.TombstoneRetention(ctx, adm, e.names); err != nil || d != 10*time.Minute {
		t.Fatalf("TombstoneRetention = %v, %v; want 10m0s", d, err)
	}

	// The wall clock the projectors see; the events are an hour after it,
	// so no timer falls due.
	base := time.Now().UTC().Truncate(time.Millisecond)
	var clock atomic.Int64
	clock.Store(base.UnixNano())
	evs := workload.Generate(workload.Spec{RunID: "trust-1", Nodes: 20, Seed: 7, Start: base.Add(time.Hour)})
	half := len(evs) / 2

	run := func(dir string, at time.Duration, evs []topics.Event, applied int64) (*Projector, changelog.Result) {
		t.Helper()
		clock.Store(base.Add(at).UnixNano())
		hooks := &restoreHooks{}
		cfg := e.config(dir)
		cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
		cfg.Hooks = hooks
		p, stop := e.start(cfg)
		if got := p.CheckpointTrust(); got != 5*time.Minute {
			t.Errorf("CheckpointTrust = %v, want 5m0s: half the topic's delete.retention.ms", got)
		}
		e.produce(e.names.AgentEvents(), evs...)
		testenv.WaitFor(t, 60*time.Second, until(p, "the partition restored and the events applied", func() bool {
			return len(p.Owned()) == 1 && p.stats.Applied.Load() >= applied
		}))
		stop()
		res, ok := hooks.first()
		if !ok {
			t.Fatal("no restore reported")
		}
		return p, res
	}

	// The first half, committed at base; two copies of that store.
	dir := t.TempDir()
	run(dir, 0, evs[:half], int64(half))
	young, old := t.TempDir(), t.TempDir()
	copyDir(t, dir, young)
	copyDir(t, dir, old)
	// The second half, so that the copies' checkpoints are behind the
	// changelog.
	_, res := run(dir, 0, evs[half:], int64(len(evs)-half))
	if res.Wiped != "" || res.From == 0 {
		t.Fatalf("the first st, restarted at once: %+v, want it resumed", res)
	}
	from := res.From // the copies' checkpoint

	// 4 minutes later: within the window, resumed.
	_, res = run(young, 4*time.Minute, nil, 0)
	if res.Wiped != "" || res.From != from || res.To <= from {
		t.Errorf("a checkpoint 4 minutes old: %+v; want it resumed from %d", res, from)
	}
	// 6 minutes later: past the window, wiped and restored from the start.
	_, res = run(old, 6*time.Minute, nil, 0)
	if !strings.Contains(res.Wiped, "more than 5m0s") || res.From >= from || res.To <= from {
		t.Errorf("a checkpoint 6 minutes old: %+v; want it wiped (more than 5m0s) and restored from before %d", res, from)
	}
}

// TestCheckpointTrustFallback: when the changelog's config cannot be read
// (here: no such topic), a checkpoint is trusted for half the default
// tombstone retention, and the warning says why.
func TestCheckpointTrustFallback(t *testing.T) {
	b := brokertest.NewKfake(t)
	cl, err := kgo.NewClient(b.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	got := checkpointTrust(context.Background(), kadm.NewClient(cl), topics.Names{Prefix: "absent", Version: 1}, log)
	if got != 12*time.Hour {
		t.Errorf("trust %v, want 12h0m0s", got)
	}
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "absent.projector-changelog.v1") ||
		!strings.Contains(s, "max_checkpoint_age=12h0m0s") || !strings.Contains(s, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Errorf("log: %s", s)
	}
}

// TestStandbyStartsStaleReplicasOver: a standby replica whose checkpoint is
// older than the projector trusts starts from the changelog's start, with
// an empty store: read on from its checkpoint, past deletions it may never
// see, it would give the store a fresh checkpoint that a restore trusts.
// A younger one goes on from its checkpoint.
func TestStandbyStartsStaleReplicasOver(t *testing.T) {
	b := brokertest.NewKfake(t)
	db, err := pebble.Open(t.TempDir(), quietPebble())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	ages := []time.Duration{6 * time.Minute, 4 * time.Minute} // of partitions 0 and 1
	for part, age := range ages {
		err := store.New(db, int32(part)).Write(projection.Changes{{Key: []byte("x"), Value: []byte("v")}},
			&projection.Checkpoint{Next: 7, At: now.Add(-age).UnixMilli()}, true)
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Names: topics.Names{Prefix: b.Prefix(t, "standby"), Version: 1},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }}.withDefaults()
	p := &Projector{cfg: cfg, log: cfg.Logger, db: db, common: b.Opts(), partitions: int32(len(ages)), trust: 5 * time.Minute}
	s, err := newStandby(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for part, age := range ages {
		st := store.New(db, int32(part))
		cp, ok, err := st.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		empty, err := st.Empty()
		if err != nil {
			t.Fatal(err)
		}
		r := s.replicas[int32(part)]
		stale := age > p.trust
		switch {
		case r == nil:
			t.Errorf("partition %d: not tracked", part)
		case stale && (ok || !empty || r.next != 0):
			t.Errorf("partition %d, checkpoint %v old: st empty %v, checkpoint %+v (%v), next %d; want it started over",
				part, age, empty, cp, ok, r.next)
		case !stale && (!ok || cp.Next != 7 || empty || r.next != 7):
			t.Errorf("partition %d, checkpoint %v old: st empty %v, checkpoint %+v (%v), next %d; want it kept, read on from 7",
				part, age, empty, cp, ok, r.next)
		}
	}
}

// copyDir copies a closed data directory.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
