package projector

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/projection"
)

// QueryServer is a projector process's internal HTTP query endpoint, which
// the gateway calls on the instance that owns a run (see Assignment):
//
//	GET /internal/v1/runs/{run_id}/snapshot     the run's current agent_tree_snapshot
//	GET /internal/v1/runs/{run_id}/read-model   seed 003's read model (projection.ReadModel)
//	GET /internal/v1/runs/{run_id}/history?cursor=&limit=
//	                                            a page of the history window (projection.HistoryPage)
//	GET /internal/v1/runs/{run_id}/nodes?cursor=&limit=
//	                                            a page of every node of the run (projection.NodesPage)
//	GET /internal/v1/runs?after=&limit=         the runs of the partitions it owns (RunsPage)
//	GET /healthz                                200 while the process is alive
//	GET /readyz                                 200 when an instance runs, has restored its
//	                                            partitions and caught up (Projector.Ready), else 503
//
// With Secret set, every request but /healthz and /readyz must carry it as
// "Authorization: Bearer <Secret>"; without it, or with another, the answer
// is 401 Unauthorized, the same for both. Without a Secret the endpoint
// answers anyone, so it must listen on loopback only (QueryEndpoint.Validate).
//
// Errors are application/problem+json (internal/problem): 404 UnknownRun,
// 421 NotOwner (ask the group's assignment again), 503 Restoring with
// Retry-After, 400 BadRequest for a bad cursor or limit, 503 Unavailable
// (with Retry-After) when no instance is running.
//
// Serve replaces a failed instance with a new one, so the server does not
// hold an instance: Set, from Serve's started callback, points it at the
// current one.
type QueryServer struct {
	cur atomic.Pointer[Projector]
	mux *http.ServeMux
	// Timeout bounds how long a query may wait for the partition's owner
	// (which answers between batches); default 10s.
	Timeout time.Duration
	// Secret, when set, is the shared secret callers must present (see
	// above; ReadQuerySecret reads one). Set it before serving.
	Secret []byte
}

// retryRestoring is the Retry-After of a partition being restored or of
// an instance being replaced: restores and restarts take seconds.
const retryRestoring = 2 * time.Second

// NewQueryServer returns a query server with no instance yet: it answers
// 503 until Set is called.
func NewQueryServer() *QueryServer {
	s := &QueryServer{mux: http.NewServeMux(), Timeout: 10 * time.Second}
	s.mux.HandleFunc("GET /internal/v1/runs/{run_id}/snapshot", s.snapshot)
	s.mux.HandleFunc("GET /internal/v1/runs/{run_id}/read-model", s.readModel)
	s.mux.HandleFunc("GET /internal/v1/runs/{run_id}/history", s.history)
	s.mux.HandleFunc("GET /internal/v1/runs/{run_id}/nodes", s.nodes) // nodes.go
	s.mux.HandleFunc("GET /internal/v1/runs", s.runs)                 // nodes.go
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, r, problem.New(http.StatusNotFound, problem.NotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s
}

// Set makes p the instance queries go to (nil: none). Pass it as Serve's
// started callback.
func (s *QueryServer) Set(p *Projector) { s.cur.Store(p) }

// ServeHTTP implements http.Handler.
func (s *QueryServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(s.Secret) > 0 && !openPath(r.URL.Path) && !s.authorized(r) {
		refuse(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *QueryServer) readyz(w http.ResponseWriter, r *http.Request) {
	ok, why := false, "no projector instance is running"
	if p := s.cur.Load(); p != nil {
		ok, why = p.Ready()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(why + "\n"))
}

// instance returns the current instance and a context bounded by Timeout,
// or writes 503 when none runs.
func (s *QueryServer) instance(w http.ResponseWriter, r *http.Request) (*Projector, context.Context, context.CancelFunc, bool) {
	p := s.cur.Load()
	if p == nil {
		pr := problem.New(http.StatusServiceUnavailable, problem.Unavailable, "no projector instance is running in this process")
		pr.RetryAfter = retryRestoring
		problem.Write(w, r, pr)
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.Timeout)
	return p, ctx, cancel, true
}

func (s *QueryServer) snapshot(w http.ResponseWriter, r *http.Request) {
	p, ctx, cancel, ok := s.instance(w, r)
	if !ok {
		return
	}
	defer cancel()
	snap, err := p.Snapshot(ctx, r.PathValue("run_id"))
	s.reply(w, r, snap, err)
}

func (s *QueryServer) readModel(w http.ResponseWriter, r *http.Request) {
	p, ctx, cancel, ok := s.instance(w, r)
	if !ok {
		return
	}
	defer cancel()
	m, err := p.ReadModel(ctx, r.PathValue("run_id"))
	s.reply(w, r, m, err)
}

func (s *QueryServer) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		// The instance's own window bounds it further (Projector.History).
		if err != nil || n < 1 || n > projection.MaxHistorySize {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest,
				"limit %q: want a whole number from 1 to the history window, -history-size (default %d)", v, projection.DefaultHistoryLimit))
			return
		}
		limit = n
	}
	p, ctx, cancel, ok := s.instance(w, r)
	if !ok {
		return
	}
	defer cancel()
	pg, err := p.History(ctx, r.PathValue("run_id"), q.Get("cursor"), limit)
	s.reply(w, r, pg, err)
}

// reply writes v as JSON, or err as the problem it is.
func (s *QueryServer) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		problem.Write(w, r, queryProblem(err))
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

// queryProblem maps a query error to its problem.
func queryProblem(err error) *problem.Problem {
	var pr *problem.Problem
	switch {
	case errors.Is(err, projection.ErrUnknownRun):
		pr = problem.New(http.StatusNotFound, problem.UnknownRun, "%v", err)
	case errors.Is(err, projection.ErrRunExpired):
		pr = problem.New(http.StatusGone, problem.RunExpired, "%v", err)
	case errors.Is(err, ErrNotOwner):
		pr = problem.New(http.StatusMisdirectedRequest, problem.NotOwner, "%v: ask the group's assignment for the owner", err)
	case errors.Is(err, ErrSessionUncertain):
		pr = problem.New(http.StatusServiceUnavailable, problem.Unavailable, "%v: retry shortly", err)
		pr.RetryAfter = retryRestoring
	case errors.Is(err, ErrRestoring):
		pr = problem.New(http.StatusServiceUnavailable, problem.Restoring, "%v: retry shortly", err)
		pr.RetryAfter = retryRestoring
	case errors.Is(err, projection.ErrBadCursor), errors.Is(err, projection.ErrBadLimit):
		pr = problem.New(http.StatusBadRequest, problem.BadRequest, "%v", err)
	case errors.Is(err, ErrStopped), errors.Is(err, projection.ErrStore):
		// The instance is going down; Serve starts another one.
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
