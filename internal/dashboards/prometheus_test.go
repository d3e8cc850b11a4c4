package dashboards_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestRulesFileChecks: promtool accepts the rules file.
func TestRulesFileChecks(t *testing.T) {
	promtool := testenv.Tool(t, "promtool")
	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestQueriesAgainstPrometheus runs `projector dev` (embedded broker,
// projector, gateway, demo workload) and a real Prometheus scraping its
// /metrics with canopy's rules loaded, sends a few requests through the
// gateway, and then evaluates every query of every dashboard panel and every
// recording rule behind the alerts: each must parse and return data, and
// every rule must evaluate without error.
func TestQueriesAgainstPrometheus(t *testing.T) {
	prometheus := testenv.Tool(t, "prometheus")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	bin := filepath.Join(dir, "projector")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/projector").CombinedOutput(); err != nil {
		t.Fatalf("building the projector: %v\n%s", err, out)
	}
	dev := exec.Command(bin, "dev", "-http-addr", "127.0.0.1:0", "-gateway-addr", "127.0.0.1:0",
		"-rate", "300", "-runs", "6", "-duration", "150s")
	devOut := startProcess(t, dev)
	addrs := devOut.await(t, regexp.MustCompile(`gateway on http://([0-9.:]+) `), regexp.MustCompile(`metrics on http://([0-9.:]+)/metrics`))
	gatewayAddr, metricsAddr := addrs[0], addrs[1]

	// Prometheus scrapes every second and evaluates the rules every second
	// (the file says 30s for production).
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rules = bytes.ReplaceAll(rules, []byte("interval: 30s"), []byte("interval: 1s"))
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [rules.yaml]
scrape_configs:
  - job_name: canopy
    static_configs: [{targets: [%q]}]
`, metricsAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Two servers scrape the same canopy: one as Prometheus does by
	// default (classic histograms: x_bucket series), one with native
	// histograms on, which stores canopy's histograms as native ones only
	// (x, and no x_bucket). Every query must work on both.
	servers := []promServer{
		startPrometheus(t, prometheus, dir, "classic"),
		startPrometheus(t, prometheus, dir, "native", "--enable-feature=native-histograms"),
	}

	// Requests through the gateway, so that its panels have data: inputs
	// (202), a snapshot read, and one refused for want of a token (401).
	for i := range 5 {
		req, _ := http.NewRequest("POST", "http://"+gatewayAddr+"/v1/runs/run-1/input", strings.NewReader(`{"input_kind":"steer","text":"go on"}`))
		req.Header.Set("Authorization", "Bearer canopy-dev-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("dash-%d", i))
		doRequest(t, req)
	}
	req, _ := http.NewRequest("GET", "http://"+gatewayAddr+"/v1/runs/run-1/snapshot", nil)
	doRequest(t, req)

	queries := panelQueries(t, "1m")
	for _, r := range recordingRules(t) {
		queries["rule "+r] = r
	}
	names := make([]string, 0, len(queries))
	for n := range queries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, srv := range servers {
		// Everything returns data within the deadline, or the test names
		// what did not.
		missing := map[string]string{}
		deadline := time.Now().Add(90 * time.Second)
		for {
			clear(missing)
			for _, n := range names {
				if msg := query(t, srv.api, queries[n]); msg != "" {
					missing[n] = msg
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Second) // polling a condition, not synchronising
		}
		for _, n := range names {
			if msg, ok := missing[n]; ok {
				t.Errorf("%s Prometheus: %s: %s\n  query: %s", srv.name, n, msg, queries[n])
			}
		}
		checkRuleHealth(t, srv.api)
	}
	// Each server stored the kind of histogram it is there for, so that
	// each kind of query was really exercised.
	for _, srv := range servers {
		classic := query(t, srv.api, "count(canopy_snapshot_build_seconds_bucket)") == ""
		native := query(t, srv.api, "count(canopy_snapshot_build_seconds)") == ""
		if classic != (srv.name == "classic") || native != (srv.name == "native") {
			t.Errorf("%s Prometheus stored classic buckets %v, native histograms %v", srv.name, classic, native)
		}
	}
}

// promServer is a Prometheus process scraping canopy.
type promServer struct{ name, api string }

// startPrometheus starts Prometheus with dir's prometheus.yml (and its
// rules), its own storage, and the extra flags, until the test ends.
func startPrometheus(t *testing.T, bin, dir, name string, flags ...string) promServer {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "tsdb-"+name), "--web.listen-address=" + addr, "--log.level=warn"}, flags...)
	startProcess(t, exec.Command(bin, args...))
	return promServer{name: name, api: "http://" + addr}
}

// recordingRules are the expressions of the rules file's recording rules,
// by name (the name is itself a query once the rule has evaluated).
func recordingRules(t *testing.T) []string {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- record: (\S+)`).FindAllSubmatch(b, -1) {
		out = append(out, string(m[1]))
	}
	if len(out) == 0 {
		t.Fatal("no recording rules in " + rulesFile)
	}
	return out
}

// query evaluates expr now; "" when it returned at least one sample.
func query(t *testing.T, api, expr string) string {
	resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Status, Error string
		Data          struct{ Result []json.RawMessage }
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return err.Error()
	}
	if r.Status != "success" {
		t.Errorf("query does not parse or fails: %s\n  query: %s", r.Error, expr) // never fixed by waiting
		return "error: " + r.Error
	}
	if len(r.Data.Result) == 0 {
		return "no data"
	}
	return ""
}

// checkRuleHealth: Prometheus evaluated every rule, alerts included,
// without error.
func checkRuleHealth(t *testing.T, api string) {
	resp, err := http.Get(api + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Name  string
				Rules []struct{ Name, Health, LastError, Type string }
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health != "ok" {
				t.Errorf("rule %s/%s: health %q: %s", g.Name, rule.Name, rule.Health, rule.LastError)
			}
		}
	}
	if n < 8 {
		t.Errorf("Prometheus loaded %d rules, want the file's 8", n)
	}
}

func doRequest(t *testing.T, req *http.Request) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// output collects a process's combined output, line by line.
type output struct {
	lines chan string
	all   bytes.Buffer
}

// startProcess starts cmd and stops it (SIGTERM, then SIGKILL after 10s)
// when the test ends, printing its output if the test failed.
func startProcess(t *testing.T, cmd *exec.Cmd) *output {
	t.Helper()
	o := &output{lines: make(chan string, 1024)}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			o.all.WriteString(sc.Text() + "\n")
			select {
			case o.lines <- sc.Text():
			default:
			}
		}
	}()
	exited := make(chan struct{})
	go func() { cmd.Wait(); pw.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		<-scanned
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), tail(o.all.String(), 60))
		}
	})
	return o
}

// await returns, for each re, the first submatch of the first line matching
// it.
func (o *output) await(t *testing.T, res ...*regexp.Regexp) []string {
	t.Helper()
	found := make([]string, len(res))
	left := len(res)
	timeout := time.After(60 * time.Second)
	for left > 0 {
		select {
		case l := <-o.lines:
			for i, re := range res {
				if m := re.FindStringSubmatch(l); m != nil && found[i] == "" {
					found[i] = m[1]
					left--
				}
			}
		case <-timeout:
			t.Fatalf("no lines matching %v within 60s", res)
		}
	}
	return found
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
