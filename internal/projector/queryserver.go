package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// QueryServer is a projector process's internal HTTP query endpoint, which
// the gateway calls on the instance that owns a run (see cluster.Assignment):
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
// It reads through a Reader: a process's Supervisor, which answers for
// whichever instance runs now (503 Unavailable while none does), or one
// Projector.
type QueryServer struct {
	src Reader
	mux *http.ServeMux
	// Timeout bounds how long a query may wait for the partition's owner
	// (which answers between batches); default 10s.
	Timeout time.Duration
	// Secret, when set, is the shared secret callers must present (see
	// above; cluster.ReadQuerySecret reads one). Set it before serving.
	Secret []byte
}

// retryRestoring is the Retry-After of a partition being restored or of
// an instance being replaced: restores and restarts take seconds.
const retryRestoring = 2 * time.Second

// Reader is what the query endpoint reads runs from: a Supervisor, or one
// Projector.
type Reader interface {
	Ready() (ok bool, why string)
	Snapshot(ctx context.Context, run string) (*topics.AgentTreeSnapshot, error)
	ReadModel(ctx context.Context, run string) (*projection.ReadModel, error)
	History(ctx context.Context, run, cursor string, limit int) (*projection.HistoryPage, error)
	Nodes(ctx context.Context, run, cursor string, limit int) (*projection.NodesPage, error)
	Runs(ctx context.Context, after string, limit int) (*RunsPage, error)
}

var (
	_ Reader = (*Supervisor)(nil)
	_ Reader = (*Projector)(nil)
)

// NewQueryServer returns the query server of src.
func NewQueryServer(src Reader) *QueryServer {
	s := &QueryServer{src: src, mux: http.NewServeMux(), Timeout: 10 * time.Second}
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

// ServeHTTP implements http.Handler.
func (s *QueryServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(s.Secret) > 0 && !openPath(r.URL.Path) && !s.authorized(r) {
		refuse(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
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

func (s *QueryServer) readyz(w http.ResponseWriter, r *http.Request) {
	ok, why := s.src.Ready()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(why + "\n"))
}

func (s *QueryServer) snapshot(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.Timeout)
	defer cancel()
	snap, err := s.src.Snapshot(ctx, r.PathValue("run_id"))
	s.reply(w, r, snap, err)
}

func (s *QueryServer) readModel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.Timeout)
	defer cancel()
	m, err := s.src.ReadModel(ctx, r.PathValue("run_id"))
	s.reply(w, r, m, err)
}

func (s *QueryServer) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	// The instance's own window bounds it further (Projector.History).
	limit, ok := queryLimit(w, r, projection.MaxHistorySize,
		fmt.Sprintf("a whole number from 1 to the history window, -history-size (default %d)", projection.DefaultHistoryLimit))
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.Timeout)
	defer cancel()
	pg, err := s.src.History(ctx, r.PathValue("run_id"), q.Get("cursor"), limit)
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
	case errors.Is(err, ErrNoInstance), errors.Is(err, ErrStopped), errors.Is(err, projection.ErrStore):
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
