// Package gateway is canopy's conductor gateway: the HTTP front of the
// human input lane and of the projectors' read side.
//
// A human's input is authenticated, checked against the event contract and
// produced to the human input topic keyed by its run; the answer (202) comes
// only once Kafka has acknowledged the record from all in-sync replicas.
// Reads of a run (snapshot, read model, history) are routed to the projector
// instance that owns the run's partition; a run's wakes are streamed as
// Server-Sent Events from the two wake topics.
package gateway

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/pkg/redact"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Config configures a Gateway. Zero fields take the default their comment
// names.
type Config struct {
	// Kafka is the connection to the brokers (seed brokers, TLS, SASL)
	// every client of the gateway makes. Its Brokers are required.
	Kafka kafkaconn.Conn
	// Names are the topic names; default prefix "canopy", version 1.
	Names topics.Names
	// ProjectorGroup is the consumer group of the projector instances, whose
	// assignment says which instance owns a run; default "canopy-projector".
	ProjectorGroup string

	// JWTKey is the HS256 key bearer tokens are signed with. At least one
	// of JWTKey and TokenFile is required.
	JWTKey []byte
	// TokenFile is a JSON file mapping static bearer tokens to their claims
	// ({"token": {"sub": "...", "runs": [...], "sessions": [...]}}), for
	// development. Optional.
	TokenFile string

	// MaxBodyBytes bounds a request body; larger is 413. Default 256 KiB:
	// input text is at most 16,384 code points, 64 KiB of UTF-8, which a
	// client escaping everything but ASCII (\ud83d\ude00 for 😀, 12
	// bytes) sends as 192 KiB.
	MaxBodyBytes int64
	// AllowedHosts, when set, are the only names a request's Host header
	// may carry (any port; case-insensitive); any other Host is refused
	// with a 400 problem. A gateway on loopback with development tokens
	// sets the loopback names, so that a web page whose domain an attacker
	// re-points at 127.0.0.1 (DNS rebinding) cannot reach it from a
	// browser. Default empty: any Host.
	AllowedHosts []string
	// BodyTimeout bounds reading a request's body, from when its handler
	// starts: a client that trickles its body is answered 400 rather than
	// holding a connection. Default 10s.
	BodyTimeout time.Duration
	// RatePerSecond is each token subject's sustained request rate; default 10.
	RatePerSecond float64
	// RateBurst is how many requests a subject may make at once; default 20.
	RateBurst int
	// ProduceTimeout bounds how long an input waits for Kafka's
	// acknowledgement before the answer is 503; default 10s.
	ProduceTimeout time.Duration
	// KafkaTimeout bounds every other Kafka call a request waits on (the
	// projector group's assignment, the wake topics' offsets); past it the
	// answer is a 503 with Retry-After. Default 3s. Keep it and
	// ProduceTimeout below the HTTP server's write timeout.
	KafkaTimeout time.Duration
	// RetryAfter is what a 503 tells the client to wait; default 2s.
	RetryAfter time.Duration
	// IdempotencyKeys is how many recent Idempotency-Keys (with their first
	// response) are remembered; default 10000.
	IdempotencyKeys int
	// MaxStreams bounds concurrent wake streams; beyond, 503. Default 1000.
	MaxStreams int
	// Heartbeat is how often an idle wake stream sends a comment, so proxies
	// keep it open; default 15s.
	Heartbeat time.Duration
	// AssignmentTTL is how long the projector group's assignment is cached
	// for routing reads; a 421 from a projector refreshes it, and so does a
	// 503 or no answer (the read then goes to the new owner, if the group
	// names another). Default 5s.
	AssignmentTTL time.Duration
	// ProjectorClient calls the projectors' query endpoint; default a client
	// with a 10s timeout.
	ProjectorClient *http.Client
	// ProjectorScheme is "http" (default) or "https" for the projectors'
	// query endpoint.
	ProjectorScheme string
	// Source is the CloudEvents source of the inputs produced; default "/gateway".
	Source string
	// Redaction is the operator's redaction rules, added to the built-in
	// ones (pkg/redact): a human's input text is redacted before it is
	// produced, so that the human input topic never holds a secret pasted
	// by mistake. Give it the projectors' rules. Default none: the
	// built-in rules alone.
	Redaction redact.Config

	// Now is the clock; default time.Now. Tests inject one.
	Now func() time.Time
	// Entropy makes the ULIDs of inputs without an Idempotency-Key; default
	// a monotonic crypto/rand reader. Tests inject one.
	Entropy io.Reader
	// Logger receives the gateway's logs; default slog.Default().
	Logger *slog.Logger
	// KafkaHooks are franz-go hooks (such as kprom's) for the gateway's
	// producer; default none.
	KafkaHooks []kgo.Hook
	// Hooks receive each request's route, status and duration, for metrics
	// (pkg/telemetry); default none.
	Hooks Hooks
	// TracerProvider makes a server span per request, the parent of the
	// trace context an input carries to Kafka; default a no-op provider,
	// which still passes the caller's traceparent on.
	TracerProvider trace.TracerProvider

	// Audience, when set, must be in a JWT's "aud"; a token without it is
	// refused. Default none (aud is not checked).
	Audience string
	// Issuer, when set, must be a JWT's "iss". Default none (not checked).
	Issuer string
	// PreAuthRatePerSecond is each client address's sustained request rate,
	// checked before its token is read, so that a flood of bad tokens costs
	// little; default 50. Behind a proxy every client has the proxy's
	// address unless TrustForwardedFor is set.
	PreAuthRatePerSecond float64
	// PreAuthBurst is how many requests a client address may make at once;
	// default 100.
	PreAuthBurst int
	// TrustForwardedFor keys the pre-authentication limit by the last
	// address of X-Forwarded-For (the one the proxy in front added) rather
	// than the connection's. Set it only behind a proxy that sets the
	// header: otherwise clients choose their own key. Default false.
	TrustForwardedFor bool

	// MaxStreamsPerSubject bounds one token subject's concurrent wake
	// streams on this instance, beside MaxStreams for all of them; beyond,
	// 429. Default 50.
	MaxStreamsPerSubject int
	// StreamQueue bounds the wakes a wake stream may have waiting to be
	// written: one that still has more when a later poll of its partition
	// brings it another is dropped, with an event saying where to resume,
	// so that it never holds up the others. Default 128.
	StreamQueue int
	// ReplayBytes bounds the replay buffer of each partition this instance
	// tails: its latest wakes, from which a stream resuming from a recent
	// position is served without reading Kafka again. Default 4 MiB.
	ReplayBytes int
	// TailIdle is how long a partition is still read after its last wake
	// stream on this instance ended, so that a client reconnecting soon
	// finds it; default 30s.
	TailIdle time.Duration
	// ProjectorSecret, when set, is sent on every call to a projector's
	// query endpoint as "Authorization: Bearer <ProjectorSecret>": the
	// shared secret of the projectors' -query-secret-file
	// (cluster.ReadQuerySecret reads one). Default none, for projectors
	// that listen on loopback only.
	ProjectorSecret []byte
}

// Hooks receive what the gateway serves. Request is called once per request
// when its handler returns (for a wake stream, when the stream ends); route
// is the matched pattern ("" for no route); method is GET, POST, HEAD,
// OPTIONS, PUT, DELETE or PATCH, and "_OTHER" for any other method a client
// sent, so that it is safe as a metric label. Redacted is called once per
// replacement redaction made in an input (Config.Redaction), by rule.
type Hooks interface {
	Request(route, method string, status int, took time.Duration)
	Redacted(rule string)
}

type nopHooks struct{}

func (nopHooks) Request(string, string, int, time.Duration) {}
func (nopHooks) Redacted(string)                            {}

// ErrConfig is wrapped by Validate's error.
var ErrConfig = errors.New("gateway: invalid config")

// Defaults of Config's fields (withDefaults), which the conductor-gateway
// command's flags use as theirs: each is written once.
const (
	// DefaultProjectorGroup is Config.ProjectorGroup's default.
	DefaultProjectorGroup = "canopy-projector"
	// DefaultMaxBodyBytes is Config.MaxBodyBytes's default.
	DefaultMaxBodyBytes = 256 << 10
	// DefaultRatePerSecond is Config.RatePerSecond's default.
	DefaultRatePerSecond = 10
	// DefaultRateBurst is Config.RateBurst's default.
	DefaultRateBurst = 20
	// DefaultPreAuthRatePerSecond is Config.PreAuthRatePerSecond's default.
	DefaultPreAuthRatePerSecond = 50
	// DefaultPreAuthBurst is Config.PreAuthBurst's default.
	DefaultPreAuthBurst = 100
	// DefaultProduceTimeout is Config.ProduceTimeout's default.
	DefaultProduceTimeout = 10 * time.Second
	// DefaultBodyTimeout is Config.BodyTimeout's default.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultKafkaTimeout is Config.KafkaTimeout's default.
	DefaultKafkaTimeout = 3 * time.Second
	// DefaultMaxStreams is Config.MaxStreams's default.
	DefaultMaxStreams = 1000
	// DefaultMaxStreamsPerSubject is Config.MaxStreamsPerSubject's default.
	DefaultMaxStreamsPerSubject = 50
	// DefaultStreamQueue is Config.StreamQueue's default.
	DefaultStreamQueue = 128
	// DefaultReplayBytes is Config.ReplayBytes's default.
	DefaultReplayBytes = 4 << 20
	// DefaultTailIdle is Config.TailIdle's default.
	DefaultTailIdle = 30 * time.Second
)

// withDefaults fills in every zero field that has a default.
func (c Config) withDefaults() Config {
	if c.Names == (topics.Names{}) {
		c.Names = topics.DefaultNames()
	}
	orDefault(&c.ProjectorGroup, DefaultProjectorGroup)
	orDefault(&c.MaxBodyBytes, DefaultMaxBodyBytes)
	orDefault(&c.RatePerSecond, DefaultRatePerSecond)
	orDefault(&c.RateBurst, DefaultRateBurst)
	orDefault(&c.ProduceTimeout, DefaultProduceTimeout)
	orDefault(&c.BodyTimeout, DefaultBodyTimeout)
	orDefault(&c.KafkaTimeout, DefaultKafkaTimeout)
	orDefault(&c.RetryAfter, 2*time.Second)
	orDefault(&c.IdempotencyKeys, 10000)
	orDefault(&c.MaxStreams, DefaultMaxStreams)
	orDefault(&c.Heartbeat, 15*time.Second)
	orDefault(&c.AssignmentTTL, 5*time.Second)
	if c.ProjectorClient == nil {
		c.ProjectorClient = &http.Client{Timeout: 10 * time.Second}
	}
	orDefault(&c.ProjectorScheme, "http")
	orDefault(&c.Source, "/gateway")
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Hooks == nil {
		c.Hooks = nopHooks{}
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	orDefault(&c.PreAuthRatePerSecond, DefaultPreAuthRatePerSecond)
	orDefault(&c.PreAuthBurst, DefaultPreAuthBurst)
	orDefault(&c.MaxStreamsPerSubject, DefaultMaxStreamsPerSubject)
	orDefault(&c.StreamQueue, DefaultStreamQueue)
	orDefault(&c.ReplayBytes, DefaultReplayBytes)
	orDefault(&c.TailIdle, DefaultTailIdle)
	return c
}

// orDefault sets *v to def when it is zero.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports every problem with c (after defaults), each with what to
// fix, in one error wrapping ErrConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var ps []string
	if len(c.Kafka.Brokers) == 0 {
		ps = append(ps, "Kafka.Brokers: required (the Kafka seed brokers, host:port)")
	}
	if err := c.Names.Validate(); err != nil {
		ps = append(ps, "Names: "+err.Error())
	}
	if len(c.JWTKey) == 0 && c.TokenFile == "" {
		ps = append(ps, "JWTKey or TokenFile: at least one is required, or no token could be accepted")
	}
	if len(c.JWTKey) > 0 && len(c.JWTKey) < 32 {
		ps = append(ps, fmt.Sprintf("JWTKey: %d bytes is too short for HS256; use at least 32 random bytes", len(c.JWTKey)))
	}
	if c.MaxBodyBytes < 1<<10 {
		ps = append(ps, fmt.Sprintf("MaxBodyBytes: %d is below 1024; an input of any size would be refused", c.MaxBodyBytes))
	}
	if c.RatePerSecond < 0 {
		ps = append(ps, "RatePerSecond: must be positive")
	}
	if c.RateBurst < 1 {
		ps = append(ps, "RateBurst: must be 1 or more")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ProduceTimeout", c.ProduceTimeout}, {"KafkaTimeout", c.KafkaTimeout}, {"BodyTimeout", c.BodyTimeout}, {"RetryAfter", c.RetryAfter}, {"Heartbeat", c.Heartbeat}, {"AssignmentTTL", c.AssignmentTTL}} {
		if d.v < 0 {
			ps = append(ps, d.name+": must not be negative")
		}
	}
	if c.IdempotencyKeys < 1 {
		ps = append(ps, "IdempotencyKeys: must be 1 or more")
	}
	if c.MaxStreams < 1 {
		ps = append(ps, "MaxStreams: must be 1 or more")
	}
	if c.ProjectorScheme != "http" && c.ProjectorScheme != "https" {
		ps = append(ps, fmt.Sprintf("ProjectorScheme: %q; want http or https", c.ProjectorScheme))
	}
	if c.PreAuthRatePerSecond < 0 {
		ps = append(ps, "PreAuthRatePerSecond: must be positive")
	}
	if c.PreAuthBurst < 1 {
		ps = append(ps, "PreAuthBurst: must be 1 or more")
	}
	if c.MaxStreamsPerSubject < 1 {
		ps = append(ps, "MaxStreamsPerSubject: must be 1 or more")
	}
	if c.StreamQueue < 1 {
		ps = append(ps, "StreamQueue: must be 1 or more")
	}
	if c.ReplayBytes < 0 {
		ps = append(ps, "ReplayBytes: must not be negative")
	}
	if c.TailIdle < 0 {
		ps = append(ps, "TailIdle: must not be negative")
	}
	if len(c.ProjectorSecret) > 0 {
		if err := cluster.CheckQuerySecret(c.ProjectorSecret); err != nil {
			ps = append(ps, "ProjectorSecret: "+err.Error())
		}
	}
	if err := c.Redaction.Validate(); err != nil {
		ps = append(ps, "Redaction (-redact-field, -redact-pattern): "+err.Error())
	}
	for _, h := range c.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "[]/ ") || strings.Contains(h, ":") && net.ParseIP(h) == nil {
			ps = append(ps, fmt.Sprintf("AllowedHosts: %q; want a host name or an IP address, without brackets or a port", h))
		}
	}
	if len(ps) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(ps, "; "))
	}
	return nil
}
