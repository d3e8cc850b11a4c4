package topics_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// benchEvents returns the first 2000 events of the thousand-nodes example,
// a representative mix of event types, as structured-mode values.
func benchEvents(b *testing.B) [][]byte {
	b.Helper()
	raw, err := os.ReadFile("../../examples/thousand-nodes.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	var events [][]byte
	for line := range bytes.Lines(raw) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			events = append(events, line)
		}
		if len(events) == 2000 {
			break
		}
	}
	return events
}

// BenchmarkDecodeEvent reports the cost of decoding one event.
func BenchmarkDecodeEvent(b *testing.B) {
	events := benchEvents(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := topics.DecodeEvent(events[i%len(events)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRecord reports the cost of decoding one structured-mode record.
func BenchmarkDecodeRecord(b *testing.B) {
	events := benchEvents(b)
	key := []byte("run-thousand")
	headers := []kgo.RecordHeader{{Key: topics.HeaderContentType, Value: []byte(topics.ContentTypeCloudEvents)}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := topics.DecodeRecord(key, events[i%len(events)], headers); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRecordInto is BenchmarkDecodeRecord decoding every record
// into the same Event, as a projector's worker does.
func BenchmarkDecodeRecordInto(b *testing.B) {
	events := benchEvents(b)
	key := []byte("run-thousand")
	headers := []kgo.RecordHeader{{Key: topics.HeaderContentType, Value: []byte(topics.ContentTypeCloudEvents)}}
	var ev topics.Event
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := topics.DecodeRecordInto(&ev, key, events[i%len(events)], headers); err != nil {
			b.Fatal(err)
		}
	}
}
