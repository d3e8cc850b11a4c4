package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// No Docker engine is available to build the image, so the Dockerfile is
// checked by reading it: the stages exist, the build is static, the runtime
// stages are minimal and non-root, and every entrypoint, and every command
// the chart runs, is a binary the build produced and the stage holds.

// stage is one FROM ... [AS name] section of a Dockerfile.
type stage struct {
	Name, Base string
	// Instructions in order: keyword (upper case) and its arguments.
	Instructions [][2]string
}

func (s stage) all(keyword string) []string {
	var out []string
	for _, in := range s.Instructions {
		if in[0] == keyword {
			out = append(out, in[1])
		}
	}
	return out
}

func (s stage) last(keyword string) string {
	all := s.all(keyword)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

// parseDockerfile splits a Dockerfile into stages, joining continued lines
// and dropping comments.
func parseDockerfile(t testing.TB, src string) []stage {
	t.Helper()
	var (
		stages  []stage
		logical []string
		cur     strings.Builder
	)
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if body, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	from := regexp.MustCompile(`^(?i)FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$`)
	for _, l := range logical {
		kw, rest, _ := strings.Cut(l, " ")
		kw = strings.ToUpper(kw)
		if kw == "FROM" {
			m := from.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("Dockerfile: cannot read %q", l)
			}
			stages = append(stages, stage{Base: m[1], Name: m[2]})
			continue
		}
		if len(stages) == 0 {
			if kw != "ARG" {
				t.Fatalf("Dockerfile: %s before the first FROM", kw)
			}
			continue
		}
		stages[len(stages)-1].Instructions = append(stages[len(stages)-1].Instructions, [2]string{kw, strings.TrimSpace(rest)})
	}
	return stages
}

// execForm parses an exec-form instruction argument (a JSON array).
func execForm(t testing.TB, what, arg string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(arg), &v); err != nil || len(v) == 0 {
		t.Errorf("%s %q: want the exec form, a JSON array (no shell in the image to run a string)", what, arg)
	}
	return v
}

// copiedFromBuild maps each destination a stage COPYs from the build stage
// to its source.
func copiedFromBuild(s stage, build string) map[string]string {
	out := map[string]string{}
	for _, c := range s.all("COPY") {
		f := strings.Fields(c)
		if len(f) == 3 && f[0] == "--from="+build {
			out[f[2]] = f[1]
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	root := filepath.Join(chartDir(t), "..", "..", "..")
	src, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, string(src))
	byName := map[string]stage{}
	for _, s := range stages {
		byName[s.Name] = s
	}

	// The build stage: Go, static, both commands into /out.
	build, ok := byName["build"]
	if !ok || !strings.HasPrefix(build.Base, "golang:") {
		t.Fatalf("want a stage named build FROM golang:..., got %+v", stages)
	}
	var goBuild string
	for _, r := range build.all("RUN") {
		if strings.Contains(r, "go build") {
			goBuild = r
		}
	}
	if !strings.Contains(goBuild, "CGO_ENABLED=0") || !strings.Contains(goBuild, "-trimpath") || !strings.Contains(goBuild, "-o /out/") {
		t.Errorf("go build %q: want CGO_ENABLED=0 (static), -trimpath, -o /out/", goBuild)
	}
	built := map[string]bool{}
	for _, pkg := range []string{"projector", "conductor-gateway"} {
		if !strings.Contains(goBuild, "./cmd/"+pkg) {
			t.Errorf("go build does not build ./cmd/%s", pkg)
		}
		if _, err := os.Stat(filepath.Join(root, "cmd", pkg, "main.go")); err != nil {
			t.Errorf("./cmd/%s is not a command of this repository: %v", pkg, err)
		}
		built["/out/"+pkg] = true
	}

	// Runtime stages: minimal base, no shell needed, non-root, an exec-form
	// entrypoint that is a binary the build produced.
	wantEntrypoint := map[string]string{"projector": "/projector", "conductor-gateway": "/conductor-gateway", "canopy": "/projector"}
	for name, entry := range wantEntrypoint {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no stage %q", name)
			continue
		}
		if !strings.HasPrefix(s.Base, "gcr.io/distroless/static") && s.Base != "scratch" {
			t.Errorf("stage %s FROM %s: want distroless static or scratch", name, s.Base)
		}
		if r := s.all("RUN"); len(r) > 0 {
			t.Errorf("stage %s RUNs %q: the runtime base has no shell", name, r)
		}
		user := s.last("USER")
		uid, _, _ := strings.Cut(user, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("stage %s USER %q: want a numeric non-root uid (runAsNonRoot can only verify a number)", name, user)
		} else if name == "canopy" {
			assertChartRunsAs(t, n)
		}
		ep := execForm(t, "stage "+name+" ENTRYPOINT", s.last("ENTRYPOINT"))
		copied := copiedFromBuild(s, "build")
		if len(ep) == 0 || ep[0] != entry {
			t.Errorf("stage %s ENTRYPOINT %q, want %s", name, ep, entry)
		} else if !built[copied[ep[0]]] {
			t.Errorf("stage %s: its entrypoint %s is not copied from a binary the build stage produced (copies %v)", name, ep[0], copied)
		}
	}

	// The default target is the last stage, and it holds every command the
	// chart runs.
	final := stages[len(stages)-1]
	if final.Name != "canopy" {
		t.Errorf("the last (default) stage is %q, want canopy with both binaries", final.Name)
	}
	copied := copiedFromBuild(final, "build")
	r := template(t, "-f", allFeaturesValues, "--api-versions", monitoringAPI)
	for name, p := range r.podTemplates(t) {
		for _, c := range p.Spec.Containers {
			if len(c.Command) == 0 {
				t.Errorf("%s container %s: no command; the chart must name the binary", name, c.Name)
				continue
			}
			if !built[copied[c.Command[0]]] {
				t.Errorf("%s container %s runs %s, which the image's default stage does not hold", name, c.Name, c.Command[0])
			}
		}
	}
}

// assertChartRunsAs: the chart's default pods run as the image's user, so
// the volume's fsGroup and the image agree.
func assertChartRunsAs(t testing.TB, uid int) {
	t.Helper()
	values := readYAML(t, filepath.Join(chartDir(t), "values.yaml")).(map[string]any)
	for _, comp := range []string{"projector", "gateway"} {
		psc := values[comp].(map[string]any)["podSecurityContext"].(map[string]any)
		if got, _ := psc["runAsUser"].(float64); int(got) != uid {
			t.Errorf("%s.podSecurityContext.runAsUser %v, the image's USER is %d", comp, psc["runAsUser"], uid)
		}
	}
}
