package kafkaconn

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/flagenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFlags(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs)
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
	if c, err := f.Conn(); err != nil || len(c.Opts()) != 2 || c.TLS != nil || c.SASL == nil {
		t.Errorf("conn %+v (%d options), %v; want the brokers and SASL", c, len(c.Opts()), err)
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
	f.SASLMechanism = "GSSAPI"
	if _, err := f.Conn(); err == nil || !strings.Contains(err.Error(), "no PEM certificates") || !strings.Contains(err.Error(), "-sasl-mechanism") {
		t.Errorf("Conn with a bad CA file and mechanism: %v, want both reported", err)
	}
}

// TestConnOpts: every client's options start from the same connection, and
// a client's own options appended to them are its alone: two clients made
// from one Conn, each with its own client id, are named as they asked, and
// the options Opts returns are never shared (full slices, new each call).
func TestConnOpts(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	c := Conn{Brokers: cluster.ListenAddrs()}
	base := c.Opts()
	if len(base) != cap(base) {
		t.Errorf("Opts: length %d, capacity %d: an append would write into the caller's next slice", len(base), cap(base))
	}
	a := append(base, kgo.ClientID("client-a"))
	b := append(base, kgo.ClientID("client-b"))
	for want, opts := range map[string][]kgo.Opt{"client-a": a, "client-b": b, "own": c.Opts(kgo.ClientID("own"))} {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := cl.OptValue(kgo.ClientID); got != want {
			t.Errorf("client id %v, want %s", got, want)
		}
		if got := cl.OptValue(kgo.SeedBrokers); !slices.Equal(got.([]string), c.Brokers) {
			t.Errorf("seed brokers %v, want %v", got, c.Brokers)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := cl.Ping(ctx); err != nil {
			t.Errorf("%s: ping: %v", want, err)
		}
		cancel()
		cl.Close()
	}
	tlsConn := Conn{Brokers: []string{"x:1"}, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}
	cl, err := kgo.NewClient(tlsConn.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); got != tlsConn.TLS {
		t.Errorf("TLS %v, want the Conn's", got)
	}
}

// pki is a throwaway CA with a server certificate for 127.0.0.1 and client
// certificates, written as PEM files.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPool *x509.CertPool
	serial int64
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), ca: ca, caKey: key, caPool: x509.NewCertPool(), serial: 1}
	p.caPool.AddCert(ca)
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue makes a certificate for cn signed by the CA (by itself when
// selfSigned), for a server on 127.0.0.1 or a client, and returns it with
// the paths of its PEM certificate and key.
func (p *pki) issue(t *testing.T, cn string, server, selfSigned bool) (tls.Certificate, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	parent, signer := p.ca, p.caKey
	if selfSigned {
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := p.write(t, cn+".pem", "CERTIFICATE", der), p.write(t, cn+"-key.pem", "PRIVATE KEY", kder)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certFile, keyFile
}

// TestMutualTLS: against kfake listening with TLS and requiring a client
// certificate signed by its CA, the flags' client certificate (from the
// CANOPY_KAFKA_TLS_* variables, as the chart sets them) completes the handshake
// and the broker sees it; without one, or with one the CA did not sign,
// the broker refuses the connection.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	server, _, _ := p.issue(t, "broker", true, false)
	_, certFile, keyFile := p.issue(t, "canopy-projector", false, false)
	_, rogueCert, rogueKey := p.issue(t, "rogue", false, true)

	var mu sync.Mutex
	var peers []string
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{server}, ClientCAs: p.caPool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range cs.PeerCertificates[:1] {
				peers = append(peers, c.Subject.CommonName)
			}
			return nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")

	ping := func(f *Flags) error {
		c, err := f.Conn()
		if err != nil {
			t.Fatalf("connection: %v", err)
		}
		cl, err := kgo.NewClient(c.Opts(kgo.RetryTimeout(5 * time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}

	// The chart's way: environment variables, no flags.
	// The CA by its deprecated variable, from before the -kafka-tls rename.
	t.Setenv("CANOPY_BROKERS", brokers)
	t.Setenv("CANOPY_TLS_CA", filepath.Join(p.dir, "ca.pem"))
	t.Setenv("CANOPY_KAFKA_TLS_CERT", certFile)
	t.Setenv("CANOPY_KAFKA_TLS_KEY", keyFile)
	var f Flags
	runFlags := flag.NewFlagSet("run", flag.ContinueOnError)
	f.Register(runFlags)
	if dep, err := flagenv.Parse(runFlags, nil, EnvAliases...); err != nil || !slices.Equal(dep, []string{"CANOPY_TLS_CA"}) {
		t.Fatalf("flagenv.Parse: %v, deprecated %v", err, dep)
	}
	if err := ping(&f); err != nil {
		t.Fatalf("mTLS with the client certificate: %v", err)
	}
	mu.Lock()
	if !slices.Contains(peers, "canopy-projector") {
		t.Errorf("the broker saw client certificates %q, want canopy-projector", peers)
	}
	mu.Unlock()

	// The flags, winning over the variables.
	var g Flags
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	g.Register(fs)
	if _, err := flagenv.Parse(fs, []string{"-kafka-tls-cert", certFile, "-kafka-tls-key", keyFile}, EnvAliases...); err != nil {
		t.Fatal(err)
	}
	if err := ping(&g); err != nil {
		t.Fatalf("mTLS with -kafka-tls-cert: %v", err)
	}

	noCert := f
	noCert.TLSCert, noCert.TLSKey = "", ""
	if err := ping(&noCert); err == nil {
		t.Error("without a client certificate the broker accepted the connection")
	}
	rogue := f
	rogue.TLSCert, rogue.TLSKey = rogueCert, rogueKey
	if err := ping(&rogue); err == nil {
		t.Error("with a certificate the CA did not sign the broker accepted the connection")
	}
}

// TestClientCertificateConfig: a certificate implies TLS, needs its key,
// and a bad file is an error at start.
func TestClientCertificateConfig(t *testing.T) {
	p := newPKI(t)
	_, certFile, keyFile := p.issue(t, "client", false, false)
	f := Flags{TLSCert: certFile, TLSKey: keyFile}
	c, err := f.TLSConfig()
	if err != nil || c == nil || len(c.Certificates) != 1 {
		t.Fatalf("TLSConfig with a certificate only: %v, %v; want TLS with the certificate", c, err)
	}
	for _, bad := range []Flags{{TLSCert: certFile}, {TLSKey: keyFile}} {
		if _, err := bad.TLSConfig(); err == nil || !strings.Contains(err.Error(), "go together") {
			t.Errorf("%+v: %v, want the certificate and key go together", bad, err)
		}
	}
	if _, err := (&Flags{TLSCert: certFile, TLSKey: certFile}).TLSConfig(); err == nil {
		t.Error("a certificate as its own key was accepted")
	}
}

// TestTLSAliases: the projector's Kafka TLS flag names before the rename
// still set the -kafka-tls-* flags, and have no variable of their own.
func TestTLSAliases(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f Flags
	f.Register(fs)
	RegisterTLSAliases(fs)
	if _, err := flagenv.Parse(fs, []string{"-tls", "-tls-ca", "ca.pem"}, EnvAliases...); err != nil {
		t.Fatal(err)
	}
	if !f.TLS || f.TLSCA != "ca.pem" {
		t.Errorf("-tls -tls-ca: %+v", f)
	}
	if vars := flagenv.Vars(fs, EnvAliases...); slices.Contains(vars, "CANOPY_TLS_KEY") != true || !slices.Contains(vars, "CANOPY_KAFKA_TLS_KEY") {
		t.Errorf("variables %v", vars)
	}
}

// TestPasswordNeverPrinted: CANOPY_SASL_PASSWORD fills -sasl-password
// (a flag on the command line still wins) after parsing, never as its
// default, so -h and usage errors never print it.
func TestPasswordNeverPrinted(t *testing.T) {
	t.Setenv("CANOPY_SASL_PASSWORD", "canary-pw-1234")
	for _, args := range [][]string{nil, {"-sasl-password", "from-flag"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var out bytes.Buffer
		fs.SetOutput(&out)
		var f Flags
		f.Register(fs)
		fs.PrintDefaults()
		if _, err := flagenv.Parse(fs, args); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "canary") {
			t.Errorf("the usage prints the password:\n%s", out.String())
		}
		want := "canary-pw-1234"
		if args != nil {
			want = "from-flag"
		}
		if f.SASLPassword != want {
			t.Errorf("args %q: password %q, want %q", args, f.SASLPassword, want)
		}
	}
}
