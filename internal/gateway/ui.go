package gateway

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
)

// The live view: a static page under /ui/ that shows one run
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

// uiRoutes registers the live view's static page. Its data calls are
// routes of the API table (api.go) like any client's.
func (g *Gateway) uiRoutes() error {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		return fmt.Errorf("gateway: the live view's embedded files: %w", err)
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
	return nil
}
