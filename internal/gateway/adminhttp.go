package gateway

import (
	"context"
	"fmt"
	"net/http"
)

// AdminHandler serves a gateway process's admin endpoint, apart from the
// API so that neither needs the API's credentials nor shares its port:
// GET /metrics (the metrics handler), /healthz (the process is alive) and
// /readyz (200 when ready returns nil: the API serves, no shutdown began,
// and Kafka answers; else 503 with ready's error).
func AdminHandler(metrics http.Handler, ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
