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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
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
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := topics.Names{Prefix: "sigterm", Version: 1}
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 2, 1); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "conductor-gateway")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	api, admin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := append(testenv.EnvWithout("CANOPY_"), "CANOPY_SASL_PASSWORD="+canary,
		"CANOPY_JWT_KEY_FILE="+write("jwt.key", canary+"-jwt-key-0123456789abcdef0123\n"),
		"CANOPY_PROJECTOR_SECRET_FILE="+write("projector.secret", canary+"-projector-secret-0123456789\n"),
		"CANOPY_BROKERS="+strings.Join(c.ListenAddrs(), ","), "CANOPY_TOPIC_PREFIX="+names.Prefix,
		"CANOPY_LISTEN="+api, "CANOPY_METRICS_ADDR="+admin, "CANOPY_LOG_LEVEL=debug")

	for _, args := range [][]string{{"-h"}, {"-check-config"}} {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		if strings.Contains(string(out), canary) {
			t.Errorf("conductor-gateway %s prints a secret:\n%s", args[0], out)
		}
		if args[0] == "-check-config" && !strings.Contains(string(out), "configuration ok") {
			t.Errorf("-check-config with the test's environment:\n%s", out)
		}
	}

	var out testenv.Buffer
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	ready := func() bool {
		resp, err := client.Get("http://" + admin + "/readyz")
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
		case err := <-exited:
			t.Fatalf("conductor-gateway exited: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("conductor-gateway never ready:\n%s", out.String())
		case <-tick.C:
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-ctx.Done():
		t.Fatalf("conductor-gateway did not stop on SIGTERM:\n%s", out.String())
	}
	log := out.String()
	if err != nil {
		t.Fatalf("conductor-gateway on SIGTERM: %v\n%s", err, log)
	}
	testenv.InOrder(t, log, "received signal terminated", "actor=readiness", "actor=api", `actor="admin endpoint"`, "conductor-gateway stopped")
	if strings.Contains(log, canary) {
		t.Errorf("the log carries a secret:\n%s", log)
	}
}
