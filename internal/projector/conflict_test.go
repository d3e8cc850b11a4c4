package projector

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestReusedIDIsDeadLettered: in one partition, an event sent again (in
// structured and in binary mode) is a duplicate, and an event whose id its
// run applied with other content is dead-lettered with a reason starting
// duplicate_id_conflict:, counted apart and logged with its run, id and
// origin; the first content stays (the conflicting request opens nothing
// and wakes nobody) and every other record of the partition is projected.
func TestReusedIDIsDeadLettered(t *testing.T) { brokertest.Run(t, testReusedIDIsDeadLettered) }

func testReusedIDIsDeadLettered(t *testing.T, b *brokertest.Broker) {
	const partitions = 2
	e := newEnvOn(t, b, partitions)
	const run = "run-reused-id"
	topic := e.names.AgentEvents()
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

	created := testEvent("ev-1", run, "agent-1", at(1), &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker})
	failed := testEvent("ev-2", run, "agent-1", at(2), &topics.Failed{ErrorCode: "tool_error"})
	// ev-2 again under another content: a request, which would open and
	// wake if it were applied.
	reused := testEvent("ev-2", run, "agent-1", at(3), &topics.Request{RequestID: "req-1", RequestKind: "approval"})
	blocked := testEvent("ev-3", run, "agent-1", at(4), &topics.NodeStatus{Status: topics.StatusBlocked, Reason: "needs:input"})
	recs := []*kgo.Record{
		rawRecord(t, topic, new(testEvent("ev-0", run, "conductor", at(0), &topics.NodeCreated{Role: topics.RoleConductor})), partitions),
		rawRecord(t, topic, &created, partitions),
		rawRecord(t, topic, &failed, partitions),
		binaryRecord(t, topic, &created, partitions), // sent again, another mode: a duplicate
		rawRecord(t, topic, &reused, partitions),     // the conflict
		rawRecord(t, topic, &failed, partitions),     // sent again: a duplicate
		rawRecord(t, topic, &blocked, partitions),
	}
	const conflictAt = 4

	var logs testenv.Buffer
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return t0 } // no timer falls due
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, _ := e.start(cfg)
	produced := e.produceRecords(recs...)
	conflict := produced[conflictAt]

	var dead *kgo.Record
	e.reader(e.names.DeadLetter()).until(30*time.Second, "the conflict's dead letter", func(r *kgo.Record) bool {
		dead = r
		return true
	})
	if reason, _ := topics.Header(dead.Headers, topics.HeaderDeadLetterReason); !strings.HasPrefix(reason, DeadLetterDuplicateConflict+": ") ||
		!strings.Contains(reason, `run "`+run+`"`) || !strings.Contains(reason, `event id "ev-2"`) {
		t.Errorf("dead letter reason %q: want duplicate_id_conflict: naming the run and the id", reason)
	}
	if off, _ := topics.Header(dead.Headers, topics.HeaderDeadLetterOffset); string(dead.Value) != string(conflict.Value) ||
		off != strconv.FormatInt(conflict.Offset, 10) {
		t.Errorf("dead letter of offset %s: %s; want the conflicting record, offset %d", off, dead.Value, conflict.Offset)
	}

	// The rest of the partition is projected: ev-2's failure and ev-3's
	// block wake the run; the conflicting request never does.
	seen := map[topics.TriggerKind]bool{}
	e.reader(e.names.Wakes()).until(30*time.Second, "the failure's and the block's wakes", func(r *kgo.Record) bool {
		w := decodeWake(t, r)
		for _, tr := range w.Triggers {
			if tr.Kind == topics.TriggerRequest {
				t.Fatalf("the conflicting request woke the run: %+v", tr)
			}
			seen[tr.Kind] = true
		}
		if seen[topics.TriggerStatusBlocked] {
			// The first content stays: agent-1 holds no open request.
			for _, n := range w.AgentTreeSnapshot.Nodes {
				if n.AgentID == "agent-1" && n.OpenRequestCount != 0 {
					t.Errorf("agent-1 has %d open requests after the conflict: want 0", n.OpenRequestCount)
				}
			}
		}
		return seen[topics.TriggerFailed] && seen[topics.TriggerStatusBlocked]
	})
	st := &p.stats
	testenv.WaitFor(t, 10*time.Second, until(p, "all records counted", func() bool { return st.Records.Load() == int64(len(recs)) }))
	if st.Applied.Load() != 4 || st.Duplicates.Load() != 2 || st.DuplicateConflicts.Load() != 1 || st.DeadLettered.Load() != 1 {
		t.Errorf("%s conflicts=%d; want 4 applied, 2 duplicates, 1 conflict dead-lettered", statsString(st), st.DuplicateConflicts.Load())
	}
	warned := false
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "with other content") && strings.Contains(line, "run="+run) && strings.Contains(line, "event_id=ev-2") &&
			strings.Contains(line, "topic="+topic) && strings.Contains(line, "partition="+strconv.Itoa(int(conflict.Partition))) &&
			strings.Contains(line, "offset="+strconv.FormatInt(conflict.Offset, 10)) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning names the run, the event id and the record's origin:\n%s", logs.String())
	}
}

// binaryRecord is an event's binary-mode record (ce_* headers, the data in
// the value) for topic, in the run's partition of n.
func binaryRecord(t *testing.T, topic string, ev *topics.Event, n int32) *kgo.Record {
	t.Helper()
	data, err := topics.Marshal(ev.Data)
	if err != nil {
		t.Fatal(err)
	}
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	return &kgo.Record{Topic: topic, Key: []byte(ev.RunID), Value: data, Partition: topics.Partition([]byte(ev.RunID), n),
		Headers: []kgo.RecordHeader{h("ce_specversion", "1.0"), h("ce_id", ev.ID), h("ce_source", ev.Source),
			h("ce_type", string(ev.Type)), h("ce_time", ev.Time.String()), h("ce_agentid", ev.AgentID),
			h("ce_schemaversion", strconv.Itoa(ev.SchemaVersion)), h(topics.HeaderContentType, topics.ContentTypeJSON)}}
}
