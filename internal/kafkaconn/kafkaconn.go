// Package kafkaconn holds the Kafka connection settings every canopy command
// takes (seed brokers, topic names, TLS, SASL), as flags with CANOPY_*
// environment variables, and turns them into franz-go options. One place, so
// that the projector and the gateway name and check them alike.
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Flags are the connection settings. Register binds them to a flag set;
// flags win over the environment variables named in their help.
type Flags struct {
	Brokers, Prefix, TLSCA, SASLMechanism, SASLUser, SASLPassword string
	// TLSCert and TLSKey are PEM files of the client certificate and its
	// key, for brokers that authenticate clients by certificate (mTLS).
	TLSCert, TLSKey string
	TLS             bool
	Version         int
}

// Register adds the flags to fs. tlsPrefix prefixes the names of the TLS
// flags ("" gives -tls, -tls-ca, -tls-cert and -tls-key; "kafka-" gives
// -kafka-tls, -kafka-tls-ca, -kafka-tls-cert and -kafka-tls-key, for a
// command whose own -tls flags are about HTTP).
func (f *Flags) Register(fs *flag.FlagSet, tlsPrefix string) {
	fs.StringVar(&f.Brokers, "brokers", Env("CANOPY_BROKERS", ""), "Kafka seed brokers, host:port,... (CANOPY_BROKERS)")
	fs.StringVar(&f.Prefix, "topic-prefix", Env("CANOPY_TOPIC_PREFIX", topics.DefaultPrefix), "prefix of every topic name (CANOPY_TOPIC_PREFIX)")
	fs.IntVar(&f.Version, "topic-version", topics.DefaultVersion, "contract version suffix of every topic name")
	fs.BoolVar(&f.TLS, tlsPrefix+"tls", Env("CANOPY_TLS", "") == "true", "connect to Kafka with TLS (CANOPY_TLS=true)")
	fs.StringVar(&f.TLSCA, tlsPrefix+"tls-ca", Env("CANOPY_TLS_CA", ""), "PEM file of CAs to trust for Kafka, instead of the system's (CANOPY_TLS_CA)")
	fs.StringVar(&f.TLSCert, tlsPrefix+"tls-cert", Env("CANOPY_TLS_CERT", ""),
		"PEM file of the client certificate to present to Kafka (mTLS); implies TLS (CANOPY_TLS_CERT)")
	fs.StringVar(&f.TLSKey, tlsPrefix+"tls-key", Env("CANOPY_TLS_KEY", ""), "PEM file of the key of the client certificate (CANOPY_TLS_KEY)")
	fs.StringVar(&f.SASLMechanism, "sasl-mechanism", Env("CANOPY_SASL_MECHANISM", ""), "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (CANOPY_SASL_MECHANISM)")
	fs.StringVar(&f.SASLUser, "sasl-user", Env("CANOPY_SASL_USER", ""), "SASL user (CANOPY_SASL_USER)")
	// The password's variable is read after the flag is defined, not as its
	// default: a default is printed by -h and in usage errors.
	fs.StringVar(&f.SASLPassword, "sasl-password", "", "SASL password (CANOPY_SASL_PASSWORD)")
	f.SASLPassword = Env("CANOPY_SASL_PASSWORD", "")
}

// known are the environment variables the running command reads, noted as
// its flags are registered (Env, EnvFlag), for UnknownEnv.
var (
	knownMu sync.Mutex
	known   = map[string]bool{}
)

func note(name string) {
	knownMu.Lock()
	defer knownMu.Unlock()
	known[name] = true
}

// Env returns the environment variable name, or def when it is not set. It
// notes name as a variable the command reads (UnknownEnv).
func Env(name, def string) string {
	note(name)
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// EnvFlag sets the flag flagName of fs from the environment variable
// envName when that is set, so that the variable is parsed, and refused,
// exactly as the flag would be (Env's callers take a string as it is). Call
// it after registering the flag and before fs.Parse: a flag on the command
// line still wins.
func EnvFlag(fs *flag.FlagSet, flagName, envName string) error {
	note(envName)
	v, ok := os.LookupEnv(envName)
	if !ok {
		return nil
	}
	if err := fs.Set(flagName, v); err != nil {
		return fmt.Errorf("%s=%q (-%s): %w", envName, v, flagName, err)
	}
	return nil
}

// UnknownEnv lists the CANOPY_* variables of the environment that no flag
// of the command reads: misspelt, or meant for another command. A command
// checking its configuration (-check-config) refuses them, since otherwise
// they would be silently ignored.
func UnknownEnv() []string {
	knownMu.Lock()
	defer knownMu.Unlock()
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "CANOPY_") && !known[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Names are the topic names the flags give.
func (f *Flags) Names() topics.Names { return topics.Names{Prefix: f.Prefix, Version: f.Version} }

// BrokerList is the comma-separated brokers, trimmed, empty entries dropped.
func (f *Flags) BrokerList() []string {
	var out []string
	for _, b := range strings.Split(f.Brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// TLSConfig is the TLS configuration to dial Kafka with, nil without TLS.
// A CA or a client certificate implies TLS. The certificate and its key go
// together; both are read now, so that a bad file is a configuration error
// at start rather than a failed handshake later.
func (f *Flags) TLSConfig() (*tls.Config, error) {
	if !f.TLS && f.TLSCA == "" && f.TLSCert == "" && f.TLSKey == "" {
		return nil, nil
	}
	if (f.TLSCert == "") != (f.TLSKey == "") {
		return nil, errors.New("the Kafka client certificate (CANOPY_TLS_CERT) and its key (CANOPY_TLS_KEY) go together")
	}
	c, err := ClientTLS(f.TLSCA)
	if err != nil {
		return nil, err
	}
	if f.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("the Kafka client certificate %s and key %s: %w", f.TLSCert, f.TLSKey, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// ClientTLS is a client TLS configuration (TLS 1.2 or newer) trusting the
// CAs in the PEM file caFile, or the system's when caFile is empty.
func ClientTLS(caFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("TLS CA file: %w", err)
	}
	c.RootCAs = x509.NewCertPool()
	if !c.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS CA file %s: no PEM certificates in it", caFile)
	}
	return c, nil
}

// SASL is the SASL mechanism the flags name, nil for none.
func (f *Flags) SASL() (sasl.Mechanism, error) {
	switch strings.ToUpper(f.SASLMechanism) {
	case "":
		return nil, nil
	case "PLAIN":
		return plain.Auth{User: f.SASLUser, Pass: f.SASLPassword}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: f.SASLUser, Pass: f.SASLPassword}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: f.SASLUser, Pass: f.SASLPassword}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("-sasl-mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", f.SASLMechanism)
}

// ClientOpts are franz-go options connecting to the brokers with the TLS and
// SASL settings.
func (f *Flags) ClientOpts() ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(f.BrokerList()...)}
	t, err := f.TLSConfig()
	if err != nil {
		return nil, err
	}
	if t != nil {
		opts = append(opts, kgo.DialTLSConfig(t))
	}
	m, err := f.SASL()
	if err != nil {
		return nil, err
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}
