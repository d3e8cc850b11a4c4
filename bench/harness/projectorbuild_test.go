package harness

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestProjectorBuild: the report names the binary measured by its build
// info, and says so when there is none to read.
func TestProjectorBuild(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A test binary is a Go binary without a recorded commit.
	if got := projectorBuild(self); !strings.HasPrefix(got, self) || !strings.Contains(got, runtime.Version()) || !strings.Contains(got, "no commit recorded") {
		t.Errorf("projectorBuild(test binary) = %q, want its path, %s and no commit recorded", got, runtime.Version())
	}
	notGo := filepath.Join(t.TempDir(), "projector")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := projectorBuild(notGo); got != notGo {
		t.Errorf("projectorBuild(a script) = %q, want the path alone", got)
	}
}
