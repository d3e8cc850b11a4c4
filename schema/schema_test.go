package schema_test

// These tests keep the JSON Schema files under schema/ and the Go contract in
// pkg/topics in step: every schema compiles, every example in the repository
// is valid for both, Go's encoding of every event type is schema-valid, a
// table of broken events is refused by both, and a wake built by the real
// projection is schema-valid. No network: schemas are loaded from disk by
// mapping their $id base URL to the schema/ directory.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// baseURL is the $id prefix of every schema file; the rest of the $id is the
// file's path under schema/.
const baseURL = "https://canopy.dev/schema/"

// repoRoot walks up from the working directory to the directory of go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

func schemaDir(t testing.TB) string { return filepath.Join(repoRoot(t), "schema") }

// dirLoader serves baseURL from the schema directory and refuses anything
// else, so that compiling never touches the network.
type dirLoader struct{ dir string }

func (l dirLoader) Load(url string) (any, error) {
	rel, ok := strings.CutPrefix(url, baseURL)
	if !ok {
		return nil, fmt.Errorf("schema loader: %s is outside %s (no network in tests)", url, baseURL)
	}
	f, err := os.Open(filepath.Join(l.dir, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return jsonschema.UnmarshalJSON(f)
}

// schemas compiles schema files on demand, by path under schema/. It
// reports problems as errors, so it may be shared by subtests.
type schemas struct {
	c        *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

func newSchemas(t testing.TB) *schemas {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(dirLoader{schemaDir(t)})
	return &schemas{c: c, compiled: map[string]*jsonschema.Schema{}}
}

// compile returns the compiled schema of a file, e.g. "events/event.schema.json".
func (s *schemas) compile(rel string) (*jsonschema.Schema, error) {
	if sch, ok := s.compiled[rel]; ok {
		return sch, nil
	}
	sch, err := s.c.Compile(baseURL + rel)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", rel, err)
	}
	s.compiled[rel] = sch
	return sch, nil
}

func typeSchema(t topics.EventType) string { return "events/" + string(t) + ".schema.json" }

const (
	eventSchema    = "events/event.schema.json"
	envelopeSchema = "events/envelope.schema.json"
	wakeSchema     = "wake.schema.json"
)

// validate validates JSON bytes against a schema file. A schema that does
// not compile is an error too, so callers never mistake it for a refusal:
// tests of refusals check errSchema first.
func (s *schemas) validate(rel string, doc []byte) error {
	sch, err := s.compile(rel)
	if err != nil {
		return &schemaError{err}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	verr := sch.Validate(v)
	if hasDraft07(rel) {
		// The draft-07 rendering (draft07_test.go) must give the same
		// verdict on every document any test validates.
		sch7, err := s.compile(draft07Dir + rel)
		if err != nil {
			return &schemaError{err}
		}
		if err7 := sch7.Validate(v); (err7 == nil) != (verr == nil) {
			return &schemaError{fmt.Errorf("schema/%s%s disagrees with schema/%s on %s:\n2020-12: %v\ndraft-07: %v", draft07Dir, rel, rel, clip(doc), verr, err7)}
		}
	}
	return verr
}

// schemaError is a schema that does not compile, as opposed to a document
// the schema refuses.
type schemaError struct{ err error }

func (e *schemaError) Error() string { return e.err.Error() }

// refuses reports whether the schema rel refuses doc; a schema that does not
// compile fails the test instead.
func (s *schemas) refuses(t testing.TB, rel string, doc []byte) bool {
	t.Helper()
	err := s.validate(rel, doc)
	var se *schemaError
	if errors.As(err, &se) {
		t.Fatal(err)
	}
	return err != nil
}

// schemaFiles lists every *.json under schema/ except the examples and the
// generated draft-07 renderings, as slash-separated paths relative to
// schema/.
func schemaFiles(t testing.TB) []string {
	t.Helper()
	dir := schemaDir(t)
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == filepath.Join(dir, "examples") || path == filepath.Join(dir, "draft-07")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".json") {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readJSON decodes a file into a generic value.
func readJSON(t testing.TB, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func TestSchemasCompile(t *testing.T) {
	files := schemaFiles(t)
	if len(files) < len(topics.EventTypes())+3 {
		t.Fatalf("found only %d schema files: %v", len(files), files)
	}
	s := newSchemas(t)
	for _, rel := range files {
		t.Run(rel, func(t *testing.T) {
			doc := readJSON(t, filepath.Join(schemaDir(t), filepath.FromSlash(rel)))
			if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v, want draft 2020-12", got)
			}
			// Relative $refs resolve against $id, so it must name the file.
			if got, want := doc["$id"], baseURL+rel; got != want {
				t.Errorf("$id = %v, want %s", got, want)
			}
			if _, err := s.compile(rel); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestEveryTypeCovered checks that the schemas, the examples and Go know the
// same event types.
func TestEveryTypeCovered(t *testing.T) {
	dir := schemaDir(t)
	var want []string
	for _, et := range topics.EventTypes() {
		want = append(want, string(et))
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(typeSchema(et)))); err != nil {
			t.Errorf("type %s has no schema: %v", et, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "examples", string(et)+".json")); err != nil {
			t.Errorf("type %s has no example: %v", et, err)
		}
	}
	for _, rel := range schemaFiles(t) {
		name, ok := strings.CutSuffix(strings.TrimPrefix(rel, "events/"), ".schema.json")
		if !strings.HasPrefix(rel, "events/") || !ok || name == "envelope" || name == "event" {
			continue
		}
		if !topics.EventType(name).Known() {
			t.Errorf("%s: schema of a type Go does not know", rel)
		}
	}
	examples, _ := filepath.Glob(filepath.Join(dir, "examples", "*.json"))
	for _, p := range examples {
		if name := strings.TrimSuffix(filepath.Base(p), ".json"); !topics.EventType(name).Known() {
			t.Errorf("%s: example of a type Go does not know", p)
		}
	}
	// The dispatch schema's list of types.
	doc := readJSON(t, filepath.Join(dir, "events", "event.schema.json"))
	var got []string
	for _, part := range doc["allOf"].([]any) {
		p := part.(map[string]any)
		if props, ok := p["properties"].(map[string]any); ok {
			for _, v := range props["type"].(map[string]any)["enum"].([]any) {
				got = append(got, v.(string))
			}
		}
		if then, ok := p["then"].(map[string]any); ok {
			typ := p["if"].(map[string]any)["properties"].(map[string]any)["type"].(map[string]any)["const"].(string)
			if ref := then["$ref"]; ref != typ+".schema.json" {
				t.Errorf("event.schema.json: type %s dispatches to %v", typ, ref)
			}
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("event.schema.json types = %v\nGo types = %v", got, want)
	}
}

// example is one event found in the repository.
type example struct {
	name string // file, or file:line
	doc  []byte
}

// repoExamples returns schema/examples/*.json and every non-blank line of
// every examples/**/*.jsonl file (there may be none).
func repoExamples(t testing.TB) []example {
	t.Helper()
	root := repoRoot(t)
	var out []example
	files, _ := filepath.Glob(filepath.Join(root, "schema", "examples", "*.json"))
	slices.Sort(files)
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, example{filepath.ToSlash(rel), b})
	}
	exdir := filepath.Join(root, "examples")
	if _, err := os.Stat(exdir); errors.Is(err, fs.ErrNotExist) {
		return out
	}
	err := filepath.WalkDir(exdir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(root, path)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for n := 1; sc.Scan(); n++ {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			out = append(out, example{fmt.Sprintf("%s:%d", filepath.ToSlash(rel), n), bytes.Clone(line)})
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExamplesValid(t *testing.T) {
	s := newSchemas(t)
	exs := repoExamples(t)
	if len(exs) < len(topics.EventTypes()) {
		t.Fatalf("found %d examples, want at least one per type (%d)", len(exs), len(topics.EventTypes()))
	}
	bad := 0
	for _, ex := range exs {
		if bad >= 20 {
			t.Fatalf("stopping after %d invalid examples", bad)
		}
		var head struct {
			Type topics.EventType `json:"type"`
		}
		if err := json.Unmarshal(ex.doc, &head); err != nil {
			t.Errorf("%s: not a JSON object: %v", ex.name, err)
			bad++
			continue
		}
		if base, ok := strings.CutPrefix(ex.name, "schema/examples/"); ok && base != string(head.Type)+".json" {
			t.Errorf("%s: holds a %s event", ex.name, head.Type)
		}
		if !head.Type.Known() {
			t.Errorf("%s: unknown type %q", ex.name, head.Type)
			bad++
			continue
		}
		failed := false
		if err := s.validate(typeSchema(head.Type), ex.doc); err != nil {
			t.Errorf("%s: invalid for %s: %v", ex.name, typeSchema(head.Type), err)
			failed = true
		}
		if err := s.validate(eventSchema, ex.doc); err != nil {
			t.Errorf("%s: invalid for %s: %v", ex.name, eventSchema, err)
			failed = true
		}
		if _, err := topics.DecodeEvent(ex.doc); err != nil {
			t.Errorf("%s: DecodeEvent: %v", ex.name, err)
			failed = true
		}
		if failed {
			bad++
		}
	}
}

var t0 = topics.NewTime(time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC))

// fill sets a payload's fields to valid values: only the required ones when
// minimal, every one otherwise. It fails on a payload type it does not know,
// so that a new event type cannot go untested.
func fill(t testing.TB, p topics.Payload, minimal bool) {
	t.Helper()
	full := !minimal
	yes, no := true, false
	frac := 0.5
	zero, minusOne := int64(0), int64(-1)
	due := t0.Add(10 * time.Minute)
	switch p := p.(type) {
	case *topics.NodeCreated:
		p.Role = topics.RoleAppAgent
		if full {
			p.ParentAgentID, p.Capability, p.TaskID = "conductor-1", "web_research", "task-7"
		}
	case *topics.NodeDelegated:
		if full {
			p.ExpectedBy, p.TaskID, p.ChildRunID, p.ChildSessionKey, p.Capability = &due, "task-7", "run-demo-1/worker-1", "session-worker-1", "web_research"
		}
	case *topics.NodeStatus:
		p.Status = topics.StatusBlocked
		if full {
			p.Reason = "guard:maxDepth"
		}
	case *topics.NodeCompleted:
		if full {
			p.ResultSource = "history_fetch"
		}
	case *topics.Result: // keeps its unexported type: set fields one by one
		if full {
			p.ResultKind, p.Success, p.ArtifactIDs, p.PrimaryArtifactID = "hybrid", &yes, []string{"artifact-1", "artifact-2"}, "artifact-1"
		}
	case *topics.PlanCreated:
		p.PlanID, p.BandCount = "plan-1", 3
		if full {
			p.Replan = true
		}
	case *topics.PlanBandCreated:
		p.PlanID, p.BandIndex, p.StepCount = "plan-1", 1, 4
		if full {
			p.Parallelizable = true
		}
	case *topics.StepCreated:
		p.PlanID, p.BandIndex, p.StepID, p.StepIndex = "plan-1", 1, "step-3", 2
		if full {
			p.ChildAgentID = "worker-3"
		}
	case *topics.ArtifactCreated:
		p.ArtifactID, p.ArtifactType = "artifact-1", "json"
		if full {
			p.Label, p.IsPrimary = "result.json", true
		}
	case *topics.ParentHint:
		p.HintType = "read_json"
		if full {
			p.ArtifactIDs = []string{"artifact-1"}
		}
	case *topics.ScratchpadUpdated:
		p.ScratchpadID = "scratchpad-1"
		if full {
			p.Ref, p.AppendedBytes = "s3://bucket/scratchpad-1.md", 1024
		}
	case *topics.ReplanRequested:
		if full {
			p.PlanID, p.ReasonCode = "plan-1", "child_failed"
		}
	case *topics.Lease:
		p.Owner, p.ExpiresAt = "worker-pool-a", due
	case *topics.LeaseReleased:
		if full {
			p.Owner = "worker-pool-a"
		}
	case *topics.Progress:
		if full {
			p.Fraction, p.StepID = &frac, "step-3"
		}
	case *topics.Failed:
		p.ErrorCode = "tool_timeout"
		if full {
			p.Retryable = true
		}
	case *topics.Request:
		p.RequestID, p.RequestKind = "req-1", "clarification"
		if full {
			p.DedupeKey, p.TTLMs = "ask-1", 120000
		}
	case *topics.RequestResolved:
		p.RequestID = "req-1"
		if full {
			p.Resolution = "expired"
		}
	case *topics.Heartbeat:
	case *topics.Input:
		p.InputKind = "steer"
		if full {
			p.InputID, p.Text, p.ContentRef = "input-1", "Focus on the EU market.\nSkip the rest.", "s3://bucket/input-1.txt"
		}
	case *topics.WakeReceived:
		p.WakeID = "01JM0000000000000000000100"
		if full {
			p.SnapshotID, p.AgentIDs = "01JM0000000000000000000101", []string{"worker-1", "worker-2"}
		}
	case *topics.TurnQueued:
		p.TurnID = "turn-2"
		if full {
			p.InputID = "input-1"
		}
	case *topics.TurnStarted:
		p.TurnID = "turn-1"
		if full {
			p.InputID = "input-1"
		}
	case *topics.TurnCompleted:
		p.TurnID, p.Outcome = "turn-1", "interrupted"
		if full {
			p.ErrorCode, p.Summary = "user_interrupt", "Read three sources;\tstopped at the fourth.\nNo draft yet."
		}
	case *topics.ToolStarted:
		p.CallID, p.ToolName = "call-1", "web_search"
		if full {
			p.CallKind, p.Command, p.TurnID = "command", `grep -rn "EU market" notes/ | head -n 20`, "turn-1"
		}
	case *topics.ToolFinished:
		p.CallID, p.Outcome = "call-1", "succeeded"
		if full {
			p.DurationMs, p.ExitCode, p.ErrorCode, p.OutputRef = 1250, &minusOne, "none", "s3://bucket/call-1.log"
		}
	case *topics.EvidenceRecorded:
		p.EvidenceID, p.EvidenceKind = "evidence-1", "test_run"
		if full {
			p.Verdict, p.ArtifactID, p.Ref = "inconclusive", "artifact-1", "s3://bucket/evidence-1.json"
		}
	case *topics.IncidentOpened:
		p.IncidentID, p.IncidentKind, p.Severity = "incident-1", "crash_loop", "critical"
		if full {
			p.Title = "Worker restarts every 30 s"
		}
	case *topics.IncidentResolved:
		p.IncidentID = "incident-1"
		if full {
			p.Resolution = "restarted"
		}
	case *topics.ProcessStarted:
		p.ProcessID = "process-1"
		if full {
			p.Command, p.Environment, p.EnvironmentRef, p.OutputRef = "npm run dev -- --port 5173", "vm", "vm-12", "s3://bucket/process-1.log"
		}
	case *topics.ProcessExited:
		p.ProcessID = "process-1"
		if full {
			p.ExitCode, p.Signal, p.OutputRef = &zero, "SIGKILL", "s3://bucket/process-1.log"
		}
	case *topics.ModelUsage:
		p.Model = "large-2026-01"
		if full {
			p.Provider, p.Profile, p.InputTokens, p.OutputTokens, p.CachedTokens, p.CostMicros = "provider-a", "cheap", 1<<40, 3, 0, 12
		}
	case *topics.LimitUpdated:
		p.LimitKind, p.State = "cost", "exhausted"
		if full {
			p.Remaining, p.ResetAt = &zero, &due
		}
	case *topics.RuntimeConfigured:
		p.NetworkAccess = &no // it names one field at least
		if full {
			p.PermissionMode, p.SandboxProfile, p.ExecutionEnvironment, p.EnvironmentRef = "read_only", "strict", "remote", "host-3"
		}
	case *topics.ContextCompacted:
		p.BoundaryID = "boundary-1"
		if full {
			p.TokensBefore, p.TokensAfter, p.ThroughTurnID = 200000, 20000, "turn-1"
		}
	case *topics.ChannelState:
		p.ChannelID, p.ChannelKind, p.State = "channel-1", "ide", "disconnected"
	case *topics.SessionUpdated:
		if full {
			p.Title, p.WorkspaceID, p.AccountID, p.PinnedThreadIDs = "Q1 planning — «EU»", "workspace-1", "account-1", []string{"thread-1", "thread-2"}
		}
	default:
		t.Fatalf("no test values for %T: add it to fill", p)
	}
}

// TestGoEncodingValid encodes an event of every type the way Go producers do
// and validates it, so that the Go encoding and the schemas cannot drift.
func TestGoEncodingValid(t *testing.T) {
	s := newSchemas(t)
	for _, et := range topics.EventTypes() {
		for _, minimal := range []bool{false, true} {
			name := string(et) + "/full"
			if minimal {
				name = string(et) + "/minimal"
			}
			t.Run(name, func(t *testing.T) {
				p := topics.NewPayload(et)
				fill(t, p, minimal)
				ev := topics.Event{ID: "01JM0000000000000000000001", Source: "/agents/worker-1", Type: et, Time: t0,
					RunID: "run-demo-1", AgentID: "worker-1", SchemaVersion: topics.CurrentSchemaVersion, Data: p}
				if !minimal {
					ev.SessionID, ev.ThreadID, ev.CorrelationID, ev.CausationID = "session-1", "thread-1", "corr-1", "01JM0000000000000000000000"
				}
				if err := ev.Validate(); err != nil {
					t.Fatalf("Go refuses its own test event: %v", err)
				}
				b, err := ev.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				for _, rel := range []string{typeSchema(et), eventSchema} {
					if err := s.validate(rel, b); err != nil {
						t.Errorf("%s refuses Go's encoding %s: %v", rel, b, err)
					}
				}
			})
		}
	}
}

// jsonField is a struct field as encoding/json writes it.
type jsonField struct {
	name     string
	required bool // always encoded: its tag has no omitempty
	typ      reflect.Type
}

// jsonFields lists the exported, json-tagged fields of struct type st, in
// order: what the schema checks hold a schema's properties against. The
// fields of an embedded struct without a tag are listed in its place, as
// encoding/json writes them (projection.ModelCount).
func jsonFields(st reflect.Type) []jsonField {
	var out []jsonField
	for i := range st.NumField() {
		f := st.Field(i)
		if _, tagged := f.Tag.Lookup("json"); f.Anonymous && !tagged && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		tag, ok := f.Tag.Lookup("json")
		if !f.IsExported() || !ok || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		out = append(out, jsonField{name: name, required: !slices.Contains(strings.Split(opts, ","), "omitempty"), typ: f.Type})
	}
	return out
}

// TestPayloadFieldsMatchGo compares each type schema's data properties with
// the Go payload struct: the same JSON names, and required exactly where the
// json tag has no omitempty.
func TestPayloadFieldsMatchGo(t *testing.T) {
	dir := schemaDir(t)
	for _, et := range topics.EventTypes() {
		doc := readJSON(t, filepath.Join(dir, filepath.FromSlash(typeSchema(et))))
		data := doc["properties"].(map[string]any)["data"].(map[string]any)
		var props, req []string
		for k := range data["properties"].(map[string]any) {
			props = append(props, k)
		}
		if r, ok := data["required"].([]any); ok {
			for _, k := range r {
				req = append(req, k.(string))
			}
		}
		var goProps, goReq []string
		for _, f := range jsonFields(reflect.TypeOf(topics.NewPayload(et)).Elem()) {
			goProps = append(goProps, f.name)
			if f.required {
				goReq = append(goReq, f.name)
			}
		}
		for _, l := range [][]string{props, req, goProps, goReq} {
			slices.Sort(l)
		}
		if !slices.Equal(props, goProps) {
			t.Errorf("%s: schema data fields %v, Go fields %v", et, props, goProps)
		}
		if !slices.Equal(req, goReq) {
			t.Errorf("%s: schema requires %v, Go always encodes %v", et, req, goReq)
		}
		if doc["additionalProperties"] != nil || data["additionalProperties"] != false {
			t.Errorf("%s: data must have additionalProperties false", et)
		}
		// data is required exactly when Go refuses an event without it: a
		// payload with a required field, or one that must name something
		// (runtime.configured, an anyOf of its fields).
		noData := loadExample(t, et)
		delete(noData, "data")
		enc, err := json.Marshal(noData)
		if err != nil {
			t.Fatal(err)
		}
		_, derr := topics.DecodeEvent(enc)
		if wantData := derr != nil; wantData != slices.Contains(toStrings(doc["required"]), "data") {
			t.Errorf("%s: data must be required exactly when Go refuses an event without it (%v)", et, derr)
		}
		if _, ok := data["anyOf"]; ok != (derr != nil && len(req) == 0) {
			t.Errorf("%s: data needs an anyOf of its fields exactly when Go refuses an empty payload without a required field", et)
		}
	}
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
	}
	return out
}

// TestEnumsMatchGo compares the schemas' enums with Go's lists.
func TestEnumsMatchGo(t *testing.T) {
	dir := schemaDir(t)
	dataEnum := func(et topics.EventType, field string) []string {
		doc := readJSON(t, filepath.Join(dir, filepath.FromSlash(typeSchema(et))))
		f := doc["properties"].(map[string]any)["data"].(map[string]any)["properties"].(map[string]any)[field].(map[string]any)
		return toStrings(f["enum"])
	}
	wake := readJSON(t, filepath.Join(dir, "wake.schema.json"))
	defs := wake["$defs"].(map[string]any)
	wakeEnum := func(def, field string) []string {
		var props map[string]any
		if def == "" {
			props = wake["properties"].(map[string]any)
		} else {
			props = defs[def].(map[string]any)["properties"].(map[string]any)
		}
		var out []string
		for _, v := range toStrings(props[field].(map[string]any)["enum"]) {
			if v != "<nil>" {
				out = append(out, v)
			}
		}
		return out
	}
	str := func(vs ...any) []string {
		var out []string
		for _, v := range vs {
			out = append(out, fmt.Sprint(v))
		}
		return out
	}
	roles := str()
	for _, r := range topics.Roles {
		roles = append(roles, string(r))
	}
	statuses := str()
	for _, s := range topics.Statuses {
		statuses = append(statuses, string(s))
	}
	reportable := str()
	for _, s := range topics.ReportableStatuses {
		reportable = append(reportable, string(s))
	}
	checks := []struct {
		name      string
		got, want []string
	}{
		{"tree.node_created role", dataEnum(topics.TypeNodeCreated, "role"), roles},
		{"tree.node_status status", dataEnum(topics.TypeNodeStatus, "status"), reportable},
		{"tree.node_completed result_source", dataEnum(topics.TypeNodeCompleted, "result_source"), topics.ResultSources},
		{"tree.node_result result_kind", dataEnum(topics.TypeNodeResult, "result_kind"), topics.ResultKinds},
		{"signal.result result_kind", dataEnum(topics.TypeResult, "result_kind"), topics.ResultKinds},
		{"tree.artifact_created artifact_type", dataEnum(topics.TypeArtifactCreated, "artifact_type"), topics.ArtifactTypes},
		{"tree.parent_hint hint_type", dataEnum(topics.TypeParentHint, "hint_type"), topics.HintTypes},
		{"signal.input input_kind", dataEnum(topics.TypeInput, "input_kind"), topics.InputKinds},
		{"signal.request_resolved resolution", dataEnum(topics.TypeRequestResolved, "resolution"), topics.Resolutions},
		{"turn.completed outcome", dataEnum(topics.TypeTurnCompleted, "outcome"), topics.TurnOutcomes},
		{"tool.started call_kind", dataEnum(topics.TypeToolStarted, "call_kind"), topics.CallKinds},
		{"tool.finished outcome", dataEnum(topics.TypeToolFinished, "outcome"), topics.CallOutcomes},
		{"tree.evidence_recorded verdict", dataEnum(topics.TypeEvidenceRecorded, "verdict"), topics.EvidenceVerdicts},
		{"incident.opened severity", dataEnum(topics.TypeIncidentOpened, "severity"), topics.Severities},
		{"process.started environment", dataEnum(topics.TypeProcessStarted, "environment"), topics.Environments},
		{"limit.updated state", dataEnum(topics.TypeLimitUpdated, "state"), topics.LimitStates},
		{"runtime.configured permission_mode", dataEnum(topics.TypeRuntimeConfigured, "permission_mode"), topics.PermissionModes},
		{"runtime.configured execution_environment", dataEnum(topics.TypeRuntimeConfigured, "execution_environment"), topics.Environments},
		{"channel.state state", dataEnum(topics.TypeChannelState, "state"), topics.ChannelStates},
		{"wake node role", wakeEnum("nodeDigest", "role"), append(roles, string(topics.RoleUnknown))},
		{"wake node status", wakeEnum("nodeDigest", "status"), statuses},
		{"wake node last_signal_kind", wakeEnum("nodeDigest", "last_signal_kind"), str(topics.SignalProgress, topics.SignalResult,
			topics.SignalFailed, topics.SignalRequest, topics.SignalHeartbeat, topics.SignalInput)},
		{"wake lane", wakeEnum("", "lane"), str(topics.LaneNormal, topics.LanePriority)},
		{"wake trigger kind", wakeEnum("trigger", "kind"), str(topics.TriggerResult, topics.TriggerFailed, topics.TriggerRequest,
			topics.TriggerStatusBlocked, topics.TriggerStatusFailed, topics.TriggerCompleted, topics.TriggerHumanInput,
			topics.TriggerLeaseExpired, topics.TriggerWatchdog, topics.TriggerProgress, topics.TriggerGuard)},
		{"wake trigger input_kind", wakeEnum("triggerInput", "input_kind"), topics.InputKinds},
	}
	for _, c := range checks {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: schema enum %v, Go %v", c.name, c.got, c.want)
		}
	}
	// Status counts have one field per status.
	var counts []string
	for k := range defs["statusCounts"].(map[string]any)["properties"].(map[string]any) {
		counts = append(counts, k)
	}
	slices.Sort(counts)
	sorted := slices.Sorted(slices.Values(statuses))
	if !slices.Equal(counts, sorted) {
		t.Errorf("statusCounts fields %v, statuses %v", counts, sorted)
	}
}

// loadExample returns schema/examples/<type>.json as a generic object.
func loadExample(t testing.TB, et topics.EventType) map[string]any {
	t.Helper()
	return readJSON(t, filepath.Join(schemaDir(t), "examples", string(et)+".json"))
}

func dataOf(m map[string]any) map[string]any { return m["data"].(map[string]any) }

func TestInvalidEventsRefused(t *testing.T) {
	cases := []struct {
		name   string
		typ    topics.EventType
		mutate func(m map[string]any)
		raw    string // instead of the mutated example
	}{
		{name: "missing runid", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { delete(m, "runid") }},
		{name: "missing id", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { delete(m, "id") }},
		{name: "missing agentid", typ: topics.TypeNodeStatus, mutate: func(m map[string]any) { delete(m, "agentid") }},
		{name: "missing time", typ: topics.TypeNodeStatus, mutate: func(m map[string]any) { delete(m, "time") }},
		{name: "missing schemaversion", typ: topics.TypeFailed, mutate: func(m map[string]any) { delete(m, "schemaversion") }},
		{name: "missing source", typ: topics.TypeFailed, mutate: func(m map[string]any) { delete(m, "source") }},
		{name: "bad role enum", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { dataOf(m)["role"] = "manager" }},
		{name: "role unknown is not a producer's", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { dataOf(m)["role"] = "unknown" }},
		{name: "status unknown is not a producer's", typ: topics.TypeNodeStatus, mutate: func(m map[string]any) { dataOf(m)["status"] = "unknown" }},
		{name: "unknown data field", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { dataOf(m)["colour"] = "blue" }},
		{name: "unknown heartbeat field", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { dataOf(m)["load"] = 0.5 }},
		{name: "missing required data field role", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { delete(dataOf(m), "role") }},
		{name: "missing required data field plan_id", typ: topics.TypePlanCreated, mutate: func(m map[string]any) { delete(dataOf(m), "plan_id") }},
		{name: "missing required data field expires_at", typ: topics.TypeLeaseAcquired, mutate: func(m map[string]any) { delete(dataOf(m), "expires_at") }},
		{name: "missing required data field input_kind", typ: topics.TypeInput, mutate: func(m map[string]any) { delete(dataOf(m), "input_kind") }},
		{name: "missing data with required fields", typ: topics.TypeRequest, mutate: func(m map[string]any) { delete(m, "data") }},
		{name: "empty required data id", typ: topics.TypeFailed, mutate: func(m map[string]any) { dataOf(m)["error_code"] = "" }},
		{name: "id with a control char", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["id"] = "01JM000000000000000000\a001" }},
		{name: "runid with a newline", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["runid"] = "run-demo-1\n" }},
		{name: "data id with a C1 control char", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { dataOf(m)["parent_agent_id"] = "conductor\u00851" }},
		{name: "listed id with DEL", typ: topics.TypeWakeReceived, mutate: func(m map[string]any) { dataOf(m)["agent_ids"] = []any{"worker\u007f2"} }},
		{name: "id of 257 characters", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["agentid"] = strings.Repeat("a", 257) }},
		{name: "id of 257 emoji", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["agentid"] = strings.Repeat("😀", 257) }},
		{name: "empty id", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["id"] = "" }},
		{name: "empty type", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["type"] = "" }},
		{name: "empty runid", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["runid"] = "" }},
		{name: "source with a control char", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["source"] = "/agents/\x1bworker-1" }},
		{name: "source of 257 characters", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["source"] = "/" + strings.Repeat("a", 256) }},
		{name: "wrong specversion", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["specversion"] = "0.3" }},
		{name: "specversion as a number", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["specversion"] = 1.0 }},
		{name: "data not an object (string)", typ: topics.TypeNodeCreated, mutate: func(m map[string]any) { m["data"] = "worker" }},
		{name: "data not an object (array)", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["data"] = []any{} }},
		{name: "data not an object (number)", typ: topics.TypeNodeStatus, mutate: func(m map[string]any) { m["data"] = 42 }},
		{name: "data_base64", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { delete(m, "data"); m["data_base64"] = "e30=" }},
		{name: "snake_case attribute", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["run_id"] = m["runid"] }},
		{name: "extension name with capitals", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["TraceParent"] = "x" }},
		{name: "extension name too long", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["averyveryverylongextension"] = "x" }},
		{name: "schemaversion 2", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["schemaversion"] = 2 }},
		{name: "schemaversion 0", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["schemaversion"] = 0 }},
		{name: "schemaversion fraction", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["schemaversion"] = 1.5 }},
		{name: "unknown type", typ: topics.TypeHeartbeat, mutate: func(m map[string]any) { m["type"] = "signal.heartbleed" }},
		{name: "time not RFC 3339", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "2026-02-14 10:00:01" }},
		{name: "time lower-case t", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "2026-02-14t10:00:01z" }},
		{name: "time without offset", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "2026-02-14T10:00:01" }},
		{name: "time with a leap second", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "2026-12-31T23:59:60Z" }},
		{name: "time in year 0", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "0000-06-01T00:00:00Z" }},
		{name: "time on February 30", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "2026-02-30T10:00:00Z" }},
		{name: "time hour 24", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "2026-02-14T24:00:00Z" }},
		{name: "time the zero instant", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "0001-01-01T00:00:00Z" }},
		{name: "time the zero instant, within a millisecond", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "0001-01-01T00:00:00.0009-00:00" }},
		{name: "time in year 0 in UTC", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "0001-01-01T00:30:00+01:00" }},
		{name: "time on 0001-01-01 with a positive offset", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = "0001-01-01T12:00:00+00:01" }},
		{name: "reset_at in year 10000 in UTC", typ: topics.TypeLimitUpdated, mutate: func(m map[string]any) { dataOf(m)["reset_at"] = "9999-12-31T23:30:00-01:00" }},
		{name: "reset_at on 9999-12-31 with a negative offset", typ: topics.TypeLimitUpdated, mutate: func(m map[string]any) { dataOf(m)["reset_at"] = "9999-12-31T01:00:00-01:00" }},
		{name: "time as a number", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["time"] = 1771063201000 }},
		{name: "datacontenttype not JSON", typ: topics.TypeProgress, mutate: func(m map[string]any) { m["datacontenttype"] = "text/plain" }},
		{name: "expected_by not a time", typ: topics.TypeNodeDelegated, mutate: func(m map[string]any) { dataOf(m)["expected_by"] = "tomorrow" }},
		{name: "negative band_count", typ: topics.TypePlanCreated, mutate: func(m map[string]any) { dataOf(m)["band_count"] = -1 }},
		{name: "band_count fraction", typ: topics.TypePlanCreated, mutate: func(m map[string]any) { dataOf(m)["band_count"] = 1.5 }},
		{name: "band_count as a string", typ: topics.TypePlanCreated, mutate: func(m map[string]any) { dataOf(m)["band_count"] = "2" }},
		{name: "negative step_index", typ: topics.TypeStepCreated, mutate: func(m map[string]any) { dataOf(m)["step_index"] = -2 }},
		{name: "negative appended_bytes", typ: topics.TypeScratchpadUpdated, mutate: func(m map[string]any) { dataOf(m)["appended_bytes"] = -1 }},
		{name: "fraction above 1", typ: topics.TypeProgress, mutate: func(m map[string]any) { dataOf(m)["fraction"] = 1.5 }},
		{name: "fraction below 0", typ: topics.TypeProgress, mutate: func(m map[string]any) { dataOf(m)["fraction"] = -0.1 }},
		{name: "negative ttl_ms", typ: topics.TypeRequest, mutate: func(m map[string]any) { dataOf(m)["ttl_ms"] = -5 }},
		{name: "success as a string", typ: topics.TypeResult, mutate: func(m map[string]any) { dataOf(m)["success"] = "yes" }},
		{name: "bad result_kind", typ: topics.TypeNodeResult, mutate: func(m map[string]any) { dataOf(m)["result_kind"] = "pdf" }},
		{name: "bad result_source", typ: topics.TypeNodeCompleted, mutate: func(m map[string]any) { dataOf(m)["result_source"] = "rumour" }},
		{name: "bad artifact_type", typ: topics.TypeArtifactCreated, mutate: func(m map[string]any) { dataOf(m)["artifact_type"] = "image" }},
		{name: "bad hint_type", typ: topics.TypeParentHint, mutate: func(m map[string]any) { dataOf(m)["hint_type"] = "read_minds" }},
		{name: "bad input_kind", typ: topics.TypeInput, mutate: func(m map[string]any) { dataOf(m)["input_kind"] = "shout" }},
		{name: "bad resolution", typ: topics.TypeRequestResolved, mutate: func(m map[string]any) { dataOf(m)["resolution"] = "ignored" }},
		{name: "artifact_ids not a list", typ: topics.TypeParentHint, mutate: func(m map[string]any) { dataOf(m)["artifact_ids"] = "artifact-1" }},
		{name: "empty id in a list", typ: topics.TypeNodeResult, mutate: func(m map[string]any) { dataOf(m)["artifact_ids"] = []any{""} }},
		{name: "more than 64 ids", typ: topics.TypeWakeReceived, mutate: func(m map[string]any) {
			ids := make([]any, 65)
			for i := range ids {
				ids[i] = fmt.Sprintf("worker-%d", i)
			}
			dataOf(m)["agent_ids"] = ids
		}},
		{name: "input text of 16,385 characters", typ: topics.TypeInput, mutate: func(m map[string]any) { dataOf(m)["text"] = strings.Repeat("x", 16<<10+1) }},
		{name: "input text of 16,385 é", typ: topics.TypeInput, mutate: func(m map[string]any) { dataOf(m)["text"] = strings.Repeat("é", 16<<10+1) }},
		// The activity vocabulary.
		{name: "turn without turn_id", typ: topics.TypeTurnStarted, mutate: func(m map[string]any) { delete(dataOf(m), "turn_id") }},
		{name: "bad turn outcome", typ: topics.TypeTurnCompleted, mutate: func(m map[string]any) { dataOf(m)["outcome"] = "timed_out" }},
		{name: "summary with a carriage return", typ: topics.TypeTurnCompleted, mutate: func(m map[string]any) { dataOf(m)["summary"] = "line one\r\nline two" }},
		{name: "summary with a vertical tab", typ: topics.TypeTurnCompleted, mutate: func(m map[string]any) { dataOf(m)["summary"] = "a\vb" }},
		{name: "summary with a C1 control char", typ: topics.TypeTurnCompleted, mutate: func(m map[string]any) { dataOf(m)["summary"] = "a\u009bb" }},
		{name: "empty summary", typ: topics.TypeTurnCompleted, mutate: func(m map[string]any) { dataOf(m)["summary"] = "" }},
		{name: "summary of 513 characters", typ: topics.TypeTurnCompleted, mutate: func(m map[string]any) { dataOf(m)["summary"] = strings.Repeat("é", 513) }},
		{name: "command of 513 characters", typ: topics.TypeToolStarted, mutate: func(m map[string]any) { dataOf(m)["command"] = strings.Repeat("x", 513) }},
		{name: "title with an escape character", typ: topics.TypeIncidentOpened, mutate: func(m map[string]any) { dataOf(m)["title"] = "\x1b[31mred" }},
		{name: "tool_name with a tab (an id)", typ: topics.TypeToolStarted, mutate: func(m map[string]any) { dataOf(m)["tool_name"] = "web\tsearch" }},
		{name: "bad call_kind", typ: topics.TypeToolStarted, mutate: func(m map[string]any) { dataOf(m)["call_kind"] = "lambda" }},
		{name: "tool.finished without outcome", typ: topics.TypeToolFinished, mutate: func(m map[string]any) { delete(dataOf(m), "outcome") }},
		{name: "negative duration_ms", typ: topics.TypeToolFinished, mutate: func(m map[string]any) { dataOf(m)["duration_ms"] = -1 }},
		{name: "exit_code null", typ: topics.TypeToolFinished, mutate: func(m map[string]any) { dataOf(m)["exit_code"] = nil }},
		{name: "exit_code beyond 64 bits", typ: topics.TypeProcessExited, mutate: func(m map[string]any) { dataOf(m)["exit_code"] = json.Number("-9223372036854775809") }},
		{name: "exit_code fraction", typ: topics.TypeProcessExited, mutate: func(m map[string]any) { dataOf(m)["exit_code"] = 1.5 }},
		{name: "bad verdict", typ: topics.TypeEvidenceRecorded, mutate: func(m map[string]any) { dataOf(m)["verdict"] = "green" }},
		{name: "evidence without kind", typ: topics.TypeEvidenceRecorded, mutate: func(m map[string]any) { delete(dataOf(m), "evidence_kind") }},
		{name: "incident without severity", typ: topics.TypeIncidentOpened, mutate: func(m map[string]any) { delete(dataOf(m), "severity") }},
		{name: "bad severity", typ: topics.TypeIncidentOpened, mutate: func(m map[string]any) { dataOf(m)["severity"] = "fatal" }},
		{name: "incident.resolved without data", typ: topics.TypeIncidentResolved, mutate: func(m map[string]any) { delete(m, "data") }},
		{name: "bad environment", typ: topics.TypeProcessStarted, mutate: func(m map[string]any) { dataOf(m)["environment"] = "cloud" }},
		{name: "process.exited signal a number", typ: topics.TypeProcessExited, mutate: func(m map[string]any) { dataOf(m)["signal"] = 15 }},
		{name: "model.usage without model", typ: topics.TypeModelUsage, mutate: func(m map[string]any) { delete(dataOf(m), "model") }},
		{name: "negative tokens", typ: topics.TypeModelUsage, mutate: func(m map[string]any) { dataOf(m)["cached_tokens"] = -3 }},
		{name: "negative cost", typ: topics.TypeModelUsage, mutate: func(m map[string]any) { dataOf(m)["cost_micros"] = -1 }},
		{name: "bad limit state", typ: topics.TypeLimitUpdated, mutate: func(m map[string]any) { dataOf(m)["state"] = "throttled" }},
		{name: "negative remaining", typ: topics.TypeLimitUpdated, mutate: func(m map[string]any) { dataOf(m)["remaining"] = -1 }},
		{name: "reset_at not a time", typ: topics.TypeLimitUpdated, mutate: func(m map[string]any) { dataOf(m)["reset_at"] = "in a minute" }},
		{name: "runtime.configured names nothing", typ: topics.TypeRuntimeConfigured, mutate: func(m map[string]any) { m["data"] = map[string]any{} }},
		{name: "runtime.configured without data", typ: topics.TypeRuntimeConfigured, mutate: func(m map[string]any) { delete(m, "data") }},
		{name: "runtime.configured with null data", typ: topics.TypeRuntimeConfigured, mutate: func(m map[string]any) { m["data"] = nil }},
		{name: "bad permission_mode", typ: topics.TypeRuntimeConfigured, mutate: func(m map[string]any) { dataOf(m)["permission_mode"] = "yolo" }},
		{name: "network_access as a string", typ: topics.TypeRuntimeConfigured, mutate: func(m map[string]any) { m["data"] = map[string]any{"network_access": "false"} }},
		{name: "context.compacted without boundary_id", typ: topics.TypeContextCompacted, mutate: func(m map[string]any) { delete(dataOf(m), "boundary_id") }},
		{name: "negative tokens_after", typ: topics.TypeContextCompacted, mutate: func(m map[string]any) { dataOf(m)["tokens_after"] = -1 }},
		{name: "bad channel state", typ: topics.TypeChannelState, mutate: func(m map[string]any) { dataOf(m)["state"] = "online" }},
		{name: "channel without kind", typ: topics.TypeChannelState, mutate: func(m map[string]any) { delete(dataOf(m), "channel_kind") }},
		{name: "65 pinned threads", typ: topics.TypeSessionUpdated, mutate: func(m map[string]any) {
			ids := make([]any, 65)
			for i := range ids {
				ids[i] = fmt.Sprintf("thread-%d", i)
			}
			dataOf(m)["pinned_thread_ids"] = ids
		}},
		{name: "pinned_thread_ids null", typ: topics.TypeSessionUpdated, mutate: func(m map[string]any) { dataOf(m)["pinned_thread_ids"] = nil }},
		{name: "session title with a NUL", typ: topics.TypeSessionUpdated, mutate: func(m map[string]any) { dataOf(m)["title"] = "a\x00b" }},
		{name: "value is null", raw: `null`},
		{name: "value is an array", raw: `[]`},
		{name: "value is a string", raw: `"tree.node_created"`},
	}
	s := newSchemas(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := []byte(c.raw)
			if c.raw == "" {
				m := loadExample(t, c.typ)
				c.mutate(m)
				var err error
				if doc, err = json.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			if ev, err := topics.DecodeEvent(doc); err == nil {
				t.Errorf("DecodeEvent accepts it: %+v", ev)
			}
			if !s.refuses(t, eventSchema, doc) {
				t.Errorf("%s accepts it", eventSchema)
			}
			if c.typ != "" && !s.refuses(t, typeSchema(c.typ), doc) {
				t.Errorf("%s accepts it", typeSchema(c.typ))
			}
		})
	}
}

// TestValidVariantsAccepted: less common but valid forms are accepted by both.
func TestValidVariantsAccepted(t *testing.T) {
	cases := []struct {
		name   string
		typ    topics.EventType
		mutate func(m map[string]any)
	}{
		{"other extension attribute", topics.TypeHeartbeat, func(m map[string]any) { m["partitionkey"] = "run-demo-1"; m["sampled"] = true }},
		{"time with offset and nanoseconds", topics.TypeProgress, func(m map[string]any) { m["time"] = "2026-02-14T11:00:01.123456789+01:00" }},
		{"time in year 1 and year 9999", topics.TypeLeaseAcquired, func(m map[string]any) {
			m["time"] = "0001-01-02T00:00:00Z"
			dataOf(m)["expires_at"] = "9999-12-31T23:59:59.999Z"
		}},
		{"time at the first millisecond", topics.TypeProgress, func(m map[string]any) { m["time"] = "0001-01-01T00:00:00.001+00:00" }},
		{"time on 0001-01-01 with a negative offset", topics.TypeProgress, func(m map[string]any) { m["time"] = "0001-01-01T00:00:00-00:01" }},
		{"reset_at on 9999-12-31 with a positive offset", topics.TypeLimitUpdated, func(m map[string]any) { dataOf(m)["reset_at"] = "9999-12-31T12:00:00+01:00" }},
		{"time without fraction", topics.TypeProgress, func(m map[string]any) { m["time"] = "2026-02-14T10:00:01Z" }},
		{"no datacontenttype", topics.TypeNodeStatus, func(m map[string]any) { delete(m, "datacontenttype") }},
		{"datacontenttype with charset", topics.TypeNodeStatus, func(m map[string]any) { m["datacontenttype"] = "application/json; charset=utf-8" }},
		{"dataschema and subject", topics.TypeNodeStatus, func(m map[string]any) {
			m["dataschema"] = "https://canopy.dev/schema/events/tree.node_status.schema.json"
			m["subject"] = "worker-1"
		}},
		{"all optional envelope attributes", topics.TypeNodeStatus, func(m map[string]any) {
			m["threadid"], m["correlationid"], m["causationid"] = "thread-1", "corr-1", "01JM0000000000000000000003"
		}},
		{"no optional envelope attributes", topics.TypeNodeStatus, func(m map[string]any) {
			for _, k := range []string{"datacontenttype", "sessionid", "threadid", "correlationid", "causationid"} {
				delete(m, k)
			}
		}},
		{"heartbeat without data", topics.TypeHeartbeat, func(m map[string]any) { delete(m, "data") }},
		{"completion without data", topics.TypeNodeCompleted, func(m map[string]any) { delete(m, "data") }},
		{"empty progress", topics.TypeProgress, func(m map[string]any) { m["data"] = map[string]any{} }},
		{"fraction bounds", topics.TypeProgress, func(m map[string]any) { dataOf(m)["fraction"] = 1 }},
		{"multi-byte ids", topics.TypeNodeCreated, func(m map[string]any) { m["agentid"] = "wörker-ü1"; dataOf(m)["capability"] = "研究" }},
		{"id of exactly 256 characters", topics.TypeNodeCreated, func(m map[string]any) { m["agentid"] = strings.Repeat("a", 256) }},
		{"id of 65 emoji (260 bytes)", topics.TypeNodeCreated, func(m map[string]any) { m["agentid"] = strings.Repeat("😀", 65) }},
		{"id of 100 CJK characters (300 bytes)", topics.TypeNodeCreated, func(m map[string]any) { m["agentid"] = strings.Repeat("工", 100) }},
		{"id of 256 emoji (1,024 bytes)", topics.TypeNodeCreated, func(m map[string]any) { m["agentid"] = strings.Repeat("😀", 256) }},
		{"parent hint without artifacts", topics.TypeParentHint, func(m map[string]any) { dataOf(m)["artifact_ids"] = []any{} }},
		{"parent hint with null artifacts (Go's nil)", topics.TypeParentHint, func(m map[string]any) { dataOf(m)["artifact_ids"] = nil }},
		{"64 ids", topics.TypeWakeReceived, func(m map[string]any) {
			ids := make([]any, 64)
			for i := range ids {
				ids[i] = fmt.Sprintf("worker-%d", i)
			}
			dataOf(m)["agent_ids"] = ids
		}},
		{"input text of 16 KiB with newlines", topics.TypeInput, func(m map[string]any) { dataOf(m)["text"] = strings.Repeat("line\n", 16<<10/5) }},
		{"input text of 16,384 é (32 KiB)", topics.TypeInput, func(m map[string]any) { dataOf(m)["text"] = strings.Repeat("é", 16<<10) }},
		{"summary with line feeds and tabs", topics.TypeTurnCompleted, func(m map[string]any) { dataOf(m)["summary"] = "one\n\ttwo\nthree" }},
		{"summary of 512 emoji (2 KiB)", topics.TypeTurnCompleted, func(m map[string]any) { dataOf(m)["summary"] = strings.Repeat("😀", 512) }},
		{"title with a line separator", topics.TypeIncidentOpened, func(m map[string]any) { dataOf(m)["title"] = "a\u2028b" }},
		{"negative exit_code", topics.TypeToolFinished, func(m map[string]any) { dataOf(m)["exit_code"] = -2 }},
		{"exit_code at the 64-bit bounds", topics.TypeProcessExited, func(m map[string]any) { dataOf(m)["exit_code"] = json.Number("-9223372036854775808") }},
		{"zero counts", topics.TypeModelUsage, func(m map[string]any) {
			for _, k := range []string{"input_tokens", "output_tokens", "cached_tokens", "cost_micros"} {
				dataOf(m)[k] = 0
			}
		}},
		{"tool.finished with only its required fields", topics.TypeToolFinished, func(m map[string]any) {
			m["data"] = map[string]any{"call_id": "call-1", "outcome": "cancelled"}
		}},
		{"runtime.configured naming network_access false alone", topics.TypeRuntimeConfigured, func(m map[string]any) {
			m["data"] = map[string]any{"network_access": false}
		}},
		{"session.updated without data", topics.TypeSessionUpdated, func(m map[string]any) { delete(m, "data") }},
		{"session.updated with null data", topics.TypeSessionUpdated, func(m map[string]any) { m["data"] = nil }},
		{"session.updated with an empty pinned list", topics.TypeSessionUpdated, func(m map[string]any) { m["data"] = map[string]any{"pinned_thread_ids": []any{}} }},
		{"approval request", topics.TypeRequest, func(m map[string]any) { dataOf(m)["request_kind"] = "permission" }},
	}
	s := newSchemas(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := loadExample(t, c.typ)
			c.mutate(m)
			doc, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := topics.DecodeEvent(doc); err != nil {
				t.Errorf("DecodeEvent: %v", err)
			}
			for _, rel := range []string{typeSchema(c.typ), eventSchema, envelopeSchema} {
				if err := s.validate(rel, doc); err != nil {
					t.Errorf("%s: %v", rel, err)
				}
			}
		})
	}
}

// decodedExamples returns schema/examples decoded, in time order.
func decodedExamples(t testing.TB) []*topics.Event {
	t.Helper()
	var evs []*topics.Event
	for _, ex := range repoExamples(t) {
		if !strings.HasPrefix(ex.name, "schema/examples/") {
			continue
		}
		ev, err := topics.DecodeEvent(ex.doc)
		if err != nil {
			t.Fatalf("%s: %v", ex.name, err)
		}
		evs = append(evs, ev)
	}
	slices.SortStableFunc(evs, func(a, b *topics.Event) int { return a.Time.Std().Compare(b.Time.Std()) })
	return evs
}

// wakesOf projects events with cfg, one event per processing batch (as
// replay -batch 1 does), then moves every run's clock an hour on so that its
// timers (lease expiry, watchdog) fire, and returns every wake encoded.
func wakesOf(t testing.TB, cfg projection.Config, evs []*topics.Event) [][]byte {
	t.Helper()
	p, err := projection.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pending projection.Pending
	var out [][]byte
	var last topics.Time
	for i := 0; i <= len(evs); i++ {
		if i < len(evs) {
			trigs, _ := p.Apply(evs[i])
			pending.Add(evs[i].RunID, trigs)
			if evs[i].Time.After(last) {
				last = evs[i].Time
			}
		} else {
			ids := p.RunIDs()
			slices.Sort(ids)
			for _, id := range ids {
				pending.Add(id, p.Advance(id, last.Add(time.Hour)))
			}
		}
		built, err := p.Wakes(&pending, time.Time{}, topics.Time{})
		if err != nil {
			t.Fatal(err)
		}
		pending.Reset()
		for _, b := range built {
			enc, err := topics.Marshal(b.Wake)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, enc)
		}
	}
	return out
}

func TestWakeFromProjection(t *testing.T) {
	s := newSchemas(t)
	parts := 0 // parts of split wakes, in "split"
	defer func() {
		if !t.Failed() && parts == 0 {
			t.Error("no split wake was exercised")
		}
	}()
	evs := decodedExamples(t)
	root := &topics.Event{ID: "01JM0000000000000000000000", Source: "/agents/conductor-1", Type: topics.TypeNodeCreated,
		Time: t0.Add(-time.Second), RunID: "run-demo-1", AgentID: "conductor-1", SchemaVersion: 1, SessionID: "session-demo-1",
		Data: &topics.NodeCreated{Role: topics.RoleConductor, Capability: "orchestrate"}}
	// A chain created leaf-first: its root's creation raises six guard
	// triggers at once, split one a wake.
	var chain []*topics.Event
	for _, ev := range (workload.Burst{RunID: "run-split", Nodes: 10, Start: t0.Add(time.Hour).Std()}).LeafFirstChain() {
		chain = append(chain, &ev)
	}
	configs := []struct {
		name string
		cfg  projection.Config
		evs  []*topics.Event
		// check is what the wakes must show, beyond schema validity.
		check func(t *testing.T, w *topics.Wake)
	}{
		{"defaults", projection.Config{}, evs, nil},
		{"with root", projection.Config{}, append([]*topics.Event{root}, evs...), func(t *testing.T, w *topics.Wake) {
			if w.AgentTreeSnapshot.RootAgentID == nil {
				t.Error("root_agent_id is null")
			}
		}},
		{"truncated", projection.Config{Limits: snapshot.Limits{MaxNodes: 1, MaxCorrelationHandles: 1, MaxStringLength: 8}}, evs,
			func(t *testing.T, w *topics.Wake) {
				if !w.AgentTreeSnapshot.Truncated {
					t.Error("not truncated")
				}
			}},
		{"split", projection.Config{MaxWakeTriggers: 1}, append(slices.Clone(evs), chain...), func(t *testing.T, w *topics.Wake) {
			if len(w.Triggers) != 1 {
				t.Errorf("%d triggers in a wake of at most 1", len(w.Triggers))
			}
			if w.Part != nil {
				parts++
			}
		}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			wakes := wakesOf(t, c.cfg, c.evs)
			if len(wakes) < 2 {
				t.Fatalf("got %d wakes, want a priority and a normal one", len(wakes))
			}
			lanes := map[topics.Lane]bool{}
			timer := false // a trigger without an event: event_id null
			for _, enc := range wakes {
				if err := s.validate(wakeSchema, enc); err != nil {
					t.Errorf("wake.schema.json refuses %s: %v", clip(enc), err)
				}
				w, err := topics.DecodeWake(enc)
				if err != nil {
					t.Fatalf("DecodeWake: %v", err)
				}
				lanes[w.Lane] = true
				for _, tr := range w.Triggers {
					timer = timer || tr.EventID == nil
				}
				if c.check != nil {
					c.check(t, w)
				}
			}
			if !lanes[topics.LanePriority] || !lanes[topics.LaneNormal] {
				t.Errorf("lanes %v, want both", lanes)
			}
			if !timer {
				t.Error("no timer trigger (event_id null) was exercised")
			}
		})
	}
}

func TestInvalidWakesRefused(t *testing.T) {
	s := newSchemas(t)
	wakes := wakesOf(t, projection.Config{}, decodedExamples(t))
	var base map[string]any
	if err := json.Unmarshal(wakes[0], &base); err != nil {
		t.Fatal(err)
	}
	snap := func(m map[string]any) map[string]any { return m["agent_tree_snapshot"].(map[string]any) }
	node := func(m map[string]any) map[string]any { return snap(m)["nodes"].([]any)[0].(map[string]any) }
	cases := []struct {
		name   string
		mutate func(m map[string]any)
	}{
		{"missing wake_id", func(m map[string]any) { delete(m, "wake_id") }},
		{"unknown field", func(m map[string]any) { m["priority"] = 1 }},
		{"bad lane", func(m map[string]any) { m["lane"] = "express" }},
		{"no triggers", func(m map[string]any) { m["triggers"] = []any{} }},
		{"bad trigger kind", func(m map[string]any) { m["triggers"].([]any)[0].(map[string]any)["kind"] = "whim" }},
		{"trigger without detail", func(m map[string]any) { delete(m["triggers"].([]any)[0].(map[string]any), "detail") }},
		{"time not in fixed form", func(m map[string]any) { snap(m)["generated_at"] = "2026-02-14T10:00:00Z" }},
		{"snapshot field missing", func(m map[string]any) { delete(snap(m), "stale") }},
		{"snapshot unknown field", func(m map[string]any) { snap(m)["mood"] = "ok" }},
		{"node field missing", func(m map[string]any) { delete(node(m), "lease_owner") }},
		{"node bad role", func(m map[string]any) { node(m)["role"] = "manager" }},
		{"node bad status", func(m map[string]any) { node(m)["status"] = "sleeping" }},
		{"node bad signal kind", func(m map[string]any) { node(m)["last_signal_kind"] = "ping" }},
		{"node null status", func(m map[string]any) { node(m)["status"] = nil }},
		{"nodes null", func(m map[string]any) { snap(m)["nodes"] = nil }},
		{"negative count", func(m map[string]any) { snap(m)["summary"].(map[string]any)["node_count_total"] = -1 }},
		{"status count missing", func(m map[string]any) {
			delete(snap(m)["truncation_meta"].(map[string]any)["omitted_by_status"].(map[string]any), "unknown")
		}},
		{"schema_version 2", func(m map[string]any) { m["schema_version"] = 2 }},
		{"part number 0", func(m map[string]any) { m["part"] = map[string]any{"number": 0, "count": 2} }},
		{"part of one", func(m map[string]any) { m["part"] = map[string]any{"number": 1, "count": 1} }},
		{"part without count", func(m map[string]any) { m["part"] = map[string]any{"number": 1} }},
		{"part unknown field", func(m map[string]any) { m["part"] = map[string]any{"number": 1, "count": 2, "of": 2} }},
		{"part null", func(m map[string]any) { m["part"] = nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(wakes[0], &m); err != nil {
				t.Fatal(err)
			}
			c.mutate(m)
			doc, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if !s.refuses(t, wakeSchema, doc) {
				t.Errorf("wake.schema.json accepts %s", clip(doc))
			}
		})
	}
}

// TestAsyncAPI checks asyncapi.yaml's text: its version line, that it names
// every topic and header, that it is plain two-space-indented YAML, that
// every file and local component it references exists, and that its
// payloads are the draft-07 renderings. The AsyncAPI parser reads it in
// TestAsyncAPIParser (apitools_test.go).
func TestAsyncAPI(t *testing.T) {
	dir := schemaDir(t)
	b, err := os.ReadFile(filepath.Join(dir, "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	lines := strings.Split(text, "\n")
	first := ""
	for _, l := range lines {
		if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "#") {
			first = l
			break
		}
	}
	if first != "asyncapi: 3.0.0" {
		t.Errorf("first line %q, want asyncapi: 3.0.0", first)
	}
	for i, l := range lines {
		if strings.Contains(l, "\t") {
			t.Errorf("line %d: tab", i+1)
		}
		if indent := len(l) - len(strings.TrimLeft(l, " ")); indent%2 != 0 && strings.TrimSpace(l) != "" {
			t.Errorf("line %d: odd indentation %d", i+1, indent)
		}
	}
	for _, spec := range topics.DefaultNames().Specs(1) {
		if !strings.Contains(text, spec.Name) {
			t.Errorf("topic %s is not described", spec.Name)
		}
		for k, v := range spec.Configs {
			if !strings.Contains(text, k) || !strings.Contains(text, v) {
				t.Errorf("topic %s: config %s=%s is not described", spec.Name, k, v)
			}
		}
	}
	for _, h := range []string{topics.HeaderContentType, topics.HeaderTraceParent, topics.HeaderTraceState, topics.HeaderSchemaVersion,
		topics.HeaderDeadLetterReason, topics.HeaderDeadLetterTopic, topics.HeaderDeadLetterPartition, topics.HeaderDeadLetterOffset,
		topics.ContentTypeCloudEvents, topics.ContentTypeJSON, "murmur2", "murmur2_random", "application/schema+json;version=draft-07"} {
		if !strings.Contains(text, h) {
			t.Errorf("%q is not mentioned", h)
		}
	}
	// File references: every $ref to a .json file, relative to asyncapi.yaml.
	fileRef := regexp.MustCompile(`\$ref:\s*['"]?([^'"#\s]+\.json)(#[^'"\s]*)?['"]?`)
	refs := map[string]bool{}
	for _, m := range fileRef.FindAllStringSubmatch(text, -1) {
		p := filepath.Join(dir, filepath.FromSlash(m[1]))
		if _, err := os.Stat(p); err != nil {
			t.Errorf("$ref %s: %v", m[1], err)
		}
		rel, _ := filepath.Rel(dir, p)
		refs[filepath.ToSlash(rel)] = true
	}
	// The payloads reference the draft-07 renderings (draft07_test.go), and
	// only those; the descriptions name the 2020-12 sources.
	for _, src := range draft07Sources() {
		if !refs[draft07Dir+src] {
			t.Errorf("no $ref to %s%s", draft07Dir, src)
		}
		if !strings.Contains(text, "schema/"+src) {
			t.Errorf("schema/%s is not mentioned", src)
		}
	}
	for ref := range refs {
		if !strings.HasPrefix(ref, draft07Dir) {
			t.Errorf("$ref %s: a payload must reference a draft-07 rendering (AsyncAPI tooling does not read 2020-12)", ref)
		}
	}
	if strings.Contains(text, "schemaFormat: application/schema+json;version=draft-2020-12") {
		t.Error("a payload's schemaFormat is draft 2020-12, which the AsyncAPI parser does not read")
	}
	// Mentions of schema/...json paths (in descriptions) must exist too.
	mention := regexp.MustCompile(`schema/[A-Za-z0-9_./-]+\.json`)
	for _, m := range mention.FindAllString(text, -1) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), filepath.FromSlash(m))); err != nil {
			t.Errorf("mentions %s: %v", m, err)
		}
	}
	// Local references: the last path element must be defined as a key.
	localRef := regexp.MustCompile(`\$ref:\s*['"]?#/([^'"\s]+)['"]?`)
	for _, m := range localRef.FindAllStringSubmatch(text, -1) {
		parts := strings.Split(m[1], "/")
		key := parts[len(parts)-1]
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(key) + `:\s*$`).MatchString(text) {
			t.Errorf("$ref #/%s: no key %s", m[1], key)
		}
		if top := parts[0]; !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(top) + `:\s*$`).MatchString(text) {
			t.Errorf("$ref #/%s: no top-level %s", m[1], top)
		}
	}
}

// asyncAPIMessage is a message of asyncapi.yaml, as far as the tests read it.
type asyncAPIMessage struct {
	Payload struct {
		Schema struct {
			Ref string `json:"$ref"`
		} `json:"schema"`
	} `json:"payload"`
	Examples []struct {
		Headers map[string]string `json:"headers"`
		Payload json.RawMessage   `json:"payload"`
	} `json:"examples"`
}

// asyncAPIDoc is asyncapi.yaml, as far as the tests read it.
type asyncAPIDoc struct {
	Channels map[string]struct {
		Messages map[string]struct {
			Ref string `json:"$ref"`
		} `json:"messages"`
	} `json:"channels"`
	Components struct {
		Messages map[string]asyncAPIMessage `json:"messages"`
	} `json:"components"`
}

// readAsyncAPI reads asyncapi.yaml, and returns with it the message of
// each event type by id: the type whose schema its payload references.
func readAsyncAPI(t testing.TB) (*asyncAPIDoc, map[topics.EventType]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(schemaDir(t), "asyncapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc asyncAPIDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	byType := map[topics.EventType]string{}
	for _, id := range slices.Sorted(maps.Keys(doc.Components.Messages)) {
		ref := doc.Components.Messages[id].Payload.Schema.Ref
		name, ok := strings.CutPrefix(ref, "./"+draft07Dir+eventSchema+"#/definitions/")
		if !ok {
			name, ok = strings.CutPrefix(ref, "./"+draft07Dir+"events/")
			name = strings.TrimSuffix(name, ".schema.json")
			ok = ok && name != "event"
		}
		if !ok {
			continue
		}
		et := topics.EventType(name)
		if !et.Known() {
			t.Errorf("message %s: payload %s is of no event type", id, ref)
			continue
		}
		if other, dup := byType[et]; dup {
			t.Errorf("%s has two messages, %s and %s", et, other, id)
		}
		byType[et] = id
	}
	return &doc, byType
}

// TestAsyncAPIMessagePerType checks asyncapi.yaml's messages against the
// event types: each type has one message, whose payload is the type's
// schema (its draft-07 rendering) and whose first example is the type's
// schema/examples file; the agent-events channel lists exactly those
// messages (signal.input's is the human-input channel's), so that an event
// is valid against one and only one of them, as AsyncAPI asks.
func TestAsyncAPIMessagePerType(t *testing.T) {
	doc, byType := readAsyncAPI(t)
	var agentEvents, humanInput []string
	for _, et := range topics.EventTypes() {
		id, ok := byType[et]
		if !ok {
			t.Errorf("%s has no message", et)
			continue
		}
		if et == topics.TypeInput {
			humanInput = append(humanInput, id)
		} else {
			agentEvents = append(agentEvents, id)
		}
		m := doc.Components.Messages[id]
		if len(m.Examples) == 0 {
			t.Errorf("message %s (%s) has no example", id, et)
			continue
		}
		for i, ex := range m.Examples {
			if ct := ex.Headers[topics.HeaderContentType]; ct != topics.ContentTypeCloudEvents {
				t.Errorf("message %s, example %d: content-type %q", id, i, ct)
			}
		}
		var got any
		if err := json.Unmarshal(m.Examples[0].Payload, &got); err != nil {
			t.Fatalf("message %s: %v", id, err)
		}
		if want := any(loadExample(t, et)); !reflect.DeepEqual(got, want) {
			t.Errorf("message %s: its example is not schema/examples/%s.json:\n%s", id, et, m.Examples[0].Payload)
		}
	}
	channel := func(name string) []string {
		var ids []string
		for _, m := range doc.Channels[name].Messages {
			ids = append(ids, strings.TrimPrefix(m.Ref, "#/components/messages/"))
		}
		slices.Sort(ids)
		return ids
	}
	slices.Sort(agentEvents)
	if got := channel("agentEvents"); !slices.Equal(got, agentEvents) {
		t.Errorf("channel agentEvents lists %v, want the messages of the types, %v", got, agentEvents)
	}
	if got := channel("humanInput"); !slices.Equal(got, humanInput) {
		t.Errorf("channel humanInput lists %v, want %v", got, humanInput)
	}
}

// clip shortens a document for an error message.
func clip(b []byte) string {
	const n = 300
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
