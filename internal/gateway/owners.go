package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// ownerCache caches the projector group's assignment for AssignmentTTL, so
// that a read does not ask the group coordinator every time.
//
// No lock is held across the admin call: one request reads the assignment
// (within KafkaTimeout, and not cut short when that request's client goes
// away: the others wait on its answer). When the read fails, the last
// assignment read is used however old, and the next read is tried only
// RetryAfter later: routing by a stale owner is safe, because a projector
// refuses a run it does not own (421), and a slow or absent broker must not
// turn every read into a wait. Only a request that has no assignment at all
// to use waits for a read in flight.
type ownerCache struct {
	ttl        time.Duration
	mu         sync.Mutex
	assignment map[int32]cluster.Member // nil until first read
	at         time.Time                // when assignment was read
	inflight   chan struct{}            // closed when the read in flight ends; nil if none
	err        error                    // the last read's error, nil if it succeeded
	failedAt   time.Time                // when the last read failed
}

// assignment returns the cached assignment, reading it again when it is
// older than the TTL or refresh is set.
func (g *Gateway) assignment(ctx context.Context, refresh bool) (map[int32]cluster.Member, error) {
	c := &g.owners
	c.mu.Lock()
	now := g.cfg.Now()
	fresh := c.assignment != nil && now.Sub(c.at) < c.ttl && !refresh
	backoff := c.err != nil && now.Sub(c.failedAt) < g.cfg.RetryAfter
	if fresh || backoff || c.inflight != nil && c.assignment != nil {
		c.mu.Unlock()
		return c.latest()
	}
	if wait := c.inflight; wait != nil {
		// Another request is reading the first assignment: wait for it.
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return c.latest()
	}
	wait := make(chan struct{})
	c.inflight = wait
	c.mu.Unlock()

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.KafkaTimeout)
	a, err := cluster.Assignment(rctx, g.adm, g.cfg.ProjectorGroup, g.cfg.Names)
	cancel()
	if errors.Is(err, kerr.GroupIDNotFound) {
		// No projector has joined the group yet: nobody owns anything.
		a, err = map[int32]cluster.Member{}, nil
	}
	c.mu.Lock()
	if err == nil {
		c.assignment, c.at = a, g.cfg.Now()
	} else {
		c.failedAt = g.cfg.Now()
	}
	c.err = err
	c.inflight = nil
	c.mu.Unlock()
	close(wait)
	if err != nil {
		g.cfg.Logger.Warn("gateway: cannot read the projector group's assignment", "group", g.cfg.ProjectorGroup, "err", err)
	}
	return c.latest()
}

// latest is the last assignment read, stale if the last read failed; the
// error only when there is none.
func (c *ownerCache) latest() (map[int32]cluster.Member, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assignment != nil {
		return c.assignment, nil
	}
	if c.err != nil {
		return nil, c.err
	}
	return nil, context.DeadlineExceeded
}

// owner returns the advertised address of the projector that owns run, or a
// 503 problem that says why there is none.
func (g *Gateway) owner(ctx context.Context, run string, refresh bool) (string, *problem.Problem) {
	a, err := g.assignment(ctx, refresh)
	if err != nil {
		return "", g.unavailable(problem.Unavailable, "cannot read the projector group's assignment from Kafka in time; retry later")
	}
	m, part, err := cluster.Owner(a, run, g.partitions)
	if errors.Is(err, cluster.ErrNoOwner) && !refresh {
		// A cached assignment may predate the owner: ask again once.
		return g.owner(ctx, run, true)
	}
	if err != nil {
		return "", g.unavailable(problem.NoOwner,
			"no projector instance owns partition %d of run %q yet (the group %q is rebalancing, or no projector is running); retry later",
			part, run, g.cfg.ProjectorGroup)
	}
	if m.Addr == "" {
		g.cfg.Logger.Error("gateway: a projector advertises no address; start it with -advertise-addr", "client_id", m.ClientID, "partition", part)
		return "", g.unavailable(problem.NoOwner,
			"the projector that owns partition %d of run %q advertises no address to read from", part, run)
	}
	return m.Addr, nil
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
func (g *Gateway) ask(ctx context.Context, run, what string, query url.Values) (*http.Response, *problem.Problem) {
	addr, prob := g.owner(ctx, run, false)
	if prob != nil {
		return nil, prob
	}
	for attempt := 0; ; attempt++ {
		u := url.URL{Scheme: g.cfg.ProjectorScheme, Host: addr, Path: "/internal/v1/runs/" + run + "/" + what,
			RawPath: "/internal/v1/runs/" + url.PathEscape(run) + "/" + what, RawQuery: query.Encode()}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			g.cfg.Logger.Error("gateway: building a projector query", "run", run, "err", err)
			return nil, problem.New(http.StatusInternalServerError, problem.Internal, "the query to the run's projector could not be built")
		}
		if len(g.cfg.ProjectorSecret) > 0 {
			req.Header.Set("Authorization", "Bearer "+string(g.cfg.ProjectorSecret))
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
			next, prob := g.owner(ctx, run, true)
			if prob == nil && (misdirected || next != addr) {
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

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}

// maxProjectorBody bounds what the gateway relays from a projector.
const maxProjectorBody = 64 << 20

// relay answers with a projector's response: a 200 body as is, a problem
// with the gateway's path as its instance.
func (g *Gateway) relay(w http.ResponseWriter, r *http.Request, run string, resp *http.Response) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if p, ok := problem.Read(resp); ok {
			p.Instance = ""
			if p.Status == 0 {
				p.Status = resp.StatusCode
			}
			if p.Status == http.StatusMisdirectedRequest {
				// Ownership moved twice in a row: to the client, the run has no settled owner.
				p = g.unavailable(problem.NoOwner, "ownership of run %q is moving between projector instances; retry", run)
			}
			problem.Write(w, r, p)
			return
		}
		problem.Write(w, r, g.unavailable(problem.Unavailable, "the projector that owns run %q answered %s", run, resp.Status))
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProjectorBody))
	if err != nil {
		g.cfg.Logger.Warn("gateway: reading a projector's answer", "run", run, "err", err)
		problem.Write(w, r, g.unavailable(problem.Unavailable, "the answer of the projector that owns run %q was cut short; retry", run))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// read is GET /v1/runs/{run_id}/{what} for the snapshot and the read model.
func (g *Gateway) read(what string) func(http.ResponseWriter, *http.Request, *Principal, string) {
	return func(w http.ResponseWriter, r *http.Request, p *Principal, run string) {
		if prob := g.authorize(r.Context(), p, run); prob != nil {
			problem.Write(w, r, prob)
			return
		}
		resp, prob := g.ask(r.Context(), run, what, nil)
		if prob != nil {
			problem.Write(w, r, prob)
			return
		}
		g.relay(w, r, run, resp)
	}
}

// maxHistoryLimit bounds a history page: the largest window any projector
// can keep. The owner refuses a limit above its own window (-history-size,
// default 256) with a 400 the gateway passes on.
const maxHistoryLimit = projection.MaxHistorySize

// history is GET /v1/runs/{run_id}/history?cursor=&limit=.
func (g *Gateway) history(w http.ResponseWriter, r *http.Request, p *Principal, run string) {
	g.pagedRead(w, r, p, run, "history", maxHistoryLimit)
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
func (g *Gateway) pagedRead(w http.ResponseWriter, r *http.Request, p *Principal, run, what string, max int) {
	q := r.URL.Query()
	out := url.Values{}
	if c := q.Get("cursor"); c != "" {
		if len(c) > maxCursorLength || strings.TrimLeft(c, cursorAlphabet) != "" {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "cursor: pass back a next_cursor as received"))
			return
		}
		out.Set("cursor", c)
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > max {
			problem.Write(w, r, problem.New(http.StatusBadRequest, problem.BadRequest, "limit: want an integer from 1 to %d, got %q", max, l))
			return
		}
		out.Set("limit", strconv.Itoa(n))
	}
	if prob := g.authorize(r.Context(), p, run); prob != nil {
		problem.Write(w, r, prob)
		return
	}
	resp, prob := g.ask(r.Context(), run, what, out)
	if prob != nil {
		problem.Write(w, r, prob)
		return
	}
	g.relay(w, r, run, resp)
}

// runSession asks the run's owner for its snapshot and returns the session
// in its scope ("" when it has none), for session-scoped tokens.
func (g *Gateway) runSession(ctx context.Context, run string) (string, *problem.Problem) {
	resp, prob := g.ask(ctx, run, "snapshot", nil)
	if prob != nil {
		return "", prob
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
