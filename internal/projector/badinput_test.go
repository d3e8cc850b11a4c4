package projector

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/store"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestBadInputIsDeadLetteredAndNothingElseStalls: records that cannot be
// projected, interleaved with good ones in one partition, go to the
// dead-letter topic with why and whence in their headers; an event of a type
// from a newer producer is counted and skipped; every good event around and
// after them is applied and wakes its run (the design card, "Events in").
func TestBadInputIsDeadLetteredAndNothingElseStalls(t *testing.T) {
	brokertest.Run(t, testBadInputIsDeadLetteredAndNothingElseStalls)
}

func testBadInputIsDeadLetteredAndNothingElseStalls(t *testing.T, b *brokertest.Broker) {
	const partitions = 3
	e := newEnvOn(t, b, partitions)
	const run = "run-bad-input"
	part := topics.Partition([]byte(run), partitions)
	topic := e.names.AgentEvents()
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

	good := []topics.Event{
		testEvent("ev-0", run, "conductor", at(0), &topics.NodeCreated{Role: topics.RoleConductor}),
		testEvent("ev-1", run, "agent-1", at(1), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}),
		testEvent("ev-2", run, "agent-1", at(2), &topics.Request{RequestID: "req-1", RequestKind: "clarification"}),
		testEvent("ev-3", run, "agent-1", at(3), &topics.NodeStatus{Status: topics.StatusBlocked, Reason: "needs:credential"}),
		testEvent("ev-4", run, "agent-1", at(4), &topics.Failed{ErrorCode: "tool_error"}),
	}
	// A record whose value is not JSON at all.
	notJSON := &kgo.Record{Topic: topic, Partition: part, Key: []byte(run), Value: []byte("agent-7 says hello {not json")}
	// A well-formed event that breaks the contract: a role outside the enum.
	badRoleEv := testEvent("ev-bad-role", run, "agent-2", at(5), &topics.NodeCreated{ParentAgentID: "conductor", Role: "wizard"})
	badRole := rawRecord(t, topic, &badRoleEv, partitions)
	// A valid event whose record key is not its run id.
	wrongKeyEv := testEvent("ev-wrong-key", run, "agent-1", at(6), &topics.Progress{})
	wrongKey := rawRecord(t, topic, &wrongKeyEv, partitions)
	wrongKey.Key = []byte("run-somebody-else")
	// An event of a type this build does not know, from a newer producer.
	futureEv := testEvent("ev-future", run, "agent-1", at(7), &topics.Heartbeat{})
	future := rawRecord(t, topic, &futureEv, partitions)
	future.Value = bytes.Replace(future.Value, []byte(`"type":"signal.heartbeat"`), []byte(`"type":"tree.node_teleported"`), 1)
	if !bytes.Contains(future.Value, []byte("tree.node_teleported")) {
		t.Fatalf("could not forge the unknown type: %s", future.Value)
	}

	// Text that is not UTF-8, which encoding/json would read as U+FFFD:
	// in a structured-mode value, and in a binary-mode ce_ header.
	badTextEv := testEvent("ev-bad-utf8", run, "w1", at(8), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker})
	badText := rawRecord(t, topic, &badTextEv, partitions)
	badText.Value = bytes.Replace(badText.Value, []byte(`"agentid":"w1"`), []byte("\"agentid\":\"w1\xff\xfe\""), 1)
	if !bytes.Contains(badText.Value, []byte("w1\xff\xfe")) {
		t.Fatalf("could not forge the bytes: %s", badText.Value)
	}
	badHeader := &kgo.Record{Topic: topic, Partition: part, Key: []byte(run), Value: []byte(`{"role":"worker","parent_agent_id":"conductor"}`),
		Headers: []kgo.RecordHeader{{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte("ev-bad-utf8-binary")},
			{Key: "ce_source", Value: []byte("/agents/w1")}, {Key: "ce_type", Value: []byte(topics.TypeNodeCreated)},
			{Key: "ce_time", Value: []byte("2026-02-14T10:00:09Z")}, {Key: "ce_runid", Value: []byte(run)},
			{Key: "ce_agentid", Value: []byte("w1\xc0\xaf")}, {Key: "ce_schemaversion", Value: []byte("1")}}}

	bads := []*kgo.Record{notJSON, badRole, wrongKey, future, badText, badHeader}
	var recs []*kgo.Record
	for i := range max(len(good), len(bads)) {
		if i < len(good) {
			recs = append(recs, rawRecord(t, topic, &good[i], partitions))
		}
		if i < len(bads) {
			recs = append(recs, bads[i])
		}
	}
	for _, r := range recs {
		if r.Partition != part {
			t.Fatalf("record not in the run's partition %d", part)
		}
	}

	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return t0 } // no timer falls due
	p, _ := e.start(cfg)
	produced := e.produceRecords(recs...)

	// Dead letters: the broken records and the one of an unknown type (a
	// newer producer's, or a typo: never silently gone), in order, with
	// their reasons and their origin. A reason with a code starts with it.
	want := []struct {
		rec    *kgo.Record
		reason string
		prefix bool
	}{
		{produced[1], "not a JSON object", false},
		{produced[3], "data.role", false},
		{produced[5], "differs from runid", false},
		{produced[7], "unknown_type: ", true},
		{produced[9], "invalid_utf8: topics: invalid event (tree.node_created ev-bad-utf8): agentid: invalid_utf8: byte 0xff at offset 2 is not UTF-8", true},
		{produced[10], "invalid_utf8: topics: invalid event (tree.node_created ev-bad-utf8-binary): ce_agentid: invalid_utf8: byte 0xc0 at offset 2 is not UTF-8", true},
	}
	var dead []*kgo.Record
	e.reader(e.names.DeadLetter()).until(30*time.Second, "six dead letters", func(r *kgo.Record) bool {
		dead = append(dead, r)
		return len(dead) == len(want)
	})
	for i, w := range want {
		d := dead[i]
		if !bytes.Equal(d.Value, w.rec.Value) || !bytes.Equal(d.Key, w.rec.Key) {
			t.Errorf("dead letter %d: key %q value %q, want the original %q %q", i, d.Key, d.Value, w.rec.Key, w.rec.Value)
		}
		hdr := func(k string) string {
			v, ok := topics.Header(d.Headers, k)
			if !ok {
				t.Errorf("dead letter %d: no %s header", i, k)
			}
			return v
		}
		if r := hdr(topics.HeaderDeadLetterReason); !strings.Contains(r, w.reason) || w.prefix && !strings.HasPrefix(r, w.reason) {
			t.Errorf("dead letter %d: reason %q does not say %q (at its start: %v)", i, r, w.reason, w.prefix)
		}
		if v := hdr(topics.HeaderDeadLetterTopic); v != topic {
			t.Errorf("dead letter %d: topic header %q, want %q", i, v, topic)
		}
		if v := hdr(topics.HeaderDeadLetterPartition); v != strconv.Itoa(int(part)) {
			t.Errorf("dead letter %d: partition header %q, want %d", i, v, part)
		}
		if v := hdr(topics.HeaderDeadLetterOffset); v != strconv.FormatInt(w.rec.Offset, 10) {
			t.Errorf("dead letter %d: offset header %q, want %d", i, v, w.rec.Offset)
		}
	}

	// The partition goes on: a good event produced after the bad ones is
	// applied and wakes too.
	late := testEvent("ev-5", run, "agent-1", at(10), &topics.NodeStatus{Status: topics.StatusRunning})
	late2 := testEvent("ev-6", run, "agent-1", at(11), topics.NewResult(topics.TypeResult, topics.Result{ResultKind: "json"}))
	e.produce(topic, late, late2)
	good = append(good, late, late2)

	testenv.WaitFor(t, 30*time.Second, until(p, "every good event applied", func() bool { return p.stats.Applied.Load() >= int64(len(good)) }))
	// Every trigger-raising good event shows up in a wake of the run.
	wantTrig := map[string]topics.TriggerKind{"ev-2": topics.TriggerRequest, "ev-3": topics.TriggerStatusBlocked,
		"ev-4": topics.TriggerFailed, "ev-6": topics.TriggerResult}
	seen := map[string]topics.TriggerKind{}
	e.reader(e.names.Wakes(), e.names.PriorityWakes()).until(30*time.Second, "the good events' wakes", func(r *kgo.Record) bool {
		w := decodeWake(t, r)
		if w.RunID != run || w.Lane != topics.LaneNormal {
			t.Fatalf("unexpected wake: run %q lane %q", w.RunID, w.Lane)
		}
		for _, tr := range w.Triggers {
			if tr.EventID == nil {
				t.Fatalf("unexpected timer trigger %+v", tr)
			}
			if strings.HasPrefix(*tr.EventID, "ev-bad") || *tr.EventID == "ev-wrong-key" || *tr.EventID == "ev-future" {
				t.Fatalf("a refused event raised a trigger: %+v", tr)
			}
			seen[*tr.EventID] = tr.Kind
		}
		return len(seen) >= len(wantTrig)
	})
	for id, k := range wantTrig {
		if seen[id] != k {
			t.Errorf("trigger of %s: %q, want %q (seen %v)", id, seen[id], k, seen)
		}
	}
	st := &p.stats
	testenv.WaitFor(t, 10*time.Second, until(p, "all records counted", func() bool { return st.Records.Load() == int64(len(recs)+2) }))
	if st.Applied.Load() != int64(len(good)) || st.DeadLettered.Load() != 6 || st.UnknownType.Load() != 1 ||
		st.Duplicates.Load() != 0 || st.Rerouted.Load() != 0 {
		t.Fatalf("%s; want %d applied, 6 dead-lettered (1 of an unknown type)", statsString(st), len(good))
	}
	// No node came of the text that is not UTF-8, under any spelling: the
	// run has the conductor and agent-1 only.
	snap, err := p.Snapshot(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Summary.NodeCountTotal != 2 {
		t.Errorf("%d nodes, want 2 (conductor, agent-1): %+v", snap.Summary.NodeCountTotal, snap.Nodes)
	}
}

// TestWrongPartitionIsRerouted: an event produced to the partition a
// librdkafka client's default partitioner (CRC32 of the key) picks, which is
// not the run's murmur2 partition, is rerouted to the run's partition
// (counted), applied exactly once there, and wakes its run; the partition it
// landed in never projects it (the design card, "Topics").
func TestWrongPartitionIsRerouted(t *testing.T) {
	const partitions = 4
	e := newEnv(t, partitions)
	topic := e.names.AgentEvents()
	// A run id whose CRC32 partition differs from its murmur2 one.
	var run string
	var wrong, right int32
	for i := 0; ; i++ {
		run = fmt.Sprintf("run-librdkafka-%d", i)
		wrong = int32(crc32.ChecksumIEEE([]byte(run)) % partitions)
		right = topics.Partition([]byte(run), partitions)
		if wrong != right {
			break
		}
	}
	ev := testEvent("ev-misplaced", run, "agent-1", time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC), &topics.Failed{ErrorCode: "tool_error"})
	rec := rawRecord(t, topic, &ev, partitions)
	rec.Partition = wrong

	dir := t.TempDir()
	cfg := e.config(dir)
	cfg.Now = func() time.Time { return ev.Time.Std() }
	p, stop := e.start(cfg)
	e.produceRecords(rec)

	// Its wake comes out of the run's partition, raised by the event.
	e.reader(e.names.Wakes()).until(30*time.Second, "the rerouted event's wake", func(r *kgo.Record) bool {
		w := decodeWake(t, r)
		if w.RunID != run || r.Partition != right {
			t.Fatalf("wake of run %q in partition %d, want run %q in %d", w.RunID, r.Partition, run, right)
		}
		if len(w.Triggers) != 1 || w.Triggers[0].Kind != topics.TriggerFailed || w.Triggers[0].EventID == nil ||
			*w.Triggers[0].EventID != ev.ID {
			t.Fatalf("wake triggers %+v, want the failed event", w.Triggers)
		}
		if w.AgentTreeSnapshot.AsOfEventSeq != 1 {
			t.Fatalf("snapshot as of event %d, want 1", w.AgentTreeSnapshot.AsOfEventSeq)
		}
		return true
	})
	st := &p.stats
	testenv.WaitFor(t, 10*time.Second, until(p, "both copies consumed", func() bool { return st.Records.Load() == 2 }))
	if st.Rerouted.Load() != 1 || st.Applied.Load() != 1 || st.Duplicates.Load() != 0 || st.DeadLettered.Load() != 0 {
		t.Fatalf("%s; want 1 rerouted, 1 applied", statsString(st))
	}

	// The copy sits in the run's partition, keyed by the run, same value.
	e.partitionReader(topic, right).until(10*time.Second, "the rerouted copy", func(r *kgo.Record) bool {
		if !bytes.Equal(r.Key, []byte(run)) || !bytes.Equal(r.Value, rec.Value) {
			t.Fatalf("partition %d holds %q=%q, want the rerouted event", right, r.Key, r.Value)
		}
		return true
	})
	stop()

	// Only the run's partition has the run in its state.
	db, err := pebble.Open(filepath.Join(dir, "pebble"), quietPebble())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for part := range int32(partitions) {
		proj, err := projection.Open(projection.Config{}, store.New(db, part))
		if err != nil {
			t.Fatal(err)
		}
		r, ok := proj.Run(run)
		switch {
		case part == right && (!ok || r.Seq() != 1):
			t.Errorf("partition %d (the run's): run present %v, want it with 1 event", part, ok)
		case part != right && ok:
			t.Errorf("partition %d holds run %s, which belongs to %d", part, run, right)
		}
	}
}
