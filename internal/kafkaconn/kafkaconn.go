// Package kafkaconn is how every canopy binary reaches Kafka: the
// connection settings each command takes as flags (seed brokers, topic
// names, TLS, SASL; CANOPY_* variables by flagenv's rule), and Conn, the
// connection they make, which the projector's and the gateway's Config
// carry and every Kafka client of theirs starts its options from. One
// place, so that every binary names, checks and applies them alike.
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

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/canopy-dev/canopy/internal/flagenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Conn is a connection to Kafka: the seed brokers, and the TLS and SASL
// every connection to them uses. The projector's and the gateway's Config,
// canopy-dev and the bench harness each hold one, and each of their Kafka
// clients starts from its Opts.
type Conn struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// TLS, when set, is used for every broker connection.
	TLS *tls.Config
	// SASL, when set, authenticates every broker connection.
	SASL sasl.Mechanism
}

// Opts are the franz-go options of a client of c: the seed brokers, TLS
// and SASL, then more, the client's own (its kgo.ClientID among them;
// without one franz-go names it "kgo"). The slice is new on every call and
// full (its capacity is its length), so that a caller appending to it never
// writes into another client's options.
func (c Conn) Opts(more ...kgo.Opt) []kgo.Opt {
	opts := make([]kgo.Opt, 0, 3+len(more))
	opts = append(opts, kgo.SeedBrokers(c.Brokers...))
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	return slices.Clip(append(opts, more...))
}

// Flags are the connection settings. Register binds them to a flag set;
// their CANOPY_* variables are flagenv's (flagenv.Parse), applied after the
// command line.
type Flags struct {
	Brokers, Prefix, TLSCA, SASLMechanism, SASLUser, SASLPassword string
	// TLSCert and TLSKey are PEM files of the client certificate and its
	// key, for brokers that authenticate clients by certificate (mTLS).
	TLSCert, TLSKey string
	TLS             bool
	Version         int
}

// Register adds the flags to fs. Kafka's TLS flags are -kafka-tls,
// -kafka-tls-ca, -kafka-tls-cert and -kafka-tls-key in every command, so
// that no command's own -tls flags (the gateway's HTTPS) read the same
// variable; EnvAliases reads their deprecated variables too.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Brokers, "brokers", "", "Kafka seed brokers, host:port,...")
	fs.StringVar(&f.Prefix, "topic-prefix", topics.DefaultPrefix, "prefix of every topic name")
	fs.IntVar(&f.Version, "topic-version", topics.DefaultVersion, "contract version suffix of every topic name")
	fs.BoolVar(&f.TLS, "kafka-tls", false, "connect to Kafka with TLS")
	fs.StringVar(&f.TLSCA, "kafka-tls-ca", "", "PEM file of CAs to trust for Kafka, instead of the system's")
	fs.StringVar(&f.TLSCert, "kafka-tls-cert", "", "PEM file of the client certificate to present to Kafka (mTLS); implies TLS")
	fs.StringVar(&f.TLSKey, "kafka-tls-key", "", "PEM file of the key of the client certificate")
	fs.StringVar(&f.SASLMechanism, "sasl-mechanism", "", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	fs.StringVar(&f.SASLUser, "sasl-user", "", "SASL user")
	fs.StringVar(&f.SASLPassword, "sasl-password", "", "SASL password; never printed")
}

// RegisterTLSAliases adds the Kafka TLS flags' deprecated names (-tls,
// -tls-ca, -tls-cert, -tls-key) to the commands that still accept them
// (projector run and create-topics). Call it after Register.
func RegisterTLSAliases(fs *flag.FlagSet) {
	for _, n := range []string{"tls", "tls-ca", "tls-cert", "tls-key"} {
		flagenv.Alias(fs, n, "kafka-"+n)
	}
}

// EnvAliases are the Kafka TLS flags' deprecated variables (CANOPY_TLS,
// ...), read when the CANOPY_KAFKA_TLS* ones are not set.
var EnvAliases = []flagenv.EnvAlias{
	{Var: "CANOPY_TLS", Flag: "kafka-tls"},
	{Var: "CANOPY_TLS_CA", Flag: "kafka-tls-ca"},
	{Var: "CANOPY_TLS_CERT", Flag: "kafka-tls-cert"},
	{Var: "CANOPY_TLS_KEY", Flag: "kafka-tls-key"},
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
		return nil, errors.New("the Kafka client certificate (-kafka-tls-cert) and its key (-kafka-tls-key) go together")
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

// Conn is the connection the flags name, its TLS files and SASL mechanism
// read now; the error reports the problems of both.
func (f *Flags) Conn() (Conn, error) {
	c := Conn{Brokers: f.BrokerList()}
	var terr, serr error
	c.TLS, terr = f.TLSConfig()
	c.SASL, serr = f.SASL()
	return c, errors.Join(terr, serr)
}
