package gateway

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

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
	g.pagedRead(w, r, p, run, "nodes", projection.MaxNodesLimit)
}

// runsList is the answer of GET /v1/runs.
type runsList struct {
	Runs []projection.RunRef `json:"runs"`
	// NextAfter continues the list after the last run the projectors gave
	// (pass it back as after); empty when they gave all. A page may hold
	// fewer runs than the limit, or none, when the token covers only some.
	NextAfter string `json:"next_after"`
	// Complete is false when some partitions could not be listed: their
	// runs are missing (UnavailablePartitions says which).
	Complete              bool    `json:"complete"`
	UnavailablePartitions []int32 `json:"unavailable_partitions"`
}

// projectorRuns is a projector's answer to GET /internal/v1/runs.
type projectorRuns struct {
	Runs        []projection.RunRef `json:"runs"`
	More        bool                `json:"more"`
	Partitions  []int32             `json:"partitions"`
	Unavailable []int32             `json:"unavailable"`
}

// runs is GET /v1/runs?after=&limit=: the runs the token covers, by run
// id, from every projector instance of the group's assignment (each lists
// the partitions it owns), merged. A partition without an owner, or whose
// owner did not answer, makes the list incomplete rather than failing it.
func (g *Gateway) runs(w http.ResponseWriter, r *http.Request, p *Principal, _ string) {
	q := r.URL.Query()
	after := q.Get("after")
	if after != "" && idProblem(after) != "" {
		problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "after: %s", idProblem(after)))
		return
	}
	limit := projection.DefaultRunsLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > projection.MaxRunsLimit {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "limit: want an integer from 1 to %d, got %q", projection.MaxRunsLimit, l))
			return
		}
		limit = n
	}
	a, err := g.assignment(r.Context(), false)
	if err != nil {
		problem.Write(w, r, g.unavailable(problem.Unavailable, "cannot read the projector group's assignment from Kafka in time; retry later"))
		return
	}
	listed := make(map[int32]bool)
	addrs := make(map[string]bool)
	for _, m := range a {
		if m.Addr != "" {
			addrs[m.Addr] = true
		}
	}
	out := url.Values{"limit": {strconv.Itoa(limit)}}
	if after != "" {
		out.Set("after", after)
	}
	type answer struct {
		pr  projectorRuns
		err error
	}
	answers := make(chan answer, len(addrs))
	for addr := range addrs {
		go func() {
			var an answer
			an.pr, an.err = g.projectorRuns(r.Context(), addr, out)
			answers <- an
		}()
	}
	var all []projection.RunRef
	more := false
	for range addrs {
		an := <-answers
		if an.err != nil {
			g.cfg.Logger.Warn("gateway: listing a projector's runs", "err", an.err)
			continue
		}
		for _, part := range an.pr.Partitions {
			listed[part] = true
		}
		all = append(all, an.pr.Runs...)
		more = more || an.pr.More
	}
	slices.SortFunc(all, func(x, y projection.RunRef) int { return strings.Compare(x.RunID, y.RunID) })
	all = slices.CompactFunc(all, func(x, y projection.RunRef) bool { return x.RunID == y.RunID }) // listed twice mid-rebalance
	res := runsList{Runs: []projection.RunRef{}, Complete: true, UnavailablePartitions: []int32{}}
	if len(all) > limit {
		all, more = all[:limit], true
	}
	if more && len(all) > 0 {
		res.NextAfter = all[len(all)-1].RunID
	}
	for _, ref := range all {
		if p.CoversRun(ref.RunID) || ref.SessionID != nil && p.CoversSession(*ref.SessionID) {
			res.Runs = append(res.Runs, ref)
		}
	}
	for part := range g.partitions {
		if !listed[part] {
			res.Complete = false
			res.UnavailablePartitions = append(res.UnavailablePartitions, part)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(res)
}

// projectorRuns asks the projector instance at addr for the runs of the
// partitions it owns.
func (g *Gateway) projectorRuns(ctx context.Context, addr string, query url.Values) (projectorRuns, error) {
	var pr projectorRuns
	u := url.URL{Scheme: g.cfg.ProjectorScheme, Host: addr, Path: "/internal/v1/runs", RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return pr, fmt.Errorf("projector %s: %w", addr, err)
	}
	if len(g.cfg.ProjectorSecret) > 0 {
		req.Header.Set("Authorization", "Bearer "+string(g.cfg.ProjectorSecret))
	}
	resp, err := g.cfg.ProjectorClient.Do(req)
	if err != nil {
		return pr, fmt.Errorf("projector %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pr, fmt.Errorf("projector %s answered %s", addr, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProjectorBody)).Decode(&pr); err != nil {
		return pr, fmt.Errorf("projector %s: decoding its runs: %w", addr, err)
	}
	return pr, nil
}
