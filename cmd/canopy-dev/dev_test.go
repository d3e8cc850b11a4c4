package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestDev is `make run` as a new user meets it: everything comes up on
// loopback, the curl the banner prints sends human input through the gateway,
// its wake is printed on the priority lane, the other curl reads the run's
// snapshot (the projector's query endpoint closed to callers without the
// session's secret, which the gateway has), and the whole stops by itself.
func TestDev(t *testing.T) {
	var out testenv.Buffer
	var errOut testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- dev(ctx, devOptions{runs: 2, nodes: 10, rate: 100, partitions: 2, httpAddr: "127.0.0.1:0", gatewayAddr: "127.0.0.1:0"}, &out, &errOut)
	}()
	waitOut := func(what string, re *regexp.Regexp) []string {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if m := re.FindStringSubmatch(out.String()); m != nil {
				return m
			}
			select {
			case err := <-done:
				t.Fatalf("dev ended waiting for %s: %v\n%s\n%s", what, err, out.String(), errOut.String())
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v\n%s", what, ctx.Err(), out.String())
			case <-tick.C:
			}
		}
	}
	addr := waitOut("the gateway's address", regexp.MustCompile(`gateway on (http://[0-9.:]+)`))[1]
	waitOut("the first wake", regexp.MustCompile(`wake +\S+ run=run-1`))

	do := func(method, path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+devToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := do(http.MethodPost, "/v1/runs/run-1/input", `{"input_kind":"steer","text":"a test steers run-1"}`); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("input: %s", resp.Status)
	}
	waitOut("the input's priority wake", regexp.MustCompile(`WAKE! \S+ run=run-1 .*"a test steers run-1"`))
	if resp := do(http.MethodGet, "/v1/runs/run-1/snapshot", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("snapshot: %s", resp.Status)
	}
	// The gateway read it with the session's secret; without it the
	// projector's own endpoint refuses, though it listens on loopback.
	metrics := waitOut("the projector's endpoint", regexp.MustCompile(`metrics on (http://[0-9.:]+)/metrics`))[1]
	if resp, err := http.Get(metrics + "/internal/v1/runs/run-1/snapshot"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the projector's snapshot without the secret: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev: %v", err)
	}
	if !strings.Contains(out.String(), "events projected") {
		t.Fatalf("no closing summary:\n%s", out.String())
	}
	// The snapshot events are info lines in `projector run`; dev prints the
	// wakes itself and keeps them out, or they would bury its output.
	for _, o := range []string{out.String(), errOut.String()} {
		if strings.Contains(o, "conductor.snapshot.") {
			t.Fatalf("dev's output carries per-wake event lines:\n%s", o)
		}
	}
}

// TestDevSaysBrokersFromTheEnvironment: a CANOPY_BROKERS exported for the
// projector also sends make run's demo to that Kafka, and the first line
// says so, so nobody demos against a shared cluster unawares.
func TestDevSaysBrokersFromTheEnvironment(t *testing.T) {
	b := brokertest.NewKfake(t)
	t.Setenv("CANOPY_BROKERS", strings.Join(b.Addrs, ","))
	var out, errOut testenv.Buffer
	code := run([]string{"-duration", "2s", "-runs", "1", "-nodes", "3", "-partitions", "1",
		"-http-addr", "127.0.0.1:0", "-gateway-addr", "127.0.0.1:0"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if want := "Kafka from CANOPY_BROKERS on " + b.Addrs[0]; !strings.Contains(first, want) {
		t.Fatalf("first line %q, want it to contain %q", first, want)
	}
}
