package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
	"github.com/canopy-dev/canopy/pkg/wake"
)

// conductorUnderTest is one example conductor the shared behaviour test
// runs: how to start it, and which consumer groups it commits in.
type conductorUnderTest struct {
	name string
	// command returns the program and the arguments that run the
	// conductor on brokers, with topics of prefix, in group, printing each
	// wake's JSON on a line and taking work to handle each.
	command func(t *testing.T, root string, brokers, prefix, group string, work time.Duration) []string
	// groups are the consumer groups it commits the priority and the
	// normal lane's offsets in.
	groups func(group string) (priority, normal string)
}

// perLaneGroups: the Python and TypeScript conductors use one consumer
// (and group) per lane.
func perLaneGroups(g string) (string, string) { return g + "-priority", g }

var conductors = []conductorUnderTest{
	{name: "python", groups: perLaneGroups,
		command: func(t *testing.T, root string, brokers, prefix, group string, work time.Duration) []string {
			return []string{testenv.PythonSDK(t), filepath.Join(root, "examples/python/conductor.py"), "--brokers", brokers,
				"--prefix", prefix, "--group", group, "--print-wakes", "--work-ms", fmt.Sprint(work.Milliseconds())}
		}},
	{name: "typescript", groups: perLaneGroups,
		command: func(t *testing.T, root string, brokers, prefix, group string, work time.Duration) []string {
			ts := compileTypeScript(t)
			return []string{ts.node, filepath.Join(filepath.Dir(ts.js), "conductor.js"), "--brokers", brokers,
				"--prefix", prefix, "--group", group, "--print-wakes", "--work-ms", fmt.Sprint(work.Milliseconds())}
		}},
	{name: "go", groups: func(g string) (string, string) { return g, g },
		command: func(t *testing.T, root string, brokers, prefix, group string, work time.Duration) []string {
			bin := filepath.Join(t.TempDir(), "conductor")
			build := exec.Command(testenv.Tool(t, "go"), "build", "-o", bin, "./examples/conductor")
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build ./examples/conductor: %v\n%s", err, out)
			}
			return []string{bin, "-brokers", brokers, "-topic-prefix", prefix, "-group", group, "-print-wakes", "-work", work.String()}
		}},
}

// TestConductorBehaviour is the conductor behaviour test every example
// conductor passes: the Python and the TypeScript one (kafkajs), and the Go
// one on pkg/wake (whose own tests go further). With wakes of both lanes
// waiting in Kafka transactions, and a duplicate among them, the conductor
// is started, and two priority wakes (two partitions) are produced while it
// handles a normal one:
//   - priority first: the waiting priority wakes are taken before any
//     normal one, and the two produced during a normal wake's handling are
//     taken next, both before the next normal wake;
//   - dedupe: each wake_id is printed and acknowledged once;
//   - acknowledgement: one conductor.wake_received per wake, valid against
//     the JSON Schemas, keyed and murmur2-partitioned by run, with the
//     content type, the snapshot's root agent, the agents of its result and
//     completion triggers, and the id pkg/wake derives from the wake id
//     and source, so a repeated acknowledgement is a duplicate;
//   - commit after the acknowledgement: whenever the test looks, every
//     wake below a committed offset has its acknowledgement in Kafka; at
//     the end every wake (the duplicate too) is committed;
//   - it stops on SIGTERM with status 0.
func TestConductorBehaviour(t *testing.T) {
	for _, c := range conductors {
		t.Run(c.name, func(t *testing.T) {
			brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) { testConductorBehaviour(t, b, c) })
		})
	}
}

func testConductorBehaviour(t *testing.T, b *brokertest.Broker, c conductorUnderTest) {
	root := testenv.RepoRoot(t)
	brokers := strings.Join(b.Addrs, ",")
	names := topics.Names{Prefix: b.Prefix(t, "conductor"), Version: 1}
	group := names.Prefix + "-conductor"
	// Each wake takes this long to handle: long enough for a priority wake
	// produced meanwhile to be fetched before the next normal one.
	const work = 700 * time.Millisecond
	argv := c.command(t, root, brokers, names.Prefix, group, work)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.CreateTopics(ctx, adm, names, partitions, 1); err != nil {
		t.Fatal(err)
	}

	normal := behaviourWakes(t, root, names, topics.LaneNormal, 6)
	prio := behaviourWakes(t, root, names, topics.LanePriority, 4)
	// The backlog: six normal wakes and a duplicate of the second (same
	// run, same partition, after it), then two priority wakes (one
	// partition).
	dup := *normal[1]
	backlog := append(append(append([]*kgo.Record{}, normal...), &dup), prio[:2]...)
	produceTx(t, ctx, b.Addrs, names.Prefix+"-backlog", backlog...)
	wakeOf := map[string]*topics.Wake{}
	for _, r := range append(append([]*kgo.Record{}, normal...), prio...) {
		w, err := topics.DecodeWake(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		wakeOf[w.WakeID] = w
	}
	total := len(wakeOf)

	p := start(t, argv[0], argv[1:]...)
	stopped := false
	defer func() {
		if !stopped {
			p.stop(t)
		}
	}()

	acks := newAckReader(t, b.Addrs, names.AgentEvents())
	defer acks.cl.Close()
	prioGroup, normalGroup := c.groups(group)
	// The overtaking priority wakes: of two runs, in two partitions.
	overtake := prio[2:]
	// How many wakes were printed when the overtaking wakes' transaction
	// began, and when it had committed (they could be fetched): its own
	// time (a transactional producer's start, under a loaded machine up
	// to a second) is not the conductor's to answer for.
	overtakeAt, visibleAt := -1, -1
	deadline := time.NewTimer(90 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		printed := printedWakes(t, p)
		if overtakeAt < 0 && len(printed) >= 4 {
			overtakeAt = len(printed)
			produceTx(t, ctx, b.Addrs, names.Prefix+"-overtake", overtake...)
			visibleAt = len(printedWakes(t, p))
		}
		// Commit after acknowledgement: read the committed offsets, then
		// every acknowledgement written before, and check each committed
		// wake is acknowledged.
		committed := committedOffsets(t, ctx, adm, prioGroup, normalGroup)
		acks.catchUp(t, ctx, adm)
		for _, r := range backlog {
			checkAckedIfCommitted(t, r, committed, acks)
		}
		if overtakeAt >= 0 {
			for _, r := range overtake {
				checkAckedIfCommitted(t, r, committed, acks)
			}
		}
		if overtakeAt >= 0 && len(printed) == total && len(acks.byWake) == total &&
			allCommitted(append(append([]*kgo.Record{}, backlog...), overtake...), committed) {
			break
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("the conductor exited: %v; printed %d of %d wakes\n%s", err, len(printed), total, p.errOut.String())
		case <-deadline.C:
			t.Fatalf("printed %d of %d wakes, %d acknowledged; committed %v\n%s", len(printed), total, len(acks.byWake),
				committed, p.errOut.String())
		case <-tick.C:
		}
	}
	p.stop(t)
	stopped = true
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the conductor exited with status %d on SIGTERM, want 0\n%s", code, p.errOut.String())
	}

	printed := printedWakes(t, p)
	id := func(r *kgo.Record) string { w, _ := topics.DecodeWake(r.Value); return w.WakeID }
	if first := printed[:2]; !slices.Contains(first, id(prio[0])) || !slices.Contains(first, id(prio[1])) {
		t.Errorf("printed %v first, want the waiting priority wakes %s and %s", first, id(prio[0]), id(prio[1]))
	}
	for _, r := range overtake {
		// Printed no earlier than produced, and next after the wake under
		// way when its transaction committed, or the one after (a fetch in
		// flight): before any normal wake taken later.
		if i := slices.Index(printed, id(r)); i < overtakeAt || i > visibleAt+1 {
			t.Errorf("a priority wake produced while the conductor handled wake %d (committed during wake %d) was printed %dth, want %dth to %dth, before any normal wake: %v",
				overtakeAt, visibleAt, i+1, overtakeAt+1, visibleAt+2, printed)
		}
	}
	seen := map[string]int{}
	for _, w := range printed {
		seen[w]++
	}
	for w := range wakeOf {
		if seen[w] != 1 {
			t.Errorf("wake %s printed %d times, want once", w, seen[w])
		}
	}
	if len(printed) != total {
		t.Errorf("printed %d wakes, want %d: each once, the duplicate dropped", len(printed), total)
	}

	// The acknowledgements.
	s := newSchemas(t, root)
	if acks.n != total {
		t.Errorf("%d acknowledgements, want one per wake (%d)", acks.n, total)
	}
	for wid, r := range acks.byWake {
		w := wakeOf[wid]
		if w == nil {
			t.Errorf("acknowledgement of an unknown wake %s", wid)
			continue
		}
		checkRecord(t, r, true)
		for _, rel := range []string{"events/event.schema.json", "events/" + string(topics.TypeWakeReceived) + ".schema.json"} {
			if err := s.validate(rel, r.Value); err != nil {
				t.Errorf("the acknowledgement of %s is refused by schema/%s: %v\n%s", wid, rel, err, r.Value)
			}
		}
		ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
		if err != nil {
			t.Errorf("the acknowledgement of %s does not decode: %v", wid, err)
			continue
		}
		want := wake.AckEvent(w, "/conductors/"+group, "conductor", time.Now())
		got := ev.Data.(*topics.WakeReceived)
		if ev.ID != want.ID || ev.Source != want.Source || ev.RunID != w.RunID || ev.AgentID != want.AgentID ||
			got.SnapshotID != w.AgentTreeSnapshot.SnapshotID || !slices.Equal(got.AgentIDs, want.Data.(*topics.WakeReceived).AgentIDs) {
			t.Errorf("acknowledgement of %s:\n%s\nwant id %s, source %s, agent %s, snapshot %s, agent_ids %v (as pkg/wake)", wid, r.Value,
				want.ID, want.Source, want.AgentID, w.AgentTreeSnapshot.SnapshotID, want.Data.(*topics.WakeReceived).AgentIDs)
		}
	}
}

// behaviourWakes returns n wakes of lane as records of its topic, each a
// copy of the first wake of that lane replay computes for
// examples/small-run.jsonl (a normal one with a result trigger), with a
// wake id of its own (a ULID, as the projector's) and run run-a or run-b
// (the first two, run-a: a partition's order is known). The third normal
// one is part 2 of 3 of a split wake.
func behaviourWakes(t *testing.T, root string, names topics.Names, lane topics.Lane, n int) []*kgo.Record {
	t.Helper()
	in, err := os.ReadFile(filepath.Join(root, "examples/small-run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := replay.Run(bytes.NewReader(in), &out, io.Discard, replay.Options{}); err != nil {
		t.Fatal(err)
	}
	var tmpl []byte
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		w, err := topics.DecodeWake([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if w.Lane != lane {
			continue
		}
		hasResult := slices.ContainsFunc(w.Triggers, func(tr topics.Trigger) bool { return tr.Kind == topics.TriggerResult })
		if lane == topics.LanePriority || hasResult {
			tmpl = []byte(line)
			break
		}
	}
	if tmpl == nil {
		t.Fatalf("replay of small-run.jsonl gives no %s wake to copy", lane)
	}
	var recs []*kgo.Record
	for i := range n {
		w, _ := topics.DecodeWake(tmpl)
		w.WakeID, w.RunID = ulid.Make().String(), []string{"run-a", "run-b"}[max(0, i-1)%2]
		if lane == topics.LaneNormal && i == 2 {
			// A part of a split wake: a wake like any other to a conductor
			// (docs/CONTRACT.md "Wake size"), which must not refuse part.
			w.Part = &topics.WakePart{Number: 2, Count: 3}
		}
		v, err := topics.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: names.WakeTopic(lane), Key: []byte(w.RunID), Value: v})
	}
	return recs
}

// produceTx produces recs in one Kafka transaction, as a projector does,
// setting their offsets.
func produceTx(t *testing.T, ctx context.Context, brokers []string, txid string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(txid))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// printedWakes returns the wake ids the conductor printed so far, in order.
func printedWakes(t *testing.T, p *process) []string {
	t.Helper()
	var ids []string
	out := p.out.String()
	for line := range strings.Lines(out[:strings.LastIndexByte(out, '\n')+1]) {
		w, err := topics.DecodeWake([]byte(line))
		if err != nil {
			t.Fatalf("the conductor printed a line that is not a wake: %v\n%s", err, line)
		}
		ids = append(ids, w.WakeID)
	}
	return ids
}

// committedOffsets returns the offsets the groups committed, by topic and
// partition.
func committedOffsets(t *testing.T, ctx context.Context, adm *kadm.Client, groups ...string) map[string]map[int32]int64 {
	t.Helper()
	out := map[string]map[int32]int64{}
	for _, g := range groups {
		offs, err := adm.FetchOffsets(ctx, g)
		if errors.Is(err, kerr.GroupIDNotFound) || kerr.IsRetriable(err) {
			continue // nothing committed yet, or the coordinator is starting: the next look sees it
		}
		if err != nil {
			t.Fatalf("committed offsets of %s: %v", g, err)
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil {
				if out[o.Topic] == nil {
					out[o.Topic] = map[int32]int64{}
				}
				out[o.Topic][o.Partition] = max(out[o.Topic][o.Partition], o.At)
			}
		})
	}
	return out
}

func allCommitted(recs []*kgo.Record, committed map[string]map[int32]int64) bool {
	for _, r := range recs {
		if committed[r.Topic][r.Partition] <= r.Offset {
			return false
		}
	}
	return true
}

// checkAckedIfCommitted: a wake below its partition's committed offset is
// acknowledged (the conductor commits only after the acknowledgement).
func checkAckedIfCommitted(t *testing.T, r *kgo.Record, committed map[string]map[int32]int64, acks *ackReader) {
	t.Helper()
	if committed[r.Topic][r.Partition] <= r.Offset {
		return
	}
	w, _ := topics.DecodeWake(r.Value)
	if acks.byWake[w.WakeID] == nil {
		t.Fatalf("%s/%d@%d (wake %s) is committed but not acknowledged", r.Topic, r.Partition, r.Offset, w.WakeID)
	}
}

// ackReader reads the agent events topic: the acknowledgements, by wake id.
type ackReader struct {
	cl     *kgo.Client
	topic  string
	next   map[int32]int64
	byWake map[string]*kgo.Record
	n      int
}

func newAckReader(t *testing.T, brokers []string, topic string) *ackReader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	return &ackReader{cl: cl, topic: topic, next: map[int32]int64{}, byWake: map[string]*kgo.Record{}}
}

// catchUp reads until it has every record the topic had when it was
// called.
func (a *ackReader) catchUp(t *testing.T, ctx context.Context, adm *kadm.Client) {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, a.topic)
	if err != nil {
		t.Fatal(err)
	}
	behind := func() bool {
		b := false
		ends.Each(func(o kadm.ListedOffset) { b = b || a.next[o.Partition] < o.Offset })
		return b
	}
	for behind() {
		fs := a.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", a.topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			a.next[r.Partition] = r.Offset + 1
			ev, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
			if err != nil || ev.Type != topics.TypeWakeReceived {
				t.Fatalf("%s/%d@%d is not an acknowledgement (%v):\n%s", r.Topic, r.Partition, r.Offset, err, r.Value)
			}
			a.n++
			a.byWake[ev.Data.(*topics.WakeReceived).WakeID] = r
		})
	}
}
