package gateway

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Gateway is the conductor gateway, an http.Handler. Close it when done.
type Gateway struct {
	cfg        Config
	cl         *kgo.Client
	adm        *kadm.Client
	partitions int32
	auth       *authenticator
	limit      *limiter // per token subject
	preAuth    *limiter // per client address, before the token is read
	idem       *idemCache
	hub        *hub       // the wake streams' tails and caps (tail.go)
	kstats     kafkaStats // the gateway's Kafka clients and connections
	mux        *http.ServeMux
	owners     ownerCache
	ready      readyCache // the last broker check of Ready
	tracer     trace.Tracer

	entropyMu sync.Mutex // ulid entropy readers are not safe for concurrent use

	ctx    context.Context // cancelled by Close: ends the wake streams
	cancel context.CancelFunc
	wg     sync.WaitGroup

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
	g := &Gateway{cfg: cfg, tracer: cfg.TracerProvider.Tracer("github.com/canopy-dev/canopy/internal/gateway"), limit: newLimiter(cfg.RatePerSecond, cfg.RateBurst, cfg.Now), preAuth: newLimiter(cfg.PreAuthRatePerSecond, cfg.PreAuthBurst, cfg.Now),
		idem: newIdemCache(cfg.IdempotencyKeys)}
	if g.cfg.Entropy == nil {
		g.cfg.Entropy = ulid.Monotonic(rand.Reader, 0)
	}
	g.auth = newAuthenticator(cfg.JWTKey, cfg.Audience, cfg.Issuer, cfg.Now)
	if cfg.TokenFile != "" {
		var err error
		if g.auth.static, err = LoadTokenFile(cfg.TokenFile); err != nil {
			return nil, err
		}
	}
	var err error
	// The producer is idempotent (franz-go's default) and waits for all
	// in-sync replicas, so a 202 means the record survives a broker loss.
	// The partition is chosen here with the contract's murmur2 so that it is
	// the run's partition of every co-partitioned topic.
	// Only the producer gets KafkaHooks: metrics hooks such as kprom's
	// register once per client, and the wake streams' tail client
	// (tail.go) would be a second.
	g.cl, err = kgo.NewClient(append(cfg.kafkaOpts(), kgo.WithHooks(cfg.KafkaHooks...),
		kgo.WithHooks(&g.kstats),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		// A record not delivered by then fails in the client too, rather
		// than being written long after its request got a 503.
		kgo.RecordDeliveryTimeout(max(cfg.ProduceTimeout, time.Second)),
	)...)
	if err != nil {
		return nil, fmt.Errorf("gateway: kafka client: %w", err)
	}
	g.adm = kadm.NewClient(g.cl)
	g.partitions, err = cluster.CheckTopics(ctx, g.adm, cfg.Names)
	if err != nil {
		g.cl.Close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.hub, err = newHub(&g.cfg, &g.kstats); err != nil {
		g.cl.Close()
		return nil, fmt.Errorf("gateway: kafka client of the wake streams: %w", err)
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.owners.ttl = cfg.AssignmentTTL
	g.routes()
	return g, nil
}

// Drain ends the wake streams, which otherwise last as long as their
// clients; inputs in flight go on. http.Server.Shutdown waits for open
// requests, so register Drain with RegisterOnShutdown.
func (g *Gateway) Drain() { g.cancel() }

// Close ends the wake streams and closes the Kafka client. Call it after the
// HTTP server stopped; calling it again does nothing.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		g.cancel()
		g.wg.Wait()
		g.hub.close()
		g.cl.Close()
	})
}

// Partitions is the partition count of the co-partitioned topics.
func (g *Gateway) Partitions() int32 { return g.partitions }

// route is one path of the API; methods maps each allowed method to its
// handler, so that any other method is a 405 problem.
type route map[string]func(http.ResponseWriter, *http.Request, *Principal, string)

// table is the API: schema/openapi.yaml documents exactly these paths and
// methods (openapi_test.go checks).
func (g *Gateway) table() map[string]route {
	return map[string]route{
		"/v1/runs/{run_id}/input":      {http.MethodPost: g.input},
		"/v1/runs/{run_id}/snapshot":   {http.MethodGet: g.read("snapshot")},
		"/v1/runs/{run_id}/read-model": {http.MethodGet: g.read("read-model")},
		"/v1/runs/{run_id}/history":    {http.MethodGet: g.history},
		"/v1/runs/{run_id}/wakes":      {http.MethodGet: g.wakes},
		"/v1/runs/{run_id}/nodes":      {http.MethodGet: g.nodes}, // ui.go
		"/v1/runs":                     {http.MethodGet: g.runs},  // ui.go
	}
}

func (g *Gateway) routes() {
	g.mux = http.NewServeMux()
	for path, rt := range g.table() {
		g.mux.Handle(path, g.handle(rt))
	}
	g.uiRoutes() // ui.go: the live view's static page, public and data-free
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, r, problem.New(http.StatusNotFound, problem.NotFound, "no such endpoint; see schema/openapi.yaml"))
	})
}

// ServeHTTP serves the API. A panic in a handler becomes a 500 problem and a
// log line rather than a dropped connection.
func (g *Gateway) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	began := time.Now()
	method := methodName(r.Method)
	attrs := []attribute.KeyValue{attribute.String("http.request.method", method), attribute.String("url.path", r.URL.Path)}
	spanMethod := method
	if method == methodOther {
		// OpenTelemetry's HTTP conventions: the span is named "HTTP" and
		// the method the client sent is kept as an attribute only.
		spanMethod = "HTTP"
		attrs = append(attrs, attribute.String("http.request.method_original", r.Method))
	}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := g.tracer.Start(ctx, spanMethod, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	r = r.WithContext(ctx)
	w := &statusWriter{ResponseWriter: rw}
	defer func() {
		// r.Pattern is set by the mux once it matched a route.
		span.SetName(strings.TrimSpace(spanMethod + " " + r.Pattern))
		span.SetAttributes(attribute.String("http.route", r.Pattern), attribute.Int("http.response.status_code", w.status()))
		if w.status() >= 500 {
			span.SetStatus(codes.Error, http.StatusText(w.status()))
		}
		span.End()
		g.cfg.Hooks.Request(r.Pattern, method, w.status(), time.Since(began))
	}()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.cfg.Logger.Error("gateway: panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			problem.Write(w, r, problem.New(http.StatusInternalServerError, problem.Internal, "internal error"))
		}
	}()
	if !g.hostAllowed(r.Host) {
		problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest,
			"this gateway does not serve the host name the request names; use one of its allowed hosts"))
		return
	}
	if msg := pathProblem(r); msg != "" {
		// ServeMux would answer a redirect (307) to the cleaned path, or a
		// text/plain 404: a client of this API gets a problem instead.
		problem.Write(w, r, problem.New(http.StatusNotFound, problem.NotFound, "%s", msg))
		return
	}
	g.mux.ServeHTTP(w, r)
}

// hostAllowed reports whether host (a Host header) names one of
// AllowedHosts, or AllowedHosts is empty.
func (g *Gateway) hostAllowed(host string) bool {
	if len(g.cfg.AllowedHosts) == 0 {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	for _, a := range g.cfg.AllowedHosts {
		if strings.EqualFold(host, a) {
			return true
		}
	}
	return false
}

// LoopbackHosts are the names of this machine's loopback interface: the
// AllowedHosts of a gateway that serves on loopback only.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// pathProblem says why r's path is not one the API serves as sent, or "".
// The path is taken escaped, as ServeMux matches it: a run id holding "/"
// or ".." is served when it is path-escaped.
func pathProblem(r *http.Request) string {
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		return "the request target must be a path; see schema/openapi.yaml"
	}
	// As ServeMux cleans: path.Clean, keeping a trailing slash.
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if clean != p {
		return "the path has an empty, \".\" or \"..\" segment; path-escape the run id"
	}
	return ""
}

// methodOther stands for every HTTP method outside the fixed set methodName
// knows, as in OpenTelemetry's HTTP conventions.
const methodOther = "_OTHER"

// methodName is the method as metrics and spans report it: one of a fixed
// set, else methodOther. net/http accepts any token as a method, so a
// client could otherwise make a new metric series (and span name) per
// request.
func methodName(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodPatch:
		return m
	}
	return methodOther
}

// statusWriter remembers the status a handler wrote, for Hooks.Request;
// Flush and Unwrap keep wake streams and http.ResponseController working.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.code == 0 {
			w.code = http.StatusOK
		}
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// handle runs the checks every endpoint shares, in an order that tells the
// client the first thing to fix: method, credentials, rate, run id. The
// client address's rate is checked before the credentials, so that a flood
// of bad tokens is refused before any is parsed.
func (g *Gateway) handle(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := rt[r.Method]
		if !ok {
			for m := range rt {
				w.Header().Set("Allow", m)
			}
			problem.Write(w, r, problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "%s is not allowed here; use %s", r.Method, w.Header().Get("Allow")))
			return
		}
		if ok, wait := g.preAuth.allow(clientKey(r, g.cfg.TrustForwardedFor)); !ok {
			prob := problem.New(http.StatusTooManyRequests, problem.RateLimited,
				"this client address is over %g requests/s (burst %d); retry after the Retry-After seconds", g.cfg.PreAuthRatePerSecond, g.cfg.PreAuthBurst)
			prob.RetryAfter = wait
			problem.Write(w, r, prob)
			return
		}
		p, prob := g.auth.authenticate(r)
		if prob != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="canopy"`)
			problem.Write(w, r, prob)
			return
		}
		if ok, wait := g.limit.allow(p.Subject); !ok {
			prob := problem.New(http.StatusTooManyRequests, problem.RateLimited,
				"token subject %q is over %g requests/s (burst %d); retry after the Retry-After seconds", p.Subject, g.cfg.RatePerSecond, g.cfg.RateBurst)
			prob.RetryAfter = wait
			problem.Write(w, r, prob)
			return
		}
		run := r.PathValue("run_id")
		if msg := idProblem(run); msg != "" && strings.Contains(r.Pattern, "{run_id}") {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "run_id: %s", msg))
			return
		}
		h(w, r, p, run)
	})
}

// idProblem checks an identifier against the contract (topics.IDProblem),
// which a path's run id, percent-decoded, may well break.
func idProblem(v string) string {
	if v == "" {
		return "required"
	}
	return topics.IDProblem(v)
}

// authorize checks that p may touch run: the token names the run, or one of
// its sessions is the run's session (as the run's owner projector knows it).
func (g *Gateway) authorize(ctx context.Context, p *Principal, run string) *problem.Problem {
	_, prob := g.authorizeSession(ctx, p, run)
	return prob
}

// authorizeSession is authorize that also returns the run's session when
// the token covers the run only through it ("" when it names the run).
func (g *Gateway) authorizeSession(ctx context.Context, p *Principal, run string) (string, *problem.Problem) {
	if p.CoversRun(run) {
		return "", nil
	}
	// One answer whether the run is unknown, expired, or in a session the
	// token does not name: whether a run exists is for those it is for.
	notCovered := problem.New(http.StatusForbidden, problem.Forbidden, "the token of %q does not cover run %q", p.Subject, run)
	if len(p.Sessions) == 0 {
		return "", notCovered
	}
	session, prob := g.runSession(ctx, run)
	if prob != nil {
		if prob.Type == problem.UnknownRun || prob.Type == problem.RunExpired {
			return "", notCovered
		}
		return "", prob
	}
	if !p.CoversSession(session) {
		return "", notCovered
	}
	return session, nil
}

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
