package testenv

import (
	"net"
	"os"
	"strings"
	"testing"
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
