package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// canary is a secret's value that no output may show.
const canary = "canary-5e2a9b41d7"

// TestSIGTERMAndSecrets builds the binary, runs it against an embedded
// broker on loopback with its settings in the environment (the JWT key,
// the projectors' secret and the SASL password among them), waits until it
// is ready, sends it SIGTERM and expects a clean exit (0) with the actors
// stopped in the group's order: readiness off first, then the API, the
// admin endpoint last. No output of the process, nor of -h and
// -check-config with the same environment, carries a secret's value.
func TestSIGTERMAndSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, names := kfakeWithTopics(ctx, t, "sigterm")
	dir := t.TempDir()
	bin := filepath.Join(dir, "conductor-gateway")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(name, content string) string { return testenv.WriteFile(t, dir, name, content) }
	api, admin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := append(testenv.EnvWithout("CANOPY_"), "CANOPY_SASL_PASSWORD="+canary,
		"CANOPY_JWT_KEY_FILE="+write("jwt.key", canary+"-jwt-key-0123456789abcdef0123\n"),
		"CANOPY_PROJECTOR_SECRET_FILE="+write("projector.secret", canary+"-projector-secret-0123456789\n"),
		"CANOPY_BROKERS="+strings.Join(c.ListenAddrs(), ","), "CANOPY_TOPIC_PREFIX="+names.Prefix,
		"CANOPY_LISTEN="+api, "CANOPY_METRICS_ADDR="+admin, "CANOPY_LOG_LEVEL=debug")

	outs := testenv.NoSecretPrinted(ctx, t, bin, env, canary, []string{"-h"}, []string{"-check-config"})
	if !strings.Contains(outs[1], "configuration ok") {
		t.Errorf("-check-config with the test's environment:\n%s", outs[1])
	}

	cmd := exec.Command(bin)
	cmd.Env = env
	log := testenv.StopWhenReady(ctx, t, cmd, "http://"+admin+"/readyz")
	testenv.InOrder(t, log, "received signal terminated", "actor=readiness", "actor=api", `actor="admin endpoint"`, "conductor-gateway stopped")
	if strings.Contains(log, canary) {
		t.Errorf("the log carries a secret:\n%s", log)
	}
}
