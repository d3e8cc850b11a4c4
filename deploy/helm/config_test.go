package helm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestRenderedConfigRunsInTheBinaries: every container the chart renders,
// with every values set (every optional feature on among them), is run as
// the real binary with its rendered arguments and environment and
// -check-config, which parses the flags and CANOPY_* variables as a start
// would, reads the files they name (from stand-ins for the Secrets), refuses
// any CANOPY_* variable the command does not read, and exits without
// connecting. So a flag or variable the chart renders that the binaries do
// not know, or a value they cannot parse, fails here rather than in a pod.
func TestRenderedConfigRunsInTheBinaries(t *testing.T) {
	bins := buildBinaries(t)
	secrets := newSecretFiles(t)
	ran := map[string]bool{}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			for name, p := range template(t, vs.args...).podTemplates(t) {
				for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
					bin, args := checkCommand(t, bins, c)
					out, err := runChecked(t, bin, args, podEnv(t, p.Spec, c, secrets))
					if err != nil || !strings.Contains(out, "configuration ok") {
						t.Errorf("%s container %s: %s %s: %v\n%s", name, c.Name, c.Command[0], strings.Join(args, " "), err, out)
					}
					what := c.Command[0]
					if what == "/projector" && len(c.Args) > 0 {
						what += " " + c.Args[0]
					}
					ran[what] = true
				}
			}
		})
	}
	for _, want := range []string{"/projector run", "/projector create-topics", "/conductor-gateway"} {
		if !ran[want] {
			t.Errorf("no rendered container ran %s (ran %v)", want, keys(ran))
		}
	}
}

// TestCheckConfigRefuses: -check-config is not a rubber stamp: a variable
// no flag reads, a number that does not parse and an unknown flag each
// fail it, as they would fail (or be silently ignored by) a real start.
func TestCheckConfigRefuses(t *testing.T) {
	bins := buildBinaries(t)
	secrets := newSecretFiles(t)
	r := template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI)
	pods := r.podTemplates(t)
	for _, tc := range []struct {
		workload, extraEnv, extraArg, want string
	}{
		{"StatefulSet/rel-canopy-projector", "CANOPY_READY_LAGG=5", "", "CANOPY_READY_LAGG"},
		{"StatefulSet/rel-canopy-projector", "CANOPY_READY_LAG=lots", "", "CANOPY_READY_LAG"},
		{"StatefulSet/rel-canopy-projector", "", "-sesion-timeout=30s", "sesion-timeout"},
		{"StatefulSet/rel-canopy-projector", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "", "http/json"},
		{"Job/rel-canopy-create-topics", "CANOPY_JWT_KEY_FILE=/x", "", "CANOPY_JWT_KEY_FILE"},
		{"Deployment/rel-canopy-gateway", "CANOPY_MAX_STREAMS=many", "", "CANOPY_MAX_STREAMS"},
		{"Deployment/rel-canopy-gateway", "CANOPY_DATA_DIR=/var/lib/canopy", "", "CANOPY_DATA_DIR"},
		{"Deployment/rel-canopy-gateway", "CANOPY_KAFKA_TLS_KEY=", "", "go together"},
		// The query endpoint listens on every interface: not without the secret.
		{"StatefulSet/rel-canopy-projector", "CANOPY_QUERY_SECRET_FILE=", "", "-query-secret-file"},
		{"StatefulSet/rel-canopy-projector", "CANOPY_QUERY_SECRET_FILE=/nonexistent/query-secret", "", "-query-secret-file"},
		{"Deployment/rel-canopy-gateway", "CANOPY_PROJECTOR_SECRET_FILE=/nonexistent/query-secret", "", "-projector-secret-file"},
	} {
		p, ok := pods[tc.workload]
		if !ok {
			t.Fatalf("no %s rendered; have %v", tc.workload, keys(pods))
		}
		c := p.Spec.Containers[0]
		bin, args := checkCommand(t, bins, c)
		if tc.extraArg != "" {
			args = append(args, tc.extraArg)
		}
		env := podEnv(t, p.Spec, c, secrets)
		if tc.extraEnv != "" {
			env = append(env, tc.extraEnv) // the last of a name wins
		}
		out, err := runChecked(t, bin, args, env)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s with %s%s: %v, want a refusal naming %s:\n%s", tc.workload, tc.extraEnv, tc.extraArg, err, tc.want, out)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// buildBinaries builds the image's two binaries, by their path in the
// image.
func buildBinaries(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Tool(t, "go"), "build", "-o", dir+string(filepath.Separator), "./cmd/projector", "./cmd/conductor-gateway")
	cmd.Dir = testenv.RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return map[string]string{"/projector": filepath.Join(dir, "projector"), "/conductor-gateway": filepath.Join(dir, "conductor-gateway")}
}

// checkCommand is the binary to run for c and its arguments with
// -check-config: after the subcommand for /projector, first for the
// gateway.
func checkCommand(t *testing.T, bins map[string]string, c corev1.Container) (string, []string) {
	t.Helper()
	if len(c.Command) != 1 {
		t.Fatalf("container %s: command %q, want one of the image's binaries", c.Name, c.Command)
	}
	bin, ok := bins[c.Command[0]]
	if !ok {
		t.Fatalf("container %s runs %s, which is not in the image", c.Name, c.Command[0])
	}
	args := slices.Clone(c.Args)
	at := 0
	if c.Command[0] == "/projector" {
		at = 1
	}
	return bin, slices.Insert(args, at, "-check-config")
}

// runChecked runs bin with exactly env (nothing inherited) and returns its
// output.
func runChecked(t *testing.T, bin string, args, env []string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// podEnv is c's environment as the kubelet would give it: values in order,
// $(VAR) expanded from the variables before it, the downward API's pod
// name and namespace, secretKeyRef values as stand-ins, and every path in
// a Secret volume moved to where secrets wrote that Secret's files.
func podEnv(t *testing.T, pod corev1.PodSpec, c corev1.Container, secrets *secretFiles) []string {
	t.Helper()
	mounts := map[string]string{} // mount path -> local directory
	for _, vm := range c.VolumeMounts {
		if v := volume(pod, vm.Name); v != nil && v.Secret != nil {
			mounts[strings.TrimSuffix(vm.MountPath, "/")] = secrets.dir(t, v.Secret)
		}
	}
	defined := map[string]string{}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var env []string
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
			v = ref.ReplaceAllStringFunc(v, func(m string) string {
				if d, ok := defined[ref.FindStringSubmatch(m)[1]]; ok {
					return d
				}
				return m // Kubernetes leaves an undefined reference as it is
			})
		case e.ValueFrom.FieldRef != nil:
			v = map[string]string{"metadata.name": "rel-canopy-projector-0", "metadata.namespace": "ns"}[e.ValueFrom.FieldRef.FieldPath]
			if v == "" {
				t.Fatalf("%s: %s from field %s, which the test does not stand in for", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			v = "stand-in-" + e.ValueFrom.SecretKeyRef.Key
			if e.Name == "OTEL_EXPORTER_OTLP_HEADERS" {
				v = "api-key=stand-in"
			}
		default:
			t.Fatalf("%s: %s from %+v, which the test does not stand in for", c.Name, e.Name, e.ValueFrom)
		}
		for mount, dir := range mounts {
			if rest, ok := strings.CutPrefix(v, mount+"/"); ok {
				v = filepath.Join(dir, rest)
			}
		}
		defined[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env
}

// secretFiles writes stand-ins for the Secrets the chart mounts: a CA, a
// certificate with its key, an HS256 key, a token file. A Secret key the
// test has no content for fails it, so a new one is noticed.
type secretFiles struct {
	root    string
	content map[string][]byte
	dirs    map[string]string
}

func newSecretFiles(t *testing.T) *secretFiles {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stand-in"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &secretFiles{root: t.TempDir(), dirs: map[string]string{}, content: map[string][]byte{
		"ca.crt": cert, "ca.pem": cert, "tls.crt": cert,
		"tls.key":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		"jwt.key":     []byte("0123456789abcdef0123456789abcdef0123456789abcdef\n"),
		"tokens.json": []byte(`{"a-development-token-of-some-length": {"sub": "dev", "runs": ["*"]}}`),
		// The projectors' shared secret: the chart's key, and the one the
		// all-features values name.
		"query-secret":  []byte("a-stand-in-for-the-projectors-shared-secret\n"),
		"shared-secret": []byte("another-stand-in-for-the-shared-secret-0123\n"),
	}}
}

// dir is the directory holding the files a Secret volume mounts.
func (s *secretFiles) dir(t *testing.T, v *corev1.SecretVolumeSource) string {
	t.Helper()
	d := filepath.Join(s.root, v.SecretName)
	items := v.Items
	if len(items) == 0 {
		// The whole Secret: the test knows the keys of kubernetes.io/tls ones.
		items = []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}}
	}
	for _, it := range items {
		b, ok := s.content[it.Key]
		if !ok {
			t.Fatalf("the chart mounts key %q of Secret %s; the test has no stand-in for it", it.Key, v.SecretName)
		}
		p := filepath.Join(d, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(fmt.Errorf("writing %s: %w", p, err))
		}
	}
	return d
}
