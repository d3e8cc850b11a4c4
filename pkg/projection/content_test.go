package projection

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func hashOf(ev *topics.Event) uint64 {
	h, _ := contentHash(ev, nil)
	return h
}

// TestContentCoversEveryField: every event type's payload is in
// appendContent's switch, and changing any field of the payload or of the
// envelope, but the id, the run id, the schema version and the trace id
// (a header's), changes the
// hash. A payload field added to pkg/topics and left out of the hash fails
// here: two events differing only there would be taken for duplicates.
func TestContentCoversEveryField(t *testing.T) {
	at := topics.NewTime(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC))
	base := func(typ topics.EventType) topics.Event {
		return topics.Event{ID: "e1", Source: "/s", Type: typ, Time: at, RunID: "run", AgentID: "a", SchemaVersion: 1,
			Data: topics.NewPayload(typ)}
	}
	// set gives a field a value other than its zero (and other than any
	// payload's base value): false for a field kind this test does not know.
	set := func(f reflect.Value) bool {
		switch v := f.Addr().Interface().(type) {
		case *string:
			*v = "x"
		case *topics.Role:
			*v = topics.RoleWorker
		case *topics.Status:
			*v = topics.StatusBlocked
		case *int:
			*v = 7
		case *int64:
			*v = 7
		case **int64:
			x := int64(0)
			*v = &x
		case *bool:
			*v = true
		case **bool:
			b := false
			*v = &b
		case **float64:
			x := 0.0
			*v = &x
		case *[]string:
			*v = []string{""}
		case *topics.Time:
			*v = at.Add(time.Millisecond)
		case **topics.Time:
			x := at
			*v = &x
		default:
			return false
		}
		return true
	}
	for _, typ := range topics.EventTypes() {
		ev := base(typ)
		if _, typed := appendContent(nil, &ev); !typed {
			t.Errorf("%s: its payload is not in appendContent's switch", typ)
		}
		want := hashOf(&ev)
		p := reflect.ValueOf(ev.Data).Elem()
		for i := range p.NumField() {
			if !p.Type().Field(i).IsExported() {
				continue
			}
			other := base(typ)
			if !set(reflect.ValueOf(other.Data).Elem().Field(i)) {
				t.Errorf("%s.%s: a field of type %s this test cannot set: add it", typ, p.Type().Field(i).Name, p.Field(i).Type())
				continue
			}
			if hashOf(&other) == want {
				t.Errorf("%s: a different %s hashes alike: the field is not content", typ, p.Type().Field(i).Name)
			}
		}
	}
	// The envelope: every field is content but the three that are not,
	// and for human input and acknowledgements (which canopy's gateway and
	// conductors stamp on each attempt) their source and time.
	for _, typ := range []topics.EventType{topics.TypeHeartbeat, topics.TypeInput, topics.TypeWakeReceived} {
		env := reflect.ValueOf(base(typ))
		want := hashOf(new(base(typ)))
		for i := range env.NumField() {
			name := env.Type().Field(i).Name
			other := base(typ)
			f := reflect.ValueOf(&other).Elem().Field(i)
			switch name {
			case "Data":
				other.Data = nil
			case "Type":
				other.Type = topics.TypeNodeCompleted
			case "SchemaVersion":
				other.SchemaVersion = 2
			default:
				if !set(f) {
					t.Fatalf("Event.%s: a field of type %s this test cannot set: add it", name, f.Type())
				}
			}
			notContent := name == "ID" || name == "RunID" || name == "SchemaVersion" || name == "TraceID" ||
				typ != topics.TypeHeartbeat && (name == "Source" || name == "Time")
			if same := hashOf(&other) == want; same != notContent {
				t.Errorf("%s: Event.%s changed: same hash %v, want %v", typ, name, same, notContent)
			}
		}
	}
}

// TestContentIgnoresDelivery: one event delivered in structured mode, with
// its members in another order, other whitespace, escapes and a time
// written with an offset, and in binary mode, has one content; the hash
// of a fixed event is a constant, since it is state written by one build
// and read by the next.
func TestContentIgnoresDelivery(t *testing.T) {
	structured := []string{
		`{"specversion":"1.0","id":"e1","source":"/agents/w1","type":"signal.request","time":"2026-02-14T10:40:00Z","runid":"run-1","agentid":"w1","schemaversion":1,"correlationid":"c1","data":{"request_id":"r1","request_kind":"approval","ttl_ms":60000}}`,
		"{ \"data\" : { \"ttl_ms\" : 60000 , \"request_kind\" : \"appr\\u006fval\", \"request_id\":\"r1\" },\n \"schemaversion\":1, \"agentid\":\"\\u0077\\u0031\", \"runid\":\"run-1\", \"time\":\"2026-02-14T11:40:00.000+01:00\",\n \"type\":\"signal.request\", \"source\":\"\\/agents\\/w1\", \"id\":\"e1\", \"specversion\":\"1.0\", \"correlationid\":\"c1\", \"datacontenttype\":\"application/json\", \"subject\":\"ignored\", \"traceid\":\"x\"}",
	}
	var hashes []uint64
	for _, s := range structured {
		ev, err := topics.DecodeEvent([]byte(s))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		hashes = append(hashes, hashOf(ev))
	}
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	ev, err := topics.DecodeRecord([]byte("run-1"), []byte(`{"request_kind":"approval","request_id":"r1","ttl_ms":60000}`), []kgo.RecordHeader{
		h("ce_specversion", "1.0"), h("ce_id", "e1"), h("ce_source", "/agents/w1"), h("ce_type", "signal.request"),
		h("ce_time", "2026-02-14T10:40:00.000Z"), h("ce_agentid", "w1"), h("ce_schemaversion", "1"), h("ce_correlationid", "c1"),
		h("content-type", "application/json"), h("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
	})
	if err != nil {
		t.Fatal(err)
	}
	hashes = append(hashes, hashOf(ev))
	for i, got := range hashes {
		if got != hashes[0] {
			t.Errorf("delivery %d hashes to %#x, the first to %#x", i, got, hashes[0])
		}
	}
	// Written down once: a change of the encoding or of the hash function
	// would make every id in every store a conflict of itself.
	const stable = uint64(0x7f67bf8a3eda9b08)
	if hashes[0] != stable {
		t.Errorf("the content hash of the fixed event is %#x, want %#x: the hash is state and must not change", hashes[0], stable)
	}
	ev.Data.(*topics.Request).TTLMs++
	if hashOf(ev) == hashes[0] {
		t.Error("another TTL hashes alike")
	}
}

// TestDuplicateConflictError: a conflict's error names the run, the id and
// the first content's seq, matches the sentinel, and leaves the projection
// usable: it is the event's, not the store's.
func TestDuplicateConflictError(t *testing.T) {
	p, err := Open(Config{}, newMemStorage())
	if err != nil {
		t.Fatal(err)
	}
	at := topics.NewTime(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC))
	ev := func(id, agent string) *topics.Event {
		return &topics.Event{ID: id, Source: "/s", Type: topics.TypeHeartbeat, Time: at, RunID: "run-1", AgentID: agent,
			SchemaVersion: 1, Data: &topics.Heartbeat{}}
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		if _, dup, err := p.ApplyEvent(ev(id, "w1")); dup || err != nil {
			t.Fatalf("%s: dup %v, %v", id, dup, err)
		}
	}
	_, dup, err := p.ApplyEvent(ev("e2", "w2"))
	var conflict *DuplicateConflictError
	if dup || !errors.Is(err, ErrDuplicateConflict) || !errors.As(err, &conflict) {
		t.Fatalf("e2 with another agent: dup %v, %v; want a DuplicateConflictError", dup, err)
	}
	if want := (DuplicateConflictError{Run: "run-1", EventID: "e2", Type: topics.TypeHeartbeat, AgentID: "w2", Seq: 2}); *conflict != want {
		t.Errorf("conflict %+v, want %+v", *conflict, want)
	}
	if r, _ := p.Run("run-1"); r.Seq() != 3 || r.Len() != 1 {
		t.Errorf("after the conflict: seq %d, %d nodes; want 3 and 1 (w2 not created)", r.Seq(), r.Len())
	}
	if _, dup, err := p.ApplyEvent(ev("e4", "w1")); dup || err != nil || p.Err() != nil {
		t.Fatalf("the next event: dup %v, %v (sticky %v); want applied", dup, err, p.Err())
	}
	if err := p.Commit(nil); err != nil {
		t.Fatalf("commit after a conflict: %v", err)
	}
}

// BenchmarkContentHash is the dedupe window's cost per applied event: the
// content hash of the events of a generated run.
func BenchmarkContentHash(b *testing.B) {
	evs := workload.Generate(workload.Spec{RunID: "run-bench", Nodes: 200, Seed: 1})
	var buf []byte
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, buf = contentHash(&evs[i%len(evs)], buf)
		i++
	}
}
