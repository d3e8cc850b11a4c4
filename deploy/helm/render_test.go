// Package helm tests the Helm chart in deploy/helm/canopy and the image the
// repository's Dockerfile builds for it. It has no non-test code.
//
// The chart is linted (`helm lint --strict`) and rendered (`helm template`)
// with several values sets: the least an install needs, every optional
// feature on, and a small install without volumes or gateway. The rendered
// manifests are decoded strictly into the Kubernetes API types (k8s.io/api),
// which rejects unknown and misplaced fields and wrong types the way the API
// server would: this is the offline stand-in for kubeconform, whose
// Kubernetes schemas are not available from the Go module proxy. Then the
// tests assert what an operator relies on: one volume per projector pod, the
// pod name as static group member id, probes, security contexts, Secrets
// referenced and never inlined, monitoring objects only when asked for and
// possible, and a schema and a README that cover every value. Last, each
// rendered container's arguments and environment go through the real
// binaries' configuration parsing (-check-config, config_test.go).
//
// helm comes from testenv.Tool: PATH or bin/tools (make test builds it
// there); without it the tests skip, or fail under CI=true.
package helm

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// kubeVersion is the Kubernetes version the chart is rendered for. A helm
// built with `go install` assumes v1.20 otherwise, older than the chart's
// kubeVersion constraint.
const kubeVersion = "1.32.0"

// monitoringAPI is the API of prometheus-operator's CRDs; the chart renders
// ServiceMonitor and PrometheusRule only where the cluster has it.
const monitoringAPI = "monitoring.coreos.com/v1"

// Values sets in the chart's ci/ directory.
const (
	requiredValues      = "ci/required-values.yaml"
	allFeaturesValues   = "ci/all-features-values.yaml"
	noPersistenceValues = "ci/no-persistence-values.yaml"
)

func chartDir(t testing.TB) string {
	return filepath.Join(testenv.RepoRoot(t), "deploy", "helm", "canopy")
}

// manifest is one rendered Kubernetes object: its kind and name, its JSON
// (for strict typed decoding) and its generic form (for CRDs).
type manifest struct {
	Kind, Name string
	JSON       []byte
	Obj        map[string]any
}

// rendered is the output of one helm template run.
type rendered []manifest

// helmCmd runs helm in the chart directory and returns its combined output.
func helmCmd(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(testenv.Tool(t, "helm"), args...)
	cmd.Dir = chartDir(t)
	// Keep helm away from the user's repositories and cache: the chart has
	// no dependencies and nothing here needs the network.
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+tmp, "HELM_CACHE_HOME="+tmp, "HELM_DATA_HOME="+tmp)
	return cmd.CombinedOutput()
}

// template renders the chart with the given extra helm arguments (values
// files, --set, --api-versions) and fails the test when helm does.
func template(t testing.TB, args ...string) rendered {
	t.Helper()
	out, err := templateErr(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return parse(t, out)
}

func templateErr(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	return helmCmd(t, append([]string{"template", "rel", ".", "--namespace", "ns", "--kube-version", kubeVersion}, args...)...)
}

// parse splits helm's multi-document output into manifests.
func parse(t testing.TB, out []byte) rendered {
	t.Helper()
	var ms rendered
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if string(j) == "null" {
			continue // comments only
		}
		var obj map[string]any
		if err := json.Unmarshal(j, &obj); err != nil {
			t.Fatalf("rendered document is not an object: %v\n%s", err, doc)
		}
		md, _ := obj["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		kind, _ := obj["kind"].(string)
		ms = append(ms, manifest{Kind: kind, Name: name, JSON: j, Obj: obj})
	}
	return ms
}

// of returns the manifests of a kind.
func (r rendered) of(kind string) []manifest {
	var out []manifest
	for _, m := range r {
		if m.Kind == kind {
			out = append(out, m)
		}
	}
	return out
}

// one decodes the only manifest of a kind into v, failing unless there is
// exactly one.
func (r rendered) one(t testing.TB, kind string, v any) {
	t.Helper()
	ms := r.of(kind)
	if len(ms) != 1 {
		t.Fatalf("want one %s, rendered %d", kind, len(ms))
	}
	strict(t, ms[0], v)
}

// strict decodes m into v, rejecting fields v's type does not have.
func strict(t testing.TB, m manifest, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(m.JSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s %s does not decode strictly into %T: %v", m.Kind, m.Name, v, err)
	}
}

// typed maps every kind the chart renders, except the CRDs, to its API type.
var typed = map[string]func() any{
	"StatefulSet":             func() any { return new(appsv1.StatefulSet) },
	"Deployment":              func() any { return new(appsv1.Deployment) },
	"Service":                 func() any { return new(corev1.Service) },
	"ServiceAccount":          func() any { return new(corev1.ServiceAccount) },
	"ConfigMap":               func() any { return new(corev1.ConfigMap) },
	"PodDisruptionBudget":     func() any { return new(policyv1.PodDisruptionBudget) },
	"Ingress":                 func() any { return new(networkingv1.Ingress) },
	"HorizontalPodAutoscaler": func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"Job":                     func() any { return new(batchv1.Job) },
	"Secret":                  func() any { return new(corev1.Secret) },
	"NetworkPolicy":           func() any { return new(networkingv1.NetworkPolicy) },
}

// apiVersions are the apiVersions of the kinds above, so that a manifest
// cannot decode into the right struct under the wrong group or version.
var apiVersions = map[string]string{
	"StatefulSet":             "apps/v1",
	"Deployment":              "apps/v1",
	"Service":                 "v1",
	"ServiceAccount":          "v1",
	"ConfigMap":               "v1",
	"PodDisruptionBudget":     "policy/v1",
	"Ingress":                 "networking.k8s.io/v1",
	"HorizontalPodAutoscaler": "autoscaling/v2",
	"Job":                     "batch/v1",
	"Secret":                  "v1",
	"NetworkPolicy":           "networking.k8s.io/v1",
	"ServiceMonitor":          monitoringAPI,
	"PrometheusRule":          monitoringAPI,
}

// podTemplates returns the pod template of every workload rendered, by
// "Kind/name".
func (r rendered) podTemplates(t testing.TB) map[string]corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]corev1.PodTemplateSpec{}
	for _, m := range r {
		switch m.Kind {
		case "StatefulSet":
			var s appsv1.StatefulSet
			strict(t, m, &s)
			out[m.Kind+"/"+m.Name] = s.Spec.Template
		case "Deployment":
			var d appsv1.Deployment
			strict(t, m, &d)
			out[m.Kind+"/"+m.Name] = d.Spec.Template
		case "Job":
			var j batchv1.Job
			strict(t, m, &j)
			out[m.Kind+"/"+m.Name] = j.Spec.Template
		}
	}
	return out
}

// env returns a container's environment variable by name.
func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// arg returns the value of a -name=value argument.
func arg(c corev1.Container, name string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func containerPort(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// selects reports whether a selector's labels are all among labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// readYAML reads a YAML (or JSON) file into a generic value.
func readYAML(t testing.TB, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// notes renders templates/NOTES.txt, which helm template does not print: a
// copy of the chart gets a ConfigMap template that renders the notes with
// tpl, in the same context as helm would.
func notes(t testing.TB, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "canopy")
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes-under-test.txt"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-under-test\ndata:\n  notes: {{ tpl (.Files.Get \"notes-under-test.txt\") . | quote }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes-under-test.yaml"), []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Tool(t, "helm"), append([]string{"template", "rel", dir, "--namespace", "ns", "--kube-version", kubeVersion,
		"--show-only", "templates/zz-notes-under-test.yaml"}, args...)...)
	cmd.Dir = chartDir(t) // values files are relative to the chart
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+tmp, "HELM_CACHE_HOME="+tmp, "HELM_DATA_HOME="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rendering NOTES.txt: %v\n%s", err, out)
	}
	var cm corev1.ConfigMap
	strict(t, parse(t, out)[0], &cm)
	return cm.Data["notes"]
}
