// Package projectorhttp is a projector process's HTTP endpoint (projector
// run -http-addr; canopy-dev serves the same), everything the process
// answers over HTTP, in one handler:
//
//	GET /internal/v1/runs/{run_id}/snapshot     the run's current agent_tree_snapshot
//	GET /internal/v1/runs/{run_id}/read-model   seed 003's read model (projection.ReadModel)
//	GET /internal/v1/runs/{run_id}/history?cursor=&limit=
//	                                            a page of the history window (projection.HistoryPage)
//	GET /internal/v1/runs/{run_id}/nodes?cursor=&limit=
//	                                            a page of every node of the run (projection.NodesPage)
//	GET /internal/v1/runs?after=&limit=         the runs of the partitions it owns (projector.RunsPage)
//	GET /internal/v1/sessions/{session_id}?after=&limit=&history_limit=&history_cursor=&run=
//	                                            what the partitions it owns hold of a session
//	                                            (projector.SessionPage); each run= names a run the
//	                                            reader may see, and then no other is read
//	GET /internal/v1/sessions/{session_id}/history?cursor=&limit=&run=
//	                                            a page of the session's history (projector.SessionHistoryPage)
//	GET /healthz                                200 while the process is alive
//	GET /readyz                                 200 when an instance runs, has restored its partitions
//	                                            and caught up (projector.Projector.Ready), and the
//	                                            process is not shutting down; else 503 saying why
//	GET /metrics                                the process's Prometheus metrics
//
// The gateway calls the /internal/v1/ reads on the instance that owns a run
// (cluster.Assignment). They answer with run data, so the endpoint is closed
// by default: either its callers present a shared secret (Config.Secret),
// or it listens on loopback only (Endpoint.Validate). The probes and
// /metrics, which carry no run's data, stay open.
//
// Errors are application/problem+json (internal/problem): 401 Unauthorized
// without the secret, 404 UnknownRun, 410 RunExpired, 421 NotOwner (ask the
// group's assignment again), 503 Restoring with Retry-After, 400 BadRequest
// for a bad cursor or limit, 503 Unavailable (with Retry-After) when no
// instance is running.
package projectorhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/canopy-dev/canopy/internal/lifecycle"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// Reader is what the endpoint reads runs and readiness from: a process's
// projector.Supervisor, which answers for whichever instance runs now (503
// Unavailable while none does), or one projector.Projector.
type Reader interface {
	Ready() (ok bool, why string)
	Snapshot(ctx context.Context, run string) (*topics.AgentTreeSnapshot, error)
	ReadModel(ctx context.Context, run string) (*projection.ReadModel, error)
	History(ctx context.Context, run, cursor string, limit int) (*projection.HistoryPage, error)
	Nodes(ctx context.Context, run, cursor string, limit int) (*projection.NodesPage, error)
	Runs(ctx context.Context, after string, limit int) (*projector.RunsPage, error)
	Session(ctx context.Context, q projection.SessionQuery) (*projector.SessionPage, error)
	SessionHistory(ctx context.Context, q projection.SessionQuery) (*projector.SessionHistoryPage, error)
}

var (
	_ Reader = (*projector.Supervisor)(nil)
	_ Reader = (*projector.Projector)(nil)
)

// Config configures a Handler. Zero fields take the default their comment
// names.
type Config struct {
	// Source is what the reads and /readyz answer from. Required.
	Source Reader
	// Secret, when set, is what every request but the probes and /metrics
	// must carry as "Authorization: Bearer <Secret>"; without it, or with
	// another, the answer is 401, the same for both (cluster.ReadQuerySecret
	// reads one). Default none: the endpoint answers anyone, so it must
	// listen on loopback only (Endpoint.Validate).
	Secret []byte
	// Metrics, when set, serves GET /metrics: the process's registry
	// (telemetry.Handler). Default none: /metrics is 404.
	Metrics http.Handler
	// Profiling, when set, serves Go's profiles under /debug/pprof/
	// (net/http/pprof: heap, goroutines, a CPU profile or an execution
	// trace on demand), behind Secret like the reads: what performance
	// work needs from a running instance under its real load. Default off.
	Profiling bool
	// Serving, when set, says whether the process is up and not shutting
	// down (lifecycle.Readiness.Ready): once it says false, /readyz answers
	// 503 whatever Source says. Default always up.
	Serving func() bool
	// Timeout bounds how long a read may wait for the partition's owner
	// (which answers between batches); default 10s.
	Timeout time.Duration
}

// Handler is a projector process's HTTP endpoint (see the package doc), an
// http.Handler.
type Handler struct {
	cfg Config
	mux *http.ServeMux
}

// retryRestoring is the Retry-After of a partition being restored or of
// an instance being replaced: restores and restarts take seconds.
const retryRestoring = 2 * time.Second

// New returns the endpoint of cfg.
func New(cfg Config) *Handler {
	if cfg.Serving == nil {
		cfg.Serving = func() bool { return true }
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /internal/v1/runs/{run_id}/snapshot", h.snapshot)
	h.mux.HandleFunc("GET /internal/v1/runs/{run_id}/read-model", h.readModel)
	h.mux.HandleFunc("GET /internal/v1/runs/{run_id}/history", h.history)
	h.mux.HandleFunc("GET /internal/v1/runs/{run_id}/nodes", h.nodes)
	h.mux.HandleFunc("GET /internal/v1/runs", h.runs)
	h.mux.HandleFunc("GET /internal/v1/sessions/{session_id}", h.session)
	h.mux.HandleFunc("GET /internal/v1/sessions/{session_id}/history", h.sessionHistory)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	h.mux.HandleFunc("GET /readyz", h.readyz)
	if cfg.Metrics != nil {
		h.mux.Handle("GET /metrics", cfg.Metrics)
	}
	if cfg.Profiling {
		h.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		h.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		h.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		h.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		h.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, r, problem.New(http.StatusNotFound, problem.NotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return h
}

// Actor serves h on ln, which the caller opened before the process's
// lifecycle.Group starts, as the group's "query endpoint": stopped, it lets
// the requests in flight finish, for up to 5s. The http.Server's own
// complaints (malformed requests, TLS handshakes) go to log as warnings.
func (h *Handler) Actor(ln net.Listener, log *slog.Logger) lifecycle.Actor {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	return lifecycle.HTTPServer("query endpoint", srv, ln, 5*time.Second)
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(h.cfg.Secret) > 0 && !h.open(r.URL.Path) && !h.authorized(r) {
		refuse(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// readyz is GET /readyz: the process's readiness first (a process shutting
// down is not ready, whatever its instance says), then the projector's.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ok, why := false, "not ready: shutting down"
	if h.cfg.Serving() {
		ok, why = h.cfg.Source.Ready()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(why + "\n"))
}

// snapshot is GET /internal/v1/runs/{run_id}/snapshot.
func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	snap, err := h.cfg.Source.Snapshot(ctx, r.PathValue("run_id"))
	reply(w, r, snap, err)
}

// readModel is GET /internal/v1/runs/{run_id}/read-model.
func (h *Handler) readModel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	m, err := h.cfg.Source.ReadModel(ctx, r.PathValue("run_id"))
	reply(w, r, m, err)
}

// history is GET /internal/v1/runs/{run_id}/history?cursor=&limit=.
func (h *Handler) history(w http.ResponseWriter, r *http.Request) {
	// The instance's own window bounds it further (Projector.History).
	limit, ok := queryLimit(w, r, projection.MaxHistorySize,
		fmt.Sprintf("a whole number from 1 to the history window, -history-size (default %d)", projection.DefaultHistoryLimit))
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	pg, err := h.cfg.Source.History(ctx, r.PathValue("run_id"), r.URL.Query().Get("cursor"), limit)
	reply(w, r, pg, err)
}

// nodes is GET /internal/v1/runs/{run_id}/nodes?cursor=&limit=.
func (h *Handler) nodes(w http.ResponseWriter, r *http.Request) {
	limit, ok := queryLimit(w, r, projection.MaxNodesLimit, fmt.Sprintf("a whole number from 1 to %d", projection.MaxNodesLimit))
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	pg, err := h.cfg.Source.Nodes(ctx, r.PathValue("run_id"), r.URL.Query().Get("cursor"), limit)
	reply(w, r, pg, err)
}

// runs is GET /internal/v1/runs?after=&limit=.
func (h *Handler) runs(w http.ResponseWriter, r *http.Request) {
	limit, ok := queryLimit(w, r, projection.MaxRunsLimit, fmt.Sprintf("a whole number from 1 to %d", projection.MaxRunsLimit))
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	pg, err := h.cfg.Source.Runs(ctx, r.URL.Query().Get("after"), limit)
	reply(w, r, pg, err)
}

// session is GET /internal/v1/sessions/{session_id}.
func (h *Handler) session(w http.ResponseWriter, r *http.Request) {
	q := sessionQuery(r)
	var ok bool
	if q.Limit, ok = queryLimit(w, r, projection.MaxSessionRunsLimit, fmt.Sprintf("a whole number from 1 to %d", projection.MaxSessionRunsLimit)); !ok {
		return
	}
	q.HistoryLimit = projection.DefaultHistoryLimit
	if v := r.URL.Query().Get("history_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > projection.MaxHistoryLimit {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "history_limit %q: want a whole number from 0 to %d", v, projection.MaxHistoryLimit))
			return
		}
		q.HistoryLimit = n
	}
	q.After, q.HistoryCursor = r.URL.Query().Get("after"), r.URL.Query().Get("history_cursor")
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	pg, err := h.cfg.Source.Session(ctx, q)
	reply(w, r, pg, err)
}

// sessionHistory is GET /internal/v1/sessions/{session_id}/history.
func (h *Handler) sessionHistory(w http.ResponseWriter, r *http.Request) {
	q := sessionQuery(r)
	var ok bool
	if q.HistoryLimit, ok = queryLimit(w, r, projection.MaxHistoryLimit, fmt.Sprintf("a whole number from 1 to %d", projection.MaxHistoryLimit)); !ok {
		return
	}
	q.HistoryCursor = r.URL.Query().Get("cursor")
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	pg, err := h.cfg.Source.SessionHistory(ctx, q)
	reply(w, r, pg, err)
}

// sessionQuery is the session and the runs (run=) a session read names.
func sessionQuery(r *http.Request) projection.SessionQuery {
	q := projection.SessionQuery{SessionID: r.PathValue("session_id")}
	if runs, named := r.URL.Query()["run"]; named {
		q.Only = runs
	}
	return q
}

// queryLimit reads the limit parameter of a paged read: 0 (the read's
// default) when there is none, else a number from 1 to max; anything else is
// answered 400 saying want, and ok is false.
func queryLimit(w http.ResponseWriter, r *http.Request, max int, want string) (limit int, ok bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "limit %q: want %s", v, want))
		return 0, false
	}
	return n, true
}

// reply writes v as JSON, or err as the problem it is.
func reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		problem.Write(w, r, readProblem(err))
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		problem.Write(w, r, problem.New(http.StatusInternalServerError, problem.Internal, "encoding the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// readProblem maps a read's error to its problem.
func readProblem(err error) *problem.Problem {
	var pr *problem.Problem
	switch {
	case errors.Is(err, projection.ErrUnknownRun):
		pr = problem.New(http.StatusNotFound, problem.UnknownRun, "%v", err)
	case errors.Is(err, projection.ErrRunExpired):
		pr = problem.New(http.StatusGone, problem.RunExpired, "%v", err)
	case errors.Is(err, projector.ErrNotOwner):
		pr = problem.New(http.StatusMisdirectedRequest, problem.NotOwner, "%v: ask the group's assignment for the owner", err)
	case errors.Is(err, projector.ErrSessionUncertain):
		pr = problem.New(http.StatusServiceUnavailable, problem.Unavailable, "%v: retry shortly", err)
		pr.RetryAfter = retryRestoring
	case errors.Is(err, projector.ErrRestoring):
		pr = problem.New(http.StatusServiceUnavailable, problem.Restoring, "%v: retry shortly", err)
		pr.RetryAfter = retryRestoring
	case errors.Is(err, projection.ErrBadCursor), errors.Is(err, projection.ErrBadLimit):
		pr = problem.New(http.StatusBadRequest, problem.BadRequest, "%v", err)
	case errors.Is(err, projector.ErrNoInstance), errors.Is(err, projector.ErrStopped), errors.Is(err, projection.ErrStore):
		// No instance runs, or it is going down: the Supervisor starts
		// another one.
		pr = problem.New(http.StatusServiceUnavailable, problem.Unavailable, "%v", err)
		pr.RetryAfter = retryRestoring
	case errors.Is(err, context.DeadlineExceeded):
		pr = problem.New(http.StatusServiceUnavailable, problem.Unavailable, "the partition's owner did not answer in time: %v", err)
		pr.RetryAfter = retryRestoring
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads this.
		pr = problem.New(http.StatusServiceUnavailable, problem.Unavailable, "%v", err)
	default:
		pr = problem.New(http.StatusInternalServerError, problem.Internal, "%v", err)
	}
	return pr
}
