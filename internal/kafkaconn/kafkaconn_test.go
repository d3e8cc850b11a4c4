package kafkaconn

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFlags(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs, "kafka-")
	if err := fs.Parse([]string{"-brokers", " a:1, ,b:2", "-topic-prefix", "p", "-sasl-mechanism", "scram-sha-512"}); err != nil {
		t.Fatal(err)
	}
	if got := f.BrokerList(); !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Errorf("brokers %q", got)
	}
	if n := f.Names(); n.Prefix != "p" || n.Version != 1 {
		t.Errorf("names %+v", n)
	}
	if m, err := f.SASL(); err != nil || m.Name() != "SCRAM-SHA-512" {
		t.Errorf("SASL %v %v", m, err)
	}
	if tc, err := f.TLSConfig(); tc != nil || err != nil {
		t.Errorf("TLS without -kafka-tls: %v %v", tc, err)
	}
	if opts, err := f.ClientOpts(); err != nil || len(opts) != 2 {
		t.Errorf("client opts: %d, %v", len(opts), err)
	}

	f.SASLMechanism = "GSSAPI"
	if _, err := f.SASL(); err == nil || !strings.Contains(err.Error(), "want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512") {
		t.Errorf("unknown mechanism: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.TLSCA = bad
	if _, err := f.TLSConfig(); err == nil || !strings.Contains(err.Error(), "no PEM certificates") {
		t.Errorf("CA file without certificates: %v", err)
	}
}
