package gateway

// Routed reads: a run's snapshot, read model, history and nodes are asked
// of the projector instance that owns the run (owners.go) on its query
// endpoint and relayed; the run list asks every instance and merges.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// read is GET /v1/runs/{run_id}/{what} for the snapshot and the read model.
func (g *Gateway) read(what string) handler {
	return func(w http.ResponseWriter, r *http.Request, p *Principal, run string) error {
		if err := g.authorize(r.Context(), p, run); err != nil {
			return err
		}
		resp, err := g.ask(r.Context(), run, what, nil)
		if err != nil {
			return err
		}
		return g.relay(w, run, resp)
	}
}

// maxHistoryLimit bounds a history page: the largest window any projector
// can keep. The owner refuses a limit above its own window (-history-size,
// default 256) with a 400 the gateway passes on.
const maxHistoryLimit = projection.MaxHistorySize

// history is GET /v1/runs/{run_id}/history?cursor=&limit=.
func (g *Gateway) history(w http.ResponseWriter, r *http.Request, p *Principal, run string) error {
	return g.pagedRead(w, r, p, run, "history", maxHistoryLimit)
}

// nodes is GET /v1/runs/{run_id}/nodes?cursor=&limit=: every node of the
// run, a page at a time, from its owning projector (projection.NodesPage).
func (g *Gateway) nodes(w http.ResponseWriter, r *http.Request, p *Principal, run string) error {
	return g.pagedRead(w, r, p, run, "nodes", projection.MaxNodesLimit)
}

// Cursors are base64url (no padding) of what the owner needs to go on
// (projection.EncodeCursor, EncodeNodesCursor): at most an agent id's UTF-8,
// 256 code points of up to 4 bytes.
var (
	maxCursorLength = base64.RawURLEncoding.EncodedLen(utf8.UTFMax * topics.MaxIDLength)
	cursorAlphabet  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
)

// pagedRead relays a paged read (history, nodes) of run to its owner: the
// cursor, passed back as the owner gave it, and the limit, at most max,
// are checked here so that the owner is not asked in vain.
func (g *Gateway) pagedRead(w http.ResponseWriter, r *http.Request, p *Principal, run, what string, max int) error {
	q := r.URL.Query()
	out := url.Values{}
	if c := q.Get("cursor"); c != "" {
		if len(c) > maxCursorLength || strings.TrimLeft(c, cursorAlphabet) != "" {
			return problem.New(http.StatusBadRequest, problem.BadRequest, "cursor: pass back a next_cursor as received")
		}
		out.Set("cursor", c)
	}
	if l := q.Get("limit"); l != "" {
		n, err := queryLimit(l, max)
		if err != nil {
			return err
		}
		out.Set("limit", strconv.Itoa(n))
	}
	if err := g.authorize(r.Context(), p, run); err != nil {
		return err
	}
	resp, err := g.ask(r.Context(), run, what, out)
	if err != nil {
		return err
	}
	return g.relay(w, run, resp)
}

// queryLimit parses a limit parameter: an integer from 1 to max.
func queryLimit(l string, max int) (int, error) {
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > max {
		return 0, problem.New(http.StatusBadRequest, problem.BadRequest, "limit: want an integer from 1 to %d, got %q", max, l)
	}
	return n, nil
}

// ask sends GET /internal/v1/runs/{run}/{what}?query to the run's owner and
// returns the response. Once, it asks the group for the owner again and
// retries: when the instance asked says it is not the owner (421:
// ownership moved), and when it cannot answer (503: paused and unsure of its
// session, restoring, or stopping) or cannot be reached, if the group now
// names another owner. Otherwise the answer (a 503 with its Retry-After) is
// the client's. With Config.ProjectorSecret each call carries it as its
// bearer token; a projector that refuses it (401) is the deployment's
// misconfiguration, logged, and 503 to the client.
func (g *Gateway) ask(ctx context.Context, run, what string, query url.Values) (*http.Response, error) {
	addr, err := g.owner(ctx, run, false)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		u := url.URL{Scheme: g.cfg.ProjectorScheme, Host: addr, Path: "/internal/v1/runs/" + run + "/" + what,
			RawPath: "/internal/v1/runs/" + url.PathEscape(run) + "/" + what, RawQuery: query.Encode()}
		req, err := g.projectorRequest(ctx, u)
		if err != nil {
			g.cfg.Logger.Error("gateway: building a projector query", "run", run, "err", err)
			return nil, problem.New(http.StatusInternalServerError, problem.Internal, "the query to the run's projector could not be built")
		}
		resp, err := g.cfg.ProjectorClient.Do(req)
		if err == nil && resp.StatusCode == http.StatusUnauthorized {
			// The projector wants a secret the gateway does not have: the
			// deployment's fault, not the client's, whose token was good.
			drain(resp)
			g.cfg.Logger.Error("gateway: a projector refused the gateway's secret; give the gateway the projectors' -query-secret-file as -projector-secret-file",
				"projector", addr, "secret_set", len(g.cfg.ProjectorSecret) > 0)
			return nil, g.unavailable(problem.Unavailable, "the projector that owns run %q refused the gateway's credentials for it", run)
		}
		misdirected := err == nil && resp.StatusCode == http.StatusMisdirectedRequest
		unable := err != nil || resp.StatusCode == http.StatusServiceUnavailable
		if attempt == 0 && (misdirected || unable) {
			next, oerr := g.owner(ctx, run, true)
			if oerr == nil && (misdirected || next != addr) {
				if resp != nil {
					drain(resp)
				}
				addr = next
				continue
			}
		}
		if err != nil {
			g.cfg.Logger.Warn("gateway: projector unreachable", "run", run, "addr", addr, "err", err)
			return nil, g.unavailable(problem.Unavailable, "the projector that owns run %q cannot be reached; retry later", run)
		}
		return resp, nil
	}
}

// projectorRequest is a GET of u on a projector's query endpoint, with the
// projectors' shared secret when there is one.
func (g *Gateway) projectorRequest(ctx context.Context, u url.URL) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if len(g.cfg.ProjectorSecret) > 0 {
		req.Header.Set("Authorization", "Bearer "+string(g.cfg.ProjectorSecret))
	}
	return req, nil
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}

// maxProjectorBody bounds what the gateway relays from a projector.
const maxProjectorBody = 64 << 20

// relay answers with a projector's response: a 200 body as is; otherwise
// the problem to answer, with the gateway's path as its instance.
func (g *Gateway) relay(w http.ResponseWriter, run string, resp *http.Response) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if p, ok := problem.Read(resp); ok {
			p.Instance = ""
			if p.Status == 0 {
				p.Status = resp.StatusCode
			}
			if p.Status == http.StatusMisdirectedRequest {
				// Ownership moved twice in a row: to the client, the run has no settled owner.
				return g.unavailable(problem.NoOwner, "ownership of run %q is moving between projector instances; retry", run)
			}
			return p
		}
		return g.unavailable(problem.Unavailable, "the projector that owns run %q answered %s", run, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProjectorBody))
	if err != nil {
		g.cfg.Logger.Warn("gateway: reading a projector's answer", "run", run, "err", err)
		return g.unavailable(problem.Unavailable, "the answer of the projector that owns run %q was cut short; retry", run)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return nil
}

// runSession asks the run's owner for its snapshot and returns the session
// in its scope ("" when it has none), for session-scoped tokens (authz.go).
func (g *Gateway) runSession(ctx context.Context, run string) (string, error) {
	resp, err := g.ask(ctx, run, "snapshot", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if p, ok := problem.Read(resp); ok {
			if p.Status == http.StatusServiceUnavailable && p.RetryAfter == 0 {
				p.RetryAfter = g.cfg.RetryAfter
			}
			return "", p
		}
		return "", g.unavailable(problem.Unavailable, "the projector that owns run %q answered %s", run, resp.Status)
	}
	var s topics.AgentTreeSnapshot
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProjectorBody)).Decode(&s); err != nil {
		g.cfg.Logger.Warn("gateway: decoding a projector's snapshot", "run", run, "err", err)
		return "", g.unavailable(problem.Unavailable, "the snapshot of run %q could not be read from its projector; retry", run)
	}
	if s.Scope.SessionID == nil {
		return "", nil
	}
	return *s.Scope.SessionID, nil
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
func (g *Gateway) runs(w http.ResponseWriter, r *http.Request, p *Principal, _ string) error {
	q := r.URL.Query()
	after := q.Get("after")
	if after != "" && idProblem(after) != "" {
		return problem.New(http.StatusBadRequest, problem.BadRequest, "after: %s", idProblem(after))
	}
	limit := projection.DefaultRunsLimit
	if l := q.Get("limit"); l != "" {
		var err error
		if limit, err = queryLimit(l, projection.MaxRunsLimit); err != nil {
			return err
		}
	}
	a, err := g.assignment(r.Context(), false)
	if err != nil {
		return g.unavailable(problem.Unavailable, "cannot read the projector group's assignment from Kafka in time; retry later")
	}
	all, more, listed := g.listRuns(r.Context(), a, after, limit)
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
	return nil
}

// listRuns asks every instance of the assignment a, at once, for up to
// limit runs after after: their runs by run id, whether any has more, and
// the partitions listed. An instance that does not answer is logged and
// its partitions are not listed.
func (g *Gateway) listRuns(ctx context.Context, a map[int32]cluster.Member, after string, limit int) (all []projection.RunRef, more bool, listed map[int32]bool) {
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
			an.pr, an.err = g.projectorRuns(ctx, addr, out)
			answers <- an
		}()
	}
	listed = make(map[int32]bool)
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
	return all, more, listed
}

// projectorRuns asks the projector instance at addr for the runs of the
// partitions it owns.
func (g *Gateway) projectorRuns(ctx context.Context, addr string, query url.Values) (projectorRuns, error) {
	var pr projectorRuns
	req, err := g.projectorRequest(ctx, url.URL{Scheme: g.cfg.ProjectorScheme, Host: addr, Path: "/internal/v1/runs", RawQuery: query.Encode()})
	if err != nil {
		return pr, fmt.Errorf("projector %s: %w", addr, err)
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
