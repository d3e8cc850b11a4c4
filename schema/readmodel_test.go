package schema_test

// read-model.schema.json against Go: the read models the real projection
// builds are valid, and the schema's fields and required fields are Go's
// (projection.ReadModel, recursively), so the document the gateway's
// OpenAPI references cannot drift from what the projector answers.

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

const readModelSchema = "read-model.schema.json"

func TestReadModelFromProjection(t *testing.T) {
	s := newSchemas(t)
	evs := decodedExamples(t)
	// A second run with more running nodes than a list holds, so that the
	// bounded lists are truncated; its runtime sends no activity, so that
	// every fact of it is unknown.
	const wide = "run-wide"
	at := t0
	ev := func(run, agent string, et topics.EventType, data topics.Payload) *topics.Event {
		at = at.Add(time.Millisecond)
		return &topics.Event{ID: fmt.Sprintf("01JM1%021d", len(evs)), Source: "/agents/" + agent, Type: et, Time: at,
			RunID: run, AgentID: agent, SchemaVersion: 1, Data: data}
	}
	evs = append(evs, ev(wide, "root", topics.TypeNodeCreated, &topics.NodeCreated{Role: topics.RoleConductor}))
	for i := range projection.MaxReadModelList + 5 {
		w := fmt.Sprintf("w-%02d", i)
		evs = append(evs, ev(wide, w, topics.TypeNodeCreated, &topics.NodeCreated{ParentAgentID: "root", Role: topics.RoleWorker}))
		evs = append(evs, ev(wide, w, topics.TypeNodeStatus, &topics.NodeStatus{Status: topics.StatusRunning}))
	}
	evs = append(evs, activityRuns(t)...)
	p, err := projection.New(projection.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if _, _, err := p.ApplyEvent(e); err != nil {
			t.Fatalf("%s: %v", e.ID, err)
		}
	}
	ids := p.RunIDs()
	slices.Sort(ids)
	if len(ids) < 4 {
		t.Fatalf("runs %v, want the examples', %s and the activity runs", ids, wide)
	}
	truncated := false
	// seen collects, per fact (checks.<name> for a diagnostic check), the
	// statuses it had over the runs, and the interrupt states.
	seen := map[string]map[string]bool{}
	for _, id := range ids {
		for _, stale := range []bool{false, true} {
			m, err := p.ReadModel(id, t0.Std().Add(time.Hour), stale)
			if err != nil {
				t.Fatal(err)
			}
			truncated = truncated || m.Active.Truncated
			enc, err := json.Marshal(m) // as the projector's query server encodes it
			if err != nil {
				t.Fatal(err)
			}
			if err := s.validate(readModelSchema, enc); err != nil {
				t.Errorf("run %s, stale %v: read-model.schema.json refuses %s: %v", id, stale, clip(enc), err)
			}
			if !stale {
				collectStatuses(t, enc, seen)
			}
		}
	}
	if !truncated {
		t.Error("no truncated list was exercised")
	}
	// Every fact was known in some run (and so its value validated), and
	// unknown in the run without activity; the blocked and not_applicable
	// facts were exercised too.
	for _, name := range factNames() {
		if !seen[name]["known"] {
			t.Errorf("fact %s was never known: no run gave its value to validate (statuses %v)", name, slices.Sorted(maps.Keys(seen[name])))
		}
	}
	for _, name := range []string{"active_turn_id", "active_turns", "last_outcome", "active_incidents", "queued_turns",
		"latest_compaction_boundary", "tool_summary", "artifact_summary", "evidence_summary", "model_routing", "limit_state",
		"permission_state", "sandbox_profile", "active_processes", "execution_environment", "remote_channel_state",
		"telemetry_correlation", "checks.failed_tools", "checks.failed_commands", "checks.stalled_turns", "checks.quota_blocks",
		"checks.context_gaps"} {
		if !seen[name]["unknown"] {
			t.Errorf("fact %s was never unknown (statuses %v)", name, slices.Sorted(maps.Keys(seen[name])))
		}
	}
	for name, st := range map[string]string{"limit_state": "blocked", "permission_state": "blocked", "job_progress": "not_applicable",
		"interrupt_state=none": "known", "interrupt_state=pending": "known", "interrupt_state=honoured": "known"} {
		if !seen[name][st] {
			t.Errorf("fact %s was never %s (statuses %v)", name, st, slices.Sorted(maps.Keys(seen[name])))
		}
	}
}

// activityRuns are two runs of the demo workload with the activity
// vocabulary (Spec.Activity), so that every fact of the read model is
// known in one of them. run-activity keeps its approvals waiting (its
// permission state is blocked), carries trace ids and has an interrupt
// pending; run-settled has its approvals resolved, a limit exhausted
// (blocked) and its interrupt honoured by the turn that ends interrupted.
func activityRuns(t *testing.T) []*topics.Event {
	t.Helper()
	var out []*topics.Event
	at := t0.Std()
	add := func(run, agent string, data topics.Payload) {
		at = at.Add(time.Millisecond)
		out = append(out, &topics.Event{ID: fmt.Sprintf("01JM2%021d", len(out)), Source: "/agents/" + agent, Type: data.EventType(),
			Time: topics.NewTime(at), RunID: run, AgentID: agent, SchemaVersion: 1, Data: data})
	}
	approvals := map[string][]string{}
	for _, run := range []string{"run-activity", "run-settled"} {
		gen := workload.Generate(workload.Spec{RunID: run, SessionID: "s-demo", Nodes: 60, Activity: true, Start: t0.Std(), Step: time.Millisecond, Seed: 11})
		for i := range gen {
			e := &gen[i]
			if run == "run-activity" && i%5 == 0 {
				e.TraceID = fmt.Sprintf("%032x", 1+i/100) // as a traceparent header gives it
			}
			if q, ok := e.Data.(*topics.Request); ok && topics.IsApproval(q.RequestKind) {
				approvals[run] = append(approvals[run], q.RequestID)
			}
			if e.Time.Std().After(at) {
				at = e.Time.Std()
			}
			out = append(out, e)
		}
		if len(approvals[run]) == 0 {
			t.Fatalf("the workload's %s asks for no approval", run)
		}
	}
	add("run-activity", "human", &topics.Input{InputKind: "interrupt", Text: "stop"})
	for _, q := range approvals["run-settled"] {
		add("run-settled", "conductor", &topics.RequestResolved{RequestID: q, Resolution: "approved"})
	}
	add("run-settled", "human", &topics.Input{InputKind: "interrupt", Text: "stop"})
	add("run-settled", "conductor", &topics.TurnCompleted{TurnID: "turn-2", Outcome: "interrupted"})
	add("run-settled", "conductor", &topics.LimitUpdated{LimitKind: "tokens", State: "exhausted"})
	return out
}

// factNames are the JSON names of the read model's facts (every field of
// type projection.Fact), the diagnostics' checks as checks.<name>.
func factNames() []string {
	var out []string
	for prefix, typ := range map[string]reflect.Type{"": reflect.TypeFor[projection.ReadModel](), "checks.": reflect.TypeFor[projection.DiagnosticChecks]()} {
		for _, f := range jsonFields(typ) {
			if strings.HasPrefix(f.typ.Name(), "Fact[") {
				out = append(out, prefix+f.name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// collectStatuses adds the status of each fact of an encoded read model to
// seen, and the interrupt state as interrupt_state=<value>.
func collectStatuses(t *testing.T, enc []byte, seen map[string]map[string]bool) {
	t.Helper()
	type fact struct {
		Status string `json:"status"`
		Value  any    `json:"value"`
	}
	var m map[string]json.RawMessage
	var d struct {
		Checks map[string]fact `json:"checks"`
	}
	if err := json.Unmarshal(enc, &m); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m["diagnostics"], &d); err != nil {
		t.Fatal(err)
	}
	mark := func(name, status string) {
		if seen[name] == nil {
			seen[name] = map[string]bool{}
		}
		seen[name][status] = true
	}
	for _, name := range factNames() {
		var f fact
		if c, ok := strings.CutPrefix(name, "checks."); ok {
			f = d.Checks[c]
		} else if err := json.Unmarshal(m[name], &f); err != nil {
			t.Fatalf("fact %s: %v", name, err)
		}
		mark(name, f.Status)
	}
	if v, ok := d.Checks["interrupt_state"].Value.(string); ok {
		mark("interrupt_state="+v, d.Checks["interrupt_state"].Status)
	}
}

// TestReadModelFieldsMatchGo checks every object of read-model.schema.json
// against the Go struct encoded there: the same field names, required
// exactly when Go always encodes them, and no others.
func TestReadModelFieldsMatchGo(t *testing.T) {
	dir := schemaDir(t)
	docs := map[string]map[string]any{}
	doc := func(file string) map[string]any {
		if docs[file] == nil {
			docs[file] = readJSON(t, filepath.Join(dir, file))
		}
		return docs[file]
	}
	// deref follows $refs (within a file, or into wake.schema.json) and
	// the non-null branch of an anyOf with null.
	var deref func(file string, s map[string]any) (string, map[string]any)
	deref = func(file string, s map[string]any) (string, map[string]any) {
		if ref, ok := s["$ref"].(string); ok {
			f, frag, _ := strings.Cut(ref, "#")
			if f != "" {
				file = f
			}
			target := doc(file)
			if name, ok := strings.CutPrefix(frag, "/$defs/"); ok {
				target = target["$defs"].(map[string]any)[name].(map[string]any)
			} else if frag != "" {
				t.Fatalf("%s: $ref %s", file, ref)
			}
			return deref(file, target)
		}
		if alts, ok := s["anyOf"].([]any); ok && len(alts) == 2 {
			for _, b := range alts {
				if b.(map[string]any)["type"] != "null" {
					return deref(file, b.(map[string]any))
				}
			}
		}
		return file, s
	}
	marshaler := reflect.TypeFor[json.Marshaler]()
	var check func(where, file string, s map[string]any, typ reflect.Type)
	check = func(where, file string, s map[string]any, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		file, s = deref(file, s)
		if typ.Implements(marshaler) || reflect.PointerTo(typ).Implements(marshaler) {
			return // encodes itself (topics.Time): a scalar
		}
		switch typ.Kind() {
		case reflect.Slice:
			items, _ := s["items"].(map[string]any)
			if s["type"] != "array" || items == nil {
				t.Errorf("%s: Go has a list, the schema %v", where, s["type"])
				return
			}
			check(where+"[]", file, items, typ.Elem())
		case reflect.Struct:
			props, _ := s["properties"].(map[string]any)
			if s["additionalProperties"] != false {
				t.Errorf("%s: additionalProperties must be false", where)
			}
			var goProps, goReq []string
			for _, f := range jsonFields(typ) {
				goProps = append(goProps, f.name)
				if f.required {
					goReq = append(goReq, f.name)
				}
				if p, ok := props[f.name].(map[string]any); ok {
					check(where+"."+f.name, file, p, f.typ)
				}
			}
			var have []string
			for k := range props {
				have = append(have, k)
			}
			req := toStrings(s["required"])
			for _, l := range [][]string{have, req, goProps, goReq} {
				slices.Sort(l)
			}
			if !slices.Equal(have, goProps) {
				t.Errorf("%s: schema fields %v, Go fields %v", where, have, goProps)
			}
			if !slices.Equal(req, goReq) {
				t.Errorf("%s: schema requires %v, Go always encodes %v", where, req, goReq)
			}
		}
	}
	check("read model", readModelSchema, doc(readModelSchema), reflect.TypeFor[projection.ReadModel]())

	// The node enums are the snapshot's.
	defs := doc(readModelSchema)["$defs"].(map[string]any)
	node := doc(wakeSchema)["$defs"].(map[string]any)["nodeDigest"].(map[string]any)["properties"].(map[string]any)
	for _, e := range []string{"role", "status"} {
		if got, want := toStrings(defs[e].(map[string]any)["enum"]), toStrings(node[e].(map[string]any)["enum"]); !slices.Equal(got, want) {
			t.Errorf("read model %s enum %v, the snapshot's %v", e, got, want)
		}
	}
	var avail []string
	for _, a := range []projection.Availability{projection.Known, projection.Unknown, projection.Unavailable, projection.NotApplicable, projection.Stale, projection.Blocked} {
		avail = append(avail, string(a))
	}
	if got := toStrings(defs["availability"].(map[string]any)["enum"]); !slices.Equal(got, avail) {
		t.Errorf("availability enum %v, Go's %v", got, avail)
	}
	// The activity's enums are the vocabulary's (pkg/topics activity.go).
	for def, want := range map[string][]string{"turnOutcomeKind": topics.TurnOutcomes, "callKind": topics.CallKinds,
		"callOutcome": topics.CallOutcomes, "verdict": topics.EvidenceVerdicts, "severity": topics.Severities,
		"environment": topics.Environments, "limitState": topics.LimitStates, "permissionMode": topics.PermissionModes,
		"channelState": topics.ChannelStates, "artifactType": topics.ArtifactTypes} {
		if got := toStrings(defs[def].(map[string]any)["enum"]); !slices.Equal(got, want) {
			t.Errorf("%s enum %v, Go's %v", def, got, want)
		}
	}
}
