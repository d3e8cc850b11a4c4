package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionNamesTheCommit: a gateway built in the checkout prints its
// commit and Go version (the same values as canopy_build_info).
func TestVersionNamesTheCommit(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD (the tests run in a checkout): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "conductor-gateway")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("conductor-gateway version: %v", err)
	}
	got := strings.TrimSpace(string(out))
	if rev := strings.TrimSpace(string(head))[:12]; !strings.HasPrefix(got, "canopy ") || !strings.Contains(got, " "+rev) || !strings.HasSuffix(got, " "+runtime.Version()) {
		t.Errorf("version printed %q; want canopy <version> %s[+modified] %s", got, rev, runtime.Version())
	}
}
