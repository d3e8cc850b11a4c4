package schema_test

// The draft-07 renderings. The schemas are written in JSON Schema draft
// 2020-12, which AsyncAPI's tooling does not read: the AsyncAPI parser (and
// the generators, Studio and CLI built on it) know the AsyncAPI schema
// format and JSON Schema draft-07, and treat a payload of any other
// schemaFormat as opaque. So asyncapi.yaml's payloads point at bundled
// draft-07 renderings under schema/draft-07/, generated here from the
// 2020-12 sources:
//
//	go test ./schema -run TestDraft07Current -update
//
// A rendering is one self-contained file: $defs become definitions, every
// $ref points into the file, a reference to a small schema without
// references of its own (an id, a timestamp) is inlined, and a $ref with
// sibling keywords (which draft-07 would ignore) becomes an allOf. It must
// stay equivalent to its source: schemas.validate validates every document
// the tests validate against a source (the examples, every repository
// JSONL line, Go's encodings, the tables of broken events and mutations, the
// projection's wakes) against its rendering too, and fails on any
// disagreement. TestAsyncAPIParser (apitools_test.go) checks that the
// parser reads the payloads as typed.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/topics"
)

var update = flag.Bool("update", false, "rewrite the generated draft-07 renderings under schema/draft-07")

// draft07Dir is where the renderings live, under schema/; a rendering's
// path below it is its source's path under schema/.
const draft07Dir = "draft-07/"

// draft07Sources are the schemas rendered: the payloads of asyncapi.yaml.
func draft07Sources() []string {
	return []string{eventSchema, typeSchema(topics.TypeWakeReceived), typeSchema(topics.TypeInput), wakeSchema}
}

// hasDraft07 says whether the source rel has a rendering.
func hasDraft07(rel string) bool { return slices.Contains(draft07Sources(), rel) }

// keywords2020Only are draft 2020-12 (or 2019-09) keywords draft-07 does
// not have. The sources use none; the generator refuses them rather than
// render a schema that means something else.
var keywords2020Only = []string{"prefixItems", "unevaluatedProperties", "unevaluatedItems", "dependentRequired",
	"dependentSchemas", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
	"minContains", "maxContains", "$vocabulary", "contentSchema"}

// annotations are keywords that do not constrain: a $ref's siblings made of
// these alone merge into an inlined schema.
var annotations = map[string]bool{"title": true, "description": true, "$comment": true, "examples": true, "default": true, "deprecated": true, "readOnly": true, "writeOnly": true}

// bundler renders one source and the schemas it references.
type bundler struct {
	dir   string                    // schema/
	docs  map[string]map[string]any // source documents by $id
	root  string                    // the $id of the source rendered
	names map[string]string         // absolute reference → definition name
	taken map[string]string         // definition name → absolute reference
	defs  map[string]any            // definition name → rendered schema
}

// renderDraft07 renders the 2020-12 schema rel (a path under schema/) as a
// self-contained draft-07 document, encoded as the committed file is.
func renderDraft07(dir, rel string) ([]byte, error) {
	b := &bundler{dir: dir, docs: map[string]map[string]any{}, names: map[string]string{}, taken: map[string]string{}, defs: map[string]any{}}
	b.root = baseURL + rel
	doc, err := b.load(b.root)
	if err != nil {
		return nil, err
	}
	out, err := b.convert(doc, b.root, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	m := out.(map[string]any)
	m["$schema"] = "http://json-schema.org/draft-07/schema#"
	m["$id"] = baseURL + draft07Dir + rel
	m["$comment"] = "Generated from ../" + strings.Repeat("../", strings.Count(rel, "/")) + rel +
		" (JSON Schema draft 2020-12) by `go test ./schema -run TestDraft07Current -update`: do not edit. A draft-07 rendering, self-contained, for the AsyncAPI tooling that reads draft-07 and not 2020-12."
	if len(b.defs) > 0 {
		m["definitions"] = b.defs
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// load reads the source document whose $id is id.
func (b *bundler) load(id string) (map[string]any, error) {
	if d, ok := b.docs[id]; ok {
		return d, nil
	}
	rel, ok := strings.CutPrefix(id, baseURL)
	if !ok {
		return nil, fmt.Errorf("reference to %s, outside %s", id, baseURL)
	}
	raw, err := os.ReadFile(filepath.Join(b.dir, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // 9223372036854775807 stays exact
	var d map[string]any
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	if d["$id"] != id {
		return nil, fmt.Errorf("%s: $id %v, want %s", rel, d["$id"], id)
	}
	b.docs[id] = d
	return d, nil
}

// resolve finds the schema an absolute reference names: a whole document or
// one of its $defs.
func (b *bundler) resolve(abs string) (map[string]any, error) {
	id, frag, _ := strings.Cut(abs, "#")
	doc, err := b.load(id)
	if err != nil {
		return nil, err
	}
	if frag == "" {
		return doc, nil
	}
	name, ok := strings.CutPrefix(frag, "/$defs/")
	if !ok || strings.Contains(name, "/") {
		return nil, fmt.Errorf("reference %s: only a document or one of its $defs can be referenced", abs)
	}
	defs, _ := doc["$defs"].(map[string]any)
	s, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("reference %s: no such $defs entry", abs)
	}
	return s, nil
}

// defName names the definition of an absolute reference: the file's name
// without .schema.json, and the $defs entry after a dot.
func defName(abs string) string {
	id, frag, _ := strings.Cut(abs, "#")
	name := strings.TrimSuffix(id[strings.LastIndex(id, "/")+1:], ".schema.json")
	if d, ok := strings.CutPrefix(frag, "/$defs/"); ok {
		name += "." + d
	}
	return name
}

// hasRef says whether a schema holds a $ref anywhere.
func hasRef(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["$ref"]; ok {
			return true
		}
		for _, x := range v {
			if hasRef(x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if hasRef(x) {
				return true
			}
		}
	}
	return false
}

// define renders the schema abs names into definitions (once) and returns
// the local reference to it.
func (b *bundler) define(abs string, target map[string]any) (string, error) {
	if abs == b.root {
		return "#", nil
	}
	name, ok := b.names[abs]
	if !ok {
		name = defName(abs)
		if other, clash := b.taken[name]; clash {
			return "", fmt.Errorf("definition name %s for both %s and %s", name, other, abs)
		}
		b.names[abs], b.taken[name] = name, abs
		b.defs[name] = nil // taken before rendering, for references back to it
		id, _, _ := strings.Cut(abs, "#")
		r, err := b.convert(target, id, false)
		if err != nil {
			return "", err
		}
		b.defs[name] = r
	}
	return "#/definitions/" + name, nil
}

// convert renders one schema of the document whose $id is base.
func (b *bundler) convert(v any, base string, top bool) (any, error) {
	s, ok := v.(map[string]any)
	if !ok {
		if _, isBool := v.(bool); isBool {
			return v, nil
		}
		return nil, fmt.Errorf("a schema must be an object or a boolean, not %T", v)
	}
	if ref, ok := s["$ref"].(string); ok {
		return b.convertRef(s, ref, base)
	}
	out := map[string]any{}
	for k, x := range s {
		if slices.Contains(keywords2020Only, k) {
			return nil, fmt.Errorf("keyword %s has no draft-07 equivalent", k)
		}
		switch k {
		case "$schema", "$defs":
			// The rendering sets its own $schema; $defs are rendered as
			// definitions when referenced.
		case "$id":
			if !top && x != base {
				return nil, fmt.Errorf("an embedded $id (%v) is not supported", x)
			}
		case "properties", "patternProperties":
			props := map[string]any{}
			for name, p := range x.(map[string]any) {
				r, err := b.convert(p, base, false)
				if err != nil {
					return nil, fmt.Errorf("%s/%s: %w", k, name, err)
				}
				props[name] = r
			}
			out[k] = props
		case "items", "additionalProperties", "additionalItems", "if", "then", "else", "not", "contains", "propertyNames":
			r, err := b.convert(x, base, false)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = r
		case "allOf", "anyOf", "oneOf":
			var list []any
			for i, p := range x.([]any) {
				r, err := b.convert(p, base, false)
				if err != nil {
					return nil, fmt.Errorf("%s/%d: %w", k, i, err)
				}
				list = append(list, r)
			}
			out[k] = list
		default:
			out[k] = x
		}
	}
	return out, nil
}

// convertRef renders a schema with a $ref: the referenced schema inlined
// when it is small and self-contained, or a reference into definitions;
// sibling keywords, which draft 2020-12 applies along with the reference
// and draft-07 would ignore, are merged into an inlined schema or kept next
// to an allOf holding the reference.
func (b *bundler) convertRef(s map[string]any, ref, base string) (any, error) {
	bu, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	ru, err := url.Parse(ref)
	if err != nil {
		return nil, fmt.Errorf("$ref %q: %w", ref, err)
	}
	abs := bu.ResolveReference(ru).String()
	abs = strings.TrimSuffix(abs, "#")
	target, err := b.resolve(abs)
	if err != nil {
		return nil, err
	}
	siblings := map[string]any{}
	for k, x := range s {
		if k != "$ref" {
			siblings[k] = x
		}
	}
	id, _, _ := strings.Cut(abs, "#")
	if !hasRef(target) && abs != b.root && strings.Contains(abs, "#") {
		inl, err := b.convert(target, id, false)
		if err != nil {
			return nil, err
		}
		m := inl.(map[string]any)
		merge := true
		for k := range siblings {
			if _, both := m[k]; both && !annotations[k] {
				merge = false
			}
		}
		if merge {
			sib, err := b.convert(siblings, base, false)
			if err != nil {
				return nil, err
			}
			for k, x := range sib.(map[string]any) {
				m[k] = x
			}
			return m, nil
		}
	}
	local, err := b.define(abs, target)
	if err != nil {
		return nil, err
	}
	r := map[string]any{"$ref": local}
	if len(siblings) == 0 {
		return r, nil
	}
	sib, err := b.convert(siblings, base, false)
	if err != nil {
		return nil, err
	}
	m := sib.(map[string]any)
	all, _ := m["allOf"].([]any)
	m["allOf"] = append([]any{r}, all...)
	return m, nil
}

// TestDraft07Current checks that every committed rendering is what the
// generator makes of its current source (-update rewrites them), and that
// schema/draft-07 holds nothing else.
func TestDraft07Current(t *testing.T) {
	dir := schemaDir(t)
	want := map[string]bool{}
	for _, rel := range draft07Sources() {
		path := filepath.Join(dir, filepath.FromSlash(draft07Dir+rel))
		want[path] = true
		got, err := renderDraft07(dir, rel)
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v: run go test ./schema -run TestDraft07Current -update", err)
			continue
		}
		if !bytes.Equal(have, got) {
			t.Errorf("schema/%s%s is not the rendering of schema/%s: run go test ./schema -run TestDraft07Current -update", draft07Dir, rel, rel)
		}
	}
	err := filepath.WalkDir(filepath.Join(dir, draft07Dir), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !want[path] {
			t.Errorf("%s: not a rendering of a source in draft07Sources", path)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}

// TestDraft07Renders checks what a rendering is made of: draft-07, no
// reference outside the file, no $defs left.
func TestDraft07Renders(t *testing.T) {
	dir := schemaDir(t)
	for _, rel := range draft07Sources() {
		b, err := renderDraft07(dir, rel)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if strings.Contains(text, `"$defs"`) {
			t.Errorf("%s: $defs left in the rendering", rel)
		}
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				if ref, ok := v["$ref"].(string); ok && ref != "#" && !strings.HasPrefix(ref, "#/definitions/") {
					t.Errorf("%s: $ref %s points outside the file", rel, ref)
				}
				for _, x := range v {
					walk(x)
				}
			case []any:
				for _, x := range v {
					walk(x)
				}
			}
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		walk(doc)
	}
}
