package gateway

import (
	"errors"
	"net/http"
	"strings"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// handler is one operation of the API. It either writes its answer, or
// returns an error without having written anything: a *problem.Problem
// (or an error wrapping one) is then the answer, and any other error is a
// 500 whose cause goes to the log only (writeError). A handler never
// writes a problem itself, so that every error answer takes one path.
type handler func(w http.ResponseWriter, r *http.Request, p *Principal, run string) error

// route is one path of the API; it maps each allowed method to its
// handler, so that any other method is a 405 problem.
type route map[string]handler

// table is the API: schema/openapi.yaml documents exactly these paths and
// methods (openapi_test.go checks).
func (g *Gateway) table() map[string]route {
	return map[string]route{
		"/v1/runs/{run_id}/input":           {http.MethodPost: g.input},           // input.go
		"/v1/runs/{run_id}/snapshot":        {http.MethodGet: g.read("snapshot")}, // reads.go
		"/v1/runs/{run_id}/read-model":      {http.MethodGet: g.read("read-model")},
		"/v1/runs/{run_id}/history":         {http.MethodGet: g.history},
		"/v1/runs/{run_id}/nodes":           {http.MethodGet: g.nodes},
		"/v1/runs":                          {http.MethodGet: g.runs},
		"/v1/runs/{run_id}/wakes":           {http.MethodGet: g.wakes},   // sse.go
		"/v1/sessions/{session_id}":         {http.MethodGet: g.session}, // sessions.go
		"/v1/sessions/{session_id}/history": {http.MethodGet: g.sessionHistoryPage},
	}
}

// routes builds the mux: the API's table, the live view's static page
// (ui.go) and a 404 problem for anything else.
func (g *Gateway) routes() error {
	g.mux = http.NewServeMux()
	for path, rt := range g.table() {
		g.mux.Handle(path, g.handle(rt))
	}
	if err := g.uiRoutes(); err != nil {
		return err
	}
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		g.writeError(w, r, problem.New(http.StatusNotFound, problem.NotFound, "no such endpoint; see schema/openapi.yaml"))
	})
	return nil
}

// handle adapts a route to net/http: the checks every endpoint shares,
// then the method's handler, and whatever error either returns written
// as a problem.
func (g *Gateway) handle(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.writeError(w, r, g.dispatch(rt, w, r))
	})
}

// dispatch runs the checks every endpoint shares, in an order that tells
// the client the first thing to fix: method, credentials, rate, run id.
// The client address's rate is checked before the credentials, so that a
// flood of bad tokens is refused before any is parsed (ratelimit.go).
func (g *Gateway) dispatch(rt route, w http.ResponseWriter, r *http.Request) error {
	h, ok := rt[r.Method]
	if !ok {
		for m := range rt {
			w.Header().Set("Allow", m)
		}
		return problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "%s is not allowed here; use %s", r.Method, w.Header().Get("Allow"))
	}
	if err := g.limits.checkAddress(r); err != nil {
		return err
	}
	p, prob := g.auth.authenticate(r)
	if prob != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="canopy"`)
		return prob
	}
	if err := g.limits.checkSubject(p.Subject); err != nil {
		return err
	}
	run := r.PathValue("run_id")
	if msg := idProblem(run); msg != "" && strings.Contains(r.Pattern, "{run_id}") {
		return problem.New(http.StatusBadRequest, problem.BadRequest, "run_id: %s", msg)
	}
	return h(w, r, p, run)
}

// writeError answers err, the error a handler returned (nothing when it is
// nil): as its problem, or as a 500 that names no cause, the cause going
// to the log. A handler that wrote its answer already (a wake stream past
// its headers) cannot be answered again: its error is logged. Hooks see
// the status through the statusWriter.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if err == nil {
		return
	}
	if sw, ok := w.(*statusWriter); ok && sw.code != 0 {
		g.cfg.Logger.Warn("gateway: an error after the answer began", "path", r.URL.Path, "status", sw.code, "err", err)
		return
	}
	p, ok := asProblem(err)
	if !ok {
		g.cfg.Logger.Error("gateway: serving a request", "path", r.URL.Path, "err", err)
		p = problem.New(http.StatusInternalServerError, problem.Internal, "internal error")
	}
	problem.Write(w, r, p)
}

// asProblem is errors.As for a *problem.Problem, without its allocation
// when err is one (as handlers return them).
func asProblem(err error) (*problem.Problem, bool) {
	if p, ok := err.(*problem.Problem); ok {
		return p, true
	}
	var p *problem.Problem
	ok := errors.As(err, &p)
	return p, ok
}

// idProblem checks an identifier against the contract (topics.IDProblem),
// which a path's run id, percent-decoded, may well break.
func idProblem(v string) string {
	if v == "" {
		return "required"
	}
	return topics.IDProblem(v)
}
