package projector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestWakeTopicTooSmallRefusesToStart: a wake topic that takes records
// smaller than the largest wake the projection builds is refused at start,
// with what to change, rather than failing its first large wake later.
func TestWakeTopicTooSmallRefusesToStart(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		e := newEnvOn(t, b, 1)
		setWakeLimit(t, e, 200_000)
		cfg := e.config(t.TempDir())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := New(ctx, cfg)
		if err == nil {
			p.closeClients()
			p.db.Close()
			t.Fatal("a projector started with wake topics of 200,000 bytes and wakes of up to 524,288")
		}
		if !errors.Is(err, ErrRecordLimits) {
			t.Fatalf("err %v, want ErrRecordLimits", err)
		}
		for _, want := range []string{e.names.Wakes() + " takes 200000", e.names.PriorityWakes() + " takes 200000", "max.message.bytes to 528384", "-max-wake-bytes"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}

		// Wakes of at most what the topics take: it starts.
		cfg.Projection.MaxWakeBytes = 150_000
		_, stop := e.start(cfg)
		stop()
	})
}

// TestWakeAboveProducerDefault: a topic whose max.message.bytes is raised
// takes wakes larger than franz-go's default batch size (1,000,012 bytes),
// which the projector's producers no longer impose.
func TestWakeAboveProducerDefault(t *testing.T) {
	brokertest.Run(t, func(t *testing.T, b *brokertest.Broker) {
		e := newEnvOn(t, b, 1)
		setWakeLimit(t, e, 4_000_000)
		cfg := e.config(t.TempDir())
		t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
		cfg.Now = func() time.Time { return t0 }
		cfg.Projection.Limits.MaxNodes = 4000
		cfg.Projection.Limits.MaxBytes = 1_500_000
		cfg.Projection.MaxWakeBytes = 2_000_000
		p, stop := e.start(cfg)
		const run = "run-wide"
		evs := poisonEvents(run, t0, 0)[:2]
		for i := range 3000 {
			evs = append(evs, testEvent(fmt.Sprintf("ev-n%d", i), run, noisyID(fmt.Sprint(i)), t0.Add(time.Millisecond),
				&topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker}))
		}
		evs = append(evs, poisonEvents(run, t0, 0)[2])
		e.produce(e.names.AgentEvents(), evs...)
		testenv.WaitFor(t, 60*time.Second, until(p, "the wide run's wake", func() bool { return p.stats.Wakes.Load() >= 1 }))
		var size int
		e.reader(e.names.Wakes()).until(30*time.Second, "the wide run's wake", func(r *kgo.Record) bool {
			size = len(r.Value)
			return true
		})
		if size <= 1_000_012 {
			t.Errorf("the wake is %d bytes: not above franz-go's default, as the test means", size)
		}
		stop()
		if n := p.stats.DeadLettered.Load() + p.stats.Rewinds.Load(); n != 0 {
			t.Errorf("%d dead letters and rewinds: the large wake was refused", n)
		}
	})
}

// TestDeadLetterRecordFits: a dead letter stays within what the
// dead-letter topic takes (its value left out, and its size said, when it
// would not) and its reason header is valid UTF-8 however long the reason.
func TestDeadLetterRecordFits(t *testing.T) {
	names := topics.DefaultNames()
	w := &worker{p: &Projector{cfg: Config{Names: names}, limits: map[string]int{names.DeadLetter(): 10_000}}}
	reason := "poison: " + strings.Repeat("é", 600) // 1,208 bytes: clipped inside a character at 1,024
	small := w.deadLetterRecord([]byte("run-1"), []byte(`{"id":"e1"}`), nil, reason, "t", 3, 42)
	got, _ := topics.Header(small.Headers, topics.HeaderDeadLetterReason)
	if !utf8.ValidString(got) || len(got) > 1024 || !strings.HasPrefix(reason, got) {
		t.Errorf("reason header of %d bytes, valid UTF-8 %v: want a prefix of the reason of at most 1,024 bytes, whole characters", len(got), utf8.ValidString(got))
	}
	if string(small.Value) != `{"id":"e1"}` {
		t.Errorf("a small record's value %q was not kept", small.Value)
	}
	if _, ok := topics.Header(small.Headers, topics.HeaderDeadLetterValueOmitted); ok {
		t.Error("a small record's value is said to be omitted")
	}

	big := w.deadLetterRecord([]byte("run-1"), make([]byte, 20_000), nil, "poison: too large", "t", 3, 42)
	if big.Value != nil {
		t.Errorf("a %d-byte value was kept in a dead letter for a topic of 10,000 bytes", len(big.Value))
	}
	if v, _ := topics.Header(big.Headers, topics.HeaderDeadLetterValueOmitted); v != "20000" {
		t.Errorf("omitted value header %q, want 20000", v)
	}
	if n := recordSize(big.Key, big.Value, big.Headers); n > 10_000 {
		t.Errorf("the dead letter is %d bytes, over the topic's 10,000", n)
	}
}

// TestBatchLimits: the wake topics' and the changelog's producer batches
// are no larger than their largest record needs, so that a commit's
// produce requests stay small, yet every record checkRecordLimits lets
// the projector write fits a batch; the other topics keep their own limit.
func TestBatchLimits(t *testing.T) {
	names := topics.DefaultNames()
	cfg := Config{Names: names}.withDefaults()
	wake := cfg.Projection.MaxWakeBytes + wakeRecordOverhead
	state := projection.MaxRecordBytes + recordFraming
	for _, tc := range []struct {
		name   string
		limits map[string]int
		topic  string
		want   int
	}{
		{"wakes under Kafka's default limit", map[string]int{names.Wakes(): 1_048_588}, names.Wakes(), wake},
		{"priority wakes under a large limit", map[string]int{names.PriorityWakes(): 8 << 20}, names.PriorityWakes(), wake},
		{"wakes whose limit is smaller", map[string]int{names.Wakes(): wake - 1}, names.Wakes(), wake - 1},
		{"changelog", map[string]int{names.Changelog(): 1_048_588}, names.Changelog(), state},
		{"changelog, limit unknown", nil, names.Changelog(), state},
		{"dead letters keep their limit", map[string]int{names.DeadLetter(): 4 << 20}, names.DeadLetter(), 4 << 20},
		{"unknown topic", nil, "other", defaultRecordLimit},
		{"capped", map[string]int{names.DeadLetter(): 1 << 30}, names.DeadLetter(), maxBatchLimit},
	} {
		p := &Projector{cfg: cfg, limits: tc.limits}
		if got := int(p.batchLimit(tc.topic)); got != tc.want {
			t.Errorf("%s: batch limit %d, want %d", tc.name, got, tc.want)
		}
	}
	// A changelog record of the largest size in a batch of its own.
	if n := recordSize(make([]byte, 64), make([]byte, projection.MaxRecordBytes-64), nil); n > state {
		t.Errorf("a changelog record of %d bytes takes %d in a batch, over its batch limit %d", projection.MaxRecordBytes, n, state)
	}
}
