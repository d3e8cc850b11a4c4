package gateway

import (
	"net"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/canopy-dev/canopy/internal/problem"
)

// ServeHTTP serves the API: what every request gets, whatever its route (a
// server span, Hooks.Request, the Host and path checks), then the mux
// (api.go). A panic in a handler becomes a 500 problem and a log line
// rather than a dropped connection.
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
				// net/http's own signal to abort the response: its server
				// recovers it, closes the connection and logs nothing, so
				// it is handed back rather than answered with a 500 on a
				// response that may be half written. It never reaches
				// the process.
				panic(v)
			}
			g.cfg.Logger.Error("gateway: panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			g.writeError(w, r, problem.New(http.StatusInternalServerError, problem.Internal, "internal error"))
		}
	}()
	if err := g.checkTarget(r); err != nil {
		g.writeError(w, r, err)
		return
	}
	g.mux.ServeHTTP(w, r)
}

// checkTarget refuses a request whose Host or path the API does not serve
// as sent.
func (g *Gateway) checkTarget(r *http.Request) error {
	if !g.hostAllowed(r.Host) {
		return problem.New(http.StatusBadRequest, problem.BadRequest,
			"this gateway does not serve the host name the request names; use one of its allowed hosts")
	}
	if msg := pathProblem(r); msg != "" {
		// ServeMux would answer a redirect (307) to the cleaned path, or a
		// text/plain 404: a client of this API gets a problem instead.
		return problem.New(http.StatusNotFound, problem.NotFound, "%s", msg)
	}
	return nil
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

// statusWriter remembers the status a handler wrote, for Hooks.Request and
// for writeError (which must not write a second status); Flush and Unwrap
// keep wake streams and http.ResponseController working.
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
