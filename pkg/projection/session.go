package projection

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// A session snapshot (seed 003 "Session snapshot") gathers the runs of one
// session. Runs are keyed by run, so a session's runs are spread over the
// partitions: each partition's projection answers with what it holds of
// the session (Session, a SessionPart), and a reader merges the parts of
// every partition (MergeSessionParts). Everything is bounded:
//
//   - finding the session's runs reads every run's meta record of the
//     partition (a skip-scan, as Runs does; docs/ARCHITECTURE.md "Session
//     snapshot" has its measured cost), or only the runs a reader may see;
//   - the runs listed are a page, most recently active first, each read
//     whole (as a read model is): at most MaxSessionRunsLimit;
//   - the session's facts and its newest artifact and evidence refs come
//     from the runs' activity records, most recently active run first,
//     until no older run can change them, reading at most
//     SessionReadBudget records;
//   - the history window merges the runs' windows, most recently active run
//     first, until no older run can add to the page, reading at most
//     SessionReadBudget runs;
//   - threads are at most MaxSessionThreads, the most recently active.
//
// What a bound left out is said (truncated flags), never filled in.

// Session snapshot bounds.
const (
	// DefaultSessionRunsLimit is the runs a page lists when the limit is
	// 0; MaxSessionRunsLimit the most it may ask for.
	DefaultSessionRunsLimit = 20
	MaxSessionRunsLimit     = 100
	// MaxSessionThreads bounds the thread summaries: the most recently
	// active threads.
	MaxSessionThreads = 100
	// MaxSessionRefs bounds the session's lists of refs (artifacts,
	// evidence, task graphs, subagents).
	MaxSessionRefs = MaxReadModelList
	// SessionReadBudget bounds the runs a partition reads, beyond the
	// page, for the session's facts, refs and history window.
	SessionReadBudget = 32
	// maxRunRefs bounds a listed run's own lists (its task graphs, its
	// subagents).
	maxRunRefs = 5
)

// SessionRun is one run of a session as the session snapshot lists it: a
// summary of its read model.
type SessionRun struct {
	RunID string `json:"run_id"`
	// ThreadID is null when the run's events named no thread.
	ThreadID *string `json:"thread_id"`
	// RootAgentID is null until the run's root node is seen.
	RootAgentID *string `json:"root_agent_id"`
	// Status is the root node's, as the read model's.
	Status       Fact[topics.Status] `json:"status"`
	AsOfEventSeq int64               `json:"as_of_event_seq"`
	// FirstEventAt is the oldest event time applied; null when unknown
	// (the run was last written by a build that did not keep it).
	FirstEventAt *topics.Time `json:"first_event_at"`
	// AsOf is the run's clock: its newest event time, or the due time of
	// the last timer fired.
	AsOf  topics.Time `json:"as_of"`
	Stale bool        `json:"stale"`
	// ActiveTurnID is the newest active turn; unknown until the runtime
	// sent a turn event.
	ActiveTurnID Fact[string] `json:"active_turn_id"`
	// QueuedTurns counts the turns queued; unknown as ActiveTurnID.
	QueuedTurns      Fact[int64] `json:"queued_turns"`
	PendingRequests  int         `json:"pending_requests"`
	PendingApprovals int         `json:"pending_approvals"`
	// Tasks are the run's nodes by status and its plans (task graphs).
	Tasks TaskSummary `json:"tasks"`
	// Subagents are the run's dispatched nodes (delegated to a child run
	// or session), by watchdog status, and the most recently signalled.
	Subagents SubagentSummary `json:"subagents"`
	// Artifacts and Evidence count what the run recorded.
	Artifacts int64 `json:"artifacts"`
	Evidence  int64 `json:"evidence"`
}

// TaskSummary summarises a run's tasks: its nodes, and its plans (the task
// graphs its conductors laid out).
type TaskSummary struct {
	Nodes    int                 `json:"nodes"`
	ByStatus topics.StatusCounts `json:"by_status"`
	Plans    int                 `json:"plans"`
	// Graphs are the newest plans, newest first, at most 5.
	Graphs    []TaskGraphRef `json:"graphs"`
	Truncated bool           `json:"truncated"`
}

// TaskGraphRef is a plan: its steps counted by the status of the child
// node bound to each (JobProgress's counts, for one plan).
type TaskGraphRef struct {
	RunID     string      `json:"run_id"`
	PlanID    string      `json:"plan_id"`
	AgentID   string      `json:"agent_id"`
	CreatedAt topics.Time `json:"created_at"`
	Steps     int         `json:"steps"`
	Completed int         `json:"completed"`
	Failed    int         `json:"failed"`
	Running   int         `json:"running"`
	// Active: some step is neither completed nor failed.
	Active bool `json:"active"`
}

// SubagentSummary summarises a run's dispatched nodes.
type SubagentSummary struct {
	Watchdog WatchdogSummary `json:"watchdog"`
	// Recent are the most recently signalled, at most 5.
	Recent    []SubagentRef `json:"recent"`
	Truncated bool          `json:"truncated"`
}

// SubagentRef is a dispatched node: the child it was delegated to and how
// the delivery stands (seed 004's watchdog).
type SubagentRef struct {
	RunID   string        `json:"run_id"`
	AgentID string        `json:"agent_id"`
	Status  topics.Status `json:"status"`
	// TaskID and ChildRunID are null when the dispatch named none.
	TaskID         *string               `json:"task_id"`
	ChildRunID     *string               `json:"child_run_id"`
	WatchdogStatus topics.WatchdogStatus `json:"watchdog_status"`
	DispatchedAt   topics.Time           `json:"dispatched_at"`
}

// ThreadSummary is one thread of a session: its runs, grouped by the
// thread id their events named (null: runs that named none).
type ThreadSummary struct {
	ThreadID *string `json:"thread_id"`
	Runs     int     `json:"runs"`
	// FirstEventAt is the oldest event time of its runs; null when a run
	// does not know its own.
	FirstEventAt *topics.Time `json:"first_event_at"`
	LastEventAt  topics.Time  `json:"last_event_at"`
	// LatestRunID is its most recently active run, LatestRunStatus that
	// run's status.
	LatestRunID     string              `json:"latest_run_id"`
	LatestRunStatus Fact[topics.Status] `json:"latest_run_status"`
}

// SessionArtifactRef is an artifact of one of the session's runs.
type SessionArtifactRef struct {
	RunID string `json:"run_id"`
	ArtifactRef
}

// SessionEvidenceRef is evidence of one of the session's runs.
type SessionEvidenceRef struct {
	RunID string `json:"run_id"`
	EvidenceRef
}

// SessionHistoryEntry is an entry of a run's history window, in a
// session's history.
type SessionHistoryEntry struct {
	RunID string `json:"run_id"`
	HistoryEntry
}

// SessionHistory is a page of a session's history: its runs' windows
// merged, newest first (by time, then run id, then seq).
type SessionHistory struct {
	Entries []SessionHistoryEntry `json:"entries"`
	// More: entries older than the last here were left out.
	More bool `json:"more"`
	// Truncated: some of the session's events are not in what was read:
	// a run's window no longer keeps its older events, or runs beyond
	// SessionReadBudget were not read.
	Truncated bool `json:"truncated"`
}

// SessionPart is what projections hold of a session: one partition's, or
// several merged (MergeSessionParts).
type SessionPart struct {
	SessionID string `json:"session_id"`
	// RunsTotal counts the session's runs.
	RunsTotal int `json:"runs_total"`
	// Runs are a page of them, most recently active first (by as_of, then
	// run id); MoreRuns says that runs after the last were left out.
	Runs     []SessionRun `json:"runs"`
	MoreRuns bool         `json:"more_runs"`
	// FirstEventAt is the oldest event time of the runs that know theirs;
	// FirstEventUnknown counts those that do not.
	FirstEventAt      *topics.Time `json:"first_event_at"`
	FirstEventUnknown int          `json:"first_event_unknown"`
	// LastEventAt is the newest run clock; null without runs.
	LastEventAt *topics.Time `json:"last_event_at"`
	// Threads are the most recently active threads, at most
	// MaxSessionThreads; ThreadsTruncated says others were left out.
	Threads          []ThreadSummary `json:"threads"`
	ThreadsTruncated bool            `json:"threads_truncated"`
	// Facts are the newest session.updated facts (by updated_at, then run
	// id) of the runs read, FactsRunID the run that had them; null and ""
	// when none had any.
	Facts      *SessionFacts `json:"facts"`
	FactsRunID string        `json:"facts_run_id"`
	// Artifacts and Evidence are the newest refs, newest first, at most
	// MaxSessionRefs.
	Artifacts []SessionArtifactRef `json:"artifacts"`
	Evidence  []SessionEvidenceRef `json:"evidence"`
	// RefsTruncated: the read budget ended before every run that could
	// change Facts, Artifacts or Evidence was read.
	RefsTruncated bool `json:"refs_truncated"`
	// History is the first page of the history window; null when none was
	// asked for.
	History *SessionHistory `json:"history"`
	// Stale: a projection had not caught up with its input log.
	Stale bool `json:"stale"`
}

// SessionQuery says what to read of a session.
type SessionQuery struct {
	SessionID string
	// Only, when not nil, limits the session to these runs (the ones a
	// reader may see): no other run is read.
	Only []string
	// After continues the run list (a SessionRunsCursor); "" from the
	// most recently active.
	After string
	// Limit is the runs to list: 0 for DefaultSessionRunsLimit, at most
	// MaxSessionRunsLimit.
	Limit int
	// HistoryLimit is the history entries to give, 0 for none (Session)
	// or DefaultHistoryLimit (SessionHistory); at most MaxHistoryLimit.
	HistoryLimit int
	// HistoryCursor continues the history (a SessionHistoryCursor).
	HistoryCursor string
}

// check refuses a bad limit or cursor, ErrBadLimit or ErrBadCursor.
func (q *SessionQuery) check() error {
	if q.Limit < 0 || q.Limit > MaxSessionRunsLimit {
		return fmt.Errorf("%w: %d runs, want 1 to %d", ErrBadLimit, q.Limit, MaxSessionRunsLimit)
	}
	if q.HistoryLimit < 0 || q.HistoryLimit > MaxHistoryLimit {
		return fmt.Errorf("%w: %d history entries, want 0 to %d", ErrBadLimit, q.HistoryLimit, MaxHistoryLimit)
	}
	if _, err := decodeSessionCursor(q.After, cursorRuns); err != nil {
		return err
	}
	_, err := decodeSessionCursor(q.HistoryCursor, cursorHistory)
	return err
}

// CheckSessionQuery reports a bad limit or cursor of q (ErrBadLimit,
// ErrBadCursor) without reading anything.
func CheckSessionQuery(q SessionQuery) error { return q.check() }

// sessionRef is what a run's meta record says, enough to order the
// session's runs and to group them by thread.
type sessionRef struct {
	id, thread, root string
	first, clock     int64 // Unix ms; first 0 when unknown
	seq              int64
}

func (a sessionRef) cmp(b sessionRef) int {
	return cmp.Or(cmp.Compare(b.clock, a.clock), strings.Compare(a.id, b.id))
}

// Session returns what the projection holds of q.SessionID (stale: the
// projection is behind its input log). A session of which it holds no run
// is an empty part, not an error.
func (p *Projection) Session(q SessionQuery, stale bool) (*SessionPart, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	refs, err := p.sessionRefs(q.SessionID, q.Only)
	if err != nil {
		return nil, err
	}
	part := &SessionPart{SessionID: q.SessionID, RunsTotal: len(refs), Runs: []SessionRun{}, Threads: []ThreadSummary{},
		Artifacts: []SessionArtifactRef{}, Evidence: []SessionEvidenceRef{}, Stale: stale}
	for _, ref := range refs {
		if ref.first == 0 {
			part.FirstEventUnknown++
		} else if part.FirstEventAt == nil || ref.first < part.FirstEventAt.UnixMilli() {
			at := fromMs(ref.first)
			part.FirstEventAt = &at
		}
		if part.LastEventAt == nil || ref.clock > part.LastEventAt.UnixMilli() {
			at := fromMs(ref.clock)
			part.LastEventAt = &at
		}
	}
	if err := p.sessionRuns(part, refs, q, stale); err != nil {
		return nil, err
	}
	if err := p.sessionThreads(part, refs); err != nil {
		return nil, err
	}
	if err := p.sessionActivity(part, refs); err != nil {
		return nil, err
	}
	if q.HistoryLimit > 0 {
		if part.History, err = p.sessionHistory(refs, q.HistoryCursor, q.HistoryLimit); err != nil {
			return nil, err
		}
	}
	return part, nil
}

// SessionHistory returns a page of q.SessionID's history window: up to
// q.HistoryLimit entries (0: DefaultHistoryLimit) older than
// q.HistoryCursor, newest first, from the runs the projection holds.
func (p *Projection) SessionHistory(q SessionQuery) (*SessionHistory, error) {
	if q.HistoryLimit == 0 {
		q.HistoryLimit = DefaultHistoryLimit
	}
	if err := q.check(); err != nil {
		return nil, err
	}
	refs, err := p.sessionRefs(q.SessionID, q.Only)
	if err != nil {
		return nil, err
	}
	return p.sessionHistory(refs, q.HistoryCursor, q.HistoryLimit)
}

// sessionRefs finds the runs of session, most recently active first: the
// runs in memory as they are now, the others as the store last committed
// them; with only, just those runs. Expired runs are left out. A
// store-backed projection finds them through its index (p.sessions),
// which the first read builds.
func (p *Projection) sessionRefs(session string, only []string) ([]sessionRef, error) {
	if p.err != nil {
		return nil, p.err
	}
	indexed := only == nil && p.store != nil
	if indexed {
		if err := p.buildSessionIndex(); err != nil {
			return nil, err
		}
		only = slices.Sorted(maps.Keys(p.sessions[session]))
		if only == nil {
			only = []string{}
		}
	}
	byID := make(map[string]sessionRef)
	keep := func(id string, m *metaRecord) {
		if m.Seq > 0 && m.SessionID == session {
			byID[id] = sessionRef{id: id, thread: m.ThreadID, root: m.Root, first: m.First, clock: m.Clock, seq: m.Seq}
		}
	}
	fromMemory := func(id string, r *Run) {
		keep(id, &metaRecord{Seq: r.seq, SessionID: r.sessionID, ThreadID: r.threadID, Root: r.root, First: ms(r.first), Clock: ms(r.clock)})
	}
	stored := func(id string, m *metaRecord) {
		if _, gone := p.limbo[id]; gone {
			return // expired or forgotten, not yet written
		}
		if _, loaded := p.runs[id]; loaded {
			return // as it is now
		}
		keep(id, m)
	}
	if only != nil {
		for _, id := range only {
			if r, ok := p.runs[id]; ok {
				fromMemory(id, r)
				continue
			}
			if p.store == nil {
				continue
			}
			v, ok, err := p.store.Get(runKey(id, 'm', ""))
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrStore, err)
			}
			if ok {
				m, err := decodeMeta(v)
				if err != nil {
					return nil, fmt.Errorf("%w: run %q meta: %w", ErrStore, id, err)
				}
				stored(id, m)
			}
			if _, found := byID[id]; indexed && !found {
				p.unindexSession(session, id) // gone since it was indexed
			}
		}
	} else {
		for id, r := range p.runs {
			fromMemory(id, r)
		}
	}
	refs := slices.Collect(maps.Values(byID))
	slices.SortFunc(refs, sessionRef.cmp)
	return refs, nil
}

// buildSessionIndex indexes the runs by session, once: a scan of every
// run's meta record, and the runs in memory (some not yet written). From
// then on ApplyEvent adds a run when it gains its session, and an expiry
// removes it. An id the index keeps of a run since gone (forgotten) is
// found out by its missing meta record, as any run is checked.
func (p *Projection) buildSessionIndex() error {
	if p.sessions != nil {
		return nil
	}
	idx := make(map[string]map[string]struct{})
	add := func(session, run string) {
		if session == "" {
			return
		}
		if idx[session] == nil {
			idx[session] = make(map[string]struct{})
		}
		idx[session][run] = struct{}{}
	}
	if err := p.store.eachMeta(func(id string, m *metaRecord) { add(m.SessionID, id) }); err != nil {
		return err
	}
	for id, r := range p.runs {
		add(r.sessionID, id)
	}
	p.sessions = idx
	return nil
}

// indexSession adds run to the index of session, once it is built.
func (p *Projection) indexSession(session, run string) {
	if p.sessions == nil {
		return
	}
	if p.sessions[session] == nil {
		p.sessions[session] = make(map[string]struct{})
	}
	p.sessions[session][run] = struct{}{}
}

// unindexSession removes run from the index of session.
func (p *Projection) unindexSession(session, run string) {
	if s := p.sessions[session]; s != nil {
		delete(s, run)
		if len(s) == 0 {
			delete(p.sessions, session)
		}
	}
}

// eachMeta calls f with every run's id and meta record, by run id, seeking
// from one run's keys to the next as runs does.
func (s *store) eachMeta(f func(id string, m *metaRecord)) error {
	from := []byte{'r'}
	for {
		k, ok, err := s.kv.SeekGE(from)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStore, err)
		}
		if !ok || len(k) == 0 || k[0] != 'r' {
			return nil
		}
		i := strings.IndexByte(string(k[1:]), 0)
		if i < 0 {
			from = append(k, 0)
			continue
		}
		run := string(k[1 : 1+i])
		v, ok, err := s.kv.Get(runKey(run, 'm', ""))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStore, err)
		}
		if ok {
			m, err := decodeMeta(v)
			if err != nil {
				return fmt.Errorf("%w: run %q meta: %w", ErrStore, run, err)
			}
			f(run, m)
		}
		from = rel([]byte{'r'}, []byte(run), []byte{1})
	}
}

// sessionRuns lists the page of q's runs, each read whole.
func (p *Projection) sessionRuns(part *SessionPart, refs []sessionRef, q SessionQuery, stale bool) error {
	limit := cmp.Or(q.Limit, DefaultSessionRunsLimit)
	after, _ := decodeSessionCursor(q.After, cursorRuns)
	for _, ref := range refs {
		if after != nil && ref.cmp(sessionRef{id: after.run, clock: after.at}) <= 0 {
			continue
		}
		if len(part.Runs) == limit {
			part.MoreRuns = true
			break
		}
		r, err := p.run(ref.id, false)
		if err != nil {
			return err
		}
		if r == nil {
			continue // gone since the scan: not possible on the owning goroutine, but not a run to list
		}
		part.Runs = append(part.Runs, r.sessionRun(stale))
		if err := p.settle(r); err != nil {
			return err
		}
	}
	return nil
}

// sessionRun summarises the run for the session snapshot.
func (r *Run) sessionRun(stale bool) SessionRun {
	s := SessionRun{RunID: r.id, ThreadID: strPtr(r.threadID), RootAgentID: strPtr(r.root), AsOfEventSeq: r.seq, AsOf: r.clock, Stale: stale,
		PendingRequests: len(r.requests)}
	if !r.first.IsZero() {
		at := r.first
		s.FirstEventAt = &at
	}
	switch root := r.peek(r.root); {
	case root == nil:
		s.Status = unknownFact[topics.Status]("no root conductor node has been seen")
	case root.Status == topics.StatusUnknown:
		s.Status = unknownFact[topics.Status]("the root node has reported no status")
	default:
		s.Status = knownFact(root.Status, stale)
	}
	for _, q := range r.requests {
		if topics.IsApproval(q.kind) {
			s.PendingApprovals++
		}
	}
	a := r.act
	if a == nil {
		a = newActivity()
	}
	turns := noFamily("turn.*")
	s.ActiveTurnID = famFact(a, "", stale, turns, famTurn)
	if s.ActiveTurnID.Status != Unknown {
		s.ActiveTurnID.Value = nil
		if l := turnList(a.Turns.Active, a.Untracked["active_turns"]); len(l.Turns) > 0 {
			id := l.Turns[len(l.Turns)-1].TurnID // the newest
			s.ActiveTurnID.Value = &id
		}
	}
	s.QueuedTurns = famFact(a, int64(len(a.Turns.Queued))+a.Untracked["queued_turns"], stale, turns, famTurn)
	s.Artifacts, s.Evidence = a.Artifacts.Total, a.Evidence.Total
	s.Tasks = r.taskSummary()
	s.Subagents = r.subagentSummary()
	return s
}

// taskSummary counts the run's nodes by status and its newest plans'
// steps, reading at most readModelScan steps.
func (r *Run) taskSummary() TaskSummary {
	st := r.Stats()
	t := TaskSummary{Nodes: st.NodeCount, ByStatus: st.ByStatus, Plans: len(r.plans), Graphs: []TaskGraphRef{}}
	ids := slices.SortedFunc(maps.Keys(r.plans), func(x, y string) int {
		return cmp.Or(cmp.Compare(r.plans[y].CreatedAt.UnixMilli(), r.plans[x].CreatedAt.UnixMilli()), strings.Compare(x, y))
	})
	scanned := 0
	for _, id := range ids[:min(len(ids), maxRunRefs)] {
		pl := r.plans[id]
		g := TaskGraphRef{RunID: r.id, PlanID: id, AgentID: pl.AgentID, CreatedAt: pl.CreatedAt}
		for _, bi := range slices.Sorted(maps.Keys(pl.Bands)) {
			b := pl.Bands[bi]
			g.Steps += b.StepCount
			for _, step := range b.Steps {
				if scanned++; scanned > readModelScan {
					t.Truncated = true
					break
				}
				if n := r.peek(step.ChildAgentID); step.ChildAgentID != "" && n != nil {
					switch n.Status {
					case topics.StatusCompleted:
						g.Completed++
					case topics.StatusFailed:
						g.Failed++
					case topics.StatusRunning, topics.StatusBlocked:
						g.Running++
					}
				}
			}
		}
		g.Active = g.Completed+g.Failed < g.Steps
		t.Graphs = append(t.Graphs, g)
	}
	t.Truncated = t.Truncated || len(t.Graphs) < t.Plans
	return t
}

// subagentSummary counts the run's dispatched nodes by watchdog status and
// lists the most recently signalled, reading at most readModelScan nodes.
func (r *Run) subagentSummary() SubagentSummary {
	s := SubagentSummary{Recent: []SubagentRef{}}
	w := &s.Watchdog
	w.Active, w.SuspectDeliveryFailure = r.wdCount[topics.WatchdogActive], r.wdCount[topics.WatchdogSuspectDeliveryFailure]
	w.DoneButNotForwarded, w.Completed = r.wdCount[topics.WatchdogDoneButNotForwarded], r.wdCount[topics.WatchdogCompleted]
	w.Recovered, w.Blocked = r.wdCount[topics.WatchdogRecovered], r.wdCount[topics.WatchdogBlocked]
	for _, n := range r.wdCount {
		w.Dispatched += n
	}
	if w.Dispatched > 0 {
		scanned := 0
		r.signals.Ascend(func(k timed) bool {
			scanned++
			if n := r.peek(k.id); n != nil && n.watchdog.Dispatched {
				s.Recent = append(s.Recent, SubagentRef{RunID: r.id, AgentID: n.AgentID, Status: cmp.Or(n.Status, topics.StatusUnknown), TaskID: strPtr(n.ActiveTaskID),
					ChildRunID: strPtr(n.watchdog.ChildRunID), WatchdogStatus: n.watchdog.Status, DispatchedAt: n.watchdog.DispatchAt})
			}
			return len(s.Recent) < maxRunRefs && len(s.Recent) < w.Dispatched && scanned < readModelScan
		})
	}
	s.Truncated = len(s.Recent) < w.Dispatched
	return s
}

// sessionThreads groups the runs by thread and summarises the most
// recently active threads, reading the status of each one's latest run.
func (p *Projection) sessionThreads(part *SessionPart, refs []sessionRef) error {
	type thread struct {
		latest       sessionRef
		runs         int
		first        int64
		firstUnknown bool
	}
	byThread := make(map[string]*thread)
	var order []string
	for _, ref := range refs { // most recently active first
		t := byThread[ref.thread]
		if t == nil {
			t = &thread{latest: ref, first: ref.first}
			byThread[ref.thread] = t
			order = append(order, ref.thread)
		}
		t.runs++
		t.firstUnknown = t.firstUnknown || ref.first == 0
		t.first = min(t.first, ref.first)
	}
	if len(order) > MaxSessionThreads {
		order, part.ThreadsTruncated = order[:MaxSessionThreads], true
	}
	for _, id := range order {
		t := byThread[id]
		status, err := p.rootStatus(t.latest)
		if err != nil {
			return err
		}
		ts := ThreadSummary{ThreadID: strPtr(id), Runs: t.runs, LastEventAt: fromMs(t.latest.clock), LatestRunID: t.latest.id, LatestRunStatus: status}
		if !t.firstUnknown {
			at := fromMs(t.first)
			ts.FirstEventAt = &at
		}
		part.Threads = append(part.Threads, ts)
	}
	return nil
}

// rootStatus is the status of ref's root node, read from memory or from its
// node record, without loading the run.
func (p *Projection) rootStatus(ref sessionRef) (Fact[topics.Status], error) {
	var s topics.Status
	if r, ok := p.runs[ref.id]; ok {
		if n := r.peek(r.root); n != nil {
			s = n.Status
		}
		if err := p.settle(r); err != nil {
			return Fact[topics.Status]{}, err
		}
	} else if ref.root != "" && p.store != nil {
		v, ok, err := p.store.Get(runKey(ref.id, 'n', ref.root))
		if err != nil {
			return Fact[topics.Status]{}, fmt.Errorf("%w: %w", ErrStore, err)
		}
		if ok {
			rec, err := decodeNode(v)
			if err != nil {
				return Fact[topics.Status]{}, fmt.Errorf("%w: run %q node %q: %w", ErrStore, ref.id, ref.root, err)
			}
			s = topics.Status(rec.Status)
		}
	}
	switch {
	case ref.root == "":
		return unknownFact[topics.Status]("no root conductor node has been seen"), nil
	case s == "" || s == topics.StatusUnknown:
		return unknownFact[topics.Status]("the root node has reported no status"), nil
	}
	return knownFact(s, false), nil
}

// sessionActivity reads the runs' activity, most recently active first,
// for the session's facts and its newest refs, until no older run can
// change them (each is older than the run's clock) or the read budget
// ends.
func (p *Projection) sessionActivity(part *SessionPart, refs []sessionRef) error {
	settled := func(clock int64) bool {
		return part.Facts != nil && clock < part.Facts.UpdatedAt.UnixMilli() &&
			len(part.Artifacts) == MaxSessionRefs && clock < part.Artifacts[MaxSessionRefs-1].At.UnixMilli() &&
			len(part.Evidence) == MaxSessionRefs && clock < part.Evidence[MaxSessionRefs-1].At.UnixMilli()
	}
	for i, ref := range refs {
		if settled(ref.clock) {
			return nil
		}
		if i == SessionReadBudget {
			part.RefsTruncated = true
			return nil
		}
		a, err := p.activityOf(ref.id)
		if err != nil {
			return err
		}
		if a == nil {
			continue
		}
		if f := a.Session; f != nil && (part.Facts == nil || f.UpdatedAt.After(part.Facts.UpdatedAt) ||
			f.UpdatedAt.UnixMilli() == part.Facts.UpdatedAt.UnixMilli() && ref.id < part.FactsRunID) {
			c := *f
			c.PinnedThreadIDs = slices.Clone(f.PinnedThreadIDs)
			if c.PinnedThreadIDs == nil {
				c.PinnedThreadIDs = []string{}
			}
			part.Facts, part.FactsRunID = &c, ref.id
		}
		for _, x := range a.Artifacts.Recent {
			part.Artifacts = append(part.Artifacts, SessionArtifactRef{RunID: ref.id, ArtifactRef: x})
		}
		for _, x := range a.Evidence.Recent {
			part.Evidence = append(part.Evidence, SessionEvidenceRef{RunID: ref.id, EvidenceRef: x})
		}
		part.Artifacts = newestRefs(part.Artifacts, artifactCmp)
		part.Evidence = newestRefs(part.Evidence, evidenceCmp)
	}
	return nil
}

func artifactCmp(x, y SessionArtifactRef) int {
	return cmp.Or(cmp.Compare(y.At.UnixMilli(), x.At.UnixMilli()), strings.Compare(x.RunID, y.RunID), strings.Compare(x.ArtifactID, y.ArtifactID))
}

func evidenceCmp(x, y SessionEvidenceRef) int {
	return cmp.Or(cmp.Compare(y.At.UnixMilli(), x.At.UnixMilli()), strings.Compare(x.RunID, y.RunID), strings.Compare(x.EvidenceID, y.EvidenceID))
}

// newestRefs sorts refs newest first and keeps MaxSessionRefs, dropping
// one listed twice (a part merged twice mid-rebalance).
func newestRefs[T comparable](refs []T, order func(x, y T) int) []T {
	slices.SortFunc(refs, order)
	refs = slices.Compact(refs)
	return refs[:min(len(refs), MaxSessionRefs)]
}

// activityOf is the run's activity, from memory or its record, without
// loading the run; nil when it has none.
func (p *Projection) activityOf(id string) (*activity, error) {
	if r, ok := p.runs[id]; ok {
		return r.act, nil
	}
	if p.store == nil {
		return nil, nil
	}
	v, ok, err := p.store.Get(runKey(id, 'a', ""))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	if !ok {
		return nil, nil
	}
	a, err := decodeActivity(v)
	if err != nil {
		return nil, fmt.Errorf("%w: run %q activity: %w", ErrStore, id, err)
	}
	return a, nil
}

// sessionHistory merges the runs' history windows into a page of up to
// limit entries older than cursor, most recently active run first, until
// no older run can add to the page or the read budget ends. A run whose
// every event is newer than the cursor is not read.
func (p *Projection) sessionHistory(refs []sessionRef, cursor string, limit int) (*SessionHistory, error) {
	c, _ := decodeSessionCursor(cursor, cursorHistory)
	h := &SessionHistory{Entries: []SessionHistoryEntry{}}
	var cands []SessionHistoryEntry
	read := 0
	for _, ref := range refs {
		if c != nil && ref.first != 0 && ref.first > c.at {
			continue
		}
		if len(cands) > limit && ref.clock < cands[limit].At.UnixMilli() {
			break
		}
		if read == SessionReadBudget {
			h.Truncated = true
			break
		}
		read++
		r, err := p.run(ref.id, false)
		if err != nil {
			return nil, err
		}
		if r == nil {
			continue
		}
		n := r.hist.len()
		h.Truncated = h.Truncated || r.seq > int64(n)
		for i := range n {
			e := SessionHistoryEntry{RunID: r.id, HistoryEntry: *r.hist.at(i)}
			if c == nil || historyCmp(e, SessionHistoryEntry{RunID: c.run, HistoryEntry: HistoryEntry{Seq: c.seq, At: fromMs(c.at)}}) > 0 {
				cands = append(cands, e)
			}
		}
		if err := p.settle(r); err != nil {
			return nil, err
		}
		slices.SortFunc(cands, historyCmp)
		cands = cands[:min(len(cands), limit+1)]
	}
	h.More = len(cands) > limit
	h.Entries = append(h.Entries, cands[:min(len(cands), limit)]...)
	return h, nil
}

// historyCmp orders a session's history newest first: by time, then run
// id, then seq (newest first within a run).
func historyCmp(x, y SessionHistoryEntry) int {
	return cmp.Or(cmp.Compare(y.At.UnixMilli(), x.At.UnixMilli()), strings.Compare(x.RunID, y.RunID), cmp.Compare(y.Seq, x.Seq))
}

// MergeSessionParts merges the parts of a session that several
// partitions hold (or instances answered) into one: totals summed, the
// run page and the history page cut to limit and historyLimit (0:
// DefaultSessionRunsLimit and DefaultHistoryLimit) in their orders, the
// threads of the same id joined, the newest facts and refs kept. A run
// listed by two parts (mid-rebalance) is listed once.
func MergeSessionParts(session string, parts []*SessionPart, limit, historyLimit int) *SessionPart {
	limit = cmp.Or(limit, DefaultSessionRunsLimit)
	historyLimit = cmp.Or(historyLimit, DefaultHistoryLimit)
	out := &SessionPart{SessionID: session, Runs: []SessionRun{}, Threads: []ThreadSummary{}, Artifacts: []SessionArtifactRef{}, Evidence: []SessionEvidenceRef{}}
	threads := map[string]*ThreadSummary{}
	var hists []*SessionHistory
	for _, pt := range parts {
		out.RunsTotal += pt.RunsTotal
		out.Runs = append(out.Runs, pt.Runs...)
		out.MoreRuns = out.MoreRuns || pt.MoreRuns
		if pt.FirstEventAt != nil && (out.FirstEventAt == nil || pt.FirstEventAt.Before(*out.FirstEventAt)) {
			out.FirstEventAt = pt.FirstEventAt
		}
		out.FirstEventUnknown += pt.FirstEventUnknown
		if pt.LastEventAt != nil && (out.LastEventAt == nil || pt.LastEventAt.After(*out.LastEventAt)) {
			out.LastEventAt = pt.LastEventAt
		}
		for _, t := range pt.Threads {
			key := ""
			if t.ThreadID != nil {
				key = *t.ThreadID
			}
			have := threads[key]
			if have == nil {
				c := t
				threads[key] = &c
				continue
			}
			mergeThread(have, t)
		}
		out.ThreadsTruncated = out.ThreadsTruncated || pt.ThreadsTruncated
		if f := pt.Facts; f != nil && (out.Facts == nil || f.UpdatedAt.After(out.Facts.UpdatedAt) ||
			f.UpdatedAt.UnixMilli() == out.Facts.UpdatedAt.UnixMilli() && pt.FactsRunID < out.FactsRunID) {
			out.Facts, out.FactsRunID = f, pt.FactsRunID
		}
		out.Artifacts = append(out.Artifacts, pt.Artifacts...)
		out.Evidence = append(out.Evidence, pt.Evidence...)
		out.RefsTruncated = out.RefsTruncated || pt.RefsTruncated
		if pt.History != nil {
			hists = append(hists, pt.History)
		}
		out.Stale = out.Stale || pt.Stale
	}
	slices.SortFunc(out.Runs, func(x, y SessionRun) int {
		return cmp.Or(cmp.Compare(y.AsOf.UnixMilli(), x.AsOf.UnixMilli()), strings.Compare(x.RunID, y.RunID))
	})
	seen := make(map[string]bool, len(out.Runs))
	out.Runs = slices.DeleteFunc(out.Runs, func(r SessionRun) bool {
		dup := seen[r.RunID]
		seen[r.RunID] = true
		return dup
	})
	if len(out.Runs) > limit {
		out.Runs, out.MoreRuns = out.Runs[:limit], true
	}
	for _, t := range threads {
		out.Threads = append(out.Threads, *t)
	}
	slices.SortFunc(out.Threads, func(x, y ThreadSummary) int {
		return cmp.Or(cmp.Compare(y.LastEventAt.UnixMilli(), x.LastEventAt.UnixMilli()), strings.Compare(x.LatestRunID, y.LatestRunID))
	})
	if len(out.Threads) > MaxSessionThreads {
		out.Threads, out.ThreadsTruncated = out.Threads[:MaxSessionThreads], true
	}
	out.Artifacts = newestRefs(out.Artifacts, artifactCmp)
	out.Evidence = newestRefs(out.Evidence, evidenceCmp)
	if hists != nil {
		out.History = MergeSessionHistories(hists, historyLimit)
	}
	return out
}

// MergeSessionHistories merges pages of a session's history that several
// partitions hold into one of up to limit entries (0:
// DefaultHistoryLimit), newest first.
func MergeSessionHistories(hs []*SessionHistory, limit int) *SessionHistory {
	limit = cmp.Or(limit, DefaultHistoryLimit)
	out := &SessionHistory{Entries: []SessionHistoryEntry{}}
	for _, h := range hs {
		out.Entries = append(out.Entries, h.Entries...)
		out.More = out.More || h.More
		out.Truncated = out.Truncated || h.Truncated
	}
	slices.SortFunc(out.Entries, historyCmp)
	out.Entries = slices.CompactFunc(out.Entries, func(x, y SessionHistoryEntry) bool { return x.RunID == y.RunID && x.Seq == y.Seq })
	if len(out.Entries) > limit {
		out.Entries, out.More = out.Entries[:limit], true
	}
	return out
}

// mergeThread adds t's runs to have, the same thread from another part.
func mergeThread(have *ThreadSummary, t ThreadSummary) {
	have.Runs += t.Runs
	if have.FirstEventAt != nil && (t.FirstEventAt == nil || t.FirstEventAt.Before(*have.FirstEventAt)) {
		have.FirstEventAt = t.FirstEventAt
	}
	if t.LastEventAt.After(have.LastEventAt) || t.LastEventAt.UnixMilli() == have.LastEventAt.UnixMilli() && t.LatestRunID < have.LatestRunID {
		have.LastEventAt, have.LatestRunID, have.LatestRunStatus = t.LastEventAt, t.LatestRunID, t.LatestRunStatus
	}
}

// Session cursors are base64url (no padding) of a kind byte ('r': the run
// list, 'h': the history), a time (Unix ms, 8 bytes big endian), for the
// history a seq (8 bytes), and a run id: the position of the last run or
// entry given, in the list's order. Opaque to readers.
const (
	cursorRuns    = 'r'
	cursorHistory = 'h'
)

type sessionCursor struct {
	at, seq int64
	run     string
}

// SessionRunsCursor is the cursor that continues a session's run list
// after run (whose clock is as_of).
func SessionRunsCursor(run SessionRun) string {
	return encodeSessionCursor(cursorRuns, run.AsOf.UnixMilli(), 0, run.RunID)
}

// SessionHistoryCursor is the cursor that continues a session's history
// after e.
func SessionHistoryCursor(e SessionHistoryEntry) string {
	return encodeSessionCursor(cursorHistory, e.At.UnixMilli(), e.Seq, e.RunID)
}

func encodeSessionCursor(kind byte, at, seq int64, run string) string {
	b := append(make([]byte, 0, 17+len(run)), kind)
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	if kind == cursorHistory {
		b = binary.BigEndian.AppendUint64(b, uint64(seq))
	}
	return base64.RawURLEncoding.EncodeToString(append(b, run...))
}

// decodeSessionCursor reads a cursor of kind; nil for "".
func decodeSessionCursor(c string, kind byte) (*sessionCursor, error) {
	if c == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	head := 9
	if kind == cursorHistory {
		head = 17
	}
	if err != nil || len(b) <= head || b[0] != kind {
		return nil, fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	sc := &sessionCursor{at: int64(binary.BigEndian.Uint64(b[1:9])), run: string(b[head:])}
	if kind == cursorHistory {
		sc.seq = int64(binary.BigEndian.Uint64(b[9:17]))
	}
	if !utf8.ValidString(sc.run) || topics.IDProblem(sc.run) != "" {
		return nil, fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return sc, nil
}

// MaxSessionCursorLength is the longest cursor a session read hands out:
// a run id of topics.MaxIDLength code points of up to 4 bytes each.
var MaxSessionCursorLength = base64.RawURLEncoding.EncodedLen(17 + utf8.UTFMax*topics.MaxIDLength)
