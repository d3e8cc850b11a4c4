package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/flagenv"
	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
)

// writeTimeout bounds a response (not a wake stream's), from the end of
// its request's headers; projectorTimeout bounds one read from a projector.
const (
	writeTimeout     = 60 * time.Second
	projectorTimeout = 10 * time.Second
)

// options are the command's settings: the gateway's Config and what the
// process around it needs.
type options struct {
	cfg         gateway.Config
	addr        string      // -listen
	metricsAddr string      // -metrics-addr; empty: no admin endpoint
	httpTLS     *tls.Config // the API's HTTPS, nil for HTTP
	check       bool        // -check-config
}

// flags are the command line before it becomes options.
type flags struct {
	kafka                          kafkaconn.Flags
	jwtKeyFile, projectorSecret    string
	certFile, keyFile, projectorCA string
	allowedHosts, logLevel         string
	projectorTLS                   bool
}

// register adds every flag to fs, each with its default from gateway's
// Default* constants; flagenv gives each its CANOPY_* variable.
func (f *flags) register(fs *flag.FlagSet, o *options) {
	c := &o.cfg
	fs.StringVar(&o.addr, "listen", ":8080", "address to serve HTTP on")
	fs.StringVar(&f.certFile, "http-tls-cert", "", "PEM certificate: serve HTTPS")
	fs.StringVar(&f.keyFile, "http-tls-key", "", "PEM key of -http-tls-cert")
	// -tls-cert and -tls-key were the HTTPS flags' names: Kafka's TLS flags
	// are -kafka-tls*, as in the projector.
	flagenv.Alias(fs, "tls-cert", "http-tls-cert")
	flagenv.Alias(fs, "tls-key", "http-tls-key")
	f.kafka.Register(fs)
	fs.StringVar(&c.ProjectorGroup, "group", gateway.DefaultProjectorGroup, "consumer group of the projector instances")
	fs.BoolVar(&f.projectorTLS, "projector-tls", false, "query projectors over HTTPS")
	fs.StringVar(&f.projectorCA, "projector-tls-ca", "", "PEM file of CAs to trust for projectors")
	fs.StringVar(&f.projectorSecret, "projector-secret-file", "",
		"file holding the projectors' shared secret (their -query-secret-file), sent to them as a bearer token")
	fs.StringVar(&f.jwtKeyFile, "jwt-key-file", "", "file holding the HS256 key of bearer tokens, >= 32 bytes")
	fs.StringVar(&c.TokenFile, "token-file", "", "JSON file of static development tokens: {\"<token>\": {\"sub\", \"runs\", \"sessions\"}}")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", gateway.DefaultMaxBodyBytes, "largest request body")
	fs.StringVar(&c.Audience, "jwt-audience", "", "when set, a JWT's aud must name it")
	fs.StringVar(&c.Issuer, "jwt-issuer", "", "when set, a JWT's iss must be it")
	fs.Float64Var(&c.RatePerSecond, "rate", gateway.DefaultRatePerSecond, "requests per second per token subject")
	fs.IntVar(&c.RateBurst, "burst", gateway.DefaultRateBurst, "requests a token subject may make at once")
	fs.Float64Var(&c.PreAuthRatePerSecond, "preauth-rate", gateway.DefaultPreAuthRatePerSecond, "requests per second per client address, checked before the token")
	fs.IntVar(&c.PreAuthBurst, "preauth-burst", gateway.DefaultPreAuthBurst, "requests a client address may make at once")
	fs.BoolVar(&c.TrustForwardedFor, "trust-forwarded-for", false,
		"key -preauth-rate by the last X-Forwarded-For address (set only behind a proxy that sets it)")
	fs.DurationVar(&c.ProduceTimeout, "produce-timeout", gateway.DefaultProduceTimeout, "how long an input waits for Kafka's acknowledgement before 503")
	fs.StringVar(&f.allowedHosts, "allowed-hosts", "",
		"comma-separated host names the Host header may carry (any port); others are 400. Set it when serving development tokens on loopback: localhost,127.0.0.1,::1 (default any)")
	fs.DurationVar(&c.KafkaTimeout, "kafka-timeout", gateway.DefaultKafkaTimeout, "how long a read waits for Kafka (the projector group's assignment, the wake offsets) before 503")
	fs.DurationVar(&c.BodyTimeout, "body-timeout", gateway.DefaultBodyTimeout, "how long a request body may take to arrive before 400")
	fs.IntVar(&c.MaxStreams, "max-streams", gateway.DefaultMaxStreams, "concurrent wake streams")
	fs.IntVar(&c.MaxStreamsPerSubject, "max-streams-per-subject", gateway.DefaultMaxStreamsPerSubject, "concurrent wake streams of one token subject")
	fs.IntVar(&c.StreamQueue, "stream-queue", gateway.DefaultStreamQueue, "wakes a wake stream may have waiting; a stream further behind is dropped")
	fs.IntVar(&c.ReplayBytes, "replay-bytes", gateway.DefaultReplayBytes, "bytes of recent wakes kept per partition read, to resume wake streams from")
	fs.DurationVar(&c.TailIdle, "tail-idle", gateway.DefaultTailIdle, "how long a partition is still read after its last wake stream ended")
	c.Redaction.RegisterFlags(fs)
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":9090", "address to serve /metrics, /healthz and /readyz on, apart from the API; empty disables it")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.check, "check-config", false, "validate the flags and CANOPY_* variables (files they name included) and exit: 0 if valid, 2 if not; connects to nothing")
}

// flagsParsed, set by tests only, receives each command's flag set once
// its flags and variables are parsed; the command then returns 0 at once.
var flagsParsed func(*flag.FlagSet)

// parseOptions is the configuration from the command line and the
// environment, every problem reported at once. ok is false when the
// command must exit 2 (it printed why).
func parseOptions(args []string, stderr io.Writer) (o options, ok bool) {
	fs := flag.NewFlagSet("conductor-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f flags
	f.register(fs, &o)
	deprecated, err := flagenv.Parse(fs, args, kafkaconn.EnvAliases...)
	if err != nil {
		return o, false
	}
	if flagsParsed != nil {
		flagsParsed(fs)
		o.check = true // run returns 0 without serving
		return o, true
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: -log-level %q: want debug, info, warn or error\n", f.logLevel)
		return o, false
	}
	o.cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	for _, v := range deprecated {
		o.cfg.Logger.Warn("deprecated environment variable: the Kafka TLS variables are CANOPY_KAFKA_TLS*", "var", v)
	}
	errs := f.apply(&o)
	if o.check {
		errs = append(errs, f.checkOnly(&o, fs)...)
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
		return o, false
	}
	return o, true
}

// apply turns the flags into o's configuration and checks it.
func (f *flags) apply(o *options) []error {
	c := &o.cfg
	var err error
	c.Kafka, err = f.kafka.Conn()
	c.Names = f.kafka.Names()
	errs := []error{err}
	if f.projectorTLS || f.projectorCA != "" {
		t, err := kafkaconn.ClientTLS(f.projectorCA)
		errs = append(errs, err)
		c.ProjectorScheme = "https"
		c.ProjectorClient = &http.Client{Timeout: projectorTimeout, Transport: &http.Transport{TLSClientConfig: t}}
	}
	if f.projectorSecret != "" {
		secret, err := cluster.ReadQuerySecret(f.projectorSecret)
		if err != nil {
			errs = append(errs, fmt.Errorf("-projector-secret-file: %w", err))
		}
		c.ProjectorSecret = secret
	}
	if f.jwtKeyFile != "" {
		k, err := os.ReadFile(f.jwtKeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("-jwt-key-file: %w", err))
		}
		c.JWTKey = []byte(strings.TrimSpace(string(k)))
	}
	switch {
	case (f.certFile == "") != (f.keyFile == ""):
		errs = append(errs, errors.New("-http-tls-cert and -http-tls-key go together"))
	case f.certFile != "" && !o.check:
		// Checked by -check-config, read when serving.
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("-http-tls-cert: %w", err))
		}
		o.httpTLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	for _, h := range strings.Split(f.allowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.AllowedHosts = append(c.AllowedHosts, h)
		}
	}
	// The longest a request can take before it writes its answer: an
	// input's body, its session's lookup (the assignment and the owner,
	// asked again once on a 421 or 503) and its produce.
	if longest := c.BodyTimeout + 2*(c.KafkaTimeout+projectorTimeout) + c.ProduceTimeout; longest >= writeTimeout {
		errs = append(errs, fmt.Errorf("-body-timeout + 2 × (-kafka-timeout + %s for a projector) + -produce-timeout is %s: it must stay below the %s write timeout of a response",
			projectorTimeout, longest, writeTimeout))
	}
	return append(errs, c.Validate())
}

// checkOnly are -check-config's checks beyond apply's: files read only
// when serving, the listen address, and variables no flag reads.
func (f *flags) checkOnly(o *options, fs *flag.FlagSet) []error {
	var errs []error
	if o.cfg.TokenFile != "" {
		_, err := gateway.LoadTokenFile(o.cfg.TokenFile)
		errs = append(errs, err)
	}
	if _, err := net.ResolveTCPAddr("tcp", o.addr); err != nil {
		errs = append(errs, fmt.Errorf("-listen %q: %w", o.addr, err))
	}
	if f.certFile != "" && f.keyFile != "" {
		if _, err := tls.LoadX509KeyPair(f.certFile, f.keyFile); err != nil {
			errs = append(errs, fmt.Errorf("-http-tls-cert: %w", err))
		}
	}
	if unknown := flagenv.Unknown(fs, kafkaconn.EnvAliases...); len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("%s: no flag of this command reads it", strings.Join(unknown, ", ")))
	}
	return errs
}
