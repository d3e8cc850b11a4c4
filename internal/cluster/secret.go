package cluster

import (
	"bytes"
	"fmt"
	"os"
)

// The query endpoint of a projector (internal/projectorhttp) answers with
// run data, so it is closed by default: either its callers present a shared
// secret, or it listens on loopback only. The secret is a file's content,
// the same file for every projector and every gateway (projector run
// -query-secret-file, conductor-gateway -projector-secret-file), sent as
// "Authorization: Bearer <secret>".

// MinQuerySecretLen is the shortest secret ReadQuerySecret accepts, in
// bytes: 32 random characters are far beyond guessing.
const MinQuerySecretLen = 32

// ReadQuerySecret reads the shared secret of the query endpoint from path:
// the file's content without the whitespace around it (a trailing newline),
// at least MinQuerySecretLen bytes, printable ASCII without spaces (it goes
// into an HTTP header as it is).
func ReadQuerySecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	secret := bytes.TrimSpace(b)
	if err := CheckQuerySecret(secret); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return secret, nil
}

// CheckQuerySecret says what is wrong with a secret, if anything: it must be
// at least MinQuerySecretLen bytes of printable ASCII without spaces.
func CheckQuerySecret(secret []byte) error {
	if len(secret) < MinQuerySecretLen {
		return fmt.Errorf("%d bytes; want at least %d random ones, e.g. from `openssl rand -hex 32`", len(secret), MinQuerySecretLen)
	}
	for i, c := range secret {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("byte %d is %q; want printable ASCII without spaces (it is sent in an HTTP header), e.g. from `openssl rand -hex 32`", i, c)
		}
	}
	return nil
}
