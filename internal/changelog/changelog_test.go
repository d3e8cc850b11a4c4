package changelog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.M(m)) }

// The tests write commits of random key changes to a changelog partition of
// a real broker, with and without transactions, tear some, and restore them
// into Pebble stores in every state a store can be in. The expected state is
// a map kept alongside: the latest value of every key of every complete
// commit.

type cluster struct {
	t     *testing.T
	b     *brokertest.Broker
	topic string
	opts  []kgo.Opt
	adm   *kadm.Client
}

// newCluster makes a changelog topic of the test's own on b. Its segments
// roll every 100 ms, so that the commits of a test span several and
// Apache Kafka's cleaner, which never touches the active segment, has
// something to compact.
func newCluster(t *testing.T, b *brokertest.Broker) *cluster {
	t.Helper()
	opts := b.Opts()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	topic := b.Prefix(t, "changelog")
	if _, err := adm.CreateTopic(context.Background(), 2, 1, map[string]*string{"cleanup.policy": ptr("compact"), "segment.ms": ptr("100")}, topic); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, b: b, topic: topic, opts: opts, adm: adm}
}

func ptr(s string) *string { return &s }

// writer produces commits to partition 1, as a projector's worker does.
type writer struct {
	t     *testing.T
	topic string
	cl    *kgo.Client
	txn   bool
	rng   *rand.Rand
	want  map[string][]byte // the state of every complete commit
	n     int
}

func (c *cluster) writer(txn bool, seed uint64) *writer {
	opts := append(slices.Clip(c.opts), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if txn {
		opts = append(opts, kgo.TransactionalID(fmt.Sprintf("%s-%d", c.topic, seed)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return &writer{t: c.t, topic: c.topic, cl: cl, txn: txn, rng: rand.New(rand.NewPCG(seed, 1)), want: map[string][]byte{}}
}

// changes returns a random commit over a small key space, so that keys are
// overwritten and deleted often, closed by the offsets key.
func (w *writer) changes() projection.Changes {
	var out projection.Changes
	for range 1 + w.rng.IntN(30) {
		k := []byte(fmt.Sprintf("r%03d", w.rng.IntN(200)))
		if w.rng.IntN(5) == 0 {
			out = append(out, projection.Change{Key: k, Delete: true})
		} else {
			out = append(out, projection.Change{Key: k, Value: []byte(fmt.Sprintf("v%d", w.rng.Int()))})
		}
	}
	w.n++
	offs, _ := json.Marshal(map[string]int64{"in": int64(w.n)})
	return append(out, projection.Change{Key: projection.OffsetsKey, Value: offs})
}

// commit produces a complete commit and records its effect.
func (w *writer) commit() {
	w.t.Helper()
	ch := w.changes()
	w.produce(Records(w.topic, 1, ch), true)
	for _, c := range ch {
		if c.Delete {
			delete(w.want, string(c.Key))
		} else {
			w.want[string(c.Key)] = c.Value
		}
	}
}

// tear produces the first part of a commit only, as an instance dying half
// way through does (without transactions), or aborts it (with).
func (w *writer) tear() {
	w.t.Helper()
	rs := Records(w.topic, 1, w.changes())
	w.n-- // the commit did not happen
	w.produce(rs[:len(rs)-1-w.rng.IntN(len(rs)-1)], false)
}

func (w *writer) produce(rs []*kgo.Record, commit bool) {
	w.t.Helper()
	ctx := context.Background()
	if w.txn {
		if err := w.cl.BeginTransaction(); err != nil {
			w.t.Fatal(err)
		}
	}
	if err := w.cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
	if w.txn {
		if err := w.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			w.t.Fatal(err)
		}
		if commit && len(rs) > 0 {
			w.visible(rs[len(rs)-1])
		}
	}
}

// visible waits until a read_committed reader sees r: Apache Kafka writes a
// transaction's commit markers after EndTransaction returns, so the last
// stable offset moves a moment later (kfake moves it at once). A restore
// started before would not see the commit yet.
func (w *writer) visible(r *kgo.Record) {
	w.t.Helper()
	adm := kadm.NewClient(w.cl)
	testenv.WaitFor(w.t, 10*time.Second, func() error {
		offs, err := adm.ListCommittedOffsets(context.Background(), r.Topic)
		if err == nil {
			if o, ok := offs.Lookup(r.Topic, r.Partition); ok && o.Err == nil && o.Offset > r.Offset {
				return nil
			}
		}
		return fmt.Errorf("the committed transaction ending at offset %d of %s/%d is not visible to read_committed readers (%v)",
			r.Offset, r.Topic, r.Partition, err)
	})
}

func openStore(t *testing.T) (*pebble.DB, *store.Store) {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, store.New(db, 1)
}

func (c *cluster) restore(st *store.Store, mut ...func(*Config)) Result {
	c.t.Helper()
	cfg := Config{ClientOpts: c.opts, Topic: c.topic, BatchRecords: 50}
	for _, m := range mut {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Restore(ctx, cfg, 1, st)
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

// dump is every key of partition 1 in db but the checkpoint.
func dump(t *testing.T, db *pebble.DB) map[string][]byte {
	t.Helper()
	prefix := []byte{'p', 0, 0, 0, 1}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: []byte{'p', 0, 0, 0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string][]byte{}
	for it.First(); it.Valid(); it.Next() {
		k := string(it.Key()[len(prefix):])
		if k != "k" {
			out[k] = slices.Clone(it.Value())
		}
	}
	return out
}

func same(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, v) {
			diffs = append(diffs, fmt.Sprintf("%q: got %q (present %v), want %q", k, g, ok, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q: got %q, want it absent", k, v))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("%s: %d keys differ, e.g.\n%s", what, len(diffs), diffs[:min(len(diffs), 10)])
	}
}

// TestRestore restores complete commits into an empty store, then more
// commits on top of its checkpoint, with and without transactions, with
// aborted (transactional) commits between them, before and after the broker
// compacted the log.
func TestRestore(t *testing.T) { brokertest.Run(t, testRestore) }

func testRestore(t *testing.T, b *brokertest.Broker) {
	for _, txn := range []bool{true, false} {
		t.Run(fmt.Sprintf("transactions=%v", txn), func(t *testing.T) {
			c := newCluster(t, b)
			w := c.writer(txn, 1)
			for i := range 100 {
				w.commit()
				if txn && i%10 == 0 {
					w.tear() // an aborted transaction: never visible
				}
			}
			db, st := openStore(t)
			res := c.restore(st)
			same(t, "first restore", dump(t, db), w.want)
			if res.Wiped != "" || len(res.Tail) != 0 || res.Records == 0 {
				t.Fatalf("first restore: %+v", res)
			}
			first := res.To

			for range 50 {
				w.commit()
			}
			c.b.Compact(t, c.topic, 30*time.Second)
			res = c.restore(st)
			same(t, "restore from the checkpoint", dump(t, db), w.want)
			if res.From != first || res.Wiped != "" {
				t.Fatalf("second restore read from %d (wiped: %q), want from the checkpoint %d", res.From, res.Wiped, first)
			}

			// A current store reads nothing.
			res = c.restore(st)
			if res.Records != 0 || res.From != res.To {
				t.Fatalf("restoring a current st: %+v", res)
			}

			// An empty store restores the compacted log to the same state.
			db2, store2 := openStore(t)
			c.restore(store2)
			same(t, "restore of the compacted log", dump(t, db2), w.want)
		})
	}
}

// TestTornCommit: without transactions a writer can die half way through a
// commit. The restore stops at the last complete commit and reports the torn
// keys; the rollback written by the next owner makes the log read right
// again for everyone, also for a reader that starts from scratch later.
func TestTornCommit(t *testing.T) { brokertest.Run(t, testTornCommit) }

func testTornCommit(t *testing.T, b *brokertest.Broker) {
	c := newCluster(t, b)
	w := c.writer(false, 2)
	for range 40 {
		w.commit()
	}
	w.tear()
	db, st := openStore(t)
	res := c.restore(st)
	same(t, "restore before a torn commit's tail", dump(t, db), w.want)
	if len(res.Tail) == 0 {
		t.Fatal("the torn commit's keys were not reported")
	}
	undo, err := Rollback(st, res.Tail)
	if err != nil {
		t.Fatal(err)
	}
	if !IsCommitEnd(Records(c.topic, 1, undo)[len(undo)-1]) {
		t.Fatal("the rollback does not end with the offsets key")
	}
	w.produce(Records(c.topic, 1, undo), true) // what the new owner does first
	for range 10 {
		w.commit()
	}
	freshDB, fresh := openStore(t)
	res = c.restore(fresh)
	if len(res.Tail) != 0 {
		t.Fatalf("tail after the rollback: %d keys", len(res.Tail))
	}
	same(t, "restore through a torn commit and its rollback", dump(t, freshDB), w.want)
	res = c.restore(st)
	same(t, "the first st, restored on", dump(t, db), w.want)
}

// TestUntrustedStores: a store ahead of the changelog (its commit never made
// it into Kafka), one without a checkpoint, and one whose checkpoint is too
// old are wiped and restored from scratch.
func TestUntrustedStores(t *testing.T) { brokertest.Run(t, testUntrustedStores) }

func testUntrustedStores(t *testing.T, b *brokertest.Broker) {
	c := newCluster(t, b)
	w := c.writer(true, 3)
	for range 30 {
		w.commit()
	}
	t.Run("ahead", func(t *testing.T) {
		db, st := openStore(t)
		c.restore(st)
		junk := projection.Changes{{Key: []byte("r999"), Value: []byte("never committed")}}
		if err := st.Write(junk, &projection.Checkpoint{Next: 1 << 40, At: time.Now().UnixMilli()}, true); err != nil {
			t.Fatal(err)
		}
		if res := c.restore(st); res.Wiped == "" {
			t.Fatal("a st ahead of the changelog was not wiped")
		}
		same(t, "after wiping", dump(t, db), w.want)
	})
	t.Run("no checkpoint", func(t *testing.T) {
		db, st := openStore(t)
		if err := st.Write(projection.Changes{{Key: []byte("r999"), Value: []byte("x")}}, nil, true); err != nil {
			t.Fatal(err)
		}
		if res := c.restore(st); res.Wiped == "" {
			t.Fatal("a st without a checkpoint was not wiped")
		}
		same(t, "after wiping", dump(t, db), w.want)
	})
	t.Run("old checkpoint", func(t *testing.T) {
		db, st := openStore(t)
		c.restore(st)
		w.commit()
		if err := st.Write(projection.Changes{{Key: []byte("r999"), Value: []byte("deleted long ago")}}, nil, true); err != nil {
			t.Fatal(err)
		}
		// Past the default window, half of a day's tombstones.
		later := func(cfg *Config) { cfg.Now = func() time.Time { return time.Now().Add(13 * time.Hour) } }
		if res := c.restore(st, later); res.Wiped == "" {
			t.Fatal("a st with a checkpoint older than MaxCheckpointAge was not wiped")
		}
		same(t, "after wiping", dump(t, db), w.want)
	})
	t.Run("young checkpoint", func(t *testing.T) {
		db, st := openStore(t)
		c.restore(st)
		w.commit()
		// A key the changelog does not have stays: the store is resumed,
		// not read again.
		if err := st.Write(projection.Changes{{Key: []byte("r999"), Value: []byte("kept")}}, nil, true); err != nil {
			t.Fatal(err)
		}
		later := func(cfg *Config) { cfg.Now = func() time.Time { return time.Now().Add(11 * time.Hour) } }
		if res := c.restore(st, later); res.Wiped != "" || res.From == 0 || res.Records == 0 {
			t.Fatalf("a st with a checkpoint younger than MaxCheckpointAge: %+v, want it resumed", res)
		}
		want := maps.Clone(w.want)
		want["r999"] = []byte("kept")
		same(t, "after resuming", dump(t, db), want)
	})
}

// TestRestoreAfterLostUnsyncedWrites: a projector writes each commit to
// Pebble without syncing it once the changelog has it
// (projection.Finish). A machine crash then loses the store's latest
// writes, never some without the others: the store comes back at an earlier
// checkpoint, and the restore every owner runs first replays the rest.
func TestRestoreAfterLostUnsyncedWrites(t *testing.T) {
	for _, unsynced := range []int{0, 50} {
		t.Run(fmt.Sprintf("unsynced-data-kept=%d%%", unsynced), func(t *testing.T) {
			c := newCluster(t, brokertest.NewKfake(t))
			w := c.writer(false, 3)
			for range 30 {
				w.commit()
			}
			fs := vfs.NewCrashableMem()
			db, err := pebble.Open("/store", &pebble.Options{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			st := store.New(db, 1)
			c.restore(st) // ends with a synced write
			synced := maps.Clone(w.want)

			// Commits as a worker makes them: the changelog first, then
			// the store, unsynced.
			for range 30 {
				ch := w.changes()
				res := w.cl.ProduceSync(context.Background(), Records(c.topic, 1, ch)...)
				if err := res.FirstErr(); err != nil {
					t.Fatal(err)
				}
				for _, x := range ch {
					if x.Delete {
						delete(w.want, string(x.Key))
					} else {
						w.want[string(x.Key)] = x.Value
					}
				}
				next := res[len(res)-1].Record.Offset + 1
				if err := st.Write(ch, &projection.Checkpoint{Next: next, At: time.Now().UnixMilli()}, false); err != nil {
					t.Fatal(err)
				}
			}
			same(t, "before the crash", dump(t, db), w.want)

			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(uint64(unsynced), 7))})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = pebble.Open("/store", &pebble.Options{FS: crashed})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if unsynced == 0 {
				same(t, "after the crash, before the restore", dump(t, db), synced)
			}
			res := c.restore(store.New(db, 1))
			if res.Wiped != "" {
				t.Fatalf("the crashed st was wiped (%s): it should be behind, not untrusted", res.Wiped)
			}
			same(t, "after the crash and the restore", dump(t, db), w.want)
		})
	}
}

// TestTornCommitOfSplitJournal: a commit whose journal entries of one run
// take several chunks (long ids, many events: projection.MaxRecordBytes)
// and which tears after some of them is rolled back key by key: the run
// read back from the restored store is the one of the last complete
// commit (its journal consecutive up to its seq, its ids duplicates, the
// torn ones new), and the events applied again by the next owner restore
// whole, also from scratch through the torn commit and its rollback.
func TestTornCommitOfSplitJournal(t *testing.T) { brokertest.Run(t, testTornCommitOfSplitJournal) }

func testTornCommitOfSplitJournal(t *testing.T, b *brokertest.Broker) {
	c := newCluster(t, b)
	w := c.writer(false, 3)
	const run = "run-split"
	cfg := projection.Config{DedupeWindow: 1000}
	long := func(tag string, i int) string { return strings.Repeat("𝔸", 240) + fmt.Sprintf("%s%06d", tag, i) }
	var evs []topics.Event
	for i := range 1600 {
		evs = append(evs, topics.Event{ID: long("ev-", i), Source: "/t", Type: topics.TypeHeartbeat, Time: topics.NewTime(time.UnixMilli(int64(1000 * (i + 1)))),
			RunID: run, AgentID: long("agent-", i%20), CorrelationID: long("corr-", i), SchemaVersion: 1, Data: &topics.Heartbeat{}})
	}
	apply := func(p *projection.Projection, evs []topics.Event) {
		t.Helper()
		for i := range evs {
			if _, dup, err := p.ApplyEvent(&evs[i]); dup || err != nil {
				t.Fatalf("event %d: dup %v, %v", i, dup, err)
			}
		}
	}
	chunk := []byte("r" + run + "\x00j")
	commit := func(p *projection.Projection, next int64) {
		t.Helper()
		ch, err := p.Prepare(map[string]int64{"in": next})
		if err != nil {
			t.Fatal(err)
		}
		w.produce(Records(c.topic, 1, ch), true)
		if err := p.Finish(ch, nil); err != nil {
			t.Fatal(err)
		}
	}
	journal := func(st *store.Store, seq int64) {
		t.Helper()
		spans, _, err := projection.Journal(st, run)
		if err != nil || len(spans) == 0 || spans[len(spans)-1].Last != seq {
			t.Fatalf("journal chunks %v, %v; want them to end at seq %d", spans, err, seq)
		}
		for i := 1; i < len(spans); i++ {
			if spans[i].First != spans[i-1].Last+1 {
				t.Fatalf("journal chunks %v are not consecutive", spans)
			}
		}
	}

	// The first owner commits 800 events, then dies producing the commit
	// of the next 800 after its second journal chunk.
	_, st1 := openStore(t)
	p, err := projection.Open(cfg, st1)
	if err != nil {
		t.Fatal(err)
	}
	apply(p, evs[:800])
	commit(p, 800)
	apply(p, evs[800:])
	ch, err := p.Prepare(map[string]int64{"in": 1600})
	if err != nil {
		t.Fatal(err)
	}
	var chunks []int
	for i, x := range ch {
		if bytes.HasPrefix(x.Key, chunk) && !x.Delete {
			chunks = append(chunks, i)
		}
	}
	if len(chunks) < 3 {
		t.Fatalf("the commit of 800 events with long ids wrote %d journal chunks, want several", len(chunks))
	}
	w.produce(Records(c.topic, 1, ch[:chunks[1]+1]), false)

	// The next owner restores, rolls the torn tail back, and reads the run
	// of the last complete commit.
	db2, st2 := openStore(t)
	res := c.restore(st2)
	if len(res.Tail) == 0 {
		t.Fatal("the torn commit's keys were not reported")
	}
	undo, err := Rollback(st2, res.Tail)
	if err != nil {
		t.Fatal(err)
	}
	w.produce(Records(c.topic, 1, undo), true)
	p2, err := projection.Open(cfg, st2)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := p2.Run(run); !ok || r.Seq() != 800 {
		t.Fatalf("the restored run: %v (%v); want it at seq 800", r, p2.Err())
	}
	journal(st2, 800)
	if _, dup, err := p2.ApplyEvent(&evs[799]); !dup || err != nil {
		t.Fatalf("the last committed event sent again: dup %v, %v; want a duplicate", dup, err)
	}
	apply(p2, evs[800:])
	commit(p2, 1600)
	journal(st2, 1600)

	// From scratch, through the torn commit and its rollback: the same.
	db3, st3 := openStore(t)
	if res := c.restore(st3); len(res.Tail) != 0 {
		t.Fatalf("tail after the rollback: %d keys", len(res.Tail))
	}
	same(t, "restore through a torn split commit and its rollback", dump(t, db3), dump(t, db2))
	journal(st3, 1600)
}

// TestSlab: a Slab's records are Records', it never reuses a record handed
// out before Reset (the client may still hold it), and after Reset the
// next commit's records take the same room.
func TestSlab(t *testing.T) {
	changes := func(tag string, n int) projection.Changes {
		c := make(projection.Changes, n)
		for i := range c {
			c[i] = projection.Change{Key: []byte(fmt.Sprintf("%s-%d", tag, i)), Value: []byte(tag), Delete: i%3 == 2}
		}
		return c
	}
	var s Slab
	first := s.Append(nil, "cl", 3, changes("a", 5))
	want := Records("cl", 3, changes("a", 5))
	for i := range want {
		if !reflect.DeepEqual(first[i], want[i]) {
			t.Fatalf("record %d: %+v, Records made %+v", i, first[i], want[i])
		}
	}
	// More without a Reset: the first records stay as they were, though
	// the room runs out.
	second := s.Append(nil, "cl", 3, changes("b", 50))
	for i := range want {
		if !reflect.DeepEqual(first[i], want[i]) {
			t.Fatalf("record %d changed by a later Append before Reset: %+v", i, first[i])
		}
	}
	if len(second) != 50 || string(second[49].Key) != "b-49" {
		t.Fatalf("second append: %d records, last %q", len(second), second[len(second)-1].Key)
	}
	s.Reset()
	third := s.Append(nil, "cl", 3, changes("c", 10))
	if third[0] != second[0] && third[0] != first[0] {
		t.Errorf("after Reset the next records took new room, not the slab's")
	}
	if string(third[0].Key) != "c-0" || third[2].Value != nil {
		t.Errorf("reused room: %+v, %+v", third[0], third[2])
	}
	// Room grown past maxSlab is let go at Reset.
	s.Append(nil, "cl", 3, changes("d", maxSlab+1))
	s.Reset()
	if cap(s.recs) != 0 {
		t.Errorf("%d records of room kept, more than %d", cap(s.recs), maxSlab)
	}
}
