package projectorhttp

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
)

// The endpoint answers with run data, so it is closed by default: either
// its callers present a shared secret, or it listens on loopback only,
// where no other machine can reach it.
//
// The secret is a file's content, the same file for every projector and
// every gateway (projector run -query-secret-file, conductor-gateway
// -projector-secret-file), sent as "Authorization: Bearer <secret>".

// The default listen addresses of the endpoint (projector run -http-addr):
// every interface when callers must present a secret, loopback only when
// they need not.
const (
	DefaultAddr         = ":8081"
	DefaultLoopbackAddr = "127.0.0.1:8081"
)

// DefaultAddrFor is the endpoint's default listen address: DefaultAddr
// with a secret, DefaultLoopbackAddr without.
func DefaultAddrFor(secret []byte) string {
	if len(secret) > 0 {
		return DefaultAddr
	}
	return DefaultLoopbackAddr
}

// ErrConfig is wrapped by Endpoint.Validate's error.
var ErrConfig = errors.New("projectorhttp: invalid endpoint")

// Endpoint is where a projector process serves its Handler, and the secret
// its callers must present there.
type Endpoint struct {
	// Addr is the listen address, host:port; empty: no endpoint.
	Addr string
	// Secret, when set, is what every request but the probes and /metrics
	// must carry as "Authorization: Bearer <Secret>" (Config.Secret).
	Secret []byte
	// Profiling serves /debug/pprof/ there (Config.Profiling).
	Profiling bool
}

// Validate refuses an endpoint that would answer for runs to the network
// unauthenticated: an Addr beyond loopback without a Secret. (A warning
// would not do: it scrolls past in a log, while the endpoint hands every
// run's snapshot, read model and history to whoever reaches the port.)
func (e Endpoint) Validate() error {
	if e.Addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return fmt.Errorf("%w: -http-addr %q: want host:port, e.g. %s", ErrConfig, e.Addr, DefaultLoopbackAddr)
	}
	if len(e.Secret) > 0 {
		if err := cluster.CheckQuerySecret(e.Secret); err != nil {
			return fmt.Errorf("%w: the query secret: %w", ErrConfig, err)
		}
		return nil
	}
	if isLoopback(host) {
		return nil
	}
	where := "every interface"
	if host != "" {
		where = host + ", beyond loopback"
	}
	return fmt.Errorf("%w: -http-addr %q listens on %s, and without a secret anyone who reaches it could read every run: "+
		"set -query-secret-file (or CANOPY_QUERY_SECRET_FILE) to a file holding a shared secret of at least %d bytes, and give the "+
		"gateway the same file with -projector-secret-file (CANOPY_PROJECTOR_SECRET_FILE); or listen on loopback only, e.g. -http-addr %s",
		ErrConfig, e.Addr, where, cluster.MinQuerySecretLen, DefaultLoopbackAddr)
}

// isLoopback reports whether a listen address's host is loopback only:
// localhost or a loopback IP. A name that is not localhost counts as
// reachable from elsewhere, whatever it resolves to now.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// open reports whether a path is served without the secret: the probes and
// /metrics, which say nothing about any run.
func (h *Handler) open(path string) bool {
	return path == "/healthz" || path == "/readyz" || (path == "/metrics" && h.cfg.Metrics != nil)
}

// authorized reports whether r carries the secret as its bearer token. The
// comparison takes the same time whatever the token (the digests are
// compared, so not even the secret's length shows).
func (h *Handler) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	bearer := ok && strings.EqualFold(scheme, "Bearer")
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	want := sha256.Sum256(h.cfg.Secret)
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1 && bearer
}

// refuse answers a request without the secret, or with a wrong one, alike:
// 401, without saying which.
func refuse(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="canopy-projector"`)
	problem.Write(w, r, problem.New(http.StatusUnauthorized, problem.Unauthorized,
		"this endpoint answers only callers that present the projectors' shared secret as a bearer token"))
}
