package gateway

import (
	"embed"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/projection"
)

// The live view (issue 24): a static page under /ui/ that shows one run
// live. The page and its assets are public and carry no data; every data
// call the page makes (read model, nodes, history, wakes, input) goes to
// the API with the bearer token the user gives it, which the page keeps in
// the browser (a #token= fragment, never a query string, so it does not
// land in access logs).

//go:embed ui
var uiFiles embed.FS

// UIPath is where the gateway serves the live view; open
// UIPath#token=<token>&run=<run id> to watch a run.
const UIPath = "/ui/"

// uiCSP keeps the page to its own origin: no inline script, no CDN, no
// framing.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiRoutes registers the live view's static page.
func (g *Gateway) uiRoutes() {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(UIPath, http.FileServerFS(sub))
	g.mux.Handle("GET "+UIPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	g.mux.Handle("GET /ui", http.RedirectHandler(UIPath, http.StatusMovedPermanently))
}

// nodes is GET /v1/runs/{run_id}/nodes?cursor=&limit=: every node of the
// run, a page at a time, from its owning projector (projection.NodesPage).
func (g *Gateway) nodes(w http.ResponseWriter, r *http.Request, p *Principal, run string) {
	q := r.URL.Query()
	out := url.Values{}
	if c := q.Get("cursor"); c != "" {
		if len(c) > 1024 || idProblem(c) != "" {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "cursor: pass back a next_cursor as received"))
			return
		}
		out.Set("cursor", c)
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > projection.MaxNodesLimit {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "limit: want an integer from 1 to %d, got %q", projection.MaxNodesLimit, l))
			return
		}
		out.Set("limit", strconv.Itoa(n))
	}
	if prob := g.authorize(r.Context(), p, run); prob != nil {
		problem.Write(w, r, prob)
		return
	}
	resp, prob := g.ask(r.Context(), run, "nodes", out)
	if prob != nil {
		problem.Write(w, r, prob)
		return
	}
	g.relay(w, r, run, resp)
}
