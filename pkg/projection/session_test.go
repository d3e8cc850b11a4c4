package projection

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// session is the scenarios' session command: pages of what the projection
// holds of a session, at the clock of its newest run.
func (h *harness) session(t *testing.T, d *datadriven.TestData, arg func(key, def string) string) string {
	q := SessionQuery{SessionID: arg("session", "s1")}
	q.Limit, _ = strconv.Atoi(arg("limit", "0"))
	q.HistoryLimit, _ = strconv.Atoi(arg("history", "0"))
	if only := arg("only", ""); only != "" {
		q.Only = strings.Split(only, ",")
	}
	pages, _ := strconv.Atoi(arg("pages", "1"))
	var out strings.Builder
	for i := range pages {
		part, err := h.p.Session(q, d.HasArg("stale"))
		if err != nil {
			return err.Error()
		}
		if pages > 1 {
			fmt.Fprintf(&out, "page %d:\n", i+1)
		}
		printSessionPart(&out, part)
		if !part.MoreRuns {
			break
		}
		q.After = SessionRunsCursor(part.Runs[len(part.Runs)-1])
		q.HistoryLimit = 0
	}
	return out.String()
}

// sessionHistory is the scenarios' session-history command.
func (h *harness) sessionHistory(t *testing.T, d *datadriven.TestData, arg func(key, def string) string) string {
	q := SessionQuery{SessionID: arg("session", "s1")}
	q.HistoryLimit, _ = strconv.Atoi(arg("limit", "0"))
	q.HistoryCursor = arg("cursor", "")
	if only := arg("only", ""); only != "" {
		q.Only = strings.Split(only, ",")
	}
	pages, _ := strconv.Atoi(arg("pages", "1"))
	var out strings.Builder
	for i := range pages {
		pg, err := h.p.SessionHistory(q)
		if err != nil {
			return err.Error()
		}
		fmt.Fprintf(&out, "page %d: more=%v truncated=%v\n", i+1, pg.More, pg.Truncated)
		printHistory(&out, pg.Entries)
		if !pg.More {
			out.WriteString("end\n")
			break
		}
		q.HistoryCursor = SessionHistoryCursor(pg.Entries[len(pg.Entries)-1])
	}
	return out.String()
}

func printSessionPart(out *strings.Builder, p *SessionPart) {
	first := "-"
	if p.FirstEventAt != nil {
		first = clock(*p.FirstEventAt)
	}
	last := "-"
	if p.LastEventAt != nil {
		last = clock(*p.LastEventAt)
	}
	fmt.Fprintf(out, "session %s: runs=%d first=%s (unknown in %d) last=%s stale=%v\n", p.SessionID, p.RunsTotal, first, p.FirstEventUnknown, last, p.Stale)
	fmt.Fprintf(out, "runs (more=%v):\n", p.MoreRuns)
	for _, r := range p.Runs {
		fmt.Fprintf(out, "  %s thread=%s status=%s seq=%d first=%s as_of=%s turn=%s queued=%s requests=%d approvals=%d artifacts=%d evidence=%d\n",
			r.RunID, deref(r.ThreadID), factText(r.Status), r.AsOfEventSeq, timeText(r.FirstEventAt), clock(r.AsOf),
			factText(r.ActiveTurnID), factText(r.QueuedTurns), r.PendingRequests, r.PendingApprovals, r.Artifacts, r.Evidence)
		t := r.Tasks
		fmt.Fprintf(out, "    tasks: nodes=%d %+v plans=%d truncated=%v\n", t.Nodes, t.ByStatus, t.Plans, t.Truncated)
		for _, g := range t.Graphs {
			fmt.Fprintf(out, "      plan %s by %s @%s steps=%d completed=%d failed=%d running=%d active=%v\n",
				g.PlanID, g.AgentID, clock(g.CreatedAt), g.Steps, g.Completed, g.Failed, g.Running, g.Active)
		}
		s := r.Subagents
		fmt.Fprintf(out, "    subagents: %+v truncated=%v\n", s.Watchdog, s.Truncated)
		for _, a := range s.Recent {
			fmt.Fprintf(out, "      %s status=%s task=%s child=%s watchdog=%s dispatched=%s\n",
				a.AgentID, a.Status, deref(a.TaskID), deref(a.ChildRunID), a.WatchdogStatus, clock(a.DispatchedAt))
		}
	}
	fmt.Fprintf(out, "threads (truncated=%v):\n", p.ThreadsTruncated)
	for _, t := range p.Threads {
		fmt.Fprintf(out, "  %s runs=%d first=%s last=%s latest=%s status=%s\n",
			deref(t.ThreadID), t.Runs, timeText(t.FirstEventAt), clock(t.LastEventAt), t.LatestRunID, factText(t.LatestRunStatus))
	}
	if f := p.Facts; f != nil {
		fmt.Fprintf(out, "facts from %s: title=%q workspace=%s account=%s pinned=%v updated=%s\n",
			p.FactsRunID, f.Title, f.WorkspaceID, f.AccountID, f.PinnedThreadIDs, clock(f.UpdatedAt))
	} else {
		out.WriteString("facts: none\n")
	}
	fmt.Fprintf(out, "refs (truncated=%v):\n", p.RefsTruncated)
	for _, a := range p.Artifacts {
		fmt.Fprintf(out, "  artifact %s/%s %s @%s\n", a.RunID, a.ArtifactID, a.ArtifactType, clock(a.At))
	}
	for _, e := range p.Evidence {
		fmt.Fprintf(out, "  evidence %s/%s %s %s @%s\n", e.RunID, e.EvidenceID, e.EvidenceKind, e.Verdict, clock(e.At))
	}
	if h := p.History; h != nil {
		fmt.Fprintf(out, "history (more=%v truncated=%v):\n", h.More, h.Truncated)
		printHistory(out, h.Entries)
	}
}

func printHistory(out *strings.Builder, entries []SessionHistoryEntry) {
	for _, e := range entries {
		fmt.Fprintf(out, "  %s %d %s %s %s @%s", e.RunID, e.Seq, e.EventID, e.Type, e.AgentID, clock(e.At))
		if e.Status != nil {
			fmt.Fprintf(out, " status=%s", *e.Status)
		}
		out.WriteString("\n")
	}
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

func timeText(t *topics.Time) string {
	if t == nil {
		return "-"
	}
	return clock(*t)
}

func factText[T any](f Fact[T]) string {
	if f.Value == nil {
		return string(f.Status)
	}
	if f.Status == Known {
		return fmt.Sprint(*f.Value)
	}
	return fmt.Sprintf("%v(%s)", *f.Value, f.Status)
}

// sessionEvents makes runs of session s1 (and one of s2) over four
// threads, some with session.updated, artifacts and evidence, their
// events interleaved in time.
func sessionEvents(t *testing.T, runs int) []*topics.Event {
	t.Helper()
	h := &harness{t: t}
	var evs []*topics.Event
	add := func(line string) {
		ev, err := h.parseEvent(line)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	for i := range runs {
		run := fmt.Sprintf("run-%02d", i)
		// Run i's events are 3 s apart from 2i s on: each run's overlap
		// its neighbours'.
		at := func(s int) string { return fmt.Sprintf("10:%02d:%02d", (i*2+s*3)/60%60, (i*2+s*3)%60) }
		add(fmt.Sprintf("%s root tree.node_created {\"role\":\"conductor\"} run=%s session=s1 thread=t%d", at(0), run, i%4))
		if i%3 == 0 {
			add(fmt.Sprintf("%s root session.updated {\"title\":\"title %d\",\"pinned_thread_ids\":[\"t%d\"]} run=%s", at(1), i, i%4, run))
		}
		add(fmt.Sprintf("%s root tree.artifact_created {\"artifact_id\":\"a-%d\",\"artifact_type\":\"document\"} run=%s", at(2), i, run))
		if i%2 == 0 {
			add(fmt.Sprintf("%s root tree.evidence_recorded {\"evidence_id\":\"e-%d\",\"evidence_kind\":\"test_run\"} run=%s", at(3), i, run))
			add(fmt.Sprintf("%s root tree.node_status {\"status\":\"running\"} run=%s", at(4), run))
		}
	}
	add("11:00:00 root tree.node_created {\"role\":\"conductor\"} run=other session=s2")
	return evs
}

// TestSessionPartsMerge: a session's runs spread over three projections
// (as over three partitions), each asked with the same query and the
// answers merged, page through to what one projection holding every run
// answers: the same runs, threads, facts, refs and history, page by page.
func TestSessionPartsMerge(t *testing.T) {
	whole, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var parts [3]*Projection
	for i := range parts {
		if parts[i], err = New(Config{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ev := range sessionEvents(t, 12) {
		whole.Apply(ev)
		parts[topics.Partition([]byte(ev.RunID), 3)].Apply(ev)
	}
	for _, limit := range []int{1, 3, 20} {
		q := SessionQuery{SessionID: "s1", Limit: limit, HistoryLimit: limit}
		for page := 0; ; page++ {
			want, err := whole.Session(q, false)
			if err != nil {
				t.Fatal(err)
			}
			var got []*SessionPart
			for _, p := range parts {
				pt, err := p.Session(q, false)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, pt)
			}
			merged := MergeSessionParts("s1", got, limit, limit)
			if w, g := mustJSON(t, want), mustJSON(t, merged); w != g {
				t.Fatalf("limit %d, page %d:\nmerged %s\nwhole  %s", limit, page, g, w)
			}
			if want.RunsTotal != 12 || len(want.Threads) != 4 || want.Facts == nil || want.Facts.Title != "title 9" {
				t.Fatalf("limit %d: the session read %+v", limit, want)
			}
			if !want.MoreRuns {
				if page != (12+limit-1)/limit-1 {
					t.Errorf("limit %d: %d pages", limit, page+1)
				}
				break
			}
			q.After = SessionRunsCursor(want.Runs[len(want.Runs)-1])
			q.HistoryCursor = SessionHistoryCursor(want.History.Entries[len(want.History.Entries)-1])
		}
	}
}

// TestSessionHistoryOracle: paging through a session's history, a few
// entries at a time, gives every entry of its runs' windows once, in the
// order of all of them sorted (by time, then run id, then seq): the early
// stop (no older run can add to the page) never leaves one out. The runs'
// events interleave in time, and one arrives late (older than its run's
// clock).
func TestSessionHistoryOracle(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	evs := sessionEvents(t, 12)
	h := &harness{t: t, seq: 1000}
	late, err := h.parseEvent(`09:00:00 late tree.node_created {"role":"worker","parent_agent_id":"root"} run=run-05 session=s1`)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range append(evs, late) {
		p.Apply(ev)
	}
	var want []SessionHistoryEntry
	for _, id := range p.RunIDs() {
		r, _ := p.Run(id)
		if r.SessionID() != "s1" {
			continue
		}
		for i := range r.hist.len() {
			want = append(want, SessionHistoryEntry{RunID: id, HistoryEntry: *r.hist.at(i)})
		}
	}
	slices.SortFunc(want, historyCmp)
	for _, limit := range []int{1, 2, 5, 7} {
		var got []SessionHistoryEntry
		q := SessionQuery{SessionID: "s1", HistoryLimit: limit}
		for range len(want) + 1 {
			pg, err := p.SessionHistory(q)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, pg.Entries...)
			if !pg.More {
				break
			}
			q.HistoryCursor = SessionHistoryCursor(pg.Entries[len(pg.Entries)-1])
		}
		if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
			t.Errorf("limit %d: paged through %d entries, want %d:\ngot  %s\nwant %s", limit, len(got), len(want), g, w)
		}
	}
}

// TestSessionBounds: a session of more runs than the bounds: the run page,
// the threads, the refs and the history each stop at their bound and say
// so; the totals stay exact.
func TestSessionBounds(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := MaxSessionThreads + 5
	h := &harness{t: t}
	for i := range n {
		for _, ev := range []string{
			fmt.Sprintf(`10:00:00 root tree.node_created {"role":"conductor"} run=r-%03d session=big thread=t-%03d`, i, i),
			fmt.Sprintf(`10:%02d:%02d root tree.artifact_created {"artifact_id":"a","artifact_type":"json"} run=r-%03d`, i/60, i%60, i),
		} {
			e, err := h.parseEvent(ev)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := p.ApplyEvent(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	part, err := p.Session(SessionQuery{SessionID: "big", HistoryLimit: MaxHistoryLimit}, false)
	if err != nil {
		t.Fatal(err)
	}
	if part.RunsTotal != n || len(part.Runs) != DefaultSessionRunsLimit || !part.MoreRuns {
		t.Errorf("runs: total %d, %d listed, more %v", part.RunsTotal, len(part.Runs), part.MoreRuns)
	}
	if len(part.Threads) != MaxSessionThreads || !part.ThreadsTruncated || *part.Threads[0].ThreadID != fmt.Sprintf("t-%03d", n-1) {
		t.Errorf("threads: %d, truncated %v, first %+v", len(part.Threads), part.ThreadsTruncated, part.Threads[0])
	}
	// No session.updated: no run read can settle the facts, so the read
	// budget ends it; the newest refs are those of the runs read.
	if part.Facts != nil || !part.RefsTruncated || len(part.Artifacts) != MaxSessionRefs || part.Artifacts[0].RunID != fmt.Sprintf("r-%03d", n-1) {
		t.Errorf("refs: facts %v, truncated %v, %d artifacts, first %+v", part.Facts, part.RefsTruncated, len(part.Artifacts), part.Artifacts[0])
	}
	// Two entries a run, the runs read bounded by the budget.
	if h := part.History; len(h.Entries) != 2*SessionReadBudget || !h.Truncated || h.More {
		t.Errorf("history: %d entries, truncated %v, more %v", len(h.Entries), h.Truncated, h.More)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
