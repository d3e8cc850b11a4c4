package projectorhttp

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/problem"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestSessionEndpoint: a process owning both partitions answers a session
// read with the session's runs of both, most recently active first, pages
// through them and through the session's history by the cursors it hands
// out, reads only the runs named by run=, and refuses a bad limit or
// cursor; a session it holds no run of is an empty answer, not an error.
func TestSessionEndpoint(t *testing.T) {
	runA, runB := runOn(0, "sess"), runOn(1, "sess")
	start := time.Now().Add(time.Hour).UTC()
	p := newProcess(t,
		workload.Spec{RunID: runA, SessionID: "http-session", ThreadID: "t-a", Nodes: 5, Seed: 1, Start: start, Step: 10 * time.Millisecond},
		workload.Spec{RunID: runB, SessionID: "http-session", ThreadID: "t-b", Nodes: 6, Seed: 2, Start: start.Add(time.Second), Step: 10 * time.Millisecond})
	p.start(t)
	c := serve(t, New(Config{Source: p.sup}))
	const path = "/internal/v1/sessions/http-session"

	var pg projector.SessionPage
	testenv.WaitFor(t, 60*time.Second, func() error {
		pg = projector.SessionPage{}
		code, _, body := c.get(path, "")
		if code != 200 || json.Unmarshal(body, &pg) != nil || pg.RunsTotal != 2 || len(pg.Runs) != 2 ||
			pg.Runs[0].AsOfEventSeq != int64(p.more[runB]) || pg.Runs[1].AsOfEventSeq != int64(p.more[runA]) {
			return fmt.Errorf("both runs of the session, every event applied: %d %.300s", code, body)
		}
		return nil
	})
	if !slices.Equal(pg.Partitions, []int32{0, 1}) || len(pg.Unavailable) != 0 || pg.Runs[0].RunID != runB || pg.MoreRuns ||
		len(pg.Threads) != 2 || pg.History == nil || len(pg.History.Entries) != projection.DefaultHistoryLimit || !pg.History.More {
		t.Errorf("the session: %+v", pg)
	}

	// The run list a run at a time, by the cursor of the last run given.
	var one projector.SessionPage
	if code, _, body := c.get(path+"?limit=1&history_limit=0", ""); code != 200 || json.Unmarshal(body, &one) != nil ||
		len(one.Runs) != 1 || one.Runs[0].RunID != runB || !one.MoreRuns || one.History != nil {
		t.Fatalf("the first run: %d %.300s", code, body)
	}
	after := url.QueryEscape(projection.SessionRunsCursor(one.Runs[0]))
	one = projector.SessionPage{}
	if code, _, body := c.get(path+"?limit=1&after="+after, ""); code != 200 || json.Unmarshal(body, &one) != nil ||
		len(one.Runs) != 1 || one.Runs[0].RunID != runA || one.MoreRuns {
		t.Errorf("the run after it: %d %.300s", code, body)
	}

	// The history, three entries a page: each entry once, newest first.
	seen := map[string]bool{}
	cursor := ""
	for page := 0; page < 4; page++ {
		var h projector.SessionHistoryPage
		code, _, body := c.get(path+"/history?limit=3&cursor="+url.QueryEscape(cursor), "")
		if code != 200 || json.Unmarshal(body, &h) != nil || len(h.Entries) != 3 || !h.More {
			t.Fatalf("history page %d: %d %.300s", page, code, body)
		}
		for i, e := range h.Entries {
			key := fmt.Sprintf("%s/%d", e.RunID, e.Seq)
			if seen[key] || e.RunID != runA && e.RunID != runB {
				t.Errorf("history page %d: entry %s", page, key)
			}
			seen[key] = true
			if i > 0 && e.At.After(h.Entries[i-1].At) {
				t.Errorf("history page %d: %s after a newer entry", page, key)
			}
		}
		cursor = projection.SessionHistoryCursor(h.Entries[2])
	}

	// Only the runs named.
	var named projector.SessionPage
	if code, _, body := c.get(path+"?run="+runA+"&run=never-seen", ""); code != 200 || json.Unmarshal(body, &named) != nil ||
		named.RunsTotal != 1 || named.Runs[0].RunID != runA || len(named.Partitions) != 2 {
		t.Errorf("run=%s: %d %.300s", runA, code, body)
	}
	for _, e := range named.History.Entries {
		if e.RunID != runA {
			t.Errorf("run=%s: history of %s", runA, e.RunID)
		}
	}

	var none projector.SessionPage
	if code, _, body := c.get("/internal/v1/sessions/nobody", ""); code != 200 || json.Unmarshal(body, &none) != nil ||
		none.RunsTotal != 0 || len(none.Runs) != 0 || len(none.Partitions) != 2 {
		t.Errorf("a session without runs: %d %.300s", code, body)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?history_limit=101", "?history_limit=-1", "?after=%21%21",
		"?history_cursor=" + url.QueryEscape(projection.SessionRunsCursor(one.Runs[0])), "/history?limit=0", "/history?limit=101", "/history?cursor=x"} {
		c.problem(path+q, 400, problem.BadRequest, false)
	}
}

// runOn is a run id in partition part of two.
func runOn(part int32, prefix string) string {
	for i := 0; ; i++ {
		if r := fmt.Sprintf("%s-%d", prefix, i); topics.Partition([]byte(r), 2) == part {
			return r
		}
	}
}
