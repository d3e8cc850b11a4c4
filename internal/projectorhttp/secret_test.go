package projectorhttp

import (
	"errors"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/cluster"
)

// TestEndpointValidate: without a secret the endpoint may listen on
// loopback only, and refusing anything else says what to set; with one it
// may listen anywhere. The default address follows.
func TestEndpointValidate(t *testing.T) {
	secret := []byte(strings.Repeat("s", cluster.MinQuerySecretLen))
	for _, tc := range []struct {
		addr   string
		secret []byte
		ok     bool
	}{
		{"", nil, true}, // no endpoint
		{"127.0.0.1:8081", nil, true},
		{"127.0.0.2:0", nil, true},
		{"[::1]:8081", nil, true},
		{"localhost:8081", nil, true},
		{":8081", nil, false},
		{"0.0.0.0:8081", nil, false},
		{"[::]:8081", nil, false},
		{"10.1.2.3:8081", nil, false},
		{"projector-0.example:8081", nil, false},
		{"8081", nil, false}, // not host:port
		{":8081", secret, true},
		{"10.1.2.3:8081", secret, true},
		{":8081", secret[:cluster.MinQuerySecretLen-1], false}, // too short
		{":8081", append([]byte("a b"), secret...), false},
	} {
		err := Endpoint{Addr: tc.addr, Secret: tc.secret}.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("Validate(%q, %d-byte secret): %v, want ok=%v", tc.addr, len(tc.secret), err, tc.ok)
		}
		if err != nil && tc.secret == nil && strings.Contains(tc.addr, ":") &&
			(!strings.Contains(err.Error(), "-query-secret-file") || !strings.Contains(err.Error(), "127.0.0.1:8081")) {
			t.Errorf("Validate(%q): %v; want it to name -query-secret-file and a loopback address", tc.addr, err)
		}
	}
	if a := DefaultAddrFor(nil); a != "127.0.0.1:8081" {
		t.Errorf("default address without a secret: %q, want loopback", a)
	}
	if a := DefaultAddrFor(secret); a != ":8081" {
		t.Errorf("default address with a secret: %q, want :8081", a)
	}
}
