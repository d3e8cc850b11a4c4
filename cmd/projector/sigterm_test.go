package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

	outs := testenv.NoSecretPrinted(ctx, t, bin, env, canary, []string{"run", "-h"}, []string{"run", "-check-config"},
		[]string{"create-topics", "-h"}, []string{"replay", "-h"})
	if !strings.Contains(outs[1], "configuration ok") {
		t.Errorf("projector run -check-config with the test's environment:\n%s", outs[1])
	}

	cmd := exec.Command(bin, "run")
	cmd.Env = env
	log := testenv.StopWhenReady(ctx, t, cmd, "http://"+addr+"/readyz")
	testenv.InOrder(t, log, "received signal terminated", "actor=readiness", "actor=projector", `actor="query endpoint"`, "projector stopped")
	if strings.Contains(log, canary) {
		t.Errorf("the log carries the secret:\n%s", log)
	}
}
