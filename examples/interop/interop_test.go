// Package interop proves that canopy needs none of its Go code on either
// side: clients of other languages (kcat, on librdkafka; kafkajs from
// TypeScript; canopy's Python package, sdk/python, on confluent-kafka)
// produce events to a real broker (kfake over TCP on loopback, and Apache
// Kafka 4.x: the broker matrix of internal/brokertest), a real projector
// projects them, and the example Python conductor (on the Python package)
// reads the wakes with read_committed and acknowledges them.
package interop

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(brokertest.M(m)) }

const partitions = 4

// TestForeignClients: kcat, the Python, the Go and the TypeScript producer each produce a run; kcat
// produces a third with librdkafka's default (CRC32) partitioner, into the
// wrong partition on purpose; later kcat types a human input. The Python
// conductor receives every wake, the priority one included, and acknowledges
// each. Then
//   - every record the clients wrote has the run id as its key and the
//     CloudEvents content type, and sits in the partition murmur2 gives its
//     key (but the misplaced run's, which sit where CRC32 put them);
//   - every acknowledgement of the Python conductor is valid against the
//     JSON Schemas in schema/;
//   - the projector rerouted every record of the misplaced run, and nothing
//     was dead-lettered (the Python acknowledgements are valid events);
//   - each run's wakes, as the conductor printed them, are exactly the wakes
//     replay computes from the run's events as committed, in the order the
//     projector applied them (but for generated_at, snapshot_age_ms, stale);
//   - the watchdog counts each run's finished worker forwarded.
func TestForeignClients(t *testing.T) { brokertest.Run(t, testForeignClients) }

func testForeignClients(t *testing.T, b *brokertest.Broker) {
	kcat := testenv.Tool(t, "kcat")
	python := testenv.PythonSDK(t)
	root := testenv.RepoRoot(t)
	tsProducer := compileTypeScript(t)
	schemas := newSchemas(t, root)

	brokers := b.Addrs
	names := topics.Names{Prefix: b.Prefix(t, "interop"), Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}

	// One record per processing batch and per commit, so that each wake is
	// one event's, as replay's default (records that arrive while a commit
	// is out would otherwise share the next one); no timer falls due during
	// the test (deadlines, leases and the forward grace are an hour away).
	pcfg := projection.Config{ForwardGrace: time.Hour}
	p, err := projector.New(ctx, projector.Config{Kafka: kafkaconn.Conn{Brokers: brokers}, Names: names, DataDir: t.TempDir(), Group: names.Prefix + "-projector",
		Chunk: 1, MaxBatch: 1, Projection: pcfg, SessionTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, stopProjector := context.WithCancel(ctx)
	projected := make(chan error, 1)
	go func() { projected <- p.Run(pctx) }()
	defer func() {
		stopProjector()
		if err := <-projected; err != nil {
			t.Errorf("projector: %v", err)
		}
	}()

	conductor := start(t, python, filepath.Join(root, "examples/python/conductor.py"), "--brokers", strings.Join(brokers, ","),
		"--prefix", names.Prefix, "--group", names.Prefix+"-conductor", "--print-wakes")
	defer conductor.stop(t)

	base := time.Now().UTC().Truncate(time.Second)
	misplaced := misplacedRun(t)
	kcatEnv := func(run, partitioner string) []string {
		return append(os.Environ(), "BROKERS="+strings.Join(brokers, ","), "TOPIC="+names.AgentEvents(), "RUN="+run,
			"BASE_TIME="+base.Format("2006-01-02T15:04:05"), "PARTITIONER="+partitioner, "PATH="+filepath.Dir(kcat)+":"+os.Getenv("PATH"))
	}
	produce := filepath.Join(root, "examples/kcat/produce.sh")
	runCmd(t, kcatEnv("run-kcat", "murmur2_random"), produce)
	runCmd(t, kcatEnv(misplaced, "consistent_random"), produce)
	runCmd(t, nil, python, filepath.Join(root, "examples/python/producer.py"), "--brokers", strings.Join(brokers, ","),
		"--topic", names.AgentEvents(), "--run", "run-python", "--base-time", base.Format(time.RFC3339))
	goRun := exec.Command(testenv.Tool(t, "go"), "run", "./examples/producer-go", "-brokers", strings.Join(brokers, ","),
		"-topic", names.AgentEvents(), "-run", "run-go", "-base-time", base.Format(time.RFC3339))
	goRun.Dir = root
	if out, err := goRun.CombinedOutput(); err != nil {
		t.Fatalf("go run ./examples/producer-go: %v\n%s", err, out)
	}
	tsRun := exec.Command(tsProducer.node, tsProducer.js, "--brokers", strings.Join(brokers, ","),
		"--topic", names.AgentEvents(), "--run", "run-ts", "--base-time", base.Format(time.RFC3339))
	if out, err := tsRun.CombinedOutput(); err != nil {
		t.Fatalf("node examples/typescript/producer.js: %v\n%s", err, out)
	}

	// 10 + 10 + 12 + 12 + 12 events raise 4 + 4 + 5 + 5 + 5 wakes, each acknowledged.
	const events, wakes = 56, 23
	testenv.WaitFor(t, time.Until(deadline), progress(t, p, conductor, "every wake acknowledged and projected", func() bool {
		return p.Status().Counts.Applied == events+wakes && conductor.wakes() == wakes
	}))
	// Human input last, so the order in which its run's events were
	// applied is known: everything committed so far, then it, then its
	// wake's acknowledgement.
	adm := kadm.NewClient(cl)
	before, err := adm.ListEndOffsets(ctx, names.AgentEvents())
	if err != nil {
		t.Fatal(err)
	}
	human := fmt.Sprintf("run-python\t"+`{"specversion":"1.0","id":"human-1","source":"/humans/alice","type":"signal.input","time":"%s","runid":"run-python","agentid":"human:alice","schemaversion":1,"data":{"input_kind":"steer","text":"focus on the blocked writer"}}`,
		base.Add(2*time.Second).Format(topics.TimeLayout))
	kcatIn(t, human+"\n", kcat, "-P", "-b", strings.Join(brokers, ","), "-t", names.HumanInput(), "-K", "\t",
		"-H", "content-type=application/cloudevents+json", "-X", "topic.partitioner=murmur2_random")
	testenv.WaitFor(t, time.Until(deadline), progress(t, p, conductor, "the human input's priority wake acknowledged", func() bool {
		return p.Status().Counts.Applied == events+wakes+2 && conductor.wakes() == wakes+1
	}))

	if got := p.Status().Counts.Rerouted; got != 10 {
		t.Errorf("rerouted %d records, want the 10 of %s", got, misplaced)
	}
	if got := p.Status().Counts.DeadLettered; got != 0 {
		t.Errorf("%d records dead-lettered, want none", got)
	}

	// Each run's events in the order the projector applied them: the
	// records in the run's own partition (the misplaced run's rerouted
	// copies, not the originals), the human input after what was committed
	// before it was sent.
	recs, err := projectortest.ReadCommitted(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, names.AgentEvents())
	if err != nil {
		t.Fatal(err)
	}
	perRun := map[string][][]byte{}
	humanAt := map[string]int{}
	for _, r := range recs {
		run := string(r.Key)
		if r.Partition != topics.Partition(r.Key, partitions) {
			continue // misplaced: the projector rerouted it
		}
		if o, _ := before.Lookup(r.Topic, r.Partition); r.Offset >= o.Offset && run == "run-python" {
			if _, ok := humanAt[run]; !ok {
				humanAt[run] = len(perRun[run])
				perRun[run] = append(perRun[run], []byte(strings.SplitN(human, "\t", 2)[1]))
			}
		}
		perRun[run] = append(perRun[run], r.Value)
	}
	if _, ok := humanAt["run-python"]; !ok {
		t.Fatal("the human input's acknowledgement is not in run-python's partition")
	}
	checkRecords(t, recs, misplaced, schemas, wakes+1)
	humanRecs, err := projectortest.ReadCommitted(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, names.HumanInput())
	if err != nil {
		t.Fatal(err)
	}
	if len(humanRecs) != 1 {
		t.Fatalf("%d records on %s, want kcat's one human input", len(humanRecs), names.HumanInput())
	}
	checkRecord(t, humanRecs[0], true)

	got := conductor.wakesByRun(t)
	for _, run := range []string{"run-kcat", misplaced, "run-python", "run-go", "run-ts"} {
		var in bytes.Buffer
		for _, v := range perRun[run] {
			in.Write(v)
			in.WriteByte('\n')
		}
		var out, errs bytes.Buffer
		if _, err := replay.Run(&in, &out, &errs, replay.Options{Projection: pcfg}); err != nil || errs.Len() > 0 {
			t.Fatalf("replay of %s: %v %s", run, err, errs.String())
		}
		want := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(want) != len(got[run]) {
			t.Errorf("run %s: the conductor received %d wakes, replay gives %d", run, len(got[run]), len(want))
			continue
		}
		for i := range want {
			if a, b := contentOf(t, got[run][i]), contentOf(t, []byte(want[i])); a != b {
				t.Errorf("run %s, wake %d:\nreceived %s\nreplay   %s", run, i+1, a, b)
			}
		}
		m, err := p.ReadModel(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if w := m.Watchdog; w.Dispatched != 2 || w.Completed != 1 || w.DoneButNotForwarded != 0 {
			t.Errorf("run %s: watchdog %+v, want 2 dispatched, worker-1 completed and forwarded", run, w)
		}
	}
}

// checkRecords checks the records on the agent events topic: each a
// CloudEvent whose key is its run id, with the CloudEvents content type;
// each in the partition murmur2 gives its key, except the misplaced run's
// originals, which kcat put where CRC32 does (the projector's rerouted
// copies are in the right one); and the Python conductor's wantAcks
// acknowledgements valid against the JSON Schemas.
func checkRecords(t *testing.T, recs []*kgo.Record, misplaced string, s *schemas, wantAcks int) {
	t.Helper()
	var acks, originals, copies int
	for _, r := range recs {
		ev, err := topics.DecodeEvent(r.Value)
		if err != nil {
			t.Errorf("%s/%d@%d does not decode: %v\n%s", r.Topic, r.Partition, r.Offset, err, r.Value)
			continue
		}
		crc := int32(crc32.ChecksumIEEE(r.Key) % partitions)
		switch {
		case ev.Type == topics.TypeWakeReceived:
			acks++
			checkRecord(t, r, true)
			for _, rel := range []string{"events/event.schema.json", "events/" + string(topics.TypeWakeReceived) + ".schema.json"} {
				if err := s.validate(rel, r.Value); err != nil {
					t.Errorf("the Python conductor's acknowledgement is refused by schema/%s: %v\n%s", rel, err, r.Value)
				}
			}
		case ev.RunID != misplaced:
			checkRecord(t, r, true)
		case r.Partition == crc && crc != topics.Partition(r.Key, partitions):
			originals++
			checkRecord(t, r, false)
		default:
			copies++
			checkRecord(t, r, true)
		}
	}
	if acks != wantAcks {
		t.Errorf("%d acknowledgements, want %d", acks, wantAcks)
	}
	if originals != 10 || copies != 10 {
		t.Errorf("run %s: %d records where CRC32 put them and %d rerouted copies, want 10 and 10", misplaced, originals, copies)
	}
}

// checkRecord checks a record's key (its event's run id), its content-type
// header, and, when murmur2 is true, that it is in the partition murmur2 of
// its key gives (Kafka's and canopy's placement).
func checkRecord(t *testing.T, r *kgo.Record, murmur2 bool) {
	t.Helper()
	where := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
	ev, err := topics.DecodeEvent(r.Value)
	if err != nil {
		t.Errorf("%s does not decode: %v", where, err)
		return
	}
	if string(r.Key) != ev.RunID {
		t.Errorf("%s: key %q, want the run id %q", where, r.Key, ev.RunID)
	}
	var ct []string
	for _, h := range r.Headers {
		if h.Key == topics.HeaderContentType {
			ct = append(ct, string(h.Value))
		}
	}
	if len(ct) != 1 || ct[0] != topics.ContentTypeCloudEvents {
		t.Errorf("%s (%s of %s): content-type headers %q, want one %q", where, ev.Type, ev.Source, ct, topics.ContentTypeCloudEvents)
	}
	if want := topics.Partition(r.Key, partitions); murmur2 && r.Partition != want {
		t.Errorf("%s (%s of %s): in partition %d, murmur2 of its key gives %d", where, ev.Type, ev.Source, r.Partition, want)
	}
}

// tsProducer is the TypeScript producer example compiled to JavaScript.
type tsProducer struct{ node, js string }

// compileTypeScript compiles examples/typescript against the @canopy/agents
// package built from sdk/typescript now (testenv.TypeScriptExamples), as
// schema/clients_test.go does; without node or node_modules the test fails
// under CI=true (testenv) and skips otherwise.
func compileTypeScript(t *testing.T) tsProducer {
	t.Helper()
	node, dir := testenv.TypeScriptExamples(t)
	return tsProducer{node: node, js: filepath.Join(dir, "producer.js")}
}

// misplacedRun returns a run id that librdkafka's default partitioner
// (CRC32 of the key) puts in another partition than murmur2 does.
func misplacedRun(t *testing.T) string {
	for i := 1; ; i++ {
		run := fmt.Sprintf("run-crc32-%d", i)
		if int32(crc32.ChecksumIEEE([]byte(run))%partitions) != topics.Partition([]byte(run), partitions) {
			return run
		}
	}
}

// contentOf is a wake's JSON without the wall-clock fields, which are all
// that may differ between the live projector and replay.
func contentOf(t *testing.T, b []byte) string {
	t.Helper()
	w, err := topics.DecodeWake(b)
	if err != nil {
		t.Fatalf("wake does not decode: %v\n%s", err, b)
	}
	s := &w.AgentTreeSnapshot
	s.GeneratedAt, s.SnapshotAgeMs, s.Stale = topics.Time{}, 0, false
	out, err := topics.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// process is a started command whose output is collected.
type process struct {
	cmd         *exec.Cmd
	out, errOut testenv.Buffer
	done        chan error
}

func start(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p
}

// stop sends SIGTERM and waits for the process, killing it after 20s.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not stop on SIGTERM within 20s:\n%s", p.cmd.Path, p.errOut.String())
	}
}

func (p *process) wakes() int { return strings.Count(p.out.String(), "\n") }

// wakesByRun returns the wakes the conductor printed, by run, in the order
// it received them.
func (p *process) wakesByRun(t *testing.T) map[string][][]byte {
	out := map[string][][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
		w, err := topics.DecodeWake([]byte(line))
		if err != nil {
			t.Fatalf("the conductor printed a line that is not a wake: %v\n%s", err, line)
		}
		out[w.RunID] = append(out[w.RunID], []byte(line))
	}
	return out
}

// progress is a check for testenv.WaitFor that holds once cond does; until
// then its error is what, with the projector's counters and the wakes the
// conductor printed. The conductor exiting ends the test at once.
func progress(t *testing.T, p *projector.Projector, c *process, what string, cond func() bool) func() error {
	return func() error {
		select {
		case err := <-c.done:
			t.Fatalf("%s: the conductor exited: %v\n%s", what, err, c.errOut.String())
		default:
		}
		if cond() {
			return nil
		}
		return fmt.Errorf("%s; applied %d, rerouted %d, dead-lettered %d, wakes %d; conductor printed %d wakes:\n%s",
			what, p.Status().Counts.Applied, p.Status().Counts.Rerouted, p.Status().Counts.DeadLettered, p.Status().Counts.Wakes,
			c.wakes(), c.errOut.String())
	}
}

// runCmd runs a command to completion, failing the test with its output if
// it fails. env nil means the test's environment.
func runCmd(t *testing.T, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func kcatIn(t *testing.T, in, kcat string, args ...string) {
	t.Helper()
	cmd := exec.Command(kcat, args...)
	cmd.Stdin = strings.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestPythonConductorPriorityFirst: with wakes of both lanes waiting, and a
// duplicate among them, the Python conductor prints the priority wake
// first and every wake once.
func TestPythonConductorPriorityFirst(t *testing.T) {
	brokertest.Run(t, testPythonConductorPriorityFirst)
}

func testPythonConductorPriorityFirst(t *testing.T, b *brokertest.Broker) {
	python := testenv.PythonSDK(t)
	root := testenv.RepoRoot(t)
	brokers := b.Addrs
	names := topics.Names{Prefix: b.Prefix(t, "pyfirst"), Version: 1}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, partitions, 1); err != nil {
		t.Fatal(err)
	}
	in, err := os.ReadFile(filepath.Join(root, "examples/small-run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := replay.Run(bytes.NewReader(in), &out, io.Discard, replay.Options{}); err != nil {
		t.Fatal(err)
	}
	var normal, prio []*kgo.Record
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		w, err := topics.DecodeWake([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: names.WakeTopic(w.Lane), Key: []byte(w.RunID), Value: []byte(line)}
		if w.Lane == topics.LanePriority {
			prio = append(prio, r)
		} else {
			normal = append(normal, r)
		}
	}
	if len(prio) != 1 || len(normal) < 3 {
		t.Fatalf("small-run.jsonl gives %d priority and %d normal wakes, want 1 and at least 3", len(prio), len(normal))
	}
	// One run, one partition: the duplicate is read before the wakes after it.
	dup := *normal[0]
	send := append(append([]*kgo.Record{normal[0], &dup}, normal[1:]...), prio...)
	if err := cl.ProduceSync(ctx, send...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := start(t, python, filepath.Join(root, "examples/python/conductor.py"), "--brokers", strings.Join(brokers, ","),
		"--prefix", names.Prefix, "--group", names.Prefix, "--print-wakes")
	defer c.stop(t)
	want := len(normal) + len(prio)
	for c.wakes() < want {
		select {
		case err := <-c.done:
			t.Fatalf("the conductor exited: %v\n%s", err, c.errOut.String())
		case <-ctx.Done():
			t.Fatalf("printed %d of %d wakes:\n%s", c.wakes(), want, c.errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Every wake printed was acknowledged before the next was read.
	acks, err := projectortest.ReadCommitted(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, names.AgentEvents())
	for err == nil && len(acks) < want && ctx.Err() == nil {
		acks, err = projectortest.ReadCommitted(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, names.AgentEvents())
	}
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	if lines[0] != string(prio[0].Value) {
		t.Errorf("first wake printed is not the priority one:\n%s", lines[0])
	}
	if len(lines) != want || len(acks) != want {
		t.Errorf("printed %d wakes and acknowledged %d, want %d each (the duplicate dropped)", len(lines), len(acks), want)
	}
	for _, r := range acks {
		if _, err := topics.DecodeRecord(r.Key, r.Value, r.Headers); err != nil {
			t.Errorf("an acknowledgement does not decode: %v\n%s", err, r.Value)
		}
	}
}
