package gateway

// The session snapshot (seed 003): a session's runs are keyed by run, so
// they are spread over the partitions, and so over projector instances.
// GET /v1/sessions/{session_id} asks every instance of the group's
// assignment for what the partitions it owns hold of the session
// (/internal/v1/sessions/{session_id}), merges the answers
// (projection.MergeSessionParts) and says which partitions none could read;
// docs/ARCHITECTURE.md "Session snapshot" says why it fans out.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// sessionSnapshot is the answer of GET /v1/sessions/{session_id}
// (schema/session.schema.json).
type sessionSnapshot struct {
	SessionID   string      `json:"session_id"`
	GeneratedAt topics.Time `json:"generated_at"`
	// Title, WorkspaceID, AccountID and PinnedThreadIDs are the newest
	// session.updated facts of the runs read (FactsRunID's, at
	// FactsUpdatedAt); null (empty) when none gave any.
	Title           *string      `json:"title"`
	WorkspaceID     *string      `json:"workspace_id"`
	AccountID       *string      `json:"account_id"`
	PinnedThreadIDs []string     `json:"pinned_thread_ids"`
	FactsUpdatedAt  *topics.Time `json:"facts_updated_at"`
	FactsRunID      *string      `json:"facts_run_id"`
	// FirstEventAt is the oldest event of the session's runs, null when a
	// run does not know its own; LastEventAt the newest run clock.
	FirstEventAt *topics.Time `json:"first_event_at"`
	LastEventAt  *topics.Time `json:"last_event_at"`
	// ActiveThreadIDs are the threads whose latest run is running or
	// blocked (waiting for a person or a resource).
	ActiveThreadIDs  []string        `json:"active_thread_ids"`
	Threads          []sessionThread `json:"threads"`
	ThreadsTruncated bool            `json:"threads_truncated"`
	RunsTotal        int             `json:"runs_total"`
	// Runs are a page, most recently active first; NextCursor continues
	// it (pass it back as after), empty on the last page.
	Runs       []projection.SessionRun `json:"runs"`
	NextCursor string                  `json:"next_cursor"`
	// History is the first page of the recent history window; null with
	// history_limit=0.
	History *sessionHistory `json:"history"`
	// TaskGraphs are the active plans, Subagents the dispatched nodes, of
	// the runs on this page, newest first.
	TaskGraphs []projection.TaskGraphRef `json:"task_graphs"`
	Subagents  []projection.SubagentRef  `json:"subagents"`
	// Artifacts and Evidence are the newest refs of the session's runs.
	Artifacts     []projection.SessionArtifactRef `json:"artifacts"`
	Evidence      []projection.SessionEvidenceRef `json:"evidence"`
	RefsTruncated bool                            `json:"refs_truncated"`
	// Stale: a projector had not caught up with its input log.
	Stale bool `json:"stale"`
	// Truncated: a bound left something out (threads, refs, history).
	Truncated bool `json:"truncated"`
	// Complete is false when some partitions could not be read: their
	// runs are missing (UnavailablePartitions says which).
	Complete              bool    `json:"complete"`
	UnavailablePartitions []int32 `json:"unavailable_partitions"`
}

// sessionThread is a thread of the session, pinned or active or neither.
type sessionThread struct {
	projection.ThreadSummary
	Pinned bool `json:"pinned"`
	Active bool `json:"active"`
}

// sessionHistory is a page of a session's history.
type sessionHistory struct {
	Entries []projection.SessionHistoryEntry `json:"entries"`
	// NextCursor continues with older entries; empty when none are left.
	NextCursor string `json:"next_cursor"`
	Truncated  bool   `json:"truncated"`
}

// sessionHistoryAnswer is the answer of GET
// /v1/sessions/{session_id}/history.
type sessionHistoryAnswer struct {
	SessionID string `json:"session_id"`
	sessionHistory
	Complete              bool    `json:"complete"`
	UnavailablePartitions []int32 `json:"unavailable_partitions"`
}

// projectorSession is a projector's answer to GET
// /internal/v1/sessions/{session_id} (projector.SessionPage).
type projectorSession struct {
	projection.SessionPart
	Partitions []int32 `json:"partitions"`
}

// projectorSessionHistory is a projector's answer to its /history
// (projector.SessionHistoryPage).
type projectorSessionHistory struct {
	projection.SessionHistory
	Partitions []int32 `json:"partitions"`
}

// sessionScope is which runs of a session p may see: all (nil) when the
// token covers the session or every run; otherwise only the runs it names,
// and none (ok false) when it names none.
func sessionScope(p *Principal, session string) (only []string, ok bool) {
	switch {
	case p.CoversSession(session) || p.CoversRun("*"):
		return nil, true
	case len(p.Runs) > 0:
		return slices.Compact(slices.Sorted(slices.Values(p.Runs))), true
	}
	return nil, false
}

// sessionRead is what GET /v1/sessions/{session_id} and its history check
// first: the session id, the token's scope in it.
func sessionRead(r *http.Request, p *Principal) (session string, only []string, err error) {
	session = r.PathValue("session_id")
	if msg := idProblem(session); msg != "" {
		return "", nil, problem.New(http.StatusBadRequest, problem.BadRequest, "session_id: %s", msg)
	}
	only, ok := sessionScope(p, session)
	if !ok {
		return "", nil, notCoveringSession(p, session)
	}
	return session, only, nil
}

// notCoveringSession is the one 403 of a session the token sees no run
// of, whether the session exists or not.
func notCoveringSession(p *Principal, session string) error {
	return problem.New(http.StatusForbidden, problem.Forbidden, "the token of %q covers no run of session %q", p.Subject, session)
}

// sessionCursor checks a session cursor (after, cursor) as received, so
// that no projector is asked in vain.
func sessionCursor(name, c string, q projection.SessionQuery) error {
	if len(c) > projection.MaxSessionCursorLength || strings.TrimLeft(c, cursorAlphabet) != "" || projection.CheckSessionQuery(q) != nil {
		return problem.New(http.StatusBadRequest, problem.BadRequest, "%s: pass back a next_cursor as received", name)
	}
	return nil
}

// session is GET /v1/sessions/{session_id}?after=&limit=&history_limit=.
func (g *Gateway) session(w http.ResponseWriter, r *http.Request, p *Principal, _ string) error {
	q := r.URL.Query()
	limit, historyLimit := projection.DefaultSessionRunsLimit, projection.DefaultHistoryLimit
	if l := q.Get("limit"); l != "" {
		var err error
		if limit, err = queryLimit(l, projection.MaxSessionRunsLimit); err != nil {
			return err
		}
	}
	if l := q.Get("history_limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || n > projection.MaxHistoryLimit {
			return problem.New(http.StatusBadRequest, problem.BadRequest, "history_limit: want an integer from 0 to %d, got %q", projection.MaxHistoryLimit, l)
		}
		historyLimit = n
	}
	after := q.Get("after")
	if err := sessionCursor("after", after, projection.SessionQuery{After: after}); err != nil {
		return err
	}
	session, only, err := sessionRead(r, p)
	if err != nil {
		return err
	}
	out := url.Values{"limit": {strconv.Itoa(limit)}, "history_limit": {strconv.Itoa(historyLimit)}}
	if after != "" {
		out.Set("after", after)
	}
	if only != nil {
		out["run"] = only
	}
	answers, listed, err := askAll[projectorSession](g, r.Context(), "/internal/v1/sessions/"+url.PathEscape(session), out)
	if err != nil {
		return err
	}
	parts := make([]*projection.SessionPart, 0, len(answers))
	for _, a := range answers {
		parts = append(parts, &a.SessionPart)
	}
	m := projection.MergeSessionParts(session, parts, limit, historyLimit)
	snap := g.sessionSnapshot(m)
	snap.Complete, snap.UnavailablePartitions = g.completeness(listed)
	if m.RunsTotal == 0 && snap.Complete {
		if only != nil {
			return notCoveringSession(p, session)
		}
		return problem.New(http.StatusNotFound, problem.UnknownSession, "no run of session %q was projected", session)
	}
	return writeJSON(w, snap)
}

// sessionSnapshot is the answer of the merged part m.
func (g *Gateway) sessionSnapshot(m *projection.SessionPart) *sessionSnapshot {
	s := &sessionSnapshot{SessionID: m.SessionID, GeneratedAt: topics.NewTime(g.cfg.Now()), PinnedThreadIDs: []string{},
		LastEventAt: m.LastEventAt, ActiveThreadIDs: []string{}, Threads: []sessionThread{}, ThreadsTruncated: m.ThreadsTruncated,
		RunsTotal: m.RunsTotal, Runs: m.Runs, TaskGraphs: []projection.TaskGraphRef{}, Subagents: []projection.SubagentRef{},
		Artifacts: m.Artifacts, Evidence: m.Evidence, RefsTruncated: m.RefsTruncated, Stale: m.Stale}
	if m.FirstEventUnknown == 0 {
		s.FirstEventAt = m.FirstEventAt
	}
	if f := m.Facts; f != nil {
		s.Title, s.WorkspaceID, s.AccountID = strOrNull(f.Title), strOrNull(f.WorkspaceID), strOrNull(f.AccountID)
		s.PinnedThreadIDs = append(s.PinnedThreadIDs, f.PinnedThreadIDs...)
		at, run := f.UpdatedAt, m.FactsRunID
		s.FactsUpdatedAt, s.FactsRunID = &at, &run
	}
	for _, t := range m.Threads {
		st := sessionThread{ThreadSummary: t}
		st.Pinned = t.ThreadID != nil && slices.Contains(s.PinnedThreadIDs, *t.ThreadID)
		if v := t.LatestRunStatus.Value; v != nil && (*v == topics.StatusRunning || *v == topics.StatusBlocked) {
			st.Active = true
			if t.ThreadID != nil {
				s.ActiveThreadIDs = append(s.ActiveThreadIDs, *t.ThreadID)
			}
		}
		s.Threads = append(s.Threads, st)
	}
	slices.Sort(s.ActiveThreadIDs)
	if m.MoreRuns && len(m.Runs) > 0 {
		s.NextCursor = projection.SessionRunsCursor(m.Runs[len(m.Runs)-1])
	}
	for _, r := range m.Runs {
		for _, tg := range r.Tasks.Graphs {
			if tg.Active {
				s.TaskGraphs = append(s.TaskGraphs, tg)
			}
		}
		s.Subagents = append(s.Subagents, r.Subagents.Recent...)
	}
	slices.SortStableFunc(s.TaskGraphs, func(x, y projection.TaskGraphRef) int {
		return cmp.Or(cmp.Compare(y.CreatedAt.UnixMilli(), x.CreatedAt.UnixMilli()), strings.Compare(x.RunID, y.RunID), strings.Compare(x.PlanID, y.PlanID))
	})
	slices.SortStableFunc(s.Subagents, func(x, y projection.SubagentRef) int {
		return cmp.Or(cmp.Compare(y.DispatchedAt.UnixMilli(), x.DispatchedAt.UnixMilli()), strings.Compare(x.RunID, y.RunID), strings.Compare(x.AgentID, y.AgentID))
	})
	s.TaskGraphs = s.TaskGraphs[:min(len(s.TaskGraphs), projection.MaxSessionRefs)]
	s.Subagents = s.Subagents[:min(len(s.Subagents), projection.MaxSessionRefs)]
	if h := m.History; h != nil {
		s.History = historyAnswer(h)
		s.Truncated = h.Truncated
	}
	s.Truncated = s.Truncated || m.ThreadsTruncated || m.RefsTruncated
	return s
}

// historyAnswer is the public page of a merged history h.
func historyAnswer(h *projection.SessionHistory) *sessionHistory {
	out := &sessionHistory{Entries: h.Entries, Truncated: h.Truncated}
	if h.More && len(h.Entries) > 0 {
		out.NextCursor = projection.SessionHistoryCursor(h.Entries[len(h.Entries)-1])
	}
	return out
}

// sessionHistoryPage is GET /v1/sessions/{session_id}/history?cursor=&limit=.
func (g *Gateway) sessionHistoryPage(w http.ResponseWriter, r *http.Request, p *Principal, _ string) error {
	q := r.URL.Query()
	limit := projection.DefaultHistoryLimit
	if l := q.Get("limit"); l != "" {
		var err error
		if limit, err = queryLimit(l, projection.MaxHistoryLimit); err != nil {
			return err
		}
	}
	cursor := q.Get("cursor")
	if err := sessionCursor("cursor", cursor, projection.SessionQuery{HistoryCursor: cursor}); err != nil {
		return err
	}
	session, only, err := sessionRead(r, p)
	if err != nil {
		return err
	}
	out := url.Values{"limit": {strconv.Itoa(limit)}}
	if cursor != "" {
		out.Set("cursor", cursor)
	}
	if only != nil {
		out["run"] = only
	}
	answers, listed, err := askAll[projectorSessionHistory](g, r.Context(), "/internal/v1/sessions/"+url.PathEscape(session)+"/history", out)
	if err != nil {
		return err
	}
	hs := make([]*projection.SessionHistory, 0, len(answers))
	for _, a := range answers {
		hs = append(hs, &a.SessionHistory)
	}
	page := sessionHistoryAnswer{SessionID: session, sessionHistory: *historyAnswer(projection.MergeSessionHistories(hs, limit))}
	page.Complete, page.UnavailablePartitions = g.completeness(listed)
	return writeJSON(w, page)
}

// completeness says whether every partition was read, and which were not.
func (g *Gateway) completeness(listed map[int32]bool) (complete bool, unavailable []int32) {
	unavailable = []int32{}
	for part := range g.partitions {
		if !listed[part] {
			unavailable = append(unavailable, part)
		}
	}
	return len(unavailable) == 0, unavailable
}

// askAll asks every projector instance of the group's assignment, at once,
// GET path?query, and returns the answers of those that gave one and the
// partitions they read (their Partitions). An instance that does not
// answer is logged, and its partitions are not read: the caller says so.
func askAll[T any, PT interface {
	*T
	read() []int32
}](g *Gateway, ctx context.Context, path string, query url.Values) ([]*T, map[int32]bool, error) {
	a, err := g.assignment(ctx, false)
	if err != nil {
		return nil, nil, g.unavailable(problem.Unavailable, "cannot read the projector group's assignment from Kafka in time; retry later")
	}
	addrs := instanceAddrs(a)
	type answer struct {
		v   *T
		err error
	}
	answers := make(chan answer, len(addrs))
	for _, addr := range addrs {
		go func() {
			v := new(T)
			err := g.projectorGet(ctx, addr, path, query, v)
			answers <- answer{v, err}
		}()
	}
	var out []*T
	listed := make(map[int32]bool)
	for range addrs {
		an := <-answers
		if an.err != nil {
			g.cfg.Logger.Warn("gateway: reading a projector's part of a session", "err", an.err)
			continue
		}
		for _, part := range PT(an.v).read() {
			listed[part] = true
		}
		out = append(out, an.v)
	}
	return out, listed, nil
}

func (a *projectorSession) read() []int32        { return a.Partitions }
func (a *projectorSessionHistory) read() []int32 { return a.Partitions }

// instanceAddrs are the query addresses of the instances of assignment a,
// each once, sorted.
func instanceAddrs(a map[int32]cluster.Member) []string {
	var addrs []string
	for _, m := range a {
		if m.Addr != "" {
			addrs = append(addrs, m.Addr)
		}
	}
	slices.Sort(addrs)
	return slices.Compact(addrs)
}

// projectorGet decodes the JSON answer of GET path?query of the projector
// instance at addr into v; any answer but a 200 is an error.
func (g *Gateway) projectorGet(ctx context.Context, addr, path string, query url.Values, v any) error {
	u := url.URL{Scheme: g.cfg.ProjectorScheme, Host: addr, Path: path, RawQuery: query.Encode()}
	if p, err := url.PathUnescape(path); err == nil {
		u.Path, u.RawPath = p, path
	}
	req, err := g.projectorRequest(ctx, u)
	if err != nil {
		return fmt.Errorf("projector %s: %w", addr, err)
	}
	resp, err := g.cfg.ProjectorClient.Do(req)
	if err != nil {
		return fmt.Errorf("projector %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return fmt.Errorf("projector %s answered %s", addr, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxProjectorBody)).Decode(v); err != nil {
		return fmt.Errorf("projector %s: decoding its answer: %w", addr, err)
	}
	return nil
}

// writeJSON answers v as JSON, not to be cached.
func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	return json.NewEncoder(w).Encode(v)
}

func strOrNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
