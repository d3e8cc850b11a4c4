package dashboards_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// alertScenarios are promtool unit tests of the alerts: series as canopy
// exposes them, and when each alert must fire and must not.
const alertScenarios = "testdata/alerts.test.yaml"

// TestAlertsFire runs `promtool test rules` on alertScenarios against the
// rules file, its annotations left out (prose, whose templates promtool
// would otherwise compare word for word): every alert fires where its
// scenario says, and only there. Every alert of the file has a scenario
// in which it fires. The live test (TestQueriesAgainstPrometheus) checks
// the same expressions against canopy's real series, where most alerts
// never fire.
func TestAlertsFire(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			delete(r.(map[string]any), "annotations")
		}
	}
	stripped, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(alertScenarios)
	if err != nil {
		t.Fatal(err)
	}
	var scenarios struct {
		Tests []struct {
			AlertRuleTest []struct {
				AlertName string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &scenarios); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range scenarios.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.AlertName] = fires[a.AlertName] || len(a.ExpAlerts) > 0
		}
	}
	for _, a := range alerts(t) {
		if !fires[a.name] {
			t.Errorf("alert %s fires in no scenario of %s", a.name, alertScenarios)
		}
	}

	dir := t.TempDir()
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	doc["rule_files"] = []string{"rules.yaml"}
	test, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), stripped, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.test.yaml"), test, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", filepath.Join(dir, "alerts.test.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
