package projector

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/projectortest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Poison records (poison.go): a record whose processing fails the same way
// every time is dead-lettered with its reason after Config.PoisonAttempts
// failures alone, and everything else of its partition is projected and
// wakes exactly once, as if the record had never been produced.

// poisonRuns are three runs: the poisoned one and a control run in
// partition 0 of 2, another control run in partition 1.
func poisonRuns(t *testing.T) (poisoned, sameCtl, otherCtl string) {
	t.Helper()
	var same, other []string
	for i := 0; len(same) < 2 || len(other) < 1; i++ {
		run := fmt.Sprintf("run-%d", i)
		if topics.Partition([]byte(run), 2) == 0 {
			same = append(same, run)
		} else {
			other = append(other, run)
		}
	}
	return same[0], same[1], other[0]
}

// poisonEvents are a run's tree and a result that wakes its conductor.
func poisonEvents(run string, t0 time.Time, from int) []topics.Event {
	at := func(i int) time.Time { return t0.Add(time.Duration(from+i) * time.Millisecond) }
	id := func(what string) string { return fmt.Sprintf("%s-%s-%d", run, what, from) }
	return []topics.Event{
		testEvent(id("root"), run, "conductor", at(0), &topics.NodeCreated{Role: topics.RoleConductor}),
		testEvent(id("worker"), run, "worker", at(1), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}),
		testEvent(id("result"), run, "worker", at(2), topics.NewResult(topics.TypeResult, topics.Result{ResultKind: "json"})),
	}
}

// poisonID is the id of the poison record of testPoisonRecord.
const poisonID = "ev-poison"

// TestPoisonRecordRefused: a partition with a record whose wake the broker
// refuses every time (a wake topic's limit lowered after the projector
// started) among good ones dead-letters it after three failures alone and
// projects the rest exactly once, on both brokers. The other ways a record
// can fail every time, bugs it brings out, are injected in
// poison_faults_test.go (built with the faults tag, as make test does).
func TestPoisonRecordRefused(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		testPoisonRecord(t, b, "broker-refuses", "MESSAGE_TOO_LARGE")
	})
}

// testPoisonRecord runs a partition with the poison record among good
// ones: kind broker-refuses makes the broker refuse its wake; any other
// kind expects the test to have injected its failure. The dead letter's
// reason must say says.
func testPoisonRecord(t *testing.T, b *brokertest.Broker, kind, says string) {
	e := newEnvOn(t, b, 2)
	poisoned, sameCtl, otherCtl := poisonRuns(t)
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	poison := testEvent(poisonID, poisoned, "worker", t0.Add(time.Second), &topics.Failed{ErrorCode: "tool_error"})
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return t0 } // no timer falls due
	p, stop := e.start(cfg)
	ref := projectortest.NewReference(2)
	send := func(evs ...topics.Event) {
		t.Helper()
		for i := range evs {
			if evs[i].ID != poisonID {
				ref.Apply(t, &evs[i])
			}
		}
		e.produce(e.names.AgentEvents(), evs...)
	}

	var before []topics.Event
	if kind == "broker-refuses" {
		// The poisoned run is wide, with long ids: its wake's snapshot is
		// about 20 KB, the others' under 2 KB. Once its tree is in, the
		// wake topic takes records of 12,000 bytes at most (an operator
		// lowered it after the projector started): the failure's wake is
		// refused every time, and nothing else.
		before = append(before, poisonEvents(poisoned, t0, 0)[:2]...)
		for i := range 40 {
			before = append(before, testEvent(fmt.Sprintf("ev-wide-%d", i), poisoned, noisyID(fmt.Sprint(poisoned, i)),
				t0.Add(time.Duration(10+i)*time.Millisecond), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
		}
		before = append(before, poisonEvents(poisoned, t0, 0)[2]) // its result wakes
		send(before...)
		setWakeLimit(t, e, compressedWake(t, e, poisoned)*3/4)
	} else {
		before = poisonEvents(poisoned, t0, 0)
	}
	// In one produce, so that the poison is in the middle of a commit.
	batch := append(before[:len(before):len(before)], poisonEvents(sameCtl, t0, 0)...)
	if kind == "broker-refuses" {
		batch = poisonEvents(sameCtl, t0, 0)
	}
	batch = append(batch, poison)
	batch = append(batch, poisonEvents(otherCtl, t0, 0)...)
	batch = append(batch, poisonEvents(sameCtl, t0, 100)...)
	send(batch...)

	// The poison is dead-lettered, with the failure and how often.
	var dead *kgo.Record
	e.reader(e.names.DeadLetter()).until(60*time.Second, "the poison record dead-lettered", func(r *kgo.Record) bool {
		dead = r
		return true
	})
	reason, _ := topics.Header(dead.Headers, topics.HeaderDeadLetterReason)
	want := fmt.Sprintf("%s: failed %d times alone: ", DeadLetterPoison, DefaultPoisonAttempts)
	if !strings.HasPrefix(reason, want) {
		t.Errorf("dead letter's reason %q does not start %q", reason, want)
	}
	if !strings.Contains(reason, says) {
		t.Errorf("dead letter's reason %q does not say %q", reason, says)
	}
	if ev, err := topics.DecodeRecord(dead.Key, dead.Value, nil); err != nil || ev.ID != poisonID {
		t.Errorf("dead letter is not the poison record: %v %v", ev, err)
	}

	if kind == "broker-refuses" {
		setWakeLimit(t, e, 1<<20)
	}
	// The partition goes on: the poisoned run's later events too.
	after := []topics.Event{
		testEvent("ev-p-after", poisoned, "worker", t0.Add(2*time.Second), topics.NewResult(topics.TypeResult, topics.Result{ResultKind: "json"})),
		testEvent("ev-c-after", sameCtl, "worker", t0.Add(2*time.Second), &topics.Failed{ErrorCode: "late"}),
	}
	send(after...)
	total := int64(len(batch) - 1 + len(after))
	if kind == "broker-refuses" {
		total += int64(len(before))
	}
	testenv.WaitFor(t, 60*time.Second, until(p, "every other record applied", func() bool {
		return p.stats.Applied.Load() >= total && p.stats.Poison.Load() == 1
	}))
	if n := p.stats.Rewinds.Load(); n < DefaultPoisonAttempts {
		t.Errorf("%d rewinds, want at least %d (one per failure alone)", n, DefaultPoisonAttempts)
	}
	stop()

	k := e.checkCommitted(ref, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dls, err := projectortest.ReadCommitted(ctx, k.ClientOpts, e.names.DeadLetter())
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 {
		t.Errorf("%d dead letters, want the poison record's alone", len(dls))
	}
}

// compressedWake reads the first wake of run and returns its size as the
// broker checks it: compressed as the projector's producer compresses
// (franz-go's default, snappy).
func compressedWake(t *testing.T, e *env, run string) int {
	t.Helper()
	var size int
	e.reader(e.names.Wakes()).until(30*time.Second, "a wake of "+run, func(r *kgo.Record) bool {
		if string(r.Key) != run {
			return false
		}
		size = len(s2.EncodeSnappy(nil, r.Value))
		return true
	})
	return size
}

// noisyID is a long agent id that compresses badly, as wakes are
// compressed on their way to the broker, which checks its limit on the
// compressed batch.
func noisyID(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	sum2 := sha256.Sum256(sum[:])
	return "worker-" + base64.RawURLEncoding.EncodeToString(append(sum[:], sum2[:]...))
}

// setWakeLimit sets both wake topics' max.message.bytes.
func setWakeLimit(t *testing.T, e *env, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := strconv.Itoa(n)
	res, err := kadm.NewClient(e.client).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}},
		e.names.Wakes(), e.names.PriorityWakes())
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = fmt.Errorf("%s: %w %s", r.Name, r.Err, r.ErrMessage)
			}
		}
	}
	if err != nil {
		t.Fatalf("setting the wake topics' max.message.bytes: %v", err)
	}
	// Apache Kafka applies a config change a moment after it answers.
	testenv.WaitFor(t, 10*time.Second, func() error {
		limits, err := kadm.NewClient(e.client).DescribeTopicConfigs(ctx, e.names.Wakes())
		if err != nil {
			return err
		}
		for _, rc := range limits {
			for _, c := range rc.Configs {
				if c.Key == "max.message.bytes" && c.Value != nil && *c.Value == v {
					return nil
				}
			}
		}
		return fmt.Errorf("max.message.bytes not yet %s", v)
	})
}

// TestPoisonTimerWake: a run whose wake raised by timers alone fails every
// time (the broker refuses it: a wake topic's limit lowered after the
// projector started) gets its triggers dead-lettered in place of the wake,
// after three failures; the partition's other wakes go out, and so do the
// run's own once the topic takes them again.
func TestPoisonTimerWake(t *testing.T) {
	brokertest.Run(t, testPoisonTimerWake)
}

func testPoisonTimerWake(t *testing.T, b *brokertest.Broker) {
	e := newEnvOn(t, b, 1)
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixMilli())
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return time.UnixMilli(now.Load()) }
	const run, other = "run-timers", "run-other"
	p, stop := e.start(cfg)
	defer stop()
	// The timers' run is wide, with long ids: its wakes are some 20 KB,
	// the other run's under 2 KB.
	evs := poisonEvents(run, t0, 0)[:2]
	for i := range 40 {
		evs = append(evs, testEvent(fmt.Sprintf("ev-wide-%d", i), run, noisyID(fmt.Sprint(run, i)),
			t0.Add(time.Duration(10+i)*time.Millisecond), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
	}
	evs = append(evs, poisonEvents(run, t0, 0)[2],
		testEvent("ev-lease", run, "worker", t0.Add(time.Second), topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: "pool-1", ExpiresAt: topics.NewTime(t0.Add(time.Minute))})))
	evs = append(evs, poisonEvents(other, t0, 0)...)
	e.produce(e.names.AgentEvents(), evs...)
	setWakeLimit(t, e, compressedWake(t, e, run)*3/4)

	// The lease falls due on the projector's clock; an event of the other
	// run wakes the worker to see it.
	now.Store(t0.Add(2 * time.Minute).UnixMilli())
	e.produce(e.names.AgentEvents(), testEvent("ev-poke", other, "worker", t0.Add(2*time.Minute), &topics.Heartbeat{}))
	var dead *kgo.Record
	e.reader(e.names.DeadLetter()).until(60*time.Second, "the timer wake's triggers dead-lettered", func(r *kgo.Record) bool {
		dead = r
		return true
	})
	reason, _ := topics.Header(dead.Headers, topics.HeaderDeadLetterReason)
	if !strings.HasPrefix(reason, DeadLetterPoisonWake+": ") || !strings.Contains(reason, "MESSAGE_TOO_LARGE") || string(dead.Key) != run {
		t.Errorf("dead letter %q keyed %q, want the %s of run %s", reason, dead.Key, DeadLetterPoisonWake, run)
	}
	if !bytes.Contains(dead.Value, []byte(`"lease_expired"`)) {
		t.Errorf("dead letter's value %s does not hold the lease_expired trigger", dead.Value)
	}

	// The partition goes on: the other run wakes; and so does the run
	// itself once its wakes fit the topic again.
	e.produce(e.names.AgentEvents(), testEvent("ev-other", other, "worker", t0.Add(3*time.Minute), &topics.Failed{ErrorCode: "x"}))
	e.wakes().until(30*time.Second, func(w *topics.Wake) bool {
		return slices.ContainsFunc(w.Triggers, func(tr topics.Trigger) bool { return tr.EventID != nil && *tr.EventID == "ev-other" })
	})
	setWakeLimit(t, e, 1<<20)
	e.produce(e.names.AgentEvents(), testEvent("ev-later", run, "worker", t0.Add(3*time.Minute), &topics.Failed{ErrorCode: "x"}))
	e.wakes().until(30*time.Second, func(w *topics.Wake) bool {
		return w.RunID == run && slices.ContainsFunc(w.Triggers, func(tr topics.Trigger) bool { return tr.EventID != nil && *tr.EventID == "ev-later" })
	})
	if got := p.stats.Poison.Load(); got != 0 {
		t.Errorf("%d records counted as poison: a timer wake has no record", got)
	}
}

// TestRewindWithoutPoison: a commit that fails only because of what it
// holds together (its wakes fill a batch larger than the topic takes, each
// fitting alone) costs a rewind and no dead letter: the records are
// committed in smaller groups, every trigger in exactly one wake.
func TestRewindWithoutPoison(t *testing.T) {
	e := newEnv(t, 1)
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return t0 }
	p, stop := e.start(cfg)
	ref := projectortest.NewReference(1)
	var evs []topics.Event
	for r := range 6 {
		run := fmt.Sprintf("run-%d", r)
		evs = append(evs, poisonEvents(run, t0, 0)...)
		for i := range 12 {
			evs = append(evs, testEvent(fmt.Sprintf("%s-n%d", run, i), run, noisyID(fmt.Sprint(run, i)),
				t0.Add(time.Duration(10+i)*time.Millisecond), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
		}
	}
	for i := range evs {
		ref.Apply(t, &evs[i])
	}
	e.produce(e.names.AgentEvents(), evs...)
	testenv.WaitFor(t, 30*time.Second, until(p, "the trees applied", func() bool { return p.stats.Applied.Load() >= int64(len(evs)) }))
	// Two wakes fit the topic's limit, six do not.
	setWakeLimit(t, e, compressedWake(t, e, "run-0")*5/2)
	var results []topics.Event
	for r := range 6 {
		results = append(results, testEvent(fmt.Sprintf("ev-result-%d", r), fmt.Sprintf("run-%d", r), "worker", t0.Add(time.Second),
			topics.NewResult(topics.TypeResult, topics.Result{ResultKind: "json"})))
	}
	for i := range results {
		ref.Apply(t, &results[i])
	}
	e.produce(e.names.AgentEvents(), results...)
	testenv.WaitFor(t, 60*time.Second, until(p, "every result's wake", func() bool { return p.stats.Wakes.Load() >= 2*int64(len(results)) }))
	if p.stats.Rewinds.Load() == 0 {
		t.Errorf("no rewind: the six wakes fit one batch, and the test proves nothing")
	}
	stop()
	e.checkCommitted(ref, true)
}

// TestCommittedRecordsRecycled: the records slice of a commit that
// succeeded serves the next commit's, emptied and holding no record; one
// grown past maxSpareApplied by an outsized commit is let go.
func TestCommittedRecordsRecycled(t *testing.T) {
	ps := newPoisonState()
	rec := &kgo.Record{Topic: "agent-events", Offset: 7}
	records := make([]applied, 0, 16)
	records = append(records, appliedOf(rec, false, true, true), appliedOf(rec, true, true, false))
	ps.recycle(records)
	if len(ps.spare) != 0 || cap(ps.spare) != 16 || &ps.spare[:1][0] != &records[0] {
		t.Fatalf("spare: len %d cap %d, want records' memory, emptied", len(ps.spare), cap(ps.spare))
	}
	for i, a := range records {
		if a != (applied{}) {
			t.Errorf("record %d still held after recycling: %+v", i, a)
		}
	}
	ps.recycle(make([]applied, 3, maxSpareApplied+1))
	if cap(ps.spare) != 16 {
		t.Errorf("an outsized slice was kept (cap %d)", cap(ps.spare))
	}
}
