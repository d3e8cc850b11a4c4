package topics_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// fuzzSeedEvents are structured-mode values, valid and not, to start from.
func fuzzSeedEvents(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, s := range validExamples {
		seeds = append(seeds, []byte(s))
	}
	for typ, p := range fullPayloads() {
		b, err := fullEvent(typ, p).MarshalJSON()
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	valid := string(structured(f))
	seeds = append(seeds,
		[]byte(``),
		[]byte(`null`),
		[]byte(`{}`),
		[]byte(`[]`),
		[]byte(valid+` x`),
		structured(f, set("schemaversion", 2)),
		structured(f, set("schemaversion", "1")),
		structured(f, set("type", "tree.node_teleported")),
		structured(f, del("runid"), set("run_id", "r")),
		structured(f, set("data_base64", "e30=")),
		structured(f, set("data", raw(`[1]`))),
		structured(f, set("data", raw(`{"role":"worker","role":"boss"}`))),
		structured(f, set("time", "2026-02-14T12:40:00.123456+02:00")),
		structured(f, set("traceparent", "00-x-y-01"), set("partitionkey", "k")),
		structured(f, set("id", ""), set("type", "")),
		structured(f, data(topics.TypeLeaseAcquired, `{"owner":"o","expires_at":"soon"}`)),
		structured(f, data(topics.TypeProgress, `{"fraction":-0}`)),
		structured(f, data(topics.TypeNodeResult, `{"artifact_ids":[]}`)),
		[]byte(strings.Replace(valid, `"worker"`, `"w\u00f6rker\ud800"`, 1)),
	)
	return seeds
}

// checkDecodeResult checks what every decode must satisfy, and for a
// decoded event, that it is a fixed point of encoding.
func checkDecodeResult(t *testing.T, ev *topics.Event, err error) {
	t.Helper()
	if err != nil {
		var de *topics.DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("error is %T, not *DecodeError: %v", err, err)
		}
		if len(de.Problems) == 0 {
			t.Fatalf("DecodeError without problems: %v", err)
		}
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("error wraps %d sentinels: %v", n, err)
		}
		if errors.Is(err, topics.ErrUnknownType) {
			if ev == nil || ev.Type == "" || ev.Type.Known() || ev.Data != nil {
				t.Fatalf("ErrUnknownType with event %+v", ev)
			}
		} else if ev != nil {
			t.Fatalf("error %v with event %+v", err, ev)
		}
		return
	}
	if ev == nil {
		t.Fatal("no event and no error")
	}
	if !ev.Type.Known() || ev.Data == nil || ev.Data.EventType() != ev.Type {
		t.Fatalf("decoded event has type %q and data %#v", ev.Type, ev.Data)
	}
	if ev.ID == "" || ev.Source == "" || ev.RunID == "" || ev.AgentID == "" || ev.Time.IsZero() || ev.SchemaVersion != topics.CurrentSchemaVersion {
		t.Fatalf("decoded event lacks a required attribute: %+v", ev)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("decoded event does not Validate: %v\n%+v", err, ev)
	}
	b1, err := ev.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	ev2, err := topics.DecodeEvent(b1)
	if err != nil {
		t.Fatalf("re-encoded event does not decode: %v\n%s", err, b1)
	}
	// The envelope survives exactly; the payload survives up to its
	// canonical form (an empty list and an absent one encode alike). The
	// trace id is a record header's, not the event's.
	env1, env2 := *ev, *ev2
	env1.Data, env2.Data = nil, nil
	env1.TraceID = ""
	if !reflect.DeepEqual(env1, env2) {
		t.Fatalf("envelope changed by a round trip:\n%+v\n%+v", env1, env2)
	}
	b2, err := ev2.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("encoding is not idempotent:\n%s\n%s", b1, b2)
	}
	ev3, err := topics.DecodeEvent(b2)
	if err != nil || !reflect.DeepEqual(ev2, ev3) {
		t.Fatalf("decode of the canonical form is not a fixed point: %v\n%+v\n%+v", err, ev2, ev3)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range fuzzSeedEvents(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		ev, err := topics.DecodeEvent(value)
		checkDecodeResult(t, ev, err)
		if err == nil {
			// The structured-mode record of the same event decodes alike.
			r, err := topics.EventRecord("t", ev, "")
			if err != nil {
				t.Fatalf("EventRecord: %v", err)
			}
			got, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
			if err != nil {
				t.Fatalf("DecodeRecord(EventRecord): %v", err)
			}
			a, _ := ev.MarshalJSON()
			b, _ := got.MarshalJSON()
			if !bytes.Equal(a, b) {
				t.Fatalf("record round trip:\n%s\n%s", a, b)
			}
		}
	})
}

// splitHeaders turns a blob of "key=value" lines into record headers; a
// line without '=' is a header with no value.
func splitHeaders(blob []byte) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for line := range bytes.SplitSeq(blob, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte("="))
		h := kgo.RecordHeader{Key: string(k)}
		if ok {
			h.Value = v
		}
		hs = append(hs, h)
	}
	return hs
}

func joinHeaders(hs []kgo.RecordHeader) []byte {
	var b bytes.Buffer
	for _, h := range hs {
		b.WriteString(h.Key)
		b.WriteByte('=')
		b.Write(h.Value)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func FuzzDecodeRecord(f *testing.F) {
	bin := joinHeaders(binaryHeaders())
	ce := []byte("content-type=application/cloudevents+json\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n")
	// Binary mode.
	f.Add([]byte(testRun), []byte(`{"role":"worker"}`), bin)
	f.Add([]byte(nil), []byte(`{"role":"worker"}`), bin)
	f.Add([]byte("run-2"), []byte(`{"role":"worker"}`), bin)
	f.Add([]byte(testRun), []byte(`{"role":"worker"}`), bytes.ReplaceAll(bin, []byte("ce_runid=run-1\n"), nil))
	f.Add([]byte("run\xff"), []byte(`{"role":"worker"}`), bytes.ReplaceAll(bin, []byte("ce_runid=run-1\n"), nil))
	f.Add([]byte(nil), []byte(`{"role":"worker"}`), bytes.ReplaceAll(bin, []byte("ce_runid=run-1\n"), nil))
	f.Add([]byte(testRun), []byte(``), bytes.ReplaceAll(bin, []byte("tree.node_created"), []byte("signal.heartbeat")))
	f.Add([]byte(testRun), []byte(`{"owner":"o","expires_at":"2026-02-14T10:45:00+01:00"}`), bytes.ReplaceAll(bin, []byte("tree.node_created"), []byte("lease.renewed")))
	f.Add([]byte(testRun), []byte(`{"role":"worker"} x`), bin)
	f.Add([]byte(testRun), []byte(`[1]`), bin)
	f.Add([]byte(testRun), []byte(`{"role":"worker"}`), bytes.ReplaceAll(bin, []byte("ce_schemaversion=1"), []byte("ce_schemaversion=2")))
	f.Add([]byte(testRun), []byte(`{"role":"worker"}`), bytes.ReplaceAll(bin, []byte("tree.node_created"), []byte("tree.node_teleported")))
	f.Add([]byte(testRun), []byte(`{"role":"worker"}`), bytes.ReplaceAll(bin, []byte("application/json"), []byte("text/plain")))
	f.Add([]byte(testRun), []byte(`{"role":"worker"}`), bytes.ReplaceAll(bin, []byte("ce_source=/agents/worker-7"), []byte("ce_source=/\xff")))
	f.Add([]byte(testRun), []byte(`{"role":"worker"}`), append(bytes.Clone(bin), "ce_traceparent=00-x-y-01\nce_partitionkey=k\nflag\n"...))
	// Structured mode.
	for _, s := range fuzzSeedEvents(f)[:8] {
		f.Add([]byte("run-demo-1"), s, ce)
		f.Add([]byte(nil), s, []byte(nil))
	}
	f.Add([]byte(testRun), structured(f), ce)
	f.Add([]byte("other"), structured(f), ce)
	f.Add([]byte(testRun), structured(f, del("runid")), ce)
	f.Fuzz(func(t *testing.T, key, value, blob []byte) {
		hs := splitHeaders(blob)
		ev, err := topics.DecodeRecord(key, value, hs)
		checkDecodeResult(t, ev, err)
		sameDecodeInto(t, ev, err, key, value, hs)
		if err != nil {
			return
		}
		if len(key) > 0 && ev.RunID != string(key) {
			t.Fatalf("decoded run id %q, record key %q", ev.RunID, key)
		}
		// Re-produced as a record, the event decodes to the same event.
		r, err := topics.EventRecord("t", ev, "")
		if err != nil {
			t.Fatalf("EventRecord: %v", err)
		}
		got, err := topics.DecodeRecord(r.Key, r.Value, r.Headers)
		if err != nil {
			t.Fatalf("DecodeRecord(EventRecord): %v", err)
		}
		a, _ := ev.MarshalJSON()
		b, _ := got.MarshalJSON()
		if !bytes.Equal(a, b) {
			t.Fatalf("record round trip:\n%s\n%s", a, b)
		}
	})
}

// sameDecodeInto checks that DecodeRecordInto, into an event holding every
// field of another, gives what DecodeRecord gave (ev, err): the same error,
// or dst itself holding the same event, no field of the other left.
func sameDecodeInto(t *testing.T, ev *topics.Event, err error, key, value []byte, hs []kgo.RecordHeader) {
	t.Helper()
	dst := &topics.Event{ID: "stale-id", Source: "/stale", Type: topics.TypeNodeCreated, Time: topics.UnixMilliTime(1),
		RunID: "stale-run", AgentID: "stale-agent", SchemaVersion: 9, SessionID: "stale-session", ThreadID: "stale-thread",
		CorrelationID: "stale-corr", CausationID: "stale-cause", Data: &topics.NodeCreated{Role: topics.RoleWorker}, TraceID: "stale-trace"}
	into, intoErr := topics.DecodeRecordInto(dst, key, value, hs)
	if fmt.Sprint(intoErr) != fmt.Sprint(err) || !reflect.DeepEqual(intoErr, err) {
		t.Fatalf("DecodeRecordInto: error %v, DecodeRecord's %v", intoErr, err)
	}
	if (into == nil) != (ev == nil) {
		t.Fatalf("DecodeRecordInto: event %v, DecodeRecord's %v", into, ev)
	}
	if into == nil {
		return
	}
	if into != dst || !reflect.DeepEqual(*into, *ev) {
		t.Fatalf("DecodeRecordInto: %+v (into dst: %v), DecodeRecord: %+v", *into, into == dst, *ev)
	}
}

// FuzzDecodeDifferential: the decoder with its fast paths and the oracle
// (objects validated, then split in a second pass; every payload through
// encoding/json) agree
// on every input: the same accept or reject, the same decoded event, the
// same error, problems and fields included. Its corpus starts from
// FuzzDecodeEvent's seeds and payloads aimed at the edges of the fast path
// (nulls, wrong JSON types, numbers it leaves to encoding/json, escapes,
// repeated names).
func FuzzDecodeDifferential(f *testing.F) {
	for _, s := range fuzzSeedEvents(f) {
		f.Add(s)
	}
	for _, d := range []struct {
		typ  topics.EventType
		data string
	}{
		{topics.TypeNodeCreated, `{"role":null}`},
		{topics.TypeNodeCreated, `{"role":"worker","capability":1}`},
		{topics.TypeNodeCreated, `{"role":"w\"orker","task_id":"t\u00e9"}`},
		{topics.TypeNodeCreated, `{"role":"worker","role":"app_agent"}`},
		{topics.TypeNodeDelegated, `{"expected_by":null}`},
		{topics.TypeNodeDelegated, `{"expected_by":"2026-02-14T10:10:00Z","expected_by":"2026-02-14T10:11:00+01:00"}`},
		{topics.TypeNodeDelegated, `{"expected_by":12}`},
		{topics.TypeNodeResult, `{"success":null,"artifact_ids":["a",null]}`},
		{topics.TypeNodeResult, `{"success":"true","artifact_ids":[1]}`},
		{topics.TypeNodeResult, `{"success":true,"artifact_ids":["a","b"],"artifact_ids":[]}`},
		{topics.TypePlanCreated, `{"plan_id":"p","band_count":1.0}`},
		{topics.TypePlanCreated, `{"plan_id":"p","band_count":1e2}`},
		{topics.TypePlanCreated, `{"plan_id":"p","band_count":-0}`},
		{topics.TypePlanCreated, `{"plan_id":"p","band_count":99999999999999999999}`},
		{topics.TypePlanCreated, `{"plan_id":"p","band_count":"2"}`},
		{topics.TypeProgress, `{"fraction":1e400}`},
		{topics.TypeProgress, `{"fraction":0.5,"fraction":null}`},
		{topics.TypeProgress, `{"fraction":"0.5"}`},
		{topics.TypeScratchpadUpdated, `{"scratchpad_id":"s","appended_bytes":9223372036854775808}`},
		{topics.TypeLeaseAcquired, `{"owner":"o","expires_at":null}`},
		{topics.TypeFailed, `{"error_code":"e","retryable":1}`},
		{topics.TypeWakeReceived, `{"wake_id":"w","agent_ids":{}}`},
		{topics.TypeHeartbeat, `{}`},
		{topics.TypeToolFinished, `{"call_id":"c","outcome":"failed","exit_code":null}`},
		{topics.TypeToolFinished, `{"call_id":"c","outcome":"failed","exit_code":"1"}`},
		{topics.TypeToolFinished, `{"call_id":"c","outcome":"failed","exit_code":1.0}`},
		{topics.TypeToolFinished, `{"call_id":"c","outcome":"failed","exit_code":-0,"duration_ms":1e3}`},
		{topics.TypeToolFinished, `{"call_id":"c","outcome":"failed","exit_code":2,"exit_code":-3}`},
		{topics.TypeProcessExited, `{"process_id":"p","exit_code":9223372036854775808}`},
		{topics.TypeProcessExited, `{"process_id":"p","exit_code":-9223372036854775809}`},
		{topics.TypeProcessExited, `{"process_id":"p","exit_code":-9223372036854775808,"signal":"SIGTERM"}`},
		{topics.TypeLimitUpdated, `{"limit_kind":"cost","state":"near","remaining":-1,"reset_at":"2026-02-14T11:00:00+01:00"}`},
		{topics.TypeLimitUpdated, `{"limit_kind":"cost","state":"near","remaining":true}`},
		{topics.TypeRuntimeConfigured, `{"network_access":null}`},
		{topics.TypeRuntimeConfigured, `{"network_access":false,"permission_mode":"ask"}`},
		{topics.TypeTurnCompleted, `{"turn_id":"t","outcome":"failed","summary":"a\r\nb"}`},
		{topics.TypeTurnCompleted, `{"turn_id":"t","outcome":"failed","summary":"a\n\tb \u2028"}`},
		{topics.TypeSessionUpdated, `{"pinned_thread_ids":[]}`},
		{topics.TypeSessionUpdated, `{"pinned_thread_ids":["t",null],"title":""}`},
		{topics.TypeModelUsage, `{"model":"m","input_tokens":1,"input_tokens":-1}`},
	} {
		f.Add(structured(f, data(d.typ, d.data)))
	}
	// The data member is split with the value in one pass: a repeated
	// "data" (the last counts), one whose name is escaped, one that is not
	// an object, objects nested in it.
	base := structured(f, data(topics.TypeNodeCreated, `{"role":"worker","capability":"c"}`))
	for _, edit := range []func(string) string{
		func(v string) string { return `{"data":{"role":"app_agent"},` + v[1:] },
		func(v string) string { return v[:len(v)-1] + `,"data":{"role":"app_agent","capability":"d"}}` },
		func(v string) string { return v[:len(v)-1] + `,"dat\u0061":{"role":"app_agent"}}` },
		func(v string) string { return v[:len(v)-1] + `,"data":"worker"}` },
		func(v string) string { return v[:len(v)-1] + `,"data":null}` },
		func(v string) string { return v[:len(v)-1] + `,"data":{"role":"worker","labels":{"data":{"role":1}}}}` },
		func(v string) string { return v[:len(v)-1] + `,"data":{"role":"worker","role":"app_agent"}}` },
		func(v string) string { return v[:len(v)-1] + `,"data":{"role":"worker"},"data":{"role":"worker"` },
	} {
		f.Add([]byte(edit(string(base))))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		ev, err := topics.DecodeEvent(value)
		want, wantErr := topics.DecodeEventOracle(value)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("the fast path %s what the oracle %s:\nfast: %v\noracle: %v", verdict(err), verdict(wantErr), err, wantErr)
		}
		if err != nil {
			var de, we *topics.DecodeError
			if !errors.As(err, &de) || !errors.As(wantErr, &we) || !reflect.DeepEqual(de, we) || err.Error() != wantErr.Error() {
				t.Fatalf("errors differ:\nfast:   %#v\noracle: %#v", err, wantErr)
			}
			return
		}
		if !reflect.DeepEqual(ev, want) {
			t.Fatalf("decoded events differ:\nfast:   %+v %+v\noracle: %+v %+v", ev, ev.Data, want, want.Data)
		}
	})
}

func verdict(err error) string {
	if err == nil {
		return "accepts"
	}
	return "rejects"
}
