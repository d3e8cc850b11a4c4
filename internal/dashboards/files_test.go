package dashboards_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/dashboards"
)

var update = flag.Bool("update", false, "rewrite the dashboard files and docs/DASHBOARDS.md from dashboards.All")

const (
	dashboardDir = "../../deploy/helm/canopy/dashboards"
	guideFile    = "../../docs/DASHBOARDS.md"
	rulesFile    = "../../deploy/helm/canopy/rules/canopy.rules.yaml"
)

// TestFilesAreCurrent: the committed dashboards and guide are what
// dashboards.All renders, and no other dashboard file lies beside them.
func TestFilesAreCurrent(t *testing.T) {
	want := map[string][]byte{}
	for _, d := range dashboards.All {
		b, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		want[filepath.Join(dashboardDir, d.File)] = b
	}
	want[guideFile] = dashboards.Guide()
	if *update {
		if err := os.MkdirAll(dashboardDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for path, b := range want {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for path, b := range want {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/dashboards -update)", err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s is not what internal/dashboards renders: run go test ./internal/dashboards -update", path)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	for _, f := range files {
		if _, ok := want[f]; !ok {
			t.Errorf("%s is not rendered by internal/dashboards: remove it or add it to dashboards.All", f)
		}
	}
}

// TestDashboardsAreGrafanaJSON: each file has what Grafana's provisioning
// needs, unique panel ids, and a question on every panel.
func TestDashboardsAreGrafanaJSON(t *testing.T) {
	uids := map[string]bool{}
	for _, d := range loadDashboards(t) {
		if d.UID == "" || d.Title == "" || uids[d.UID] {
			t.Errorf("dashboard %q: missing or repeated uid %q", d.Title, d.UID)
		}
		uids[d.UID] = true
		var ids []int
		for _, p := range d.Panels {
			if slices.Contains(ids, p.ID) {
				t.Errorf("%s: panel id %d repeated", d.UID, p.ID)
			}
			ids = append(ids, p.ID)
			if p.Description == "" || len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no question or no query", d.UID, p.Title)
			}
		}
	}
}

// TestDashboardsAreScoped: every dashboard offers job, namespace and
// instance variables, and every series selector of every query carries
// them, so that one Prometheus can hold several deployments.
func TestDashboardsAreScoped(t *testing.T) {
	for _, d := range loadDashboards(t) {
		var names []string
		for _, v := range d.Templating.List {
			names = append(names, v.Name)
			if v.Type == "query" && (!v.IncludeAll || v.AllValue != ".*" || !v.Multi) {
				t.Errorf("%s: variable %s: includeAll %v, allValue %q, multi %v; want true, \".*\", true", d.UID, v.Name, v.IncludeAll, v.AllValue, v.Multi)
			}
		}
		if !slices.Equal(names, []string{"datasource", "job", "namespace", "instance"}) {
			t.Errorf("%s: variables %v, want datasource, job, namespace, instance", d.UID, names)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				series := len(seriesName.FindAllString(tg.Expr, -1))
				if scoped := strings.Count(tg.Expr, dashboards.Scope); series == 0 || scoped != series {
					t.Errorf("%s / %s / %s: %d series selectors, %d scoped: %s", d.UID, p.Title, tg.RefID, series, scoped, tg.Expr)
				}
			}
		}
	}
}

// seriesName finds series names in a query, written independently of the
// package's own pattern.
var seriesName = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(?:canopy|process|go)_[a-z0-9_]+`)

type grafanaDashboard struct {
	UID, Title string
	Templating struct {
		List []struct {
			Name, Type, AllValue string
			IncludeAll, Multi    bool
		}
	}
	Panels []struct {
		ID                 int
		Title, Description string
		Targets            []struct{ Expr, RefID string }
	}
}

// loadDashboards reads the committed dashboard files: what operators load.
func loadDashboards(t *testing.T) []grafanaDashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dashboardDir, err)
	}
	var out []grafanaDashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d grafanaDashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, d)
	}
	return out
}

// panelQueries are every panel query of every committed dashboard, by
// "dashboard / panel / refId", with Grafana's rate window replaced by
// window and the job, namespace and instance variables by job (".*" is
// what Grafana's "All" gives).
func panelQueries(t *testing.T, window, job string) map[string]string {
	r := strings.NewReplacer("$__rate_interval", window, "$job", job, "$namespace", ".*", "$instance", ".*")
	out := map[string]string{}
	for _, d := range loadDashboards(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				out[d.UID+" / "+p.Title+" / "+tg.RefID] = r.Replace(tg.Expr)
			}
		}
	}
	return out
}
