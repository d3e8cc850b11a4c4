package main

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestMain fails the package's tests if any goroutine is left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSIGTERM builds the binary, runs it on loopback ports of its own until
// its gateway serves, sends it SIGTERM and expects a clean exit (0) with
// the actors stopped in the group's order: the gateway before the
// projector, the query endpoint last.
func TestSIGTERM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "canopy-dev")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "-http-addr", "127.0.0.1:0", "-gateway-addr", "127.0.0.1:0", "-runs", "1", "-nodes", "5")
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var seen bytes.Buffer
	for !strings.Contains(seen.String(), "metrics on http://") {
		if !sc.Scan() {
			t.Fatalf("canopy-dev ended before serving:\n%s\n%s", seen.String(), stderr.String())
		}
		seen.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("canopy-dev on SIGTERM: %v\n%s", err, stderr.String())
	}
	testenv.InOrder(t, stderr.String(), "received signal terminated", "actor=gateway", "actor=projector", `actor="query endpoint"`)
	if !strings.Contains(seen.String(), "events projected") {
		t.Errorf("no closing summary:\n%s", seen.String())
	}
}
