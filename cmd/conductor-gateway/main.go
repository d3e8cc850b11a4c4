// Command conductor-gateway serves canopy's HTTP API for humans and readers:
// human input onto the priority lane, and a run's snapshot, read model,
// history and live wakes. Every flag has a CANOPY_* environment variable
// (flags win). SIGTERM or SIGINT stops it gracefully.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/pkg/telemetry"
	"github.com/canopy-dev/canopy/pkg/telemetry/otlp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr, nil))
}

// env is kafkaconn.Env: every flag of the command has a CANOPY_* variable.
var env = kafkaconn.Env

// run parses args, serves until ctx ends, then shuts down gracefully. ready,
// when set, receives the API's and the metrics endpoint's listen addresses
// (for tests).
func run(ctx context.Context, args []string, stderr io.Writer, onReady func(api, metrics string)) int {
	fs := flag.NewFlagSet("conductor-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg                            gateway.Config
		kafka                          kafkaconn.Flags
		jwtKeyFile, addr               string
		certFile, keyFile, projectorCA string
		projectorTLS                   bool
		logLevel, metricsAddr          string
	)
	fs.StringVar(&addr, "listen", env("CANOPY_LISTEN", ":8080"), "address to serve HTTP on (CANOPY_LISTEN)")
	fs.StringVar(&certFile, "tls-cert", env("CANOPY_HTTP_TLS_CERT", ""), "PEM certificate: serve HTTPS (CANOPY_HTTP_TLS_CERT)")
	fs.StringVar(&keyFile, "tls-key", env("CANOPY_HTTP_TLS_KEY", ""), "PEM key of -tls-cert (CANOPY_HTTP_TLS_KEY)")
	// -tls-cert and -tls-key are the gateway's own HTTPS: Kafka's TLS
	// flags are -kafka-tls and -kafka-tls-ca.
	kafka.Register(fs, "kafka-")
	fs.StringVar(&cfg.ProjectorGroup, "group", env("CANOPY_GROUP", "canopy-projector"), "consumer group of the projector instances (CANOPY_GROUP)")
	fs.BoolVar(&projectorTLS, "projector-tls", env("CANOPY_PROJECTOR_TLS", "") == "true", "query projectors over HTTPS (CANOPY_PROJECTOR_TLS=true)")
	fs.StringVar(&projectorCA, "projector-tls-ca", env("CANOPY_PROJECTOR_TLS_CA", ""), "PEM file of CAs to trust for projectors (CANOPY_PROJECTOR_TLS_CA)")
	projectorSecretFile := fs.String("projector-secret-file", env("CANOPY_PROJECTOR_SECRET_FILE", ""),
		"file holding the projectors' shared secret (their -query-secret-file), sent to them as a bearer token (CANOPY_PROJECTOR_SECRET_FILE)")
	fs.StringVar(&jwtKeyFile, "jwt-key-file", env("CANOPY_JWT_KEY_FILE", ""), "file holding the HS256 key of bearer tokens, >= 32 bytes (CANOPY_JWT_KEY_FILE)")
	fs.StringVar(&cfg.TokenFile, "token-file", env("CANOPY_TOKEN_FILE", ""), "JSON file of static development tokens: {\"<token>\": {\"sub\", \"runs\", \"sessions\"}} (CANOPY_TOKEN_FILE)")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 128<<10, "largest request body (CANOPY_MAX_BODY_BYTES)")
	fs.StringVar(&cfg.Audience, "jwt-audience", env("CANOPY_JWT_AUDIENCE", ""), "when set, a JWT's aud must name it (CANOPY_JWT_AUDIENCE)")
	fs.StringVar(&cfg.Issuer, "jwt-issuer", env("CANOPY_JWT_ISSUER", ""), "when set, a JWT's iss must be it (CANOPY_JWT_ISSUER)")
	fs.Float64Var(&cfg.RatePerSecond, "rate", 10, "requests per second per token subject (CANOPY_RATE)")
	fs.IntVar(&cfg.RateBurst, "burst", 20, "requests a token subject may make at once (CANOPY_BURST)")
	fs.Float64Var(&cfg.PreAuthRatePerSecond, "preauth-rate", 50, "requests per second per client address, checked before the token (CANOPY_PREAUTH_RATE)")
	fs.IntVar(&cfg.PreAuthBurst, "preauth-burst", 100, "requests a client address may make at once (CANOPY_PREAUTH_BURST)")
	fs.BoolVar(&cfg.TrustForwardedFor, "trust-forwarded-for", env("CANOPY_TRUST_FORWARDED_FOR", "") == "true",
		"key -preauth-rate by the last X-Forwarded-For address (set only behind a proxy that sets it) (CANOPY_TRUST_FORWARDED_FOR=true)")
	fs.DurationVar(&cfg.ProduceTimeout, "produce-timeout", 10*time.Second, "how long an input waits for Kafka's acknowledgement before 503 (CANOPY_PRODUCE_TIMEOUT)")
	allowedHosts := fs.String("allowed-hosts", env("CANOPY_ALLOWED_HOSTS", ""),
		"comma-separated host names the Host header may carry (any port); others are 400. Set it when serving development tokens on loopback: localhost,127.0.0.1,::1 (CANOPY_ALLOWED_HOSTS; default any)")
	fs.DurationVar(&cfg.KafkaTimeout, "kafka-timeout", 3*time.Second, "how long a read waits for Kafka (the projector group's assignment, the wake offsets) before 503 (CANOPY_KAFKA_TIMEOUT)")
	fs.DurationVar(&cfg.BodyTimeout, "body-timeout", 10*time.Second, "how long a request body may take to arrive before 400 (CANOPY_BODY_TIMEOUT)")
	fs.IntVar(&cfg.MaxStreams, "max-streams", 1000, "concurrent wake streams (CANOPY_MAX_STREAMS)")
	fs.IntVar(&cfg.MaxStreamsPerSubject, "max-streams-per-subject", 50, "concurrent wake streams of one token subject (CANOPY_MAX_STREAMS_PER_SUBJECT)")
	fs.IntVar(&cfg.StreamQueue, "stream-queue", 128, "wakes a wake stream may have waiting; a stream further behind is dropped (CANOPY_STREAM_QUEUE)")
	fs.IntVar(&cfg.ReplayBytes, "replay-bytes", 4<<20, "bytes of recent wakes kept per partition read, to resume wake streams from (CANOPY_REPLAY_BYTES)")
	fs.DurationVar(&cfg.TailIdle, "tail-idle", 30*time.Second, "how long a partition is still read after its last wake stream ended (CANOPY_TAIL_IDLE)")
	fs.StringVar(&metricsAddr, "metrics-addr", env("CANOPY_METRICS_ADDR", ":9090"),
		"address to serve /metrics, /healthz and /readyz on, apart from the API; empty disables it (CANOPY_METRICS_ADDR)")
	fs.StringVar(&logLevel, "log-level", env("CANOPY_LOG_LEVEL", "info"), "debug, info, warn or error (CANOPY_LOG_LEVEL)")
	check := fs.Bool("check-config", false, "validate the flags and CANOPY_* variables (files they name included) and exit: 0 if valid, 2 if not; connects to nothing")
	// Numbers from the environment are parsed as the flags are: a bad value
	// is an error, not the default.
	for flagName, envName := range map[string]string{"max-body-bytes": "CANOPY_MAX_BODY_BYTES", "max-streams": "CANOPY_MAX_STREAMS",
		"preauth-rate": "CANOPY_PREAUTH_RATE", "preauth-burst": "CANOPY_PREAUTH_BURST",
		"max-streams-per-subject": "CANOPY_MAX_STREAMS_PER_SUBJECT", "stream-queue": "CANOPY_STREAM_QUEUE", "replay-bytes": "CANOPY_REPLAY_BYTES",
		"tail-idle": "CANOPY_TAIL_IDLE", "kafka-timeout": "CANOPY_KAFKA_TIMEOUT", "body-timeout": "CANOPY_BODY_TIMEOUT",
		"produce-timeout": "CANOPY_PRODUCE_TIMEOUT", "rate": "CANOPY_RATE", "burst": "CANOPY_BURST"} {
		if err := kafkaconn.EnvFlag(fs, flagName, envName); err != nil {
			fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
			return 2
		}
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: -log-level %q: want debug, info, warn or error\n", logLevel)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Brokers, cfg.Names = kafka.BrokerList(), kafka.Names()
	var errs []error
	t, err := kafka.TLSConfig()
	errs = append(errs, err)
	cfg.TLS = t
	if projectorTLS || projectorCA != "" {
		t, err := kafkaconn.ClientTLS(projectorCA)
		errs = append(errs, err)
		cfg.ProjectorScheme = "https"
		cfg.ProjectorClient = &http.Client{Timeout: projectorTimeout, Transport: &http.Transport{TLSClientConfig: t}}
	}
	m, err := kafka.SASL()
	errs = append(errs, err)
	cfg.SASL = m
	if *projectorSecretFile != "" {
		secret, err := cluster.ReadQuerySecret(*projectorSecretFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("-projector-secret-file: %w", err))
		}
		cfg.ProjectorSecret = secret
	}
	if jwtKeyFile != "" {
		k, err := os.ReadFile(jwtKeyFile)
		errs = append(errs, err)
		cfg.JWTKey = []byte(strings.TrimSpace(string(k)))
	}
	if (certFile == "") != (keyFile == "") {
		errs = append(errs, errors.New("-tls-cert and -tls-key go together"))
	}
	if cfg.TokenFile != "" && *check {
		_, err := gateway.LoadTokenFile(cfg.TokenFile)
		errs = append(errs, err)
	}
	if *check {
		if _, err := net.ResolveTCPAddr("tcp", addr); err != nil {
			errs = append(errs, fmt.Errorf("-listen %q: %w", addr, err))
		}
		if certFile != "" && keyFile != "" {
			_, err := tls.LoadX509KeyPair(certFile, keyFile)
			errs = append(errs, err)
		}
		if unknown := kafkaconn.UnknownEnv(); len(unknown) > 0 {
			errs = append(errs, fmt.Errorf("%s: no flag of this command reads it", strings.Join(unknown, ", ")))
		}
	}
	for _, h := range strings.Split(*allowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.AllowedHosts = append(cfg.AllowedHosts, h)
		}
	}
	// The longest a request can take before it writes its answer: an
	// input's body, its session's lookup (the assignment and the owner,
	// asked again once on a 421 or 503) and its produce.
	if longest := cfg.BodyTimeout + 2*(cfg.KafkaTimeout+projectorTimeout) + cfg.ProduceTimeout; longest >= writeTimeout {
		errs = append(errs, fmt.Errorf("-body-timeout + 2 × (-kafka-timeout + %s for a projector) + -produce-timeout is %s: it must stay below the %s write timeout of a response",
			projectorTimeout, longest, writeTimeout))
	}
	errs = append(errs, cfg.Validate())
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
		return 2
	}
	ot, err := otlp.Setup(ctx, otlp.Config{ServiceName: "canopy-gateway"})
	if err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
		return 2
	}
	if *check {
		// The exporters connect lazily: nothing was dialled.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ot.Shutdown(sctx)
		fmt.Fprintln(stderr, "conductor-gateway: configuration ok")
		return 0
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ot.Shutdown(sctx)
	}()
	reg := telemetry.NewRegistry()
	gm, err := telemetry.NewGatewayMetrics(reg)
	if err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
		return 1
	}
	cfg.Hooks, cfg.TracerProvider = gm, ot.Tracer
	cfg.KafkaHooks = telemetry.KafkaHooks(reg)("gateway")
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	g, err := gateway.New(startCtx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
		return 1
	}
	defer g.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
		return 1
	}
	var ready atomic.Bool // the API serves and no shutdown began
	admin, metricsLn, err := adminServer(metricsAddr, reg, func(ctx context.Context) error {
		if !ready.Load() {
			return errors.New("not serving")
		}
		return g.Ready(ctx)
	}, cfg.Logger)
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "conductor-gateway: -metrics-addr: %v\n", err)
		return 1
	}
	// Headers have 10s to arrive and a body has the gateway's BodyTimeout
	// (set per request: a server-wide ReadTimeout would also end the wake
	// streams' contexts). A response has writeTimeout, longer than the
	// longest a request can wait (checked with the flags); a wake stream
	// sets a deadline per write instead.
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: writeTimeout, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	// Wake streams hold their connection: ending the gateway's context ends
	// them, so that Shutdown does not wait for them forever.
	srv.RegisterOnShutdown(g.Drain)
	served := make(chan error, 1)
	go func() {
		if certFile != "" {
			served <- srv.ServeTLS(ln, certFile, keyFile)
		} else {
			served <- srv.Serve(ln)
		}
	}()
	var adminAddr string
	if admin != nil {
		adminAddr = metricsLn.Addr().String()
		go func() { _ = admin.Serve(metricsLn) }()
		// Stopped last: metrics stay scrapeable while the API drains.
		defer admin.Close()
	}
	ready.Store(true)
	cfg.Logger.Info("conductor-gateway serving", "addr", ln.Addr().String(), "metrics", adminAddr, "tls", certFile != "", "partitions", g.Partitions())
	if onReady != nil {
		onReady(ln.Addr().String(), adminAddr)
	}
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "conductor-gateway: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	// Not ready from now on, so that load balancers stop sending requests
	// while the API drains.
	ready.Store(false)
	shutCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		fmt.Fprintf(stderr, "conductor-gateway: shutdown: %v\n", err)
		return 1
	}
	cfg.Logger.Info("conductor-gateway stopped")
	return 0
}

// writeTimeout bounds a response (not a wake stream's), from the end of
// its request's headers; projectorTimeout bounds one read from a projector.
const (
	writeTimeout     = 60 * time.Second
	projectorTimeout = 10 * time.Second
)

// adminServer serves /metrics, /healthz (the process is alive) and /readyz
// (ready returns nil: the API is serving, not shutting down, and reaches
// Kafka) on addr, apart from the API so that neither needs the API's
// credentials nor shares its port. An empty addr disables it.
func adminServer(addr string, reg *prometheus.Registry, ready func(context.Context) error, log *slog.Logger) (*http.Server, net.Listener, error) {
	if addr == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", telemetry.Handler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}, ln, nil
}
