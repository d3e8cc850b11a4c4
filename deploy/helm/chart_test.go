package helm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// valueSets are the renderings every invariant must hold for.
var valueSets = []struct {
	name string
	args []string
}{
	{"required", []string{"-f", requiredValues}},
	{"all-features", []string{"-f", allFeaturesValues, "--api-versions", monitoringAPI}},
	{"no-persistence", []string{"-f", noPersistenceValues}},
}

// TestLint: helm lint --strict (warnings are errors) with every values set
// in ci/, which also validates them against values.schema.json.
func TestLint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values sets in ci/: %v", err)
	}
	for _, f := range files {
		rel := filepath.Join("ci", filepath.Base(f))
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, err := helmCmd(t, "lint", "--strict", ".", "-f", rel, "--kube-version", kubeVersion)
			if err != nil {
				t.Fatalf("helm lint --strict -f %s: %v\n%s", rel, err, out)
			}
		})
	}
}

// TestRequiredValues: an install that does not say where Kafka is, or how
// the gateway checks tokens, fails at render time and says what to set,
// rather than installing pods that crash.
func TestRequiredValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "kafka.brokers is required"},
		{[]string{"--set", "kafka.brokers=k:9092"}, "gateway.auth.existingSecret"},
		{[]string{"-f", requiredValues, "--set", "kafka.sasl.mechanism=PLAIN"}, "kafka.sasl.existingSecret is required"},
		{[]string{"-f", requiredValues, "--set", "projector.terminationGracePeriodSeconds=60"}, "must exceed projector.transactionTimeoutSeconds"},
	} {
		out, err := templateErr(t, tc.args...)
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("helm template %v: err %v, want a failure saying %q; output:\n%s", tc.args, err, tc.want, out)
		}
	}
}

// TestManifestsDecodeStrictly: every rendered object has a known kind under
// its right apiVersion, and (except the prometheus-operator CRDs) decodes
// into its Kubernetes API type without unknown fields.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := template(t, vs.args...)
			if len(r) == 0 {
				t.Fatal("nothing rendered")
			}
			for _, m := range r {
				want, ok := apiVersions[m.Kind]
				if !ok {
					t.Errorf("%s %s: a kind this test does not know; add it to apiVersions and typed", m.Kind, m.Name)
					continue
				}
				if got := m.Obj["apiVersion"]; got != want {
					t.Errorf("%s %s: apiVersion %v, want %s", m.Kind, m.Name, got, want)
				}
				if m.Name == "" {
					t.Errorf("%s without a name", m.Kind)
				}
				if newT, ok := typed[m.Kind]; ok {
					strict(t, m, newT())
				}
			}
		})
	}
}

// TestProjectorStatefulSet: the projector is a StatefulSet whose pods each
// keep Pebble on their own claim, join the group as static members named
// after the pod, advertise their stable DNS name, and are probed for
// liveness and readiness on the endpoints that mean that.
func TestProjectorStatefulSet(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := template(t, vs.args...)
			var sts appsv1.StatefulSet
			r.one(t, "StatefulSet", &sts)
			pod := sts.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Containers))
			}
			c := pod.Containers[0]
			if !slices.Equal(c.Command, []string{"/projector"}) || len(c.Args) == 0 || c.Args[0] != "run" {
				t.Errorf("command %q args %q: want /projector run ...", c.Command, c.Args)
			}

			// State: the data directory is the volume named data, a claim per
			// pod, unless persistence is off (then an emptyDir).
			dataDir, ok := env(c, "CANOPY_DATA_DIR")
			if !ok || dataDir.Value == "" {
				t.Fatal("CANOPY_DATA_DIR not set")
			}
			var mounted string
			for _, vm := range c.VolumeMounts {
				if vm.MountPath == dataDir.Value {
					mounted = vm.Name
				}
			}
			if mounted == "" {
				t.Fatalf("nothing mounted at the data directory %s", dataDir.Value)
			}
			persistent := vs.name != "no-persistence"
			var claim *corev1.PersistentVolumeClaim
			for i := range sts.Spec.VolumeClaimTemplates {
				if sts.Spec.VolumeClaimTemplates[i].Name == mounted {
					claim = &sts.Spec.VolumeClaimTemplates[i]
				}
			}
			switch {
			case persistent && claim == nil:
				t.Errorf("the data directory's volume %q is not a volumeClaimTemplate", mounted)
			case persistent:
				if q := claim.Spec.Resources.Requests[corev1.ResourceStorage]; q.IsZero() {
					t.Error("the data claim requests no storage")
				}
				if !slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOnce) {
					t.Errorf("data claim access modes %v: want ReadWriteOnce", claim.Spec.AccessModes)
				}
			case claim != nil:
				t.Error("persistence is off but there is a volumeClaimTemplate")
			default:
				if v := volume(pod, mounted); v == nil || v.EmptyDir == nil {
					t.Errorf("persistence off: the data volume %q should be an emptyDir", mounted)
				}
			}
			if vs.name == "all-features" {
				if got := claim.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "50Gi" || claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != "fast-ssd" {
					t.Errorf("claim %v class %v: want 50Gi of fast-ssd from values", got.String(), claim.Spec.StorageClassName)
				}
			}

			// Identity: POD_NAME from the downward API, defined before the
			// variables that expand it.
			assertPodNameEnv(t, c)
			if id, _ := env(c, "CANOPY_INSTANCE_ID"); id.Value != "$(POD_NAME)" {
				t.Errorf("CANOPY_INSTANCE_ID = %q, want $(POD_NAME): the static group member id must be the pod name", id.Value)
			}

			// Addressing: the advertised address is the pod's name under the
			// StatefulSet's headless Service, on the port the query endpoint
			// listens on.
			httpPort, ok := containerPort(c, "http")
			if !ok {
				t.Fatal("no container port named http")
			}
			if a, _ := env(c, "CANOPY_HTTP_ADDR"); a.Value != fmt.Sprintf(":%d", httpPort) {
				t.Errorf("CANOPY_HTTP_ADDR %q does not listen on the container port %d", a.Value, httpPort)
			}
			adv, _ := env(c, "CANOPY_ADVERTISE_ADDR")
			wantAdv := fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local:%d", sts.Spec.ServiceName, httpPort)
			if adv.Value != wantAdv {
				t.Errorf("CANOPY_ADVERTISE_ADDR = %q, want %q", adv.Value, wantAdv)
			}
			headless := service(t, r, sts.Spec.ServiceName)
			if headless == nil {
				t.Fatalf("the StatefulSet's serviceName %q is not a rendered Service", sts.Spec.ServiceName)
			}
			if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
				t.Errorf("Service %s: want headless and publishing not-ready pods (a restoring pod must resolve)", headless.Name)
			}
			if !selects(headless.Spec.Selector, sts.Spec.Template.Labels) || !selects(sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels) {
				t.Error("the headless Service or the StatefulSet does not select the projector pods")
			}
			if !servesPort(headless, "http", httpPort) {
				t.Errorf("headless Service does not expose the http port %d", httpPort)
			}

			// Probes: alive is /healthz, ready is /readyz, on the http port.
			assertProbe(t, "liveness", c.LivenessProbe, "/healthz", "http")
			assertProbe(t, "readiness", c.ReadinessProbe, "/readyz", "http")

			// Shutdown: the grace period outlasts the transaction timeout, so
			// a pod finishes and commits its batch before it is killed.
			txArg, ok := arg(c, "transaction-timeout")
			tx, err := strconv.Atoi(strings.TrimSuffix(txArg, "s"))
			if !ok || err != nil {
				t.Fatalf("-transaction-timeout=%q: want whole seconds", txArg)
			}
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= int64(tx) {
				t.Errorf("terminationGracePeriodSeconds %s, want more than the transaction timeout %ds", ptr(g), tx)
			}

			if persistent {
				var pdb policyv1.PodDisruptionBudget
				strict(t, pdbFor(t, r, sts.Spec.Template.Labels), &pdb)
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("projector PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
				}
			}
		})
	}
}

// TestProjectorValuesReachFlags: values that change the projector's
// behaviour reach its flags and environment (a sample, from the
// all-features set).
func TestProjectorValuesReachFlags(t *testing.T) {
	r := template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI)
	var sts appsv1.StatefulSet
	r.one(t, "StatefulSet", &sts)
	c := sts.Spec.Template.Spec.Containers[0]
	for name, want := range map[string]string{"transaction-timeout": "30s", "max-hot-nodes": "100000", "max-pending": "20000", "chunk": "500", "max-batch": "5000", "memtable-mb": "32",
		"max-queued-bytes": "64MiB", "min-procs": "3"} {
		if got, _ := arg(c, name); got != want {
			t.Errorf("-%s=%q, want %q", name, got, want)
		}
	}
	if !slices.Contains(c.Args, "-log-level=debug") {
		t.Errorf("extraArgs missing from %q", c.Args)
	}
	if !slices.Contains(c.Args, "-pprof") {
		t.Errorf("-pprof missing from %q with pprof: true", c.Args)
	}
	for name, want := range map[string]string{"CANOPY_GROUP": "canopy-prod", "CANOPY_TOPIC_PREFIX": "prod", "CANOPY_STANDBY": "true", "CANOPY_TRANSACTIONS": "true", "CANOPY_KAFKA_TLS": "true", "CANOPY_KAFKA_TLS_CA": "/etc/canopy/kafka-ca/ca.pem", "CANOPY_READY_LAG": "2500", "GODEBUG": "madvdontneed=1"} {
		if e, _ := env(c, name); e.Value != want {
			t.Errorf("%s = %q, want %q", name, e.Value, want)
		}
	}
	if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 75 {
		t.Errorf("terminationGracePeriodSeconds %s, want the 75 the values set", ptr(g))
	}
	if *sts.Spec.Replicas != 4 {
		t.Errorf("replicas %d, want 4", *sts.Spec.Replicas)
	}

	// Defaults: the grace period is derived from the transaction timeout;
	// the queue's bound in bytes is the binary's (from -memory-limit), two
	// Ps at least, no profiles.
	r = template(t, "-f", requiredValues, "--set", "projector.transactionTimeoutSeconds=100")
	r.one(t, "StatefulSet", &sts)
	c = sts.Spec.Template.Spec.Containers[0]
	if got, ok := arg(c, "max-queued-bytes"); ok {
		t.Errorf("-max-queued-bytes=%q by default, want it unset (the binary's default)", got)
	}
	if got, _ := arg(c, "min-procs"); got != "8" {
		t.Errorf("-min-procs=%q by default, want 8", got)
	}
	if slices.Contains(c.Args, "-pprof") {
		t.Errorf("-pprof set by default: %q", c.Args)
	}
	if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 130 {
		t.Errorf("derived terminationGracePeriodSeconds %s, want 100+30", ptr(g))
	}
	if e, _ := env(sts.Spec.Template.Spec.Containers[0], "CANOPY_READY_LAG"); e.Value != "10000" {
		t.Errorf("default CANOPY_READY_LAG %q, want the binary's own default 10000", e.Value)
	}
}

// TestGateway: a Deployment behind a Service (and an Ingress when enabled),
// probed on its metrics port, with the token key mounted from a Secret.
func TestGateway(t *testing.T) {
	r := template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI)
	var d appsv1.Deployment
	r.one(t, "Deployment", &d)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if !slices.Equal(c.Command, []string{"/conductor-gateway"}) {
		t.Errorf("command %q, want /conductor-gateway", c.Command)
	}
	apiPort, ok1 := containerPort(c, "http")
	metricsPort, ok2 := containerPort(c, "metrics")
	if !ok1 || !ok2 {
		t.Fatal("want container ports http and metrics")
	}
	if e, _ := env(c, "CANOPY_LISTEN"); e.Value != fmt.Sprintf(":%d", apiPort) {
		t.Errorf("CANOPY_LISTEN %q does not listen on the http port %d", e.Value, apiPort)
	}
	if e, _ := env(c, "CANOPY_METRICS_ADDR"); e.Value != fmt.Sprintf(":%d", metricsPort) {
		t.Errorf("CANOPY_METRICS_ADDR %q does not listen on the metrics port %d", e.Value, metricsPort)
	}
	if e, _ := env(c, "CANOPY_GROUP"); e.Value != "canopy-prod" {
		t.Errorf("gateway CANOPY_GROUP %q: it must look up the projectors' group, canopy-prod", e.Value)
	}
	assertProbe(t, "liveness", c.LivenessProbe, "/healthz", "metrics")
	assertProbe(t, "readiness", c.ReadinessProbe, "/readyz", "metrics")
	if d.Spec.Replicas != nil {
		t.Error("with autoscaling the Deployment must leave replicas to the HorizontalPodAutoscaler")
	}

	// The token key is a file from the Secret, where CANOPY_JWT_KEY_FILE says.
	keyFile, _ := env(c, "CANOPY_JWT_KEY_FILE")
	if !fileFromSecret(pod, c, keyFile.Value, "canopy-gateway-auth") {
		t.Errorf("CANOPY_JWT_KEY_FILE %q is not a file of Secret canopy-gateway-auth", keyFile.Value)
	}
	cert, _ := env(c, "CANOPY_HTTP_TLS_CERT")
	if !fileFromSecret(pod, c, cert.Value, "canopy-gateway-tls") {
		t.Errorf("CANOPY_HTTP_TLS_CERT %q is not a file of Secret canopy-gateway-tls", cert.Value)
	}
	ca, _ := env(c, "CANOPY_KAFKA_TLS_CA")
	if !fileFromSecret(pod, c, ca.Value, "kafka-ca") {
		t.Errorf("CANOPY_KAFKA_TLS_CA %q is not a file of Secret kafka-ca", ca.Value)
	}

	svc := service(t, r, d.Name)
	if svc == nil || !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Fatalf("no Service %s selecting the gateway pods", d.Name)
	}
	if !servesPort(svc, "http", apiPort) || !servesPort(svc, "metrics", metricsPort) {
		t.Error("the gateway Service does not expose the http and metrics ports")
	}
	var ing networkingv1.Ingress
	r.one(t, "Ingress", &ing)
	for _, rule := range ing.Spec.Rules {
		for _, p := range rule.HTTP.Paths {
			if p.Backend.Service == nil || p.Backend.Service.Name != svc.Name || p.Backend.Service.Port.Name != "http" {
				t.Errorf("Ingress path %s does not go to the gateway Service's http port", p.Path)
			}
		}
	}
	if len(r.of("HorizontalPodAutoscaler")) != 1 {
		t.Error("autoscaling enabled, but no HorizontalPodAutoscaler")
	}

	// Off means off.
	r = template(t, "-f", noPersistenceValues)
	for _, kind := range []string{"Deployment", "Ingress", "HorizontalPodAutoscaler"} {
		if n := len(r.of(kind)); n != 0 {
			t.Errorf("gateway disabled, but %d %s rendered", n, kind)
		}
	}
	if len(r.of("Service")) != 1 {
		t.Errorf("gateway disabled: want only the projectors' Service, got %d", len(r.of("Service")))
	}
}

// TestSecurityContexts: every pod the chart runs is non-root, with a
// read-only root filesystem, no privilege escalation, no capabilities and no
// Kubernetes API token; every container has requests and limits.
func TestSecurityContexts(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			pods := template(t, vs.args...).podTemplates(t)
			if len(pods) == 0 {
				t.Fatal("no workloads rendered")
			}
			for name, p := range pods {
				ps := p.Spec.SecurityContext
				if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
					t.Errorf("%s mounts a service account token it does not need", name)
				}
				if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s: want the RuntimeDefault seccomp profile", name)
				}
				for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
					sc := c.SecurityContext
					where := name + " container " + c.Name
					if sc == nil {
						t.Errorf("%s: no securityContext", where)
						continue
					}
					nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (ps != nil && ps.RunAsNonRoot != nil && *ps.RunAsNonRoot)
					uid := sc.RunAsUser
					if uid == nil && ps != nil {
						uid = ps.RunAsUser
					}
					if !nonRoot || uid == nil || *uid == 0 {
						t.Errorf("%s: want runAsNonRoot and a non-zero runAsUser", where)
					}
					if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
						t.Errorf("%s: allowPrivilegeEscalation must be false", where)
					}
					if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
						t.Errorf("%s: readOnlyRootFilesystem must be true", where)
					}
					if sc.Privileged != nil && *sc.Privileged {
						t.Errorf("%s: privileged", where)
					}
					if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
						t.Errorf("%s: want capabilities drop ALL, add none", where)
					}
					for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
						if _, ok := c.Resources.Requests[res]; !ok {
							t.Errorf("%s: no %s request", where, res)
						}
						if _, ok := c.Resources.Limits[res]; !ok {
							t.Errorf("%s: no %s limit", where, res)
						}
					}
				}
			}
		})
	}
}

// TestEphemeralStorageCoversEmptyDirs: every emptyDir has a sizeLimit, and
// the pod's ephemeral-storage limit (its containers' sum) is above their
// total, so that the kubelet evicts on the volume's limit, which says what
// grew, not on the pod's. With persistence off the Pebble state is one of
// them.
func TestEphemeralStorageCoversEmptyDirs(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			for name, p := range template(t, vs.args...).podTemplates(t) {
				var dirs, limit resource.Quantity
				for _, v := range p.Spec.Volumes {
					if v.EmptyDir == nil {
						continue
					}
					if v.EmptyDir.SizeLimit == nil {
						t.Errorf("%s: emptyDir %s has no sizeLimit", name, v.Name)
						continue
					}
					dirs.Add(*v.EmptyDir.SizeLimit)
				}
				for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
					limit.Add(c.Resources.Limits[corev1.ResourceEphemeralStorage])
				}
				if limit.Cmp(dirs) <= 0 {
					t.Errorf("%s: ephemeral-storage limit %s, not above its emptyDirs' %s", name, limit.String(), dirs.String())
				}
			}
		})
	}
}

// sensitive are environment variable names that must never carry a literal
// value from the chart.
var sensitive = regexp.MustCompile(`PASSWORD|SECRET|TOKEN$|_KEY$|HEADERS$|CREDENTIAL`)

// TestSecretsReferencedNotInlined: given a Secret for everything (the
// all-features values), the chart creates no Secret and puts no credential
// in a manifest: SASL credentials and OTLP headers come from secretKeyRef,
// keys and certificates (the Kafka client certificate too) are files of
// Secret volumes, mounted read-only. (Only the projectors' query secret is
// generated when none is given: TestQuerySecret.)
func TestSecretsReferencedNotInlined(t *testing.T) {
	r := template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI)
	if n := len(r.of("Secret")); n != 0 {
		t.Errorf("the chart renders %d Secret(s); given existing ones it must only reference them", n)
	}
	refs := map[string]string{}
	for name, p := range r.podTemplates(t) {
		for _, c := range p.Spec.Containers {
			for _, e := range c.Env {
				// A literal is allowed only as the path of a file of a
				// Secret volume (a key file, a certificate).
				if sensitive.MatchString(e.Name) && e.Value != "" && !fileFromSecret(p.Spec, c, e.Value, "") {
					t.Errorf("%s %s: %s has a literal value; it must come from a Secret", name, c.Name, e.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				}
			}
		}
	}
	for name, want := range map[string]string{
		"CANOPY_SASL_USER":           "kafka-credentials/user",
		"CANOPY_SASL_PASSWORD":       "kafka-credentials/pass",
		"OTEL_EXPORTER_OTLP_HEADERS": "otel-headers/headers",
	} {
		if refs[name] != want {
			t.Errorf("%s from secretKeyRef %q, want %q", name, refs[name], want)
		}
	}

	// Kafka mTLS: every pod that talks to Kafka (projector, gateway, the
	// topics Job) gets the client certificate and key as files of the
	// kubernetes.io/tls Secret, mounted read-only, and TLS on.
	pods := r.podTemplates(t)
	if len(pods) != 3 {
		t.Fatalf("want the projector, the gateway and the topics Job, got %d workloads", len(pods))
	}
	for name, p := range pods {
		c := p.Spec.Containers[0]
		for envName, file := range map[string]string{"CANOPY_KAFKA_TLS_CERT": "tls.crt", "CANOPY_KAFKA_TLS_KEY": "tls.key"} {
			e, _ := env(c, envName)
			if !fileFromSecret(p.Spec, c, e.Value, "kafka-client-tls") || filepath.Base(e.Value) != file {
				t.Errorf("%s: %s = %q, want the file %s of Secret kafka-client-tls", name, envName, e.Value, file)
			}
			for _, vm := range c.VolumeMounts {
				if strings.HasPrefix(e.Value, vm.MountPath+"/") && !vm.ReadOnly {
					t.Errorf("%s: %s is mounted writable at %s", name, envName, vm.MountPath)
				}
			}
		}
		if e, _ := env(c, "CANOPY_KAFKA_TLS"); e.Value != "true" {
			t.Errorf("%s: CANOPY_KAFKA_TLS = %q with a client certificate, want true", name, e.Value)
		}
	}
	// Alone, a client certificate turns TLS on; without it there is none.
	for name, p := range template(t, "-f", requiredValues, "--set", "kafka.tls.clientSecret.name=mtls").podTemplates(t) {
		c := p.Spec.Containers[0]
		if e, _ := env(c, "CANOPY_KAFKA_TLS"); e.Value != "true" {
			t.Errorf("%s: a client certificate without kafka.tls.enabled: CANOPY_KAFKA_TLS = %q, want true", name, e.Value)
		}
		if v := volume(p.Spec, "kafka-client-tls"); v == nil || v.Secret == nil || v.Secret.SecretName != "mtls" {
			t.Errorf("%s: no volume of Secret mtls", name)
		}
	}
	for name, p := range template(t, "-f", requiredValues).podTemplates(t) {
		for _, n := range []string{"CANOPY_KAFKA_TLS", "CANOPY_KAFKA_TLS_CERT", "CANOPY_KAFKA_TLS_KEY"} {
			if _, ok := env(p.Spec.Containers[0], n); ok {
				t.Errorf("%s: %s set without TLS values", name, n)
			}
		}
	}
}

// TestTopicsJob: topic creation is a pre-install/pre-upgrade hook running
// `projector create-topics` with the partitions and the changelog's
// tombstone retention from values, only when asked for. A hook runs before
// the chart's ServiceAccount exists, so it must not use it.
func TestTopicsJob(t *testing.T) {
	r := template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI)
	var j batchv1.Job
	r.one(t, "Job", &j)
	hooks := strings.Split(j.Annotations["helm.sh/hook"], ",")
	if !slices.Contains(hooks, "pre-install") || !slices.Contains(hooks, "pre-upgrade") {
		t.Errorf("helm.sh/hook %q: want pre-install and pre-upgrade", j.Annotations["helm.sh/hook"])
	}
	c := j.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/projector"}) || len(c.Args) == 0 || c.Args[0] != "create-topics" {
		t.Errorf("command %q args %q: want /projector create-topics", c.Command, c.Args)
	}
	if p, _ := arg(c, "partitions"); p != "24" {
		t.Errorf("-partitions=%q, want 24", p)
	}
	if d, _ := arg(c, "changelog-tombstone-retention"); d != "36h" {
		t.Errorf("-changelog-tombstone-retention=%q, want 36h", d)
	}
	if sa := j.Spec.Template.Spec.ServiceAccountName; sa != "" {
		t.Errorf("the hook uses ServiceAccount %q, which a pre-install hook runs before", sa)
	}
	if e, _ := env(c, "CANOPY_TOPIC_PREFIX"); e.Value != "prod" {
		t.Errorf("the Job creates topics with prefix %q, the projectors use prod", e.Value)
	}
	if n := len(template(t, "-f", requiredValues).of("Job")); n != 0 {
		t.Errorf("topics.create is off by default, but %d Job(s) rendered", n)
	}
}

// TestOpenTelemetry: OTEL_* reach both binaries when an endpoint is set, with
// a service name each, and none is set otherwise (telemetry off).
func TestOpenTelemetry(t *testing.T) {
	for name, p := range template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI).podTemplates(t) {
		if strings.HasPrefix(name, "Job/") {
			continue
		}
		c := p.Spec.Containers[0]
		ep, _ := env(c, "OTEL_EXPORTER_OTLP_ENDPOINT")
		svc, _ := env(c, "OTEL_SERVICE_NAME")
		attrs, _ := env(c, "OTEL_RESOURCE_ATTRIBUTES")
		if ep.Value != "http://otel-collector.observability:4317" || !strings.HasPrefix(svc.Value, "canopy-") ||
			!strings.Contains(attrs.Value, "k8s.pod.name=$(POD_NAME)") || !strings.Contains(attrs.Value, "deployment.environment=prod") {
			t.Errorf("%s: OTEL endpoint %q service %q attributes %q", name, ep.Value, svc.Value, attrs.Value)
		}
		assertPodNameEnv(t, c)
	}
	for name, p := range template(t, "-f", requiredValues).podTemplates(t) {
		for _, e := range p.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "OTEL_") {
				t.Errorf("%s: %s set without an endpoint", name, e.Name)
			}
		}
	}
}

// TestRedaction: the operator's redaction rules reach the projector and
// the gateway alike, patterns one per line and fields comma-separated, as
// their flags read them; without rules neither variable is set.
func TestRedaction(t *testing.T) {
	want := map[string]string{
		"CANOPY_REDACT_PATTERN": `internal_host=\b[a-z0-9-]+\.corp\.example\.com\b` + "\nticket=SEC-[0-9]+",
		"CANOPY_REDACT_FIELD":   "tree.artifact_created:label,content_ref",
	}
	n := 0
	for name, p := range template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI).podTemplates(t) {
		if strings.HasPrefix(name, "Job/") {
			continue
		}
		n++
		for v, value := range want {
			if e, _ := env(p.Spec.Containers[0], v); e.Value != value {
				t.Errorf("%s: %s = %q, want %q", name, v, e.Value, value)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d pod templates of the projector and the gateway, want 2", n)
	}
	for name, p := range template(t, "-f", requiredValues).podTemplates(t) {
		for v := range want {
			if _, ok := env(p.Spec.Containers[0], v); ok {
				t.Errorf("%s: %s set without rules", name, v)
			}
		}
	}
}

// TestMonitoring: ServiceMonitor and PrometheusRule exist only when enabled
// and the cluster has prometheus-operator's API; the ServiceMonitors select
// the Services by their labels and name their ports; the PrometheusRule
// carries exactly the groups of rules/canopy.rules.yaml.
func TestMonitoring(t *testing.T) {
	on := []string{"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true"}
	for _, tc := range []struct {
		name      string
		args      []string
		wantKinds bool
	}{
		{"off", []string{"-f", requiredValues, "--api-versions", monitoringAPI}, false},
		{"on without the CRDs", append([]string{"-f", requiredValues}, on...), false},
		{"on with the CRDs", append([]string{"-f", requiredValues, "--api-versions", monitoringAPI}, on...), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := template(t, tc.args...)
			sms, prs := r.of("ServiceMonitor"), r.of("PrometheusRule")
			if !tc.wantKinds {
				if len(sms)+len(prs) != 0 {
					t.Fatalf("rendered %d ServiceMonitor(s) and %d PrometheusRule(s), want none", len(sms), len(prs))
				}
				return
			}
			if len(sms) != 2 || len(prs) != 1 {
				t.Fatalf("rendered %d ServiceMonitor(s) and %d PrometheusRule(s), want 2 (projector, gateway) and 1", len(sms), len(prs))
			}
			for _, sm := range sms {
				assertServiceMonitorFindsService(t, r, sm)
			}
			want := readYAML(t, filepath.Join(chartDir(t), "rules", "canopy.rules.yaml")).(map[string]any)["groups"]
			got := prs[0].Obj["spec"].(map[string]any)["groups"]
			if want == nil || !reflect.DeepEqual(got, want) {
				t.Errorf("PrometheusRule spec.groups differ from rules/canopy.rules.yaml:\ngot  %v\nwant %v", got, want)
			}
		})
	}
}

// TestGrafanaDashboards: when enabled, one ConfigMap per dashboards/*.json
// with the sidecar's label, holding the file unchanged; none otherwise.
func TestGrafanaDashboards(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(chartDir(t), "dashboards", "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboards in dashboards/")
	}
	r := template(t, "-f", requiredValues, "--set", "metrics.grafanaDashboards.enabled=true",
		"--set", "metrics.grafanaDashboards.label=my_dashboards", "--set-string", "metrics.grafanaDashboards.labelValue=yes")
	byKey := map[string]corev1.ConfigMap{}
	for _, m := range r.of("ConfigMap") {
		var cm corev1.ConfigMap
		strict(t, m, &cm)
		if cm.Labels["my_dashboards"] != "yes" {
			t.Errorf("ConfigMap %s lacks the sidecar label my_dashboards=yes: %v", cm.Name, cm.Labels)
		}
		for k := range cm.Data {
			byKey[k] = cm
		}
	}
	if len(byKey) != len(files) {
		t.Errorf("%d dashboard files, %d dashboards rendered", len(files), len(byKey))
	}
	for _, f := range files {
		cm, ok := byKey[filepath.Base(f)]
		if !ok {
			t.Errorf("no ConfigMap holds %s", filepath.Base(f))
			continue
		}
		src, _ := os.ReadFile(f)
		var want, got any
		if err := json.Unmarshal(src, &want); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := json.Unmarshal([]byte(cm.Data[filepath.Base(f)]), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ConfigMap %s does not hold %s unchanged (%v)", cm.Name, filepath.Base(f), err)
		}
	}
	if n := len(template(t, "-f", requiredValues).of("ConfigMap")); n != 0 {
		t.Errorf("dashboards disabled, but %d ConfigMap(s) rendered", n)
	}
}

// TestSchemaRejects: values.schema.json turns misspelt keys and wrong types
// into install errors, at the top level and nested.
func TestSchemaRejects(t *testing.T) {
	for _, set := range []string{
		"replicaCount=3",                        // unknown top-level key
		"projector.replica=3",                   // misspelt nested key
		"kafka.tls.caSecret.nam=x",              // misspelt deep key
		"projector.replicas=three",              // wrong type
		"projector.persistence.enabled=1",       // wrong type
		"kafka.sasl.mechanism=GSSAPI",           // not supported
		"projector.sessionTimeout=6",            // not a duration
		"topics.changelogTombstoneRetention=1d", // not a Go duration
		"topics.changelogTombstoneRetention=0",  // none: a projector would trust no checkpoint
		"projector.readyLag=-1",                 // below the minimum
		"kafka.brokers=kafka",                   // not host:port
		"otel.protocol=http/json",               // the binaries refuse it at start
		"projector.maxQueuedBytes=64MB",         // not a unit the binary reads
		"projector.minProcs=0",                  // below the minimum
	} {
		out, err := templateErr(t, "-f", requiredValues, "--set", set)
		if err == nil || !strings.Contains(string(out), "schema") {
			t.Errorf("--set %s: want a schema error, got %v\n%s", set, err, out)
		}
	}
}

// TestSchemaCoversEveryValue: every key of values.yaml is declared in
// values.schema.json, and every object of the schema either lists its
// properties and forbids others, or says explicitly that it is free-form
// (labels, annotations, Kubernetes objects passed through).
func TestSchemaCoversEveryValue(t *testing.T) {
	values := readYAML(t, filepath.Join(chartDir(t), "values.yaml"))
	schema := readYAML(t, filepath.Join(chartDir(t), "values.schema.json")).(map[string]any)
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		props, hasProps := s["properties"].(map[string]any)
		ap, hasAP := s["additionalProperties"]
		if typeOf(s) == "object" {
			switch {
			case hasProps && ap != false:
				t.Errorf("schema %s: lists properties but does not set additionalProperties: false", orRoot(path))
			case !hasProps && !hasAP:
				t.Errorf("schema %s: an object with neither properties nor an explicit additionalProperties", orRoot(path))
			}
		}
		m, isMap := v.(map[string]any)
		if !isMap {
			return
		}
		for k, sub := range m {
			p := strings.TrimPrefix(path+"."+k, ".")
			ps, ok := props[k].(map[string]any)
			if !ok {
				if !hasProps {
					continue // a free-form map
				}
				t.Errorf("values.yaml %s: not in values.schema.json", p)
				continue
			}
			walk(p, sub, ps)
		}
	}
	walk("", values, schema)
}

// TestReadmeDocumentsEveryValue: the chart's README names every value of
// values.yaml, as `path`, or the object it belongs to when that is one
// setting (`projector.resources` documents its requests and limits; a
// section like `projector` documents nothing).
func TestReadmeDocumentsEveryValue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	values := readYAML(t, filepath.Join(chartDir(t), "values.yaml"))
	for _, p := range leaves("", values) {
		documented := false
		parts := strings.Split(p, ".")
		for n := len(parts); n >= 2 && !documented; n-- {
			documented = strings.Contains(readme, "`"+strings.Join(parts[:n], ".")+"`")
		}
		if !documented && len(parts) == 1 {
			documented = strings.Contains(readme, "`"+p+"`")
		}
		if !documented {
			t.Errorf("README.md does not document `%s`", p)
		}
	}
}

// leaves are the dotted paths of values.yaml's settings: scalars, lists and
// empty maps (a map with keys is documented through them).
func leaves(path string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{path}
	}
	var out []string
	for k, sub := range m {
		out = append(out, leaves(strings.TrimPrefix(path+"."+k, "."), sub)...)
	}
	slices.Sort(out)
	return out
}

// ptr prints an optional number.
func ptr(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

func typeOf(s map[string]any) string {
	t, _ := s["type"].(string)
	return t
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}

func volume(p corev1.PodSpec, name string) *corev1.Volume {
	for i := range p.Volumes {
		if p.Volumes[i].Name == name {
			return &p.Volumes[i]
		}
	}
	return nil
}

func service(t testing.TB, r rendered, name string) *corev1.Service {
	t.Helper()
	for _, m := range r.of("Service") {
		if m.Name == name {
			var s corev1.Service
			strict(t, m, &s)
			return &s
		}
	}
	return nil
}

// servesPort reports whether a Service has a port of that name forwarding
// to the container port of that name (or number).
func servesPort(s *corev1.Service, name string, containerPort int32) bool {
	for _, p := range s.Spec.Ports {
		if p.Name == name && (p.TargetPort.StrVal == name || p.TargetPort.IntVal == containerPort) {
			return true
		}
	}
	return false
}

func pdbFor(t testing.TB, r rendered, podLabels map[string]string) manifest {
	t.Helper()
	for _, m := range r.of("PodDisruptionBudget") {
		var pdb policyv1.PodDisruptionBudget
		strict(t, m, &pdb)
		if pdb.Spec.Selector != nil && selects(pdb.Spec.Selector.MatchLabels, podLabels) {
			return m
		}
	}
	t.Fatalf("no PodDisruptionBudget selects the pods labelled %v", podLabels)
	return manifest{}
}

// fileFromSecret reports whether path is inside a volume mount of c whose
// volume is the Secret secretName (any Secret when secretName is empty).
func fileFromSecret(p corev1.PodSpec, c corev1.Container, path, secretName string) bool {
	for _, vm := range c.VolumeMounts {
		if path == "" || !strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		if v := volume(p, vm.Name); v != nil && v.Secret != nil && (secretName == "" || v.Secret.SecretName == secretName) {
			return true
		}
	}
	return false
}

func assertProbe(t testing.TB, what string, p *corev1.Probe, path, port string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("no HTTP %s probe", what)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.StrVal != port {
		t.Errorf("%s probe GET %s on port %q, want %s on %q", what, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
}

// assertPodNameEnv: POD_NAME and POD_NAMESPACE come from the downward API
// and precede every variable that expands them ($(VAR) only sees earlier
// variables).
func assertPodNameEnv(t testing.TB, c corev1.Container) {
	t.Helper()
	defined := map[string]bool{}
	for _, e := range c.Env {
		for _, ref := range regexp.MustCompile(`\$\((POD_NAME|POD_NAMESPACE)\)`).FindAllStringSubmatch(e.Value, -1) {
			if !defined[ref[1]] {
				t.Errorf("%s: %s uses $(%s) before it is defined", c.Name, e.Name, ref[1])
			}
		}
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			want := map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}[e.Name]
			if want != "" && e.ValueFrom.FieldRef.FieldPath == want {
				defined[e.Name] = true
			}
		}
	}
	if !defined["POD_NAME"] {
		t.Errorf("%s: POD_NAME does not come from metadata.name", c.Name)
	}
}

// assertServiceMonitorFindsService: the ServiceMonitor selects a rendered
// Service in the release namespace whose port it names.
func assertServiceMonitorFindsService(t testing.TB, r rendered, sm manifest) {
	t.Helper()
	// A minimal view of the CRD: the fields this chart uses.
	var mon struct {
		Spec struct {
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
				Path string `json:"path"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(sm.JSON, &mon); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mon.Spec.NamespaceSelector.MatchNames, []string{"ns"}) {
		t.Errorf("ServiceMonitor %s looks in namespaces %v, want the release's", sm.Name, mon.Spec.NamespaceSelector.MatchNames)
	}
	var matched []*corev1.Service
	for _, m := range r.of("Service") {
		s := service(t, r, m.Name)
		if selects(mon.Spec.Selector.MatchLabels, s.Labels) {
			matched = append(matched, s)
		}
	}
	if len(matched) != 1 {
		t.Fatalf("ServiceMonitor %s selects %d Services, want 1", sm.Name, len(matched))
	}
	for _, ep := range mon.Spec.Endpoints {
		found := false
		for _, p := range matched[0].Spec.Ports {
			found = found || p.Name == ep.Port
		}
		if !found || ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor %s scrapes port %q path %q; Service %s has no such port", sm.Name, ep.Port, ep.Path, matched[0].Name)
		}
	}
}

// TestNotes: NOTES.txt says what was installed and how to reach it, and
// warns about what was asked for but could not be installed.
func TestNotes(t *testing.T) {
	n := notes(t, "-f", requiredValues, "--set", "metrics.serviceMonitor.enabled=true")
	for _, want := range []string{
		"StatefulSet rel-canopy-projector, 3 pod(s)",
		"rollout status statefulset/rel-canopy-projector",
		"port-forward service/rel-canopy-gateway 8080:80",
		"no monitoring.coreos.com/v1 API",
		"docs/DEPLOY.md",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, n)
		}
	}
	n = notes(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI, "--set", "projector.replicas=30")
	for _, want := range []string{
		"https://canopy.example.com/",
		"30 projector pods for 24 partitions: 6 pod(s) will own nothing",
		"ServiceMonitors installed",
		"Telemetry: OTLP (grpc) to http://otel-collector.observability:4317",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, n)
		}
	}
}

// TestGoMemLimit: GOMEMLIMIT is 90% of each container's memory limit, in
// bytes, whatever form the limit is written in (the projector's less what
// Pebble allocates outside the Go heap), and the projector's
// -memory-limit (CANOPY_MEMORY_LIMIT) the limit itself; it is unset when turned
// off, and a limit the chart cannot read fails the render instead of
// giving the Go runtime a wrong limit.
func TestGoMemLimit(t *testing.T) {
	for _, tc := range []struct {
		memory, want string
	}{
		// 90% of the limit less Pebble's two 32 MiB memtables and 8 MiB
		// block cache (75,497,472 bytes), which it allocates outside the
		// Go heap.
		{"", "1857237811"}, // the default 2Gi
		{"512Mi", "407686348"},
		{"1G", "824502528"},
		{"1.5Gi", "1374053990"},
		{"3000000000", "2624502528"},
		{"1e9", "824502528"},
	} {
		args := []string{"-f", requiredValues}
		if tc.memory != "" {
			args = append(args, "--set-string", "projector.resources.limits.memory="+tc.memory)
		}
		var sts appsv1.StatefulSet
		template(t, args...).one(t, "StatefulSet", &sts)
		c := sts.Spec.Template.Spec.Containers[0]
		e, ok := env(c, "GOMEMLIMIT")
		if !ok || e.Value != tc.want || e.ValueFrom != nil {
			t.Errorf("memory limit %q: GOMEMLIMIT %q (%v), want %q bytes, 90%%", tc.memory, e.Value, e.ValueFrom, tc.want)
		}
		limit := c.Resources.Limits[corev1.ResourceMemory]
		if got, err := strconv.ParseInt(e.Value, 10, 64); err != nil || got != limit.Value()*9/10-75497472 && got != limit.Value()*9/10-75497472-1 {
			t.Errorf("memory limit %s: GOMEMLIMIT %s is not 90%% of it less Pebble's memory", limit.String(), e.Value)
		}
		// The projector's own budget is the whole limit, in bytes.
		if m, _ := env(c, "CANOPY_MEMORY_LIMIT"); m.Value != strconv.FormatInt(limit.Value(), 10) {
			t.Errorf("memory limit %s: CANOPY_MEMORY_LIMIT %q, want %d", limit.String(), m.Value, limit.Value())
		}
	}
	var d appsv1.Deployment
	template(t, "-f", requiredValues).one(t, "Deployment", &d)
	if e, _ := env(d.Spec.Template.Spec.Containers[0], "GOMEMLIMIT"); e.Value != "483183820" {
		t.Errorf("gateway GOMEMLIMIT %q, want 90%% of its 512Mi", e.Value)
	}
	var sts appsv1.StatefulSet
	template(t, "-f", requiredValues, "--set", "projector.goMemLimitFromResources=false").one(t, "StatefulSet", &sts)
	if e, ok := env(sts.Spec.Template.Spec.Containers[0], "GOMEMLIMIT"); ok {
		t.Errorf("goMemLimitFromResources=false, but GOMEMLIMIT = %q", e.Value)
	}
	out, err := templateErr(t, "-f", requiredValues, "--set-string", "projector.resources.limits.memory=1500m")
	if err == nil || !strings.Contains(string(out), "GOMEMLIMIT is derived from it") {
		t.Errorf("a memory limit in milli-bytes rendered (%v); want a failure naming it:\n%s", err, out)
	}
}

// TestSessionTimeoutDefault: the chart's session timeout outlasts a pod
// replacement (30s), so a rolling update's restarts do not rebalance.
func TestSessionTimeoutDefault(t *testing.T) {
	var sts appsv1.StatefulSet
	template(t, "-f", requiredValues).one(t, "StatefulSet", &sts)
	if got, _ := arg(sts.Spec.Template.Spec.Containers[0], "session-timeout"); got != "30s" {
		t.Errorf("-session-timeout=%q, want the chart's default 30s", got)
	}
}

// TestQuerySecret: the projectors' query endpoint, which listens on every
// interface of the pod, requires the shared secret, and the gateway presents
// it: both containers name (CANOPY_QUERY_SECRET_FILE,
// CANOPY_PROJECTOR_SECRET_FILE) the same file of the same Secret, mounted
// read-only. Without querySecret.existingSecret the chart creates that
// Secret, with a random secret the binaries accept; with it, none.
func TestQuerySecret(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		secret    string // the Secret both mount
		key       string
		generated bool
	}{
		{"generated", []string{"-f", requiredValues}, "rel-canopy-query-secret", "query-secret", true},
		{"existing", []string{"-f", allFeaturesValues, "--api-versions", monitoringAPI}, "canopy-query-secret", "shared-secret", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := template(t, tc.args...)
			secrets := r.of("Secret")
			switch {
			case tc.generated && len(secrets) != 1:
				t.Fatalf("want the query Secret rendered, got %d Secrets", len(secrets))
			case tc.generated:
				var s corev1.Secret
				strict(t, secrets[0], &s)
				v := string(s.Data[tc.key])
				if s.Name != tc.secret || len(v) < 32 || strings.TrimSpace(v) != v || strings.ContainsAny(v, " \n") {
					t.Errorf("Secret %s key %s: %d bytes %q; want %s with at least 32 printable bytes", s.Name, tc.key, len(v), v, tc.secret)
				}
				var again corev1.Secret
				template(t, tc.args...).one(t, "Secret", &again)
				if string(again.Data[tc.key]) == v {
					t.Error("two renders generated the same secret: it is not random")
				}
			case len(secrets) != 0:
				t.Errorf("querySecret.existingSecret is set, but %d Secret(s) rendered", len(secrets))
			}
			pods := r.podTemplates(t)
			for workload, envName := range map[string]string{"StatefulSet/rel-canopy-projector": "CANOPY_QUERY_SECRET_FILE", "Deployment/rel-canopy-gateway": "CANOPY_PROJECTOR_SECRET_FILE"} {
				p, ok := pods[workload]
				if !ok {
					t.Fatalf("no %s rendered", workload)
				}
				c := p.Spec.Containers[0]
				e, _ := env(c, envName)
				if !fileFromSecret(p.Spec, c, e.Value, tc.secret) || filepath.Base(e.Value) != tc.key {
					t.Errorf("%s: %s = %q, want the file %s of Secret %s", workload, envName, e.Value, tc.key, tc.secret)
				}
				for _, vm := range c.VolumeMounts {
					if strings.HasPrefix(e.Value, vm.MountPath+"/") && !vm.ReadOnly {
						t.Errorf("%s: the query secret is mounted writable at %s", workload, vm.MountPath)
					}
				}
			}
		})
	}
	// Without a gateway, the projectors still require it.
	var sts appsv1.StatefulSet
	r := template(t, "-f", noPersistenceValues)
	r.one(t, "StatefulSet", &sts)
	c := sts.Spec.Template.Spec.Containers[0]
	if e, _ := env(c, "CANOPY_QUERY_SECRET_FILE"); !fileFromSecret(sts.Spec.Template.Spec, c, e.Value, "rel-canopy-query-secret") || len(r.of("Secret")) != 1 {
		t.Errorf("gateway disabled: CANOPY_QUERY_SECRET_FILE %q, %d Secret(s); want the generated Secret's file", e.Value, len(r.of("Secret")))
	}
}

// TestNetworkPolicy: off by default. On, one NetworkPolicy selects the
// projector pods and lets reach their port only the gateway's pods and the
// Prometheus networkPolicy.metrics selects (none when it selects nothing);
// egress is restricted only when Kafka's peers are given, and then allows
// DNS, Kafka on its ports, and the extra rules.
func TestNetworkPolicy(t *testing.T) {
	if n := len(template(t, "-f", requiredValues).of("NetworkPolicy")); n != 0 {
		t.Errorf("networkPolicy.enabled is off by default, but %d NetworkPolicy rendered", n)
	}
	podLabels := func(r rendered, kind string) map[string]string {
		t.Helper()
		switch kind {
		case "StatefulSet":
			var sts appsv1.StatefulSet
			r.one(t, kind, &sts)
			return sts.Spec.Template.Labels
		default:
			var d appsv1.Deployment
			r.one(t, kind, &d)
			return d.Spec.Template.Labels
		}
	}

	// All features: the gateway, a Prometheus in namespace monitoring,
	// egress to Kafka's 10.20.0.0/16 on 9096 and to the collector.
	r := template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI)
	var np networkingv1.NetworkPolicy
	r.one(t, "NetworkPolicy", &np)
	projectorPods, gatewayPods := podLabels(r, "StatefulSet"), podLabels(r, "Deployment")
	if !selects(np.Spec.PodSelector.MatchLabels, projectorPods) || selects(np.Spec.PodSelector.MatchLabels, gatewayPods) {
		t.Errorf("podSelector %v: want the projector pods only", np.Spec.PodSelector.MatchLabels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v, want Ingress and Egress", np.Spec.PolicyTypes)
	}
	var sts appsv1.StatefulSet
	r.one(t, "StatefulSet", &sts)
	httpPort, _ := containerPort(sts.Spec.Template.Spec.Containers[0], "http")
	var sawGateway, sawPrometheus bool
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.IntValue() != int(httpPort) {
			t.Errorf("ingress rule %+v: want the projectors' port %d only", rule, httpPort)
		}
		for _, peer := range rule.From {
			switch {
			case peer.IPBlock != nil:
				t.Errorf("ingress from an ipBlock %+v", peer.IPBlock)
			case peer.NamespaceSelector == nil && peer.PodSelector != nil && selects(peer.PodSelector.MatchLabels, gatewayPods):
				sawGateway = true
			case peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "monitoring" &&
				peer.PodSelector != nil && peer.PodSelector.MatchLabels["app.kubernetes.io/name"] == "prometheus":
				sawPrometheus = true
			default:
				t.Errorf("ingress from an unexpected peer %+v", peer)
			}
		}
	}
	if !sawGateway || !sawPrometheus {
		t.Errorf("ingress %+v: want the gateway (%v) and the Prometheus of networkPolicy.metrics (%v)", np.Spec.Ingress, sawGateway, sawPrometheus)
	}
	var dns, kafka, extra bool
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			switch {
			case p.Port != nil && p.Port.IntValue() == 53 && len(rule.To) == 0:
				dns = true
			case p.Port != nil && p.Port.IntValue() == 9096 && len(rule.To) == 1 && rule.To[0].IPBlock != nil && rule.To[0].IPBlock.CIDR == "10.20.0.0/16":
				kafka = true
			case p.Port != nil && p.Port.IntValue() == 4317:
				extra = true
			}
		}
	}
	if !dns || !kafka || !extra {
		t.Errorf("egress %+v: want DNS (%v), Kafka on 9096 (%v) and the extra rule (%v)", np.Spec.Egress, dns, kafka, extra)
	}

	// Without a scraper, a gateway or Kafka's peers: nothing may reach the
	// pods (but the nodes' probes), egress is open.
	r = template(t, "-f", noPersistenceValues, "--set", "networkPolicy.enabled=true")
	r.one(t, "NetworkPolicy", &np)
	if len(np.Spec.Ingress) != 0 || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("no gateway, no scraper: ingress %+v policyTypes %v; want no ingress rule, and egress left alone", np.Spec.Ingress, np.Spec.PolicyTypes)
	}
	if n := notes(t, "-f", requiredValues, "--set", "networkPolicy.enabled=true"); !strings.Contains(n, "selects no Prometheus") {
		t.Errorf("NOTES.txt does not warn that nothing can scrape the projectors:\n%s", n)
	}
}
