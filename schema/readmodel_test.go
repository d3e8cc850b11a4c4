package schema_test

// read-model.schema.json against Go: the read models the real projection
// builds are valid, and the schema's fields and required fields are Go's
// (projection.ReadModel, recursively), so the document the gateway's
// OpenAPI references cannot drift from what the projector answers.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

const readModelSchema = "read-model.schema.json"

func TestReadModelFromProjection(t *testing.T) {
	s := newSchemas(t)
	evs := decodedExamples(t)
	// A second run with more running nodes than a list holds, so that the
	// bounded lists are truncated.
	const wide = "run-wide"
	at := t0
	ev := func(agent string, et topics.EventType, data topics.Payload) *topics.Event {
		at = at.Add(time.Millisecond)
		return &topics.Event{ID: fmt.Sprintf("01JM1%021d", len(evs)), Source: "/agents/" + agent, Type: et, Time: at,
			RunID: wide, AgentID: agent, SchemaVersion: 1, Data: data}
	}
	evs = append(evs, ev("root", topics.TypeNodeCreated, &topics.NodeCreated{Role: topics.RoleConductor}))
	for i := range projection.MaxReadModelList + 5 {
		w := fmt.Sprintf("w-%02d", i)
		evs = append(evs, ev(w, topics.TypeNodeCreated, &topics.NodeCreated{ParentAgentID: "root", Role: topics.RoleWorker}))
		evs = append(evs, ev(w, topics.TypeNodeStatus, &topics.NodeStatus{Status: topics.StatusRunning}))
	}
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
	if len(ids) < 2 {
		t.Fatalf("runs %v, want the examples' and %s", ids, wide)
	}
	truncated := false
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
		}
	}
	if !truncated {
		t.Error("no truncated list was exercised")
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
}
