package projector

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// The reasons a record is dead-lettered start with a code (docs/CONTRACT.md
// "Records canopy cannot project"); the decoder's own errors name the
// field instead.
const (
	// DeadLetterUnknownType: an event type this build does not know.
	DeadLetterUnknownType = "unknown_type"
	// DeadLetterInvalidUTF8: text that is not valid UTF-8
	// (topics.ErrInvalidUTF8); the rest names each field.
	DeadLetterInvalidUTF8 = topics.CodeInvalidUTF8
	// DeadLetterRunExpired: an event for a run that expired
	// (projection.Config.Retention): its state is gone.
	DeadLetterRunExpired = "run_expired"
)

// apply projects a batch's records into the state and gathers their
// triggers; flush commits them. human says the batch is of the human input
// topic (the worker's two channels keep the lanes apart). An agent batch is
// preemptible: it stops before any record but the first once the worker is
// preempted (see preempted). It returns how many records it took.
func (w *worker) apply(b batch, human bool) (done int) {
	_, span := w.batchSpan(b)
	defer span.End()
	var last *kgo.Record
	at := &w.at
	for i, r := range b.records {
		if !human && i > 0 && w.preempted() || w.rewinding() {
			break
		}
		done++
		if next, ok := at.offsets[r.Topic]; ok && r.Offset < next {
			continue // already in the state: fetched again around a rebalance
		}
		at.offsets[r.Topic] = r.Offset + 1
		at.consumed++
		// Kept until a commit carries it: a rewind applies it again.
		w.poison.applied = append(w.poison.applied, appliedOf(r, human, true, false))
		w.applyRecord(r, human, span)
		last = r
	}
	if last == nil || b.highWatermark < 0 {
		return done
	}
	i := w.topicIndex(last.Topic)
	w.in.lag[i].Store(max(b.highWatermark-(last.Offset+1), 0))
	at.lastAt[i] = last.Timestamp
	at.behind[last.Topic] = last.Offset+1 < b.highWatermark
	return done
}

// applyRecord decodes one record and projects it, or dead-letters or
// reroutes it, and gathers its triggers. A panic (a bug that this record
// brings out) asks for a rewind: the state may be half changed.
func (w *worker) applyRecord(r *kgo.Record, human bool, span trace.Span) {
	var ev *topics.Event
	defer func() {
		if v := recover(); v != nil {
			run := ""
			if ev != nil {
				run = ev.RunID
			}
			w.failed(w.recovered(fmt.Sprintf("applying %s/%d@%d", r.Topic, r.Partition, r.Offset), v, run))
		}
	}()
	ev, err := decodeRecord(r, w.p.cfg.redaction, w.redacted, &w.ev)
	if err != nil {
		w.refuse(r, err)
		return
	}
	w.faultApply(ev)
	if want := topics.Partition([]byte(ev.RunID), w.p.partitions); want != r.Partition {
		w.reroute(r, ev.RunID, want)
		w.count(r.Topic, ev.Type, OutcomeRerouted)
		return
	}
	trigs, dup, err := w.proj.ApplyEvent(ev)
	switch {
	case errors.Is(err, projection.ErrRunExpired):
		// Late for a run whose state retention deleted: refused, not the
		// start of a run from nothing (docs/CONTRACT.md).
		w.deadLetter(r, DeadLetterRunExpired+": "+err.Error())
		w.count(r.Topic, ev.Type, OutcomeRunExpired)
		return
	case errors.Is(err, projection.ErrDuplicateConflict):
		// An id that names another content than the one applied: refused,
		// and the first content stays (docs/CONTRACT.md).
		w.p.log.Warn("an event id was sent again with other content; the first content stays",
			"run", ev.RunID, "event_id", ev.ID, "type", ev.Type, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		w.deadLetter(r, DeadLetterDuplicateConflict+": "+err.Error())
		w.count(r.Topic, ev.Type, OutcomeDuplicateConflict)
		return
	case dup:
		w.count(r.Topic, ev.Type, OutcomeDuplicate)
	default:
		w.count(r.Topic, ev.Type, OutcomeApplied)
	}
	w.gather(r, ev.RunID, trigs, human, span)
}

// decodeRecord decodes r's event into dst and redacts it
// (Config.Redaction): from here on, the state, the wakes, the logs and the
// spans only ever see the redacted text. redacted, when not nil, is told
// each replacement's rule.
func decodeRecord(r *kgo.Record, policy *redact.Policy, redacted func(rule string), dst *topics.Event) (*topics.Event, error) {
	ev, err := topics.DecodeRecordInto(dst, r.Key, r.Value, r.Headers)
	if err == nil {
		policy.Event(ev, redacted)
	}
	return ev, err
}

// redacted reports a replacement of redaction to the hooks, but for a
// record a rewind applies again (poison.go), whose replacements they have.
func (w *worker) redacted(rule string) {
	if !w.poison.again {
		w.p.hooks.Redacted(rule)
	}
}

// refuse dead-letters a record that does not decode, with the reason's
// code first where it has one, so that an operator tells a producer's
// encoding bug or a newer producer's type from its other mistakes at a
// glance; unknown types are counted apart.
func (w *worker) refuse(r *kgo.Record, err error) {
	switch {
	case errors.Is(err, topics.ErrUnknownType):
		w.deadLetter(r, DeadLetterUnknownType+": "+err.Error())
		w.count(r.Topic, "", OutcomeUnknownType)
	case errors.Is(err, topics.ErrInvalidUTF8):
		w.deadLetter(r, DeadLetterInvalidUTF8+": "+err.Error())
		w.count(r.Topic, "", OutcomeDeadLettered)
	default:
		w.deadLetter(r, err.Error())
		w.count(r.Topic, "", OutcomeDeadLettered)
	}
}

// count reports a record's outcome to the hooks, but for a record a
// rewind applies again (poison.go), whose outcome they have.
func (w *worker) count(topic string, typ topics.EventType, outcome Outcome) {
	if !w.poison.again {
		w.p.hooks.Consumed(topic, typ, outcome)
	}
}

// caughtUp reports whether the partition has applied everything fetched and
// reached the high watermark of each input topic.
func (w *worker) caughtUp() bool {
	if w.in.queued() || len(w.in.human) > 0 || len(w.poison.suspects) > 0 {
		return false
	}
	for _, behind := range w.at.behind {
		if behind {
			return false
		}
	}
	return true
}

// source is the time up to which the state reflects its input, which a
// snapshot's age and staleness are measured from: now when the partition is
// caught up; else the append time of the last record applied of the lane
// furthest behind, so that a human input's wake under an agent backlog says
// how far behind the agent lane is rather than how fresh the input is.
func (w *worker) source(now topics.Time) topics.Time {
	if w.caughtUp() {
		return now
	}
	var src, newest time.Time
	for i, topic := range [2]string{w.p.agentTopic, w.p.humanTopic} {
		at := w.at.lastAt[i]
		if at.IsZero() {
			continue
		}
		newest = later(newest, at)
		queued := w.in.queued()
		if i == 1 {
			queued = len(w.in.human) > 0
		}
		if (w.at.behind[topic] || queued) && (src.IsZero() || at.Before(src)) {
			src = at
		}
	}
	switch {
	case !src.IsZero():
		return topics.NewTime(src)
	case !newest.IsZero():
		// Behind on a lane none of whose records was applied here yet.
		return topics.NewTime(newest)
	default:
		return now
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// deadLetter sends a record that cannot be projected to the dead-letter
// topic, with why and whence in its headers, in the agent lane's next
// commit.
func (w *worker) deadLetter(r *kgo.Record, reason string) {
	w.agent.out = append(w.agent.out, w.deadLetterRecord(r.Key, r.Value, r.Headers, reason, r.Topic, r.Partition, r.Offset))
	w.p.log.Warn("dead-lettered a record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", reason)
}

// deadLetterRecord is a dead letter of key, value and headers for reason;
// whence (topic, partition, offset) is left out when topic is "". A value
// that would make the record larger than the dead-letter topic takes is
// left out too, and its size said in a header: the original is still at
// its offset, and a dead letter the broker refuses would be poison itself.
func (w *worker) deadLetterRecord(key, value []byte, headers []kgo.RecordHeader, reason, topic string, partition int32, offset int64) *kgo.Record {
	if len(reason) > 1024 {
		// At a character's start: a header of half a character would be
		// the invalid UTF-8 canopy refuses in what it reads.
		n := 1024
		for n > 0 && !utf8.RuneStart(reason[n]) {
			n--
		}
		reason = reason[:n]
	}
	h := append([]kgo.RecordHeader(nil), headers...)
	h = append(h, kgo.RecordHeader{Key: topics.HeaderDeadLetterReason, Value: []byte(reason)})
	if topic != "" {
		h = append(h,
			kgo.RecordHeader{Key: topics.HeaderDeadLetterTopic, Value: []byte(topic)},
			kgo.RecordHeader{Key: topics.HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(partition)))},
			kgo.RecordHeader{Key: topics.HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(offset, 10))},
		)
	}
	dlq := w.p.cfg.Names.DeadLetter()
	if size := recordSize(key, value, h); size > w.p.recordLimit(dlq) {
		h = append(h, kgo.RecordHeader{Key: topics.HeaderDeadLetterValueOmitted, Value: []byte(strconv.Itoa(len(value)))})
		value = nil
	}
	return &kgo.Record{Topic: dlq, Partition: 0, Key: key, Value: value, Headers: h}
}

// reroute sends a record that sits in the wrong partition for its run (a
// producer with another partitioner) to the right one, keyed by run id, in
// the agent lane's next commit.
func (w *worker) reroute(r *kgo.Record, runID string, want int32) {
	w.agent.out = append(w.agent.out, &kgo.Record{Topic: r.Topic, Partition: want, Key: []byte(runID), Value: r.Value, Headers: r.Headers})
}
