package tools

import (
	"os"
	"os/exec"
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
