package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthFlags: the JWT and pre-authentication limit flags, and their
// CANOPY_* variables, are read and checked (-check-config connects to
// nothing).
func TestAuthFlags(t *testing.T) {
	// -check-config refuses CANOPY_* variables it does not read, such as
	// the test harness's: they are unset for the test (t.Setenv restores).
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CANOPY_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"dev-token-0123456789": {"sub": "dev", "runs": ["*"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"-check-config", "-brokers", "127.0.0.1:1", "-token-file", tokens, "-metrics-addr", ""}
	check := func(args ...string) (int, string) {
		var stderr bytes.Buffer
		code := run(context.Background(), append(append([]string{}, base...), args...), &stderr, nil)
		return code, stderr.String()
	}
	if code, out := check("-jwt-audience", "canopy", "-jwt-issuer", "https://issuer.example", "-preauth-rate", "5", "-preauth-burst", "10", "-trust-forwarded-for"); code != 0 {
		t.Fatalf("valid flags: exit %d: %s", code, out)
	}
	if code, out := check("-preauth-burst", "-1", "-preauth-rate", "-2"); code != 2 || !strings.Contains(out, "PreAuthBurst") || !strings.Contains(out, "PreAuthRatePerSecond") {
		t.Errorf("bad limits: exit %d: %s", code, out)
	}
	t.Setenv("CANOPY_JWT_AUDIENCE", "canopy")
	t.Setenv("CANOPY_JWT_ISSUER", "https://issuer.example")
	t.Setenv("CANOPY_PREAUTH_RATE", "5")
	t.Setenv("CANOPY_PREAUTH_BURST", "10")
	t.Setenv("CANOPY_TRUST_FORWARDED_FOR", "true")
	if code, out := check(); code != 0 {
		t.Fatalf("the variables: exit %d: %s", code, out)
	}
	t.Setenv("CANOPY_PREAUTH_BURST", "many")
	if code, out := check(); code != 2 || !strings.Contains(out, "CANOPY_PREAUTH_BURST") {
		t.Errorf("CANOPY_PREAUTH_BURST=many: exit %d: %s", code, out)
	}
}
