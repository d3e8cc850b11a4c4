package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// kubeScoreAccepted are the kube-score checks the chart does not follow,
// each with the reason; the chart's README says the same under "kube-score".
// Every other check must pass on every values set.
var kubeScoreAccepted = map[string]string{
	"container-image-pull-policy": "IfNotPresent, with image.digest to pin one image: pulling on every start adds a registry outage to the ways a restart fails, for nothing when a digest names the image; set image.pullPolicy=Always to re-validate imagePullSecrets on every start",
	"pod-networkpolicy":           "the chart's NetworkPolicy (networkPolicy.enabled) selects the projectors, which hold run data and answer queries; it is off by default because it needs an enforcing CNI and your Prometheus's and Kafka's addresses, and the gateway's and the topics Job's traffic (from your Ingress, to Kafka) is yours to restrict",
}

// TestKubeScore: kube-score, a linter of Kubernetes manifests for
// reliability and security, finds nothing in any values set's rendering
// beyond the checks accepted above, and the README gives each acceptance.
func TestKubeScore(t *testing.T) {
	bin := testenv.Tool(t, "kube-score")
	readme, err := os.ReadFile(filepath.Join(chartDir(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"score", "-", "--output-format", "ci"}
	for check := range kubeScoreAccepted {
		args = append(args, "--ignore-test", check)
		if !strings.Contains(string(readme), "`"+check+"`") {
			t.Errorf("README.md does not say why the chart does not follow kube-score's %s", check)
		}
	}
	finding := regexp.MustCompile(`(?m)^\[(CRITICAL|WARNING)\].*$`)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out, err := templateErr(t, vs.args...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			cmd := exec.Command(bin, args...)
			cmd.Stdin = bytes.NewReader(out)
			res, _ := cmd.CombinedOutput() // exits 1 on any finding; the lines say which
			if !bytes.Contains(res, []byte("[OK]")) {
				t.Fatalf("kube-score scored nothing:\n%s", res)
			}
			for _, f := range finding.FindAll(res, -1) {
				t.Errorf("kube-score: %s", f)
			}
		})
	}
}

// TestReadmeTemplateCommand: the README's helm template command, run as
// written from the repository's root, renders the chart.
func TestReadmeTemplateCommand(t *testing.T) {
	helm := testenv.Tool(t, "helm")
	readme, err := os.ReadFile(filepath.Join(chartDir(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(helm template .*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no helm template command")
	}
	var words []string
	for _, line := range strings.Split(string(m[1]), "\n") {
		line, _, _ = strings.Cut(line, "#")
		words = append(words, strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), `\`))...)
	}
	cmd := exec.Command(helm, words[1:]...)
	cmd.Dir = testenv.RepoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(words, " "), err, out)
	}
	if !bytes.Contains(out, []byte("kind: StatefulSet")) {
		t.Errorf("%s rendered no StatefulSet:\n%s", strings.Join(words, " "), out)
	}
}
