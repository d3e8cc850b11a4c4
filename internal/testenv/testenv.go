// Package testenv finds the outside tools some tests need (kcat, the Python
// venv of tools/python, prometheus, promtool, helm). `make test`
// installs them (tools/install.sh); a test run by hand without them is
// skipped, but under CI=true a missing tool fails the test, so CI can never
// pass by skipping. It also holds Buffer, which the tests that run those
// tools (and projectors) capture their output into.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Tool returns the path of the named program, searching PATH and then the
// repository's bin/tools. Missing, it fails t when CI=true and skips it
// otherwise, naming the command that installs it.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join(RepoRoot(t), "bin", "tools", name); isExec(p) {
		return p
	}
	Missing(t, name)
	return ""
}

// Missing reports that what is missing, failing under CI=true and skipping
// otherwise.
func Missing(t testing.TB, what string) {
	t.Helper()
	msg := what + " not found: run ./tools/install.sh (make test does)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// RepoRoot is the repository's top directory (where go.mod is).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testenv: cannot locate the source tree")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
