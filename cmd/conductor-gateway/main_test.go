package main

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
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFlagsReportEveryProblem: a bad command line names each thing to fix.
func TestFlagsReportEveryProblem(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-sasl-mechanism", "KERBEROS", "-http-tls-cert", "x"}, &stderr, nil); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	for _, want := range []string{"Brokers: required", "JWTKey or TokenFile", "-sasl-mechanism", "-http-tls-cert and -http-tls-key"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not mention %q", stderr.String(), want)
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// kfakeWithTopics starts an embedded broker on loopback, closed when the
// test ends (closing it before is allowed: Close is idempotent), with
// canopy's topics of two partitions under prefix.
func kfakeWithTopics(ctx context.Context, t *testing.T, prefix string) (*kfake.Cluster, topics.Names) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := topics.Names{Prefix: prefix, Version: 1}
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 2, 1); err != nil {
		t.Fatal(err)
	}
	return c, names
}

// TestServeAndStop: the binary serves HTTPS with a token file from the
// environment, is ready until its broker goes away, and stops gracefully
// when its context ends (as on SIGTERM).
func TestServeAndStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, names := kfakeWithTopics(ctx, t, "cmd")
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"dev-token-0123456789": {"sub": "dev", "runs": ["*"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CANOPY_TOKEN_FILE", tokens)
	t.Setenv("CANOPY_BROKERS", strings.Join(c.ListenAddrs(), ","))
	certFile, keyFile, pool := selfSigned(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	runCtx, stop := context.WithCancel(ctx)
	addrs := make(chan [2]string, 1)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(runCtx, []string{"-listen", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-topic-prefix", names.Prefix, "-log-level", "error",
			"-tls-cert", certFile, "-tls-key", keyFile}, &stderr, func(api, metrics string) { addrs <- [2]string{api, metrics} })
	}()
	var addr, metricsAddr string
	select {
	case a := <-addrs:
		addr, metricsAddr = a[0], a[1]
	case code := <-done:
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	req, _ := http.NewRequest("POST", "https://"+addr+"/v1/runs/run-1/input", strings.NewReader(`{"input_kind":"message","text":"hi"}`))
	req.Header.Set("Authorization", "Bearer dev-token-0123456789")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("input: %d", resp.StatusCode)
	}
	// The admin endpoint is plain HTTP on its own port, without credentials.
	plain := &http.Client{}
	defer plain.CloseIdleConnections()
	get := func(path string) (int, string) {
		resp, err := plain.Get("http://" + metricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(path); code != http.StatusOK {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	if code, body := get("/metrics"); code != http.StatusOK ||
		!strings.Contains(body, `canopy_gateway_requests_total{code="202",method="POST",route="/v1/runs/{run_id}/input"} 1`) ||
		!strings.Contains(body, `canopy_kafka_`) {
		t.Errorf("/metrics: %d, want the input counted and the Kafka client's metrics:\n%s", code, body)
	}
	// With the broker gone, the gateway can only answer 503: it is not
	// ready, so that a load balancer sends requests elsewhere.
	c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "no Kafka broker answered") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with the broker down: %d %s; want 503 naming Kafka", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	client.CloseIdleConnections()
	stop()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after the stop: %s", code, stderr.String())
	}
}
