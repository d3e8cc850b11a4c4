package tools

import (
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/canopy-dev/canopy"

// maxConductorDeps bounds the non-standard packages the example conductor
// links: a conductor imports pkg/wake, pkg/topics and pkg/telemetry, and
// with them franz-go, Prometheus and the OpenTelemetry APIs, not Pebble,
// the OpenTelemetry SDK or its gRPC exporters (101 when this was written).
const maxConductorDeps = 150

// goList runs go list at the module's root and returns its output's lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// TestLayers: the layers point one way, as Pebble's internal/lint
// TestForbiddenImports keeps its own. pkg/ is what anyone may import, so no
// package of it imports an internal/ one, even transitively; Pebble stays
// behind internal/store, out of every public package, the gateway and the
// example conductor; the gateway links no embedded broker; and the example
// conductor stays small.
func TestLayers(t *testing.T) {
	// pkg/ imports nothing from internal/ and links no Pebble (pkg/wake,
	// pkg/projection among them): each package with the dependencies it
	// must not have.
	pkgs := goList(t, "-f", `{{.ImportPath}}|{{join .Deps "|"}}`, "./pkg/...")
	if len(pkgs) < 5 {
		t.Fatalf("go list ./pkg/... lists %d packages", len(pkgs))
	}
	for _, line := range pkgs {
		pkg, deps, _ := strings.Cut(line, "|")
		for _, d := range strings.Split(deps, "|") {
			if strings.HasPrefix(d, module+"/internal/") {
				t.Errorf("%s imports %s: pkg/ must not depend on internal/", pkg, d)
			}
			if strings.HasPrefix(d, "github.com/cockroachdb/pebble") {
				t.Errorf("%s links %s: the Pebble store is internal/store", pkg, d)
				break
			}
		}
	}

	forbidden := []struct {
		pkg, dep, why string
	}{
		{"./cmd/conductor-gateway", "github.com/cockroachdb/pebble", "the gateway keeps no state"},
		{"./cmd/conductor-gateway", "github.com/twmb/franz-go/pkg/kfake", "the embedded broker is for tests and dev"},
		{"./cmd/projector", "github.com/twmb/franz-go/pkg/kfake", "the embedded broker is canopy-dev's (make run), not the production projector's"},
		{"./examples/conductor", "github.com/cockroachdb/pebble", "a conductor keeps no projection state"},
	}
	for _, f := range forbidden {
		for _, d := range goList(t, "-deps", f.pkg) {
			if d == f.dep || strings.HasPrefix(d, f.dep+"/") {
				t.Errorf("%s links %s: %s", f.pkg, d, f.why)
				break
			}
		}
	}

	deps := goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./examples/conductor")
	t.Logf("examples/conductor links %d non-standard packages", len(deps))
	if len(deps) >= maxConductorDeps {
		t.Errorf("examples/conductor links %d non-standard packages, want fewer than %d:\n%s",
			len(deps), maxConductorDeps, strings.Join(deps, "\n"))
	}
}

// TestConductorBuildsWithOTLP: the example conductor's OTLP export, behind
// its build tag, still compiles.
func TestConductorBuildsWithOTLP(t *testing.T) {
	cmd := exec.Command("go", "build", "-tags", "otlp", "-o", os.DevNull, "./examples/conductor")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags otlp ./examples/conductor: %v\n%s", err, out)
	}
}

// mapRow is a row of docs/ARCHITECTURE.md's package map: the packages it
// names and what they may import of canopy.
type mapRow struct {
	line     int
	pkgs     []string
	any      bool            // "anything", or "anything but ..." with but
	but, may map[string]bool // module-relative paths
	raw      string
}

// architectureMap reads the table under docs/ARCHITECTURE.md's heading
// "## Map". names resolves a short name of the may-import column (the
// last element of an importable package's path) to its path.
func architectureMap(t *testing.T, names map[string]string) []mapRow {
	t.Helper()
	b, err := os.ReadFile("../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "## Map") })
	if start < 0 {
		t.Fatal(`docs/ARCHITECTURE.md has no "## Map" heading`)
	}
	resolve := func(i int, list string) map[string]bool {
		out := map[string]bool{}
		for n := range strings.SplitSeq(list, ",") {
			n = strings.Trim(strings.TrimSpace(n), "`")
			p, ok := names[n]
			if !ok {
				t.Errorf("docs/ARCHITECTURE.md:%d: may import %q, which names no importable canopy package", i+1, n)
				continue
			}
			out[p] = true
		}
		return out
	}
	var rows []mapRow
	inTable := false
	for i := start + 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			if inTable || strings.HasPrefix(l, "## ") {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("docs/ARCHITECTURE.md:%d: a map row of %d cells, want 3 (package, owns, may import)", i+1, len(cells))
		}
		pkgCell, mayCell := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[2])
		if pkgCell == "package" || strings.HasPrefix(pkgCell, "---") {
			continue
		}
		r := mapRow{line: i + 1, raw: mayCell, may: map[string]bool{}}
		for p := range strings.SplitSeq(pkgCell, ",") {
			r.pkgs = append(r.pkgs, strings.TrimSuffix(strings.Trim(strings.TrimSpace(p), "`"), "/"))
		}
		switch {
		case mayCell == "nothing of canopy":
		case mayCell == "anything":
			r.any = true
		case strings.HasPrefix(mayCell, "anything but "):
			r.any, r.but = true, resolve(i, strings.TrimPrefix(mayCell, "anything but "))
		default:
			r.may = resolve(i, mayCell)
		}
		rows = append(rows, r)
	}
	if len(rows) < 10 {
		t.Fatalf("docs/ARCHITECTURE.md's map has %d rows: is it still a table under \"## Map\"?", len(rows))
	}
	return rows
}

// TestArchitectureMap: docs/ARCHITECTURE.md's map names every package of
// the module, each once, and no package imports a canopy package its row
// does not allow ("may import": short names, "nothing of canopy",
// "anything" or "anything but ..."). A package's own code is checked; a
// package of tests only (no non-test file), its tests.
func TestArchitectureMap(t *testing.T) {
	type pkgInfo struct {
		main    bool
		imports []string // module-relative
	}
	pkgs := map[string]pkgInfo{}
	names := map[string]string{} // short name -> path, of importable packages
	ambiguous := map[string]bool{}
	for _, line := range goList(t, "-f", `{{.ImportPath}}|{{.Name}}|{{len .GoFiles}}|{{join .Imports ","}}|{{join .TestImports ","}},{{join .XTestImports ","}}`, "./...") {
		f := strings.Split(line, "|")
		if len(f) != 5 {
			t.Fatalf("go list line %q", line)
		}
		path, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue
		}
		imports := f[3]
		if f[2] == "0" {
			imports = f[4] // tests only
		}
		var own []string
		for imp := range strings.SplitSeq(imports, ",") {
			if p, ok := strings.CutPrefix(imp, module+"/"); ok && p != path && !slices.Contains(own, p) {
				own = append(own, p)
			}
		}
		pkgs[path] = pkgInfo{main: f[1] == "main", imports: own}
		if f[1] != "main" && f[2] != "0" {
			short := path[strings.LastIndexByte(path, '/')+1:]
			if _, dup := names[short]; dup {
				ambiguous[short] = true
			}
			names[short], names[path] = path, path
		}
	}
	for short := range ambiguous {
		delete(names, short) // the map must name it by its path
	}
	seen := map[string]int{}
	for _, r := range architectureMap(t, names) {
		for _, p := range r.pkgs {
			info, ok := pkgs[p]
			if !ok {
				t.Errorf("docs/ARCHITECTURE.md:%d: the map lists %s, which is no package of the module", r.line, p)
				continue
			}
			if prev, dup := seen[p]; dup {
				t.Errorf("docs/ARCHITECTURE.md:%d: %s is in the map twice (also line %d)", r.line, p, prev)
			}
			seen[p] = r.line
			for _, imp := range info.imports {
				if r.any && !r.but[imp] || !r.any && r.may[imp] {
					continue
				}
				t.Errorf("docs/ARCHITECTURE.md:%d: %s imports %s, which its row does not allow (%q)", r.line, p, imp, r.raw)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		if _, ok := seen[p]; !ok {
			t.Errorf("%s is not in docs/ARCHITECTURE.md's map: add a row (what it owns, what it may import)", p)
		}
	}
}
