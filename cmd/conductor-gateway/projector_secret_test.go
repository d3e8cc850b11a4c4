package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestProjectorSecretFile: -projector-secret-file (or
// CANOPY_PROJECTOR_SECRET_FILE) is read and checked at start: a missing
// file or a secret the projectors would refuse to load fails the start
// naming the flag; a good one passes -check-config.
func TestProjectorSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return testenv.WriteFile(t, dir, name, content) }
	jwtKey := write("jwt.key", "0123456789abcdef0123456789abcdef\n")
	base := []string{"-check-config", "-brokers", "127.0.0.1:1", "-jwt-key-file", jwtKey}
	for name, file := range map[string]string{
		"missing": filepath.Join(dir, "missing"),
		"short":   write("short", "hunter2\n"),
		"spaces":  write("spaces", "a secret with spaces that is long enough\n"),
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), append(base, "-projector-secret-file", file), &stderr, nil); code != 2 ||
			!strings.Contains(stderr.String(), "-projector-secret-file") {
			t.Errorf("%s secret: exit %d, want 2 naming -projector-secret-file:\n%s", name, code, stderr.String())
		}
	}
	// CANOPY_* variables the command does not read fail -check-config: the
	// test's own go.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CANOPY_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	t.Setenv("CANOPY_PROJECTOR_SECRET_FILE", write("good", "0123456789abcdef0123456789abcdef-good\n"))
	var stderr bytes.Buffer
	if code := run(context.Background(), base, &stderr, nil); code != 0 {
		t.Errorf("CANOPY_PROJECTOR_SECRET_FILE with a good secret: exit %d:\n%s", code, stderr.String())
	}
}
