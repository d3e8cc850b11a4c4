package main

import (
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestKill9 runs the projector binary against a broker in this process, kills
// it with SIGKILL twice while events are still being produced, restarts it on
// the same data directory each time, lets the last one catch up and stop
// cleanly, and then reads its Pebble state: every run must be exactly what a
// projection that never stopped computes from the same events (what replay
// computes), with no event applied twice or lost, and the consumed offsets
// must be the ends of the partitions. The committed wakes must name every
// triggering event exactly once.
func TestKill9(t *testing.T) { brokertest.Run(t, testKill9) }

func testKill9(t *testing.T, b *brokertest.Broker) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	tmp := t.TempDir()

	// The binary, not race-built: the child is under test, not the harness.
	bin := filepath.Join(tmp, "projector")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The broker, on loopback, and canopy's topics.
	const partitions = 4
	brokers := b.Addrs
	names := topics.Names{Prefix: b.Prefix(t, "kill"), Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	if err := cluster.CreateTopics(ctx, adm, names, partitions, 1); err != nil {
		t.Fatal(err)
	}

	// The workload. Its clock starts an hour from now so that no timer of it
	// falls due on the projector's wall clock during the test: a timer that
	// fires while the partition is caught up with what has been produced so
	// far, but not with what is still to come, legitimately gives another
	// state than a replay of the whole input, and that is not what this test
	// is about.
	const runs, nodes = 20, 120
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	var events []topics.Event
	markers := map[string]string{} // marker event id -> run
	for i := 0; i < runs; i++ {
		run := fmt.Sprintf("kill-run-%02d", i)
		evs := workload.Generate(workload.Spec{RunID: run, SessionID: "kill", Nodes: nodes, Seed: uint64(1000 + i),
			Start: start.Add(time.Duration(i) * time.Millisecond), Step: 10 * time.Millisecond})
		// The run's last event, a failure of an agent of its own, wakes the
		// run: once that wake is on the wake topic, the run is caught up.
		last := evs[len(evs)-1].Time
		id := "marker-" + run
		evs = append(evs, topics.Event{ID: id, Source: "/agents/marker", Type: (&topics.Failed{}).EventType(), Time: last.Add(time.Second),
			RunID: run, AgentID: "marker", SchemaVersion: topics.CurrentSchemaVersion, SessionID: "kill",
			Data: &topics.Failed{ErrorCode: "end_of_test"}})
		markers[id] = run
		events = append(events, evs...)
	}
	// Interleave the runs by time, each keeping its own order.
	slices.SortStableFunc(events, func(a, b topics.Event) int { return cmp.Compare(a.Time.UnixMilli(), b.Time.UnixMilli()) })
	// Markers go last of all, after the last kill.
	slices.SortStableFunc(events, func(a, b topics.Event) int {
		_, am := markers[a.ID]
		_, bm := markers[b.ID]
		switch {
		case am == bm:
			return 0
		case am:
			return 1
		}
		return -1
	})
	records := make([]*kgo.Record, len(events))
	for i := range events {
		r, err := topics.EventRecord(names.AgentEvents(), &events[i], "")
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = topics.Partition(r.Key, partitions)
		records[i] = r
	}
	t.Logf("%d runs, %d events", runs, len(records))

	// The producer, in the background: it goes on producing while the
	// projector dies and restarts. It produces at full speed up to 30% of
	// the records, then slowly until the first instance has been killed, at
	// full speed again up to 60%, slowly until the second has been killed,
	// then the rest; the runs' markers only after the second kill. So each
	// kill falls while records are being produced and while the instance has
	// a backlog, and more records come after it, whatever the machine's
	// speed. The slow phases slow down further to a trickle a record at a
	// time once they are 25% in (at 55% and 85%): an instance that takes
	// long to start on a loaded machine (CI once took more than the 5 s the
	// slow phase lasted) still meets records in flight when it is killed.
	var killed [2]chan struct{}
	for i := range killed {
		killed[i] = make(chan struct{})
	}
	isClosed := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	var produced atomic.Int64
	produce := func() error {
		slow := time.NewTicker(10 * time.Millisecond) // pacing, not synchronisation
		defer slow.Stop()
		for i := 0; i < len(records); {
			n := min(200, len(records)-i)
			switch {
			case i >= len(records)-runs: // the markers
				select {
				case <-killed[1]:
				case <-ctx.Done():
					return ctx.Err()
				}
			case i >= len(records)*60/100 && !isClosed(killed[1]),
				i >= len(records)*30/100 && !isClosed(killed[0]):
				n = min(20, n)
				if i >= len(records)*85/100 || (i >= len(records)*55/100 && !isClosed(killed[0])) {
					n = 1 // the trickle: ~100 records a second
				}
				select {
				case <-slow.C:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if i < len(records)-runs { // the markers go alone
				n = min(n, len(records)-runs-i)
			}
			if err := cl.ProduceSync(ctx, records[i:i+n]...).FirstErr(); err != nil {
				return err
			}
			i += n
			produced.Store(int64(i))
		}
		return nil
	}
	var prodErr error
	prodDone := make(chan struct{}) // closed when the producer ends, with prodErr set
	go func() { defer close(prodDone); prodErr = produce() }()
	t.Cleanup(func() { cancel(); <-prodDone })

	// The wake reader: counts committed wake records and notes each run's
	// marker wake.
	var (
		mu         sync.Mutex
		wakeCount  int
		wakeNext   = map[string]map[int32]int64{} // next wake offset to read, per topic and partition
		markerSeen = map[string]bool{}
		readErr    error
	)
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	wakes, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Wakes(), names.PriorityWakes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	readCtx, stopReading := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			fs := wakes.PollFetches(readCtx)
			if readCtx.Err() != nil {
				return
			}
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				w, err := topics.DecodeWake(r.Value)
				if err != nil {
					readErr = fmt.Errorf("wake at %s/%d@%d does not decode: %w", r.Topic, r.Partition, r.Offset, err)
					return
				}
				wakeCount++
				if wakeNext[r.Topic] == nil {
					wakeNext[r.Topic] = map[int32]int64{}
				}
				wakeNext[r.Topic][r.Partition] = r.Offset + 1
				for _, tr := range w.Triggers {
					if tr.EventID != nil {
						if run, ok := markers[*tr.EventID]; ok && run == w.RunID {
							markerSeen[run] = true
						}
					}
				}
			})
			mu.Unlock()
			notify()
		}
	}()
	t.Cleanup(func() { stopReading(); <-readerDone; wakes.Close() })

	// The projector processes, one at a time.
	dataDir := filepath.Join(tmp, "data")
	group := "kill-" + names.Prefix
	procs := newChildren(t)
	startChild := func(name string) *child {
		t.Helper()
		// The same group and static instance id each time, as a restarted
		// pod would: the new process takes the dead one's place in the group
		// at once instead of after its session timeout.
		return procs.run(bin, name, "run", "-brokers", strings.Join(brokers, ","), "-topic-prefix", names.Prefix,
			"-data-dir", dataDir, "-group", group, "-instance-id", "kill-test", "-session-timeout", "6s", "-log-level", "info",
			"-http-addr", "127.0.0.1:0")
	}
	dump := procs.dump
	// waitFor waits until cond holds, failing if the deadline passes, the
	// reader fails, or the running child exits.
	waitFor := func(what string, c *child, cond func() bool) {
		t.Helper()
		prod := prodDone
		for {
			mu.Lock()
			ok, rerr, n, caught := cond(), readErr, wakeCount, len(markerSeen)
			mu.Unlock()
			if rerr != nil {
				dump()
				t.Fatal(rerr)
			}
			if ok {
				return
			}
			select {
			case <-changed:
			case <-prod:
				if prodErr != nil {
					dump()
					t.Fatalf("waiting for %s: producing: %v", what, prodErr)
				}
				prod = nil
			case <-c.exited:
				dump()
				t.Fatalf("waiting for %s: the %s instance exited: %v", what, c.name, c.err)
			case <-ctx.Done():
				dump()
				t.Fatalf("waiting for %s: %v (%d of %d events produced, %d wakes read, %d of %d runs caught up)",
					what, ctx.Err(), produced.Load(), len(records), n, caught, runs)
			}
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return wakeCount }

	// Kill the first two instances once each has published some wakes of
	// its own, while the producer is still at it.
	for i, name := range []string{"first", "second"} {
		// The ends of the wake topics before the instance starts: what
		// comes after them is its own.
		base, err := adm.ListEndOffsets(ctx, names.Wakes(), names.PriorityWakes())
		if err == nil {
			err = base.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
		c := startChild(name)
		waitFor("wakes of the "+name+" instance", c, func() bool {
			own := int64(0)
			base.Each(func(o kadm.ListedOffset) { own += max(wakeNext[o.Topic][o.Partition]-o.Offset, 0) })
			return own >= 20
		})
		at := produced.Load()
		c.kill()
		t.Logf("killed the %s instance: %d of %d events produced then, %d wakes read", name, at, len(records), count())
		if at >= int64(len(records)-runs) {
			t.Fatalf("the %s instance was killed after the producer had finished", name)
		}
		close(killed[i])
	}

	// The third catches up with everything, then stops on SIGTERM.
	last := startChild("third")
	waitFor("every run's marker wake", last, func() bool { return len(markerSeen) == runs })
	<-prodDone
	if prodErr != nil {
		t.Fatal(prodErr)
	}
	if err := last.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-last.exited:
	case <-ctx.Done():
		dump()
		t.Fatal("the last instance did not stop on SIGTERM")
	}
	if last.err != nil {
		dump()
		t.Fatalf("the last instance exited with %v, want a clean exit", last.err)
	}
	if !strings.Contains(last.out.String(), "projector stopped") {
		dump()
		t.Fatal("the last instance did not log its clean stop")
	}

	// The state in Pebble, partition by partition, against projections that
	// never stopped, fed the same records in order.
	ends, err := adm.ListEndOffsets(ctx, names.AgentEvents())
	if err != nil {
		t.Fatal(err)
	}
	ref := projectortest.NewReference(partitions)
	ref.ApplyRecords(t, records)
	db, err := pebble.Open(filepath.Join(dataDir, "pebble"), &pebble.Options{Logger: testLogger{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for part := int32(0); part < partitions; part++ {
		st := store.New(db, part)
		offs, err := st.Offsets()
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup(names.AgentEvents(), part)
		if got := offs[names.AgentEvents()]; got != end.Offset {
			t.Errorf("partition %d: next offset in Pebble %d, want the end of the partition, %d", part, got, end.Offset)
		}
		live, err := projection.Open(projection.Config{}, st)
		if err != nil {
			t.Fatal(err)
		}
		ref.ComparePartition(t, part, live)
	}

	// What was committed to Kafka: every triggering event in exactly one
	// wake, no wake twice, no dead letter.
	k := projectortest.Kafka{ClientOpts: []kgo.Opt{kgo.SeedBrokers(brokers...)}, Names: names}
	projectortest.CheckWakes(ctx, t, k, ref)
	projectortest.CheckDeadLetter(ctx, t, k)
}

// child is one projector process.
type child struct {
	name   string
	cmd    *exec.Cmd
	out    testenv.Buffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// children are a test's projector processes: killed when it ends, their
// output logged on demand.
type children struct {
	t    *testing.T
	list []*child
}

func newChildren(t *testing.T) *children {
	cs := &children{t: t}
	t.Cleanup(func() {
		for _, c := range cs.list {
			c.kill()
		}
	})
	return cs
}

// run starts bin with args as the child name, its output kept.
func (cs *children) run(bin, name string, args ...string) *child {
	cs.t.Helper()
	c := &child{name: name, exited: make(chan struct{})}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		cs.t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	cs.list = append(cs.list, c)
	return c
}

// dump logs every child's output.
func (cs *children) dump() {
	for _, c := range cs.list {
		cs.t.Logf("output of %s:\n%s", c.name, c.out.String())
	}
}

// kill sends SIGKILL, unless the process has exited, and waits for it.
func (c *child) kill() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// testLogger keeps Pebble's routine messages out of the test's output.
type testLogger struct{ t *testing.T }

func (testLogger) Infof(string, ...any)                {}
func (l testLogger) Errorf(format string, args ...any) { l.t.Errorf("pebble: "+format, args...) }
func (l testLogger) Fatalf(format string, args ...any) { l.t.Fatalf("pebble: "+format, args...) }
