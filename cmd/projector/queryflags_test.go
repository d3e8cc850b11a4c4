package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/testenv"
)

// TestQueryEndpointFlags: "projector run" keeps its query endpoint closed by
// default. Without -query-secret-file it listens on loopback
// (127.0.0.1:8081), and an address beyond loopback, from -http-addr or
// CANOPY_HTTP_ADDR, is refused at start, saying what to set; with a secret
// it listens on every interface (:8081) unless told otherwise.
func TestQueryEndpointFlags(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "query-secret")
	if err := os.WriteFile(secretFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short-secret")
	if err := os.WriteFile(short, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr       optionalString
		secretFile string
		want       string // the address, or "!" for a refusal
	}{
		{optionalString{}, "", "127.0.0.1:8081"},
		{optionalString{}, secretFile, ":8081"},
		{optionalString{value: "127.0.0.1:9081", set: true}, "", "127.0.0.1:9081"},
		{optionalString{value: "", set: true}, "", ""}, // disabled
		{optionalString{value: ":8081", set: true}, "", "!"},
		{optionalString{value: "0.0.0.0:8081", set: true}, "", "!"},
		{optionalString{value: "10.0.0.7:8081", set: true}, secretFile, "10.0.0.7:8081"},
		{optionalString{}, short, "!"},
		{optionalString{}, filepath.Join(t.TempDir(), "missing"), "!"},
	} {
		e, err := queryEndpoint(tc.addr, tc.secretFile)
		switch {
		case tc.want == "!" && err == nil:
			t.Errorf("-http-addr %+v -query-secret-file %q: accepted (%q), want a refusal", tc.addr, tc.secretFile, e.Addr)
		case tc.want != "!" && (err != nil || e.Addr != tc.want):
			t.Errorf("-http-addr %+v -query-secret-file %q: %q %v, want %q", tc.addr, tc.secretFile, e.Addr, err, tc.want)
		case tc.want != "!" && (len(e.Secret) > 0) != (tc.secretFile != ""):
			t.Errorf("-query-secret-file %q: secret of %d bytes", tc.secretFile, len(e.Secret))
		}
	}

	// Through the command, flags and environment: refused before anything
	// starts (-check-config too), naming what to set.
	base := []string{"-check-config", "-brokers", "127.0.0.1:1", "-data-dir", t.TempDir()}
	refused := func(what string, args ...string) {
		t.Helper()
		var out testenv.Buffer
		if code := runProjector(append(base, args...), &out); code != 2 ||
			!strings.Contains(out.String(), "-query-secret-file") || !strings.Contains(out.String(), "CANOPY_QUERY_SECRET_FILE") {
			t.Errorf("%s: exit %d, want 2 with a message naming -query-secret-file:\n%s", what, code, out.String())
		}
	}
	refused("-http-addr :0", "-http-addr", ":0")
	t.Setenv("CANOPY_HTTP_ADDR", "0.0.0.0:0")
	refused("CANOPY_HTTP_ADDR=0.0.0.0:0")

	// With the secret from CANOPY_QUERY_SECRET_FILE the same address is
	// fine. (-check-config refuses CANOPY_* variables it does not read: the
	// test's own go.)
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "CANOPY_") && name != "CANOPY_HTTP_ADDR" {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	t.Setenv("CANOPY_QUERY_SECRET_FILE", secretFile)
	var out testenv.Buffer
	if code := runProjector(base, &out); code != 0 || !strings.Contains(out.String(), "configuration ok") {
		t.Errorf("CANOPY_HTTP_ADDR=0.0.0.0:0 with CANOPY_QUERY_SECRET_FILE: exit %d:\n%s", code, out.String())
	}
	t.Setenv("CANOPY_QUERY_SECRET_FILE", short)
	var out2 testenv.Buffer
	if code := runProjector(base, &out2); code != 2 || !strings.Contains(out2.String(), "-query-secret-file") {
		t.Errorf("a 7-byte secret: exit %d, want 2 naming -query-secret-file:\n%s", code, out2.String())
	}
}
