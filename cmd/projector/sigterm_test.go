package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
)

// canary is a secret's value that no output may show.
const canary = "canary-7c1f0e9d2b"

// TestSIGTERMAndSecrets runs the binary's `projector run` against an
// embedded broker on loopback with its settings in the environment, secrets
// included, waits until it is ready, sends it SIGTERM and expects a clean
// exit (0) with the actors stopped in the group's order: readiness off
// first, then the projector, the query endpoint last. No output of the
// process, nor of -h and -check-config with the same environment, carries
// a secret's value.
func TestSIGTERMAndSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tmp, bin := buildProjector(ctx, t)
	b := brokertest.NewKfake(t)
	names, _ := freshTopics(ctx, t, b, "sigterm", 2)
	secretFile := filepath.Join(tmp, "query-secret")
	if err := os.WriteFile(secretFile, []byte(canary+"-query-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	env := append(testenv.EnvWithout("CANOPY_"), "CANOPY_SASL_PASSWORD="+canary, "CANOPY_QUERY_SECRET_FILE="+secretFile,
		"CANOPY_BROKERS="+strings.Join(b.Addrs, ","), "CANOPY_TOPIC_PREFIX="+names.Prefix, "CANOPY_DATA_DIR="+filepath.Join(tmp, "data"),
		"CANOPY_GROUP=g-"+names.Prefix, "CANOPY_SESSION_TIMEOUT=2s", "CANOPY_HTTP_ADDR="+addr, "CANOPY_LOG_LEVEL=debug")

	for _, args := range [][]string{{"run", "-h"}, {"run", "-check-config"}, {"create-topics", "-h"}, {"replay", "-h"}} {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		if strings.Contains(string(out), canary) {
			t.Errorf("projector %s prints the secret:\n%s", strings.Join(args, " "), out)
		}
		if args[1] == "-check-config" && !strings.Contains(string(out), "configuration ok") {
			t.Errorf("projector run -check-config with the test's environment:\n%s", out)
		}
	}

	c := &child{name: "sigterm", exited: make(chan struct{})}
	c.cmd = exec.Command(bin, "run")
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(c.kill)
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	ready := func() bool {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-c.exited:
			t.Fatalf("projector run exited: %v\n%s", c.err, c.out.String())
		case <-ctx.Done():
			t.Fatalf("projector run never ready:\n%s", c.out.String())
		case <-tick.C:
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-ctx.Done():
		t.Fatalf("projector run did not stop on SIGTERM:\n%s", c.out.String())
	}
	log := c.out.String()
	if c.err != nil {
		t.Fatalf("projector run on SIGTERM: %v\n%s", c.err, log)
	}
	testenv.InOrder(t, log, "received signal terminated", "actor=readiness", "actor=projector", `actor="query endpoint"`, "projector stopped")
	if strings.Contains(log, canary) {
		t.Errorf("the log carries the secret:\n%s", log)
	}
}
