package topics_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

func ptr[T any](v T) *T { return &v }

// fullWake has every field, pointer and slice set.
func fullWake() *topics.Wake {
	at := mustTime("2026-02-14T10:40:00.123Z")
	return &topics.Wake{
		WakeID:        "01JM0000000000000000000W01",
		SchemaVersion: topics.WakeSchemaVersion,
		RunID:         "run-1",
		Lane:          topics.LanePriority,
		Part:          &topics.WakePart{Number: 2, Count: 3},
		Triggers: []topics.Trigger{
			{Kind: topics.TriggerHumanInput, EventID: ptr("01JM0000000000000000000016"), AgentID: "human", CorrelationID: ptr("corr-1"), At: at,
				Detail: ptr("steer"), Input: &topics.TriggerInput{InputKind: "steer", Text: "Focus <on> 2025 & \"figures\"\n", ContentRef: "blob://in-1"}},
			{Kind: topics.TriggerLeaseExpired, EventID: nil, AgentID: "worker-7", CorrelationID: nil, At: at.Add(time.Second), Detail: ptr("pool-a")},
		},
		AgentTreeSnapshot: topics.AgentTreeSnapshot{
			SnapshotID:   "snap-1",
			GeneratedAt:  at.Add(5 * time.Millisecond),
			AsOfEventSeq: 42,
			RootAgentID:  ptr("conductor"),
			Scope:        topics.Scope{RunID: "run-1", SessionID: ptr("session-1"), ThreadID: ptr("thread-1")},
			Nodes: []topics.NodeDigest{{
				AgentID: "worker-7", Role: topics.RoleWorker, ParentAgentID: ptr("conductor"),
				Status: topics.StatusBlocked, StatusUpdatedAt: ptr(at),
				LeaseOwner: ptr("pool-a"), LeaseExpiresAt: ptr(at.Add(time.Minute)), LeaseRemainingMs: ptr(int64(-1500)),
				ActiveRunID: ptr("run-1/worker-7"), ActiveTaskID: ptr("task-1"), Capability: ptr("search"),
				LastSignalKind: ptr(topics.SignalRequest), LastSignalAt: ptr(at), LastCorrelationID: ptr("corr-1"),
				OpenRequestCount: 2, LastRequestKind: ptr("approval"), RecentRequestDedupeKeys: []string{"k1", "k2", "k3"},
			}},
			Summary: topics.Summary{
				NodeCountTotal: 100, NodeCountIncluded: 1,
				CountsByStatus: topics.StatusCounts{Idle: 1, Running: 2, Blocked: 3, Failed: 4, Completed: 5, Unknown: 85},
				BlockedCount:   3, FailedCount: 4, OverdueLeaseCount: 1,
				ActiveCorrelationHandles: []string{"corr-1", "corr-2"}, OpenRequestCount: 2,
			},
			Truncated: true,
			TruncationMeta: topics.TruncationMeta{
				OmittedCountTotal: 99, OmittedByStatus: topics.StatusCounts{Idle: 1, Running: 2, Blocked: 2, Failed: 4, Completed: 5, Unknown: 85},
				ByteBudget: 24000, PolicyVersion: "v1", OmittedCorrelationHandles: 3, CutStrings: 7,
			},
			Stale:         true,
			SnapshotAgeMs: 3100,
		},
	}
}

// checkAllSet fails on a zero exported field anywhere in v, except at the
// paths in allowZero: a round trip of v then covers every field.
func checkAllSet(t *testing.T, path string, v reflect.Value, allowZero map[string]bool) {
	t.Helper()
	if allowZero[path] {
		return
	}
	if v.IsZero() {
		t.Errorf("%s is not set", path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		checkAllSet(t, path, v.Elem(), allowZero)
	case reflect.Slice:
		for i := range v.Len() {
			checkAllSet(t, path+"[]", v.Index(i), allowZero)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[topics.Time]() {
			return
		}
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				checkAllSet(t, path+"."+f.Name, v.Field(i), allowZero)
			}
		}
	}
}

func TestWakeRoundTrip(t *testing.T) {
	w := fullWake()
	checkAllSet(t, "Wake", reflect.ValueOf(w), map[string]bool{
		"Wake.Triggers[].EventID": true, "Wake.Triggers[].CorrelationID": true, "Wake.Triggers[].Input": true, // nil in the timer trigger
	})
	b, err := topics.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := topics.DecodeWake(b)
	if err != nil {
		t.Fatalf("DecodeWake: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, w)
	}
	b2, err := topics.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Errorf("re-encoding differs:\n%s\n%s", b, b2)
	}
	if !bytes.Contains(b, []byte(`"text":"Focus <on> 2025 & \"figures\"\n"`)) {
		t.Errorf("text is HTML-escaped or altered: %s", b)
	}
	// A timer trigger has explicit nulls, not missing keys.
	if !bytes.Contains(b, []byte(`{"kind":"lease_expired","event_id":null,"agent_id":"worker-7","correlation_id":null,`)) {
		t.Errorf("timer trigger: %s", b)
	}
}

// Seed 000: every snapshot field is always present; a missing fact is null.
func TestWakeMinimalHasEveryKey(t *testing.T) {
	w := topics.Wake{WakeID: "w", SchemaVersion: 1, RunID: "r", Lane: topics.LaneNormal,
		AgentTreeSnapshot: topics.AgentTreeSnapshot{GeneratedAt: topics.UnixMilliTime(1), Nodes: []topics.NodeDigest{{AgentID: "a", Role: topics.RoleUnknown, Status: topics.StatusUnknown}}}}
	b, err := topics.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		`"root_agent_id":null`, `"session_id":null`, `"thread_id":null`, `"truncated":false`, `"truncation_meta":{`,
		`"parent_agent_id":null`, `"status_updated_at":null`, `"lease_owner":null`, `"lease_expires_at":null`,
		`"lease_remaining_ms":null`, `"active_run_id":null`, `"active_task_id":null`, `"capability":null`,
		`"last_signal_kind":null`, `"last_signal_at":null`, `"last_correlation_id":null`, `"last_request_kind":null`,
		`"recent_request_dedupe_keys":null`, `"counts_by_status":{"idle":0,"running":0,"blocked":0,"failed":0,"completed":0,"unknown":0}`,
		`"stale":false`, `"snapshot_age_ms":0`,
	} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("minimal wake lacks %s:\n%s", key, b)
		}
	}
	if _, err := topics.DecodeWake(b); err != nil {
		t.Errorf("DecodeWake(minimal): %v", err)
	}
}

func TestDecodeWakeInvalid(t *testing.T) {
	valid, err := topics.Marshal(fullWake())
	if err != nil {
		t.Fatal(err)
	}
	// edit decodes valid into a generic map, changes it and re-encodes.
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(valid, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	snap := func(m map[string]any) map[string]any { return m["agent_tree_snapshot"].(map[string]any) }
	cases := []struct {
		name string
		in   string
		want error
		msgs []string
	}{
		{"not JSON", `wake`, topics.ErrInvalidEvent, []string{"wake: invalid JSON"}},
		{"empty", ``, topics.ErrInvalidEvent, []string{"wake: "}},
		{"array", `[]`, topics.ErrInvalidEvent, []string{"wake: "}},
		{"trailing data", string(valid) + ` {}`, topics.ErrInvalidEvent, []string{"wake: trailing data"}},
		{"trailing garbage", string(valid) + `x`, topics.ErrInvalidEvent, []string{"wake: trailing data"}},
		{"unknown top-level field", edit(func(m map[string]any) { m["priority"] = 1 }), topics.ErrInvalidEvent, []string{`unknown field "priority"`}},
		{"unknown snapshot field", edit(func(m map[string]any) { snap(m)["extra"] = true }), topics.ErrInvalidEvent, []string{`unknown field "extra"`}},
		{"unknown node field", edit(func(m map[string]any) { snap(m)["nodes"].([]any)[0].(map[string]any)["mood"] = "ok" }), topics.ErrInvalidEvent, []string{`unknown field "mood"`}},
		{"unknown trigger field", edit(func(m map[string]any) { m["triggers"].([]any)[0].(map[string]any)["why"] = "x" }), topics.ErrInvalidEvent, []string{`unknown field "why"`}},
		{"camelCase field", edit(func(m map[string]any) { m["wakeId"] = m["wake_id"]; delete(m, "wake_id") }), topics.ErrInvalidEvent, []string{`unknown field "wakeId"`}},
		{"bad lane", edit(func(m map[string]any) { m["lane"] = "urgent" }), topics.ErrInvalidEvent, []string{`lane: want normal|priority, got "urgent"`}},
		{"missing lane", edit(func(m map[string]any) { delete(m, "lane") }), topics.ErrInvalidEvent, []string{`lane: want normal|priority, got ""`}},
		{"upper-case lane", edit(func(m map[string]any) { m["lane"] = "PRIORITY" }), topics.ErrInvalidEvent, []string{`lane: want normal|priority, got "PRIORITY"`}},
		{"missing wake_id", edit(func(m map[string]any) { delete(m, "wake_id") }), topics.ErrInvalidEvent, []string{"wake_id: required"}},
		{"missing run_id", edit(func(m map[string]any) { m["run_id"] = "" }), topics.ErrInvalidEvent, []string{"run_id: required"}},
		{"run_id control", edit(func(m map[string]any) { m["run_id"] = "r\n" }), topics.ErrInvalidEvent, []string{"run_id: contains a control character"}},
		{"wake_id number", edit(func(m map[string]any) { m["wake_id"] = 7 }), topics.ErrInvalidEvent, []string{"wake: ", "wake_id"}},
		{"bad trigger time", edit(func(m map[string]any) { m["triggers"].([]any)[0].(map[string]any)["at"] = "later" }), topics.ErrInvalidEvent,
			[]string{`triggers.at: want an RFC 3339 timestamp like 2026-02-14T10:40:00Z, got "later"`}},
		{"null generated_at", edit(func(m map[string]any) { snap(m)["generated_at"] = nil }), topics.ErrInvalidEvent,
			[]string{"agent_tree_snapshot.generated_at: want an RFC 3339 timestamp string, got null"}},
		{"schema_version 2", edit(func(m map[string]any) { m["schema_version"] = 2 }), topics.ErrUnsupportedVersion,
			[]string{"wake schema_version 2 is newer than this build speaks (1)"}},
		{"schema_version 2 with unknown field", edit(func(m map[string]any) { m["schema_version"] = 2; m["new_thing"] = 1 }), topics.ErrInvalidEvent,
			[]string{`unknown field "new_thing"`}},
		{"schema_version string", edit(func(m map[string]any) { m["schema_version"] = "1" }), topics.ErrInvalidEvent, []string{"schema_version"}},
		{"part number 0", edit(func(m map[string]any) { m["part"] = map[string]any{"number": 0, "count": 3} }), topics.ErrInvalidEvent,
			[]string{"part: want 1 <= number <= count and count >= 2, got number 0 of count 3"}},
		{"part number over count", edit(func(m map[string]any) { m["part"] = map[string]any{"number": 4, "count": 3} }), topics.ErrInvalidEvent,
			[]string{"part: want 1 <= number <= count and count >= 2, got number 4 of count 3"}},
		{"part of one", edit(func(m map[string]any) { m["part"] = map[string]any{"number": 1, "count": 1} }), topics.ErrInvalidEvent,
			[]string{"part: want 1 <= number <= count and count >= 2, got number 1 of count 1"}},
		{"part negative", edit(func(m map[string]any) { m["part"] = map[string]any{"number": -1, "count": -1} }), topics.ErrInvalidEvent, []string{"part: "}},
		{"part without count", edit(func(m map[string]any) { m["part"] = map[string]any{"number": 1} }), topics.ErrInvalidEvent, []string{"got number 1 of count 0"}},
		{"part unknown field", edit(func(m map[string]any) { m["part"] = map[string]any{"number": 1, "count": 2, "of": 2} }), topics.ErrInvalidEvent,
			[]string{`unknown field "of"`}},
		{"part string", edit(func(m map[string]any) { m["part"] = "1/2" }), topics.ErrInvalidEvent, []string{"part"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := topics.DecodeWake([]byte(c.in))
			if err == nil {
				t.Fatalf("DecodeWake accepted it: %+v", w)
			}
			if w != nil {
				t.Errorf("wake returned with an error: %+v", w)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) != (s == c.want) {
					t.Errorf("errors.Is(%v) = %v: %v", s, !(s == c.want), err)
				}
			}
			for _, m := range c.msgs {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error does not contain %q:\n%v", m, err)
				}
			}
		})
	}
}

// TestDecodeWakeParts: a wake without part (not split) and every part of a
// split decode, with part as sent.
func TestDecodeWakeParts(t *testing.T) {
	w := fullWake()
	w.Part = nil
	b, _ := topics.Marshal(w)
	if bytes.Contains(b, []byte(`"part"`)) {
		t.Errorf("a wake that was not split has a part: %s", b)
	}
	if got, err := topics.DecodeWake(b); err != nil || got.Part != nil {
		t.Errorf("a wake that was not split: %+v, %v", got, err)
	}
	for _, p := range []topics.WakePart{{Number: 1, Count: 2}, {Number: 2, Count: 2}, {Number: 7, Count: 79}} {
		w.Part = &p
		b, _ := topics.Marshal(w)
		if want := fmt.Sprintf(`"lane":"priority","part":{"number":%d,"count":%d},"triggers":[`, p.Number, p.Count); !bytes.Contains(b, []byte(want)) {
			t.Errorf("part %+v is not encoded as %s: %s", p, want, b)
		}
		got, err := topics.DecodeWake(b)
		if err != nil || got.Part == nil || *got.Part != p {
			t.Errorf("part %+v: %+v, %v", p, got, err)
		}
	}
}

func TestDecodeWakeLanes(t *testing.T) {
	for _, l := range []topics.Lane{topics.LaneNormal, topics.LanePriority} {
		w := fullWake()
		w.Lane = l
		b, _ := topics.Marshal(w)
		got, err := topics.DecodeWake(b)
		if err != nil || got.Lane != l {
			t.Errorf("lane %s: %v, %v", l, got, err)
		}
	}
}

func TestStatusCounts(t *testing.T) {
	var c topics.StatusCounts
	for i, s := range topics.Statuses {
		c.Add(s, i+1)
	}
	c.Add("bogus", 10) // anything else counts as unknown
	c.Add(topics.StatusRunning, -1)
	want := topics.StatusCounts{Idle: 1, Running: 1, Blocked: 3, Failed: 4, Completed: 5, Unknown: 16}
	if c != want {
		t.Errorf("counts = %+v, want %+v", c, want)
	}
	for _, s := range topics.Statuses {
		if got := c.Get(s); got != reflect.ValueOf(want).FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, string(s)) }).Interface().(int) {
			t.Errorf("Get(%s) = %d", s, got)
		}
	}
	if c.Get("bogus") != 16 {
		t.Errorf("Get(bogus) = %d", c.Get("bogus"))
	}
	if c.Total() != 30 {
		t.Errorf("Total = %d", c.Total())
	}
	// Contract order: the JSON keys follow Statuses.
	b, _ := json.Marshal(c)
	last := -1
	for _, s := range topics.Statuses {
		i := bytes.Index(b, []byte(`"`+string(s)+`":`))
		if i < last {
			t.Errorf("%s out of order in %s", s, b)
		}
		last = i
	}
	if len(topics.ReportableStatuses) != len(topics.Statuses)-1 {
		t.Errorf("ReportableStatuses = %v", topics.ReportableStatuses)
	}
	for _, s := range topics.ReportableStatuses {
		if s == topics.StatusUnknown {
			t.Error("unknown is reportable")
		}
	}
}
