package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Helpers shared by the behaviour tests (priority lane, bad input, timers,
// restart). Everything waits on a condition with a deadline, never on a
// sleep.

// until is a check for testenv.WaitFor that holds once cond does; until
// then its error is what, with the projector's counters when p is given.
func until(p *Projector, what string, cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		if p != nil {
			return fmt.Errorf("%s (%s)", what, statsString(&p.stats))
		}
		return errors.New(what)
	}
}

func statsString(s *stats) string {
	return fmt.Sprintf("records=%d applied=%d duplicates=%d deadLettered=%d unknownType=%d rerouted=%d wakes=%d priorityWakes=%d",
		s.Records.Load(), s.Applied.Load(), s.Duplicates.Load(), s.DeadLettered.Load(), s.UnknownType.Load(),
		s.Rerouted.Load(), s.Wakes.Load(), s.PriorityWakes.Load())
}

// recordReader reads raw records (with their topic, partition, offset,
// headers and timestamp) from the start of some topics or partitions.
type recordReader struct {
	t  *testing.T
	cl *kgo.Client
}

// reader reads every partition of the topics from the start.
func (e *env) reader(topicNames ...string) *recordReader {
	e.t.Helper()
	return e.newReader(kgo.ConsumeTopics(topicNames...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
}

// partitionReader reads one partition of a topic from the start.
func (e *env) partitionReader(topic string, partition int32) *recordReader {
	e.t.Helper()
	return e.newReader(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
}

func (e *env) newReader(opts ...kgo.Opt) *recordReader {
	e.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return &recordReader{t: e.t, cl: cl}
}

// until hands records to done, in the order the broker returns them, until
// done says so; it fails the test if d passes first.
func (r *recordReader) until(d time.Duration, what string, done func(rec *kgo.Record) bool) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			r.t.Fatalf("%s: not within %v", what, d)
		}
		stop := false
		fs.EachRecord(func(rec *kgo.Record) {
			if !stop {
				stop = done(rec)
			}
		})
		if stop {
			return
		}
	}
}

// decodeWake decodes a wake record's value, failing the test if it does not.
func decodeWake(t *testing.T, rec *kgo.Record) *topics.Wake {
	t.Helper()
	w, err := topics.DecodeWake(rec.Value)
	if err != nil {
		t.Fatalf("wake at %s/%d@%d does not decode: %v", rec.Topic, rec.Partition, rec.Offset, err)
	}
	return w
}

// produceRecords sends prepared records (their partitions set by the caller)
// and returns them with the offsets the broker gave them.
func (e *env) produceRecords(recs ...*kgo.Record) []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res := e.client.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	out := make([]*kgo.Record, len(res))
	for i, r := range res {
		out[i] = r.Record
	}
	return out
}

// rawRecord is an event's structured-mode record for topic, in the run's
// partition of n, without the validation EventRecord does (the caller may
// mean to send something invalid).
func rawRecord(t *testing.T, topic string, ev *topics.Event, n int32) *kgo.Record {
	t.Helper()
	v, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(ev.RunID), Value: v, Partition: topics.Partition([]byte(ev.RunID), n),
		Headers: []kgo.RecordHeader{{Key: topics.HeaderContentType, Value: []byte(topics.ContentTypeCloudEvents)}}}
}

// quietPebble is the options for a test's own look into a projector's
// Pebble, with its routine logging off.
func quietPebble() *pebble.Options {
	return &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}}
}

// testEvent returns a valid event of run at t with payload data.
func testEvent(id, run, agent string, at time.Time, data topics.Payload) topics.Event {
	return topics.Event{ID: id, Source: "/agents/" + agent, Type: data.EventType(), Time: topics.NewTime(at), RunID: run,
		AgentID: agent, SchemaVersion: topics.CurrentSchemaVersion, Data: data}
}
