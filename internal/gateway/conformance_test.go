package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// The conformance check: every response a test of this package receives
// through call (or hands to observeResponse) is checked against
// schema/openapi.yaml as the tests run: its status is documented for the
// operation, its content type is one the document gives for that status,
// its body validates against that content's schema, and the headers the
// document gives for it are present. TestMain fails the package on any
// mismatch, so the document cannot drift from the server.

// spec is schema/openapi.yaml, read once, with its schemas compiled.
type spec struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
}

var (
	specOnce sync.Once
	theSpec  *spec
	specErr  error
)

func loadSpec() (*spec, error) {
	specOnce.Do(func() {
		y, err := os.ReadFile("../../schema/openapi.yaml")
		if err != nil {
			specErr = err
			return
		}
		j, err := yaml.YAMLToJSON(y)
		if err != nil {
			specErr = fmt.Errorf("schema/openapi.yaml: %w", err)
			return
		}
		var doc map[string]any
		if err := json.Unmarshal(j, &doc); err != nil {
			specErr = err
			return
		}
		res, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err != nil {
			specErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020) // OpenAPI 3.1's schema dialect
		// The document's relative $refs (./wake.schema.json#/$defs/...,
		// ./read-model.schema.json) resolve against its place among the
		// schemas, https://canopy.dev/schema/, whose files are on disk.
		c.UseLoader(schemaDirLoader{})
		if err := c.AddResource(specURL, res); err != nil {
			specErr = err
			return
		}
		theSpec = &spec{doc: doc, compiler: c, compiled: map[string]*jsonschema.Schema{}}
	})
	return theSpec, specErr
}

// specURL is where openapi.yaml sits among the schemas' $ids, so that its
// relative references name their $ids.
const (
	schemaBase = "https://canopy.dev/schema/"
	specURL    = schemaBase + "openapi.yaml"
)

// schemaDirLoader serves schemaBase from schema/ and refuses anything else:
// no network in tests.
type schemaDirLoader struct{}

func (schemaDirLoader) Load(url string) (any, error) {
	rel, ok := strings.CutPrefix(url, schemaBase)
	if !ok {
		return nil, fmt.Errorf("schema/openapi.yaml references %s, outside %s", url, schemaBase)
	}
	f, err := os.Open(filepath.Join("../../schema", filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return jsonschema.UnmarshalJSON(f)
}

// pointer escapes one JSON pointer token.
func pointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// response finds the response object of op and status, following a $ref to
// components/responses, and the JSON pointer it lives at.
func (s *spec) response(op operation, status int) (map[string]any, string, error) {
	paths, _ := s.doc["paths"].(map[string]any)
	item, _ := paths[op.path].(map[string]any)
	o, _ := item[strings.ToLower(op.method)].(map[string]any)
	if o == nil {
		return nil, "", fmt.Errorf("%s %s is not in the document", op.method, op.path)
	}
	responses, _ := o["responses"].(map[string]any)
	r, _ := responses[strconv.Itoa(status)].(map[string]any)
	at := "/paths/" + pointer(op.path) + "/" + strings.ToLower(op.method) + "/responses/" + strconv.Itoa(status)
	if r == nil {
		return nil, "", fmt.Errorf("%s %s answered %d, which the document does not list", op.method, op.path, status)
	}
	if ref, ok := r["$ref"].(string); ok {
		name, found := strings.CutPrefix(ref, "#/components/responses/")
		comps, _ := s.doc["components"].(map[string]any)
		rs, _ := comps["responses"].(map[string]any)
		r, _ = rs[name].(map[string]any)
		if !found || r == nil {
			return nil, "", fmt.Errorf("%s: unresolved $ref %q", at, ref)
		}
		at = "/components/responses/" + pointer(name)
	}
	return r, at, nil
}

func (s *spec) schema(loc string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.compiled[loc]; ok {
		return sch, nil
	}
	sch, err := s.compiler.Compile(specURL + "#" + loc)
	if err != nil {
		return nil, err
	}
	s.compiled[loc] = sch
	return sch, nil
}

// conform checks one response of op against the document.
func (s *spec) conform(op operation, status int, header http.Header, body []byte) error {
	r, at, err := s.response(op, status)
	if err != nil {
		return err
	}
	where := fmt.Sprintf("%s %s %d", op.method, op.path, status)
	content, _ := r["content"].(map[string]any)
	ct := header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Errorf("%s: Content-Type %q: %v", where, ct, err)
	}
	if _, ok := content[mt]; !ok {
		return fmt.Errorf("%s: Content-Type %s, which the document does not give (it gives %v)", where, mt, slices.Sorted(mapKeys(content)))
	}
	headers, _ := r["headers"].(map[string]any)
	for h, def := range headers {
		if req, _ := def.(map[string]any)["required"].(bool); req && header.Get(h) == "" {
			return fmt.Errorf("%s: no %s header, which the document requires", where, h)
		}
	}
	if body == nil || !strings.HasSuffix(mt, "json") {
		return nil // a stream, read by its own checks (sse_test.go)
	}
	sch, err := s.schema(at + "/content/" + pointer(mt) + "/schema")
	if err != nil {
		return fmt.Errorf("%s: compiling its schema: %v", where, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: the body is not JSON: %v: %.200s", where, err, body)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s: the body does not match the document: %v\n%.300s", where, err, body)
	}
	return nil
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// conformance collects the mismatches seen, and how many responses were
// checked per operation and status.
var conformance = struct {
	sync.Mutex
	errs    []string
	checked map[operation]map[int]int
}{checked: map[operation]map[int]int{}}

// observeResponse checks a response of the API against the document (body
// nil for a stream) and counts it for checkObserved.
func observeResponse(method, path string, status int, header http.Header, body []byte) {
	observe(method, path, status)
	op, ok := opFor(method, path)
	if !ok {
		return
	}
	s, err := loadSpec()
	if err == nil {
		if _, documented := openAPIOps()[op]; !documented && status == http.StatusMethodNotAllowed {
			return // a method the document does not give, answered 405 as it should (problem checked by TestOpenAPIRoutes)
		}
		err = s.conform(op, status, header, body)
	}
	conformance.Lock()
	defer conformance.Unlock()
	if err != nil && len(conformance.errs) < 50 {
		conformance.errs = append(conformance.errs, err.Error())
	}
	if conformance.checked[op] == nil {
		conformance.checked[op] = map[int]int{}
	}
	conformance.checked[op][status]++
}

var (
	opsOnce sync.Once
	ops     map[operation][]int
)

func openAPIOps() map[operation][]int {
	opsOnce.Do(func() { ops, _ = readOpenAPI() })
	return ops
}

// checkConformance reports the mismatches, and fails when a test run saw
// no response of an operation at all (the check would prove nothing).
func checkConformance(fullRun bool) error {
	conformance.Lock()
	defer conformance.Unlock()
	errs := slices.Clone(conformance.errs)
	if fullRun {
		for op := range openAPIOps() {
			if conformance.checked[op][http.StatusOK]+conformance.checked[op][http.StatusAccepted] == 0 {
				errs = append(errs, fmt.Sprintf("no successful response of %s %s was checked against schema/openapi.yaml", op.method, op.path))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("responses disagree with schema/openapi.yaml:\n%s", strings.Join(errs, "\n"))
	}
	return nil
}
