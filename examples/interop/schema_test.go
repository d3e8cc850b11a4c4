package interop

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaBase is the $id prefix of every file under schema/ (as
// schema/schema_test.go compiles them).
const schemaBase = "https://canopy.dev/schema/"

// schemas validates documents against the JSON Schemas under schema/,
// compiled offline from the repository's files.
type schemas struct {
	c        *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

func newSchemas(t *testing.T, root string) *schemas {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(schemaLoader(filepath.Join(root, "schema")))
	return &schemas{c: c, compiled: map[string]*jsonschema.Schema{}}
}

// validate validates doc against the schema file rel (under schema/).
func (s *schemas) validate(rel string, doc []byte) error {
	sch, ok := s.compiled[rel]
	if !ok {
		var err error
		if sch, err = s.c.Compile(schemaBase + rel); err != nil {
			return fmt.Errorf("compiling %s: %w", rel, err)
		}
		s.compiled[rel] = sch
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}

// schemaLoader serves schemaBase from the schema directory and refuses
// anything else: compiling never touches the network.
type schemaLoader string

func (dir schemaLoader) Load(url string) (any, error) {
	rel, ok := strings.CutPrefix(url, schemaBase)
	if !ok {
		return nil, fmt.Errorf("schema loader: %s is outside %s", url, schemaBase)
	}
	f, err := os.Open(filepath.Join(string(dir), filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return jsonschema.UnmarshalJSON(f)
}
