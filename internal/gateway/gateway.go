package gateway

// The gateway's parts, a file each: serve.go (ServeHTTP: spans, hooks,
// Host and path checks), api.go (the route table, the checks every
// endpoint shares, and writeError, the one writer of error answers),
// auth.go (bearer tokens to a Principal), authz.go (may a principal touch
// a run), ratelimit.go (the two request limits), input.go and
// idempotency.go (human input onto Kafka), owners.go and reads.go (reads
// routed to the run's projector, the run list), streams.go, tail.go and
// sse.go (wake streams), ui.go (the live view's static page), ready.go
// and adminhttp.go (the admin endpoint).

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/redact"
)

// Gateway is the conductor gateway, an http.Handler. Close it when done.
type Gateway struct {
	cfg        Config
	partitions int32
	mux        *http.ServeMux
	tracer     trace.Tracer

	// Requests: who sends them, at what rate.
	auth   *authenticator
	limits *rateLimits

	// Human input: the redaction of its text, the producer and its admin
	// client, the Idempotency-Keys remembered, the entropy of the keys the
	// gateway makes.
	redaction *redact.Policy
	cl        *kgo.Client
	adm       *kadm.Client
	idem      *idemCache
	entropyMu sync.Mutex // ulid entropy readers are not safe for concurrent use

	// Reads: the projector group's assignment.
	owners ownerCache

	// Wake streams, with their own Kafka clients.
	streams *wakeStreams

	kstats kafkaStats // the gateway's Kafka clients and connections
	ready  readyCache // the last broker check of Ready

	closeOnce sync.Once
}

// kafkaOpts are the connection options every client of the gateway shares.
func (c *Config) kafkaOpts() []kgo.Opt {
	return c.Kafka.Opts(kgo.ClientID("canopy-gateway"))
}

// New validates cfg, connects to Kafka and checks the topics (their
// partition count places a run's input), and returns the gateway.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Entropy == nil {
		cfg.Entropy = ulid.Monotonic(rand.Reader, 0)
	}
	g := &Gateway{cfg: cfg, tracer: cfg.TracerProvider.Tracer("github.com/canopy-dev/canopy/internal/gateway"),
		auth: newAuthenticator(cfg.JWTKey, cfg.Audience, cfg.Issuer, cfg.Now), idem: newIdemCache(cfg.IdempotencyKeys)}
	g.limits = newRateLimits(&g.cfg)
	g.owners.ttl = cfg.AssignmentTTL
	if cfg.TokenFile != "" {
		var err error
		if g.auth.static, err = LoadTokenFile(cfg.TokenFile); err != nil {
			return nil, err
		}
	}
	if err := g.routes(); err != nil {
		return nil, err
	}
	var err error
	if g.redaction, err = redact.New(cfg.Redaction); err != nil {
		return nil, err // Validate has reported it
	}
	if g.cl, err = newProducer(&g.cfg, &g.kstats); err != nil {
		return nil, fmt.Errorf("gateway: kafka client: %w", err)
	}
	g.adm = kadm.NewClient(g.cl)
	if g.partitions, err = cluster.CheckTopics(ctx, g.adm, cfg.Names); err != nil {
		g.cl.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.streams, err = newWakeStreams(&g.cfg, g.partitions, &g.kstats); err != nil {
		g.cl.Close()
		return nil, fmt.Errorf("gateway: kafka client of the wake streams: %w", err)
	}
	return g, nil
}

// newProducer is the client of human input. It is idempotent (franz-go's
// default) and waits for all in-sync replicas, so a 202 means the record
// survives a broker loss. The partition is chosen by the gateway with the
// contract's murmur2 so that it is the run's partition of every
// co-partitioned topic. Only the producer gets KafkaHooks: metrics hooks
// such as kprom's register once per client, and the wake streams' tail
// client (streams.go) would be a second.
func newProducer(cfg *Config, stats *kafkaStats) (*kgo.Client, error) {
	return kgo.NewClient(append(cfg.kafkaOpts(), kgo.WithHooks(cfg.KafkaHooks...),
		kgo.WithHooks(stats),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		// A record not delivered by then fails in the client too, rather
		// than being written long after its request got a 503.
		kgo.RecordDeliveryTimeout(max(cfg.ProduceTimeout, time.Second)),
	)...)
}

// Drain ends the wake streams, which otherwise last as long as their
// clients; inputs in flight go on. http.Server.Shutdown waits for open
// requests, so register Drain with RegisterOnShutdown.
func (g *Gateway) Drain() { g.streams.drain() }

// Close ends the wake streams and closes the Kafka clients. Call it after
// the HTTP server stopped; calling it again does nothing.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		g.streams.close()
		g.cl.Close()
	})
}

// Partitions is the partition count of the co-partitioned topics.
func (g *Gateway) Partitions() int32 { return g.partitions }

// newULID makes an event id from the injected clock and entropy.
func (g *Gateway) newULID() (string, error) {
	g.entropyMu.Lock()
	defer g.entropyMu.Unlock()
	id, err := ulid.New(ulid.Timestamp(g.cfg.Now()), g.cfg.Entropy)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// unavailable is a 503 problem with the configured Retry-After.
func (g *Gateway) unavailable(typ, format string, args ...any) *problem.Problem {
	p := problem.New(http.StatusServiceUnavailable, typ, format, args...)
	p.RetryAfter = g.cfg.RetryAfter
	return p
}

// kafkaStats counts a gateway's franz-go clients and open broker
// connections (tests and the benchmark read it).
type kafkaStats struct {
	clients, conns, dials atomic.Int64
}

func (s *kafkaStats) OnNewClient(*kgo.Client)    { s.clients.Add(1) }
func (s *kafkaStats) OnClientClosed(*kgo.Client) { s.clients.Add(-1) }
func (s *kafkaStats) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		s.conns.Add(1)
		s.dials.Add(1)
	}
}
func (s *kafkaStats) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { s.conns.Add(-1) }
