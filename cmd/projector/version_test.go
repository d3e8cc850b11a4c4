package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionNamesTheCommit: a binary built in the checkout prints its
// commit and Go version, from the build information the toolchain embeds
// (the same values as canopy_build_info).
func TestVersionNamesTheCommit(t *testing.T) {
	dir, args := ".", []string{"version"}
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
