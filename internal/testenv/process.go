package testenv

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FreeAddr returns a loopback address whose port was free a moment ago:
// listen, note it, close. For a process under test that must be told its
// address before it starts; nothing else in a test takes the port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// EnvWithout is this process's environment without the variables whose
// names start with prefix: a child binary's environment without the test
// harness's own CANOPY_* variables (which -check-config would refuse, and
// which would change what the child reads).
func EnvWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

// InOrder fails t unless log holds each of want, in that order: the steps
// of a shutdown, say.
func InOrder(t testing.TB, log string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(log[at:], w)
		if i < 0 {
			t.Fatalf("log lacks %q after offset %d (want in order %q):\n%s", w, at, want, log)
		}
		at += i + len(w)
	}
}

// StopWhenReady starts cmd (its output going to a Buffer of its own),
// waits until readyURL answers 200, sends it SIGTERM and waits for it to
// exit, and returns everything it wrote. It fails t if the process exits
// before it is ready, is not ready or does not stop before ctx ends, or
// exits with anything but 0: the check every canopy binary's SIGTERM test
// makes before it reads the log.
func StopWhenReady(ctx context.Context, t testing.TB, cmd *exec.Cmd, readyURL string) string {
	t.Helper()
	var out Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	}()
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	ready := func() bool {
		resp, err := client.Get(readyURL)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	name := filepath.Base(cmd.Path)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("%s exited before it was ready: %v\n%s", name, err, out.String())
		case <-ctx.Done():
			t.Fatalf("%s never ready at %s:\n%s", name, readyURL, out.String())
		case <-tick.C:
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
		stopped = true
	case <-ctx.Done():
		t.Fatalf("%s did not stop on SIGTERM:\n%s", name, out.String())
	}
	if err != nil {
		t.Fatalf("%s on SIGTERM: %v, want exit 0\n%s", name, err, out.String())
	}
	return out.String()
}

// NoSecretPrinted runs bin with each of argsList in env and fails t if any
// output carries secret: the help and configuration-check paths must not
// echo a password or key that came from the environment. It returns the
// outputs, in argsList's order, for the caller's own checks.
func NoSecretPrinted(ctx context.Context, t testing.TB, bin string, env []string, secret string, argsList ...[]string) []string {
	t.Helper()
	outs := make([]string, len(argsList))
	for i, args := range argsList {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		outs[i] = string(out)
		if strings.Contains(outs[i], secret) {
			t.Errorf("%s %s prints a secret:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
		}
	}
	return outs
}

// WriteFile writes content to dir/name, readable by its owner only (it is
// often a secret), and returns the path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// VersionNamesTheCommit builds the command in dir with VCS stamping and
// runs it with args (its version command), and fails t unless it prints
// "canopy <version> <commit>[+modified] <go version>" naming the checkout's
// HEAD and this toolchain: the build information canopy_build_info carries
// too. The tests run in a git checkout.
func VersionNamesTheCommit(t testing.TB, dir string, args ...string) {
	t.Helper()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD (the tests run in a checkout): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, dir).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	got := strings.TrimSpace(string(out))
	if rev := strings.TrimSpace(string(head))[:12]; !strings.HasPrefix(got, "canopy ") || !strings.Contains(got, " "+rev) || !strings.HasSuffix(got, " "+runtime.Version()) {
		t.Errorf("version printed %q; want canopy <version> %s[+modified] %s", got, rev, runtime.Version())
	}
}
