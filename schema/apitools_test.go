package schema_test

// The API documents read by the ecosystem's own tools, pinned in
// tools/node/package-lock.json and installed by tools/install.sh (npm ci):
// asyncapi.yaml by the AsyncAPI parser (@asyncapi/parser, the library of
// AsyncAPI's CLI, Studio and generators), which must report no error or
// warning and read every JSON payload as typed; openapi.yaml by Redocly CLI's
// lint, which must report no problem at all. Without node or the installed
// tools these tests skip, and fail under CI=true (internal/testenv).

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// nodeTools returns node and tools/node, with its node_modules installed
// as package.json pins them.
func nodeTools(t *testing.T) (node, dir string) {
	t.Helper()
	node = testenv.Tool(t, "node")
	dir = filepath.Join(repoRoot(t), "tools", "node")
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	for name, want := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "node_modules", filepath.FromSlash(name), "package.json"))
		if err != nil {
			testenv.Missing(t, "tools/node/node_modules (npm ci in tools/node)")
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Version != want {
			t.Fatalf("tools/node/node_modules has %s %s, package.json pins %s: run ./tools/install.sh", name, got.Version, want)
		}
	}
	return node, dir
}

// runTool runs a command with a deadline and returns its standard output;
// its standard error goes to the failure message.
func runTool(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", filepath.Base(name), strings.Join(args, " "), err, clip(stdout.Bytes()), stderr.String())
	}
	return stdout.Bytes()
}

// parsedSchema is a payload as asyncapi-check.js describes the parser's
// Schema model of it.
type parsedSchema struct {
	Type       any                      `json:"type"`
	Properties map[string]*parsedSchema `json:"properties"`
	AllOf      []*parsedSchema          `json:"allOf"`
	Then       *parsedSchema            `json:"then"`
}

// props collects the properties of a schema and of what it composes with
// allOf.
func (s *parsedSchema) props() map[string]*parsedSchema {
	out := map[string]*parsedSchema{}
	if s == nil {
		return out
	}
	for k, v := range s.Properties {
		out[k] = v
	}
	for _, a := range s.AllOf {
		for k, v := range a.props() {
			if out[k] == nil || out[k].Type == nil {
				out[k] = v
			}
		}
	}
	return out
}

// isObject says whether a parsed type is object, alone or with null.
func isObject(typ any) bool {
	if l, ok := typ.([]any); ok {
		return slices.Contains(l, any("object"))
	}
	return typ == "object"
}

func TestAsyncAPIParser(t *testing.T) {
	node, dir := nodeTools(t)
	out := runTool(t, repoRoot(t), nil, node, filepath.Join(dir, "asyncapi-check.js"), filepath.Join(schemaDir(t), "asyncapi.yaml"))
	var res struct {
		Diagnostics []struct {
			Severity int    `json:"severity"`
			Code     string `json:"code"`
			Message  string `json:"message"`
			Path     string `json:"path"`
		} `json:"diagnostics"`
		Messages map[string]struct {
			SchemaFormat string        `json:"schemaFormat"`
			Parsed       bool          `json:"parsed"`
			Payload      *parsedSchema `json:"payload"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("asyncapi-check.js: %v: %s", err, clip(out))
	}
	// Spectral's severities: 0 error, 1 warning, 2 information, 3 hint.
	for _, d := range res.Diagnostics {
		if d.Severity <= 1 {
			t.Errorf("the parser reports (severity %d) %s at %s: %s", d.Severity, d.Code, d.Path, d.Message)
		} else {
			t.Logf("the parser notes (severity %d) %s at %s: %s", d.Severity, d.Code, d.Path, d.Message)
		}
	}
	envelope := []string{"specversion", "id", "source", "type", "time", "runid", "agentid", "schemaversion", "data"}
	wakeFields := toStrings(readJSON(t, filepath.Join(schemaDir(t), wakeSchema))["required"])
	for name, want := range map[string]func(t *testing.T, p *parsedSchema){
		"agentEvent": func(t *testing.T, p *parsedSchema) {
			// The envelope's properties, and one typed data per event type
			// in the dispatch on type.
			for _, f := range envelope {
				if p.props()[f] == nil {
					t.Errorf("no property %s", f)
				}
			}
			typed := 0
			for _, a := range p.AllOf {
				if a.Then != nil {
					if d := a.Then.props()["data"]; d != nil && isObject(d.Type) {
						typed++
					}
				}
			}
			if typed != len(topics.EventTypes()) {
				t.Errorf("%d event types have a typed data, want %d", typed, len(topics.EventTypes()))
			}
		},
		"wakeReceived": func(t *testing.T, p *parsedSchema) {
			data := p.props()["data"]
			if data == nil || data.Type != "object" || data.props()["wake_id"] == nil {
				t.Errorf("data is not the typed conductor.wake_received payload: %+v", data)
			}
		},
		"humanInput": func(t *testing.T, p *parsedSchema) {
			data := p.props()["data"]
			if data == nil || data.Type != "object" || data.props()["input_kind"] == nil || data.props()["input_kind"].Type != "string" {
				t.Errorf("data is not the typed signal.input payload: %+v", data)
			}
		},
		"wake": func(t *testing.T, p *parsedSchema) {
			if p.Type != "object" {
				t.Errorf("type %v, want object", p.Type)
			}
			for _, f := range wakeFields {
				if p.props()[f] == nil {
					t.Errorf("no property %s", f)
				}
			}
			if snap := p.props()["agent_tree_snapshot"]; snap == nil || len(snap.props()) == 0 {
				t.Error("agent_tree_snapshot has no properties")
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, ok := res.Messages[name]
			if !ok {
				t.Fatalf("the parser found no message %s (it found %d)", name, len(res.Messages))
			}
			if !m.Parsed || !strings.Contains(m.SchemaFormat, "draft-07") {
				t.Errorf("schemaFormat %s: the parser has no schema parser for it (it reads draft-07 and the AsyncAPI format), so the payload is opaque", m.SchemaFormat)
			}
			if m.Payload == nil || len(m.Payload.props()) == 0 {
				t.Fatalf("the payload is untyped: %+v", m.Payload)
			}
			want(t, m.Payload)
		})
	}
	for name, m := range res.Messages {
		if !m.Parsed {
			t.Errorf("message %s: schemaFormat %s is not one the parser reads", name, m.SchemaFormat)
		}
	}
	// The message of each event type: the parser reads its data as the
	// type's payload, with the type's fields.
	_, byType := readAsyncAPI(t)
	for _, et := range topics.EventTypes() {
		id := byType[et]
		m, ok := res.Messages[id]
		if !ok {
			t.Errorf("%s: the parser found no message %q", et, id)
			continue
		}
		data := m.Payload.props()["data"]
		if data == nil || !isObject(data.Type) {
			t.Errorf("message %s (%s): data is not a typed object: %+v", id, et, data)
			continue
		}
		doc := readJSON(t, filepath.Join(schemaDir(t), filepath.FromSlash(typeSchema(et))))
		want := slices.Sorted(maps.Keys(doc["properties"].(map[string]any)["data"].(map[string]any)["properties"].(map[string]any)))
		if got := slices.Sorted(maps.Keys(data.props())); !slices.Equal(got, want) {
			t.Errorf("message %s (%s): the parser reads data fields %v, want %v", id, et, got, want)
		}
	}
}

func TestOpenAPILint(t *testing.T) {
	_, dir := nodeTools(t)
	redocly := filepath.Join(dir, "node_modules", ".bin", "redocly")
	// No telemetry, no update check: nothing but the files is read.
	out := runTool(t, schemaDir(t), []string{"REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1"},
		redocly, "lint", "--config", "redocly.yaml", "--format", "json", "openapi.yaml")
	var res struct {
		Totals struct {
			Errors, Warnings, Ignored int
		} `json:"totals"`
		Version  string `json:"version"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("redocly lint: %v: %s", err, clip(out))
	}
	for _, p := range res.Problems {
		at := ""
		if len(p.Location) > 0 {
			at = p.Location[0].Pointer
		}
		t.Errorf("redocly %s %s at %s: %s", p.Severity, p.RuleID, at, p.Message)
	}
	if res.Totals.Errors+res.Totals.Warnings+res.Totals.Ignored != 0 {
		t.Errorf("redocly lint totals %+v, want none", res.Totals)
	}
}

// TestOpenAPITyped checks that every JSON answer of a success in
// openapi.yaml has a schema that says what it holds: a $ref (to a component
// or to one of the schema files) or an object with properties, never a bare
// type: object.
func TestOpenAPITyped(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(schemaDir(t), "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Info struct {
			License map[string]any `json:"license"`
		} `json:"info"`
		Servers []struct {
			URL       string         `json:"url"`
			Variables map[string]any `json:"variables"`
		} `json:"servers"`
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema map[string]any `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.License["name"] == nil {
		t.Error("info.license has no name")
	}
	if len(doc.Servers) == 0 || len(doc.Servers[0].Variables) == 0 {
		t.Error("no server with variables")
	}
	typed := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for status, r := range op.Responses {
				if !strings.HasPrefix(status, "2") {
					continue
				}
				for ct, c := range r.Content {
					if !strings.HasSuffix(ct, "json") {
						continue
					}
					_, ref := c.Schema["$ref"]
					_, props := c.Schema["properties"]
					if !ref && !props {
						t.Errorf("%s %s %s %s: schema %v says nothing of its fields", method, path, status, ct, c.Schema)
					}
					typed++
				}
			}
		}
	}
	// input, snapshot, read model, history
	if typed < 4 {
		t.Errorf("%d JSON success answers, want at least 4", typed)
	}
	for _, want := range []string{"./wake.schema.json#/$defs/agentTreeSnapshot", "./read-model.schema.json"} {
		if !slices.Contains(strings.Fields(strings.ReplaceAll(string(b), `"`, " ")), want) {
			t.Errorf("openapi.yaml does not reference %s", want)
		}
	}
}
