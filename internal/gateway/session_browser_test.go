package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestUISessionBrowser drives the session page in headless Chromium against
// a real stack (kfake, a projector, the gateway): /ui/?session=s1 with the
// token in the fragment loads in seed 003's order (the shell and threads,
// the recent history, the active thread's read model, its queue and
// requests), shows the session's facts, threads and a link to each run,
// loads tools, artifacts and evidence and older history only when asked,
// keeps the session and not the token in the address bar, passes axe-core,
// and a run link opens that run's page; an unknown session says so.
func TestUISessionBrowser(t *testing.T) {
	s := newUIStack(t)
	start := time.Now().Add(-time.Minute)
	main := workload.Generate(workload.Spec{RunID: "ui-sa", SessionID: "s1", ThreadID: "t-main", Nodes: 12, Start: start, Step: time.Millisecond, Seed: 3, Activity: true})
	side := workload.Generate(workload.Spec{RunID: "ui-sb", SessionID: "s1", ThreadID: "t-side", Nodes: 5, Start: start.Add(-time.Minute), Step: time.Millisecond, Seed: 4})
	// ui-sb's conductor completes: its thread is not active, ui-sa's is.
	side = append(side, statusEvent("ui-sb", "conductor", topics.StatusCompleted))
	s.produce(t, append(main, side...)...)
	want := map[string]int64{"ui-sa": int64(len(main)), "ui-sb": int64(len(side))}
	var snap sessionSnapshot
	testenv.WaitFor(t, 60*time.Second, testenv.Until("both runs of the session are projected", func() bool {
		snap = sessionSnapshot{}
		r := call(t, "GET", s.srv.URL+"/v1/sessions/s1?history_limit=0", tokSession, nil)
		if r.status != 200 || json.Unmarshal(r.body, &snap) != nil || len(snap.Runs) != 2 {
			return false
		}
		for _, run := range snap.Runs {
			if run.AsOfEventSeq != want[run.RunID] {
				return false
			}
		}
		return true
	}))

	ctx := browser(t, 1400, 1000)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.srv.URL+UIPath+"?session=s1#token="+tokAll)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 15*time.Second, "the session page loads its four parts",
		`(window.canopySession||{}).stages?.length === 4`)
	if got := js[string](t, ctx, `window.canopySession.stages.join(" ")`); got != "shell history active requests" {
		t.Errorf("the page loaded %q, want seed 003's order: shell history active requests", got)
	}
	if js[bool](t, ctx, `!document.querySelector("main").hidden || document.getElementById("session-view").hidden`) {
		t.Error("the session page does not replace the run page")
	}
	if got := js[string](t, ctx, `location.search + location.hash`); got != "?session=s1" {
		t.Errorf("the address bar keeps %q, want the session and no token", got)
	}
	if got := js[string](t, ctx, `document.getElementById("session-shell").textContent`); !contains(got, "Demo session ui-sa") || !contains(got, "workspace-demo") {
		t.Errorf("the shell shows %q: no title or workspace", got)
	}
	// The threads in the snapshot's order (most recently active first),
	// t-main the only active one.
	var order []string
	for _, th := range snap.Threads {
		order = append(order, *th.ThreadID)
	}
	threads := js[[]string](t, ctx, `[...document.querySelectorAll("#session-threads tbody tr")].map(tr => tr.dataset.thread)`)
	if !slices.Equal(threads, order) || len(threads) != 2 {
		t.Errorf("threads shown %v, want %v", threads, order)
	}
	if got := js[string](t, ctx, `[...document.querySelectorAll("#session-threads tbody tr")].filter(tr => tr.textContent.includes("active")).map(tr => tr.dataset.thread).join()`); got != "t-main" {
		t.Errorf("active threads shown: %q, want t-main", got)
	}
	for _, run := range []string{"ui-sa", "ui-sb"} {
		href := js[string](t, ctx, fmt.Sprintf(`(document.querySelector('#session-runs a[data-run=%q]')||{}).href || ""`, run))
		if href != s.srv.URL+UIPath+"#run="+run {
			t.Errorf("the link to %s is %q", run, href)
		}
	}
	if n := js[int](t, ctx, `document.querySelectorAll("#session-history li").length`); n != 20 {
		t.Errorf("the recent history shows %d entries, want 20", n)
	}
	if got := js[string](t, ctx, `document.getElementById("session-active").textContent`); !contains(got, "Run ui-sa") || !contains(got, "turn-2") {
		t.Errorf("the active thread shows %q, want run ui-sa and its active turn", got)
	}
	if got := js[string](t, ctx, `document.getElementById("session-requests").textContent`); !contains(got, "Queued turns") || !contains(got, "Pending requests") {
		t.Errorf("the queue and requests show %q", got)
	}

	// On demand only: the details, then older history.
	if !js[bool](t, ctx, `document.getElementById("session-details").hidden`) {
		t.Error("the details are shown before they were asked for")
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("session-more"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the details show the session's artifacts and evidence and the active run's tools",
		`(() => { const d = document.getElementById("session-details").textContent;
			return d.includes("artifact-") && d.includes("evidence-") && /\d+ calls/.test(d); })()`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("session-history-more"))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "older history loads", `document.querySelectorAll("#session-history li").length === 40`)

	// Accessibility: axe-core finds no serious or critical violation.
	checkAxe(t, ctx)

	// A run link opens the run page (a navigation: the address loses its
	// session).
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#session-runs a[data-run="ui-sb"]`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 15*time.Second, "the run page of ui-sb shows its nodes",
		`location.hash === "#run=ui-sb" && document.getElementById("tree-count").textContent === "(5 nodes)" && document.getElementById("session-view").hidden`)

	// An unknown session says so.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.srv.URL+UIPath+"?session=nobody")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "an unknown session says so",
		`document.getElementById("session-state").dataset.kind === "unknown" && document.getElementById("session-state").textContent.startsWith('Unknown session "nobody"')`)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
