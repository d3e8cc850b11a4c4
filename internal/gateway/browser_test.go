package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/oklog/ulid/v2"

	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// browser starts Debian's headless Chromium (a test under CI=true fails
// without it, see testenv.Tool) and returns a tab's context; the browser
// ends with the test.
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	chrome := testenv.Tool(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height), chromedp.Flag("disable-gpu", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline of its own
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// pageStateJS is the JavaScript that sums up the page as a JSON string,
// for a failed wait's message.
const pageStateJS = `JSON.stringify({conn: document.getElementById("conn").textContent,
	message: document.getElementById("message").textContent, count: document.getElementById("tree-count").textContent,
	result: document.getElementById("input-result").textContent, wakes: (window.canopyUI||{}).wakes?.length,
	requests: performance.getEntriesByType("resource").slice(-40).map(e => Math.round(e.startTime) + " " + e.name.replace(location.origin, ""))})`

// waitJS waits, at most d, until the JavaScript expression cond is true in
// the page (polled at each animation frame, in the page).
func waitJS(t *testing.T, ctx context.Context, d time.Duration, what, cond string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d+time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(d))); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](pageStateJS))
		t.Fatalf("waiting %s until %s: %v; page: %s", d, what, err, state)
	}
}

// js evaluates expr in the page and decodes its value into a T.
func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// statusEvent is a tree.node_status of agent in run, now.
func statusEvent(run, agent string, st topics.Status) topics.Event {
	return topics.Event{ID: ulid.Make().String(), Source: "/test/browser", Type: topics.TypeNodeStatus, Time: topics.NewTime(time.Now()),
		RunID: run, AgentID: agent, SchemaVersion: 1, SessionID: "s1", Data: &topics.NodeStatus{Status: st, Reason: "browser test"}}
}

// nodeWith returns a node of run whose status is st, from the nodes
// endpoint.
func (s *uiStack) nodeWith(t *testing.T, run string, st topics.Status) string {
	t.Helper()
	return s.nodesWith(t, run, st, 1)[0]
}

// nodesWith returns n nodes of run whose status is st.
func (s *uiStack) nodesWith(t *testing.T, run string, st topics.Status, n int) []string {
	t.Helper()
	r := call(t, "GET", s.srv.URL+"/v1/runs/"+run+"/nodes?limit=1000", tokAll, nil)
	var pg projection.NodesPage
	if err := json.Unmarshal(r.body, &pg); err != nil || r.status != 200 {
		t.Fatalf("nodes of %s: %d %v", run, r.status, err)
	}
	var out []string
	for _, nd := range pg.Nodes {
		if nd.Status == st && nd.AgentID != "conductor" && len(out) < n {
			out = append(out, nd.AgentID)
		}
	}
	if len(out) < n {
		t.Fatalf("run %s has %d %s nodes, want %d", run, len(out), st, n)
	}
	return out
}

// rowStatus is the JavaScript that scrolls agent's row into the tree's
// rendered window and tests its status (the tree renders only the rows in
// view).
func rowStatus(agent string, st topics.Status) string {
	return fmt.Sprintf(`(() => { const S = window.canopyUI, i = S.order.indexOf(%[1]q), box = document.getElementById("tree-scroll");
		if (i < 0) return false;
		let tr = document.querySelector('#tree-body tr[data-agent=%[1]q]');
		if (!tr) { box.scrollTop = Math.max(0, i * 28 - 56); box.dispatchEvent(new Event("scroll")); return false; }
		return tr.dataset.status === %[2]q; })()`, agent, st)
}

// TestUIBrowser drives the live view in headless Chromium against a real
// stack (kfake on loopback, a projector, the gateway): the page loads with
// the token from its fragment (and drops it from the address bar), the
// tree shows every node, a status change produced to Kafka shows within a
// second, human input typed in the box produces a priority wake shown with
// its latency, picking an older wake on the timeline shows that wake's
// snapshot, a reconnect resumes from Last-Event-ID without losing or
// repeating a wake, axe-core finds no serious or critical accessibility
// violation, and an unknown run shows a clear message.
func TestUIBrowser(t *testing.T) {
	s := newUIStack(t)
	const run = "ui-run"
	s.generate(t, run, 60)
	ctx := browser(t, 1400, 1000)

	if err := chromedp.Do(ctx, chromedp.Navigate(s.srv.URL+UIPath+"#token="+tokAll+"&run="+run)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the tree shows the run's 60 nodes",
		`document.getElementById("tree-count").textContent === "(60 nodes)" && !!document.querySelector('#tree-body tr[data-agent="conductor"]')`)
	if !js[bool](t, ctx, `[...document.querySelectorAll("#tree-body tr.band")].some(tr => /^plan plan-conductor · band 1 of \d+/.test(tr.textContent))`) {
		t.Error("the conductor's plan is not drawn as bands")
	}
	if hash := js[string](t, ctx, `location.hash`); strings.Contains(hash, "token") || hash != "#run="+run {
		t.Errorf("the address bar keeps %q: the token must leave it", hash)
	}
	waitJS(t, ctx, 10*time.Second, "the wake stream is live", `document.getElementById("conn").dataset.state === "live"`)
	if got := js[string](t, ctx, `document.querySelector("#summary dd").textContent`); got == "" {
		t.Error("the summary shows no run status")
	}
	waitJS(t, ctx, 10*time.Second, "the list of runs offers the run", `[...document.getElementById("runs").options].some(o => o.value === "ui-run")`)

	// History: scrolling back loads older entries through the cursor.
	waitJS(t, ctx, 10*time.Second, "the first history page is shown", `document.querySelectorAll("#history li").length >= 50`)
	oldest := js[int](t, ctx, `Math.min(...[...document.querySelectorAll("#history li")].map(li => +li.dataset.seq))`)
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`(() => { const h = document.getElementById("history-scroll"); h.scrollTop = h.scrollHeight; h.dispatchEvent(new Event("scroll")); })()`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "scrolling back loads older history",
		fmt.Sprintf(`Math.min(...[...document.querySelectorAll("#history li")].map(li => +li.dataset.seq)) < %d`, oldest))

	// A status change produced to Kafka shows within a second.
	target := s.nodeWith(t, run, topics.StatusRunning)
	waitJS(t, ctx, 5*time.Second, target+" is rendered running", rowStatus(target, topics.StatusRunning))
	s.produce(t, statusEvent(run, target, topics.StatusBlocked))
	began := time.Now()
	waitJS(t, ctx, time.Second, target+" shows blocked within a second", rowStatus(target, topics.StatusBlocked))
	t.Logf("status change on the page %v after it was produced", time.Since(began).Round(time.Millisecond))
	if !js[bool](t, ctx, fmt.Sprintf(`document.querySelector('#tree-body tr[data-agent=%q]').classList.contains("flag")`, target)) {
		t.Error("a blocked node is not marked")
	}

	// Human input typed in the box: the priority wake shows, with latency.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("input-text"), "focus on the blocked node"),
		chromedp.Click(chromedp.ID("input-send")),
	); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the input's priority wake is shown",
		`document.getElementById("input-result").dataset.state === "woken" && !!document.querySelector("#feed li.prio")`)
	t.Logf("the page saw its input's priority wake %s ms after sending", js[string](t, ctx, `document.getElementById("input-result").dataset.latency`))
	if !js[bool](t, ctx, `document.querySelector("#feed li.prio").textContent.includes("human_input") && document.querySelector("#feed li.prio").textContent.includes("focus on the blocked node")`) {
		t.Error("the priority wake's human_input trigger is not in the feed")
	}

	// Picking the oldest wake on the timeline shows that wake's snapshot.
	if n := js[int](t, ctx, `document.getElementById("timeline").options.length`); n < 2 {
		t.Fatalf("the timeline holds %d wakes, want the run's history of wakes", n)
	}
	first := js[string](t, ctx, `document.getElementById("timeline").options[0].value`)
	if err := chromedp.Do(ctx, chromedp.Focus(chromedp.ID("timeline")), chromedp.KeyEvent(kb.Home)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 5*time.Second, "the oldest wake's snapshot is shown", fmt.Sprintf(`(document.getElementById("snap-title")||{}).textContent?.includes(%q)`, first))
	want := js[int](t, ctx, fmt.Sprintf(`window.canopyUI.wakes.find(w => w.wake_id === %q).agent_tree_snapshot.nodes.length`, first))
	if got := js[int](t, ctx, `document.querySelectorAll("#snapshot-view tbody tr").length`); got != want || want == 0 {
		t.Errorf("the snapshot view shows %d nodes, the wake's snapshot has %d", got, want)
	}
	if !js[bool](t, ctx, `document.getElementById("snapshot-view").textContent.includes("Included") && document.getElementById("snapshot-view").textContent.includes("Omitted")`) {
		t.Error("the snapshot view does not say what was included and omitted")
	}

	// A reconnect resumes from Last-Event-ID: wakes raised while the
	// stream was down arrive once each.
	before := js[int](t, ctx, `window.canopyUI.reconnects`)
	s.srv.CloseClientConnections()
	waitJS(t, ctx, 10*time.Second, "the page notices the dropped stream", fmt.Sprintf(`window.canopyUI.reconnects > %d`, before))
	var ids []string
	for _, agent := range s.nodesWith(t, run, topics.StatusRunning, 3) {
		ev := statusEvent(run, agent, topics.StatusBlocked) // each raises a status_blocked trigger
		ids = append(ids, ev.ID)
		s.produce(t, ev)
	}
	idsJSON, _ := json.Marshal(ids)
	waitJS(t, ctx, 15*time.Second, "the wakes raised while disconnected arrive", fmt.Sprintf(`(() => { const want = %s;
		const seen = window.canopyUI.wakes.flatMap(w => w.triggers.map(t => t.event_id));
		return want.every(id => seen.includes(id)) && document.getElementById("conn").dataset.state === "live"; })()`, idsJSON))
	if dup := js[int](t, ctx, `(() => { const ids = window.canopyUI.wakes.map(w => w.wake_id); return ids.length - new Set(ids).size; })()`); dup != 0 {
		t.Errorf("%d wakes shown twice after the reconnect", dup)
	}

	// Accessibility: axe-core finds no serious or critical violation.
	checkAxe(t, ctx)

	// An unknown run says so, clearly.
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("run"), "never-seen-run"), chromedp.Click(chromedp.CSS(`#pick button[type=submit]`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "an unknown run shows a clear message",
		`document.getElementById("message").dataset.kind === "unknown" && document.getElementById("message").textContent.startsWith('Unknown run "never-seen-run"')`)
	if n := js[int](t, ctx, `document.querySelectorAll("#tree-body tr[data-agent]").length`); n != 0 {
		t.Errorf("an unknown run shows %d nodes", n)
	}
}

// TestUIRunFacts: the run page shows the read model's facts of the
// runtime's activity for a run of the demo workload with Activity (a tool
// it called, an artifact it made, an approval waiting, the model it used,
// the permission state blocked by that approval), and for a run whose
// runtime sent no activity, the facts' unknown status with the reason,
// never an empty value that looks healthy.
func TestUIRunFacts(t *testing.T) {
	s := newUIStack(t)
	s.generateSpec(t, workload.Spec{RunID: "ui-activity", Nodes: 60, Activity: true}, false)
	s.generate(t, "ui-plain", 20)
	readModel := func(run string) projection.ReadModel {
		r := call(t, "GET", s.srv.URL+"/v1/runs/"+run+"/read-model", tokSession, nil)
		var m projection.ReadModel
		if r.status != 200 || json.Unmarshal(r.body, &m) != nil {
			t.Fatalf("read model of %s: %d %s", run, r.status, r.body)
		}
		return m
	}
	// factText is the JavaScript of the text of fact name on the page.
	factText := func(name string) string {
		return fmt.Sprintf(`(document.querySelector('#facts [data-fact=%q]') || {}).textContent || ""`, name)
	}
	ctx := browser(t, 1400, 1000)

	m := readModel("ui-activity")
	if m.ToolSummary.Value == nil || m.ArtifactSummary.Value == nil || m.PendingApprovals.Value == nil || m.ModelRouting.Value == nil ||
		len(m.ToolSummary.Value.ByTool) == 0 || len(m.ArtifactSummary.Value.Recent) == 0 || len(m.PendingApprovals.Value.Requests) == 0 {
		t.Fatalf("the workload's activity gave no tool, artifact, approval or model: %+v", m)
	}
	want := map[string]string{
		"tool_summary":      m.ToolSummary.Value.ByTool[0].ToolName,
		"artifact_summary":  m.ArtifactSummary.Value.Recent[0].ArtifactID,
		"pending_approvals": m.PendingApprovals.Value.Requests[0].RequestID,
		"model_routing":     m.ModelRouting.Value.Latest.Model,
		"permission_state":  "blocked: " + m.PermissionState.Reason,
		"sandbox_profile":   *m.SandboxProfile.Value,
		"active_turn_id":    *m.ActiveTurnID.Value,
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.srv.URL+UIPath+"#token="+tokAll+"&run=ui-activity")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, 10*time.Second, "the facts are shown", `document.querySelectorAll("#facts .fact-card").length > 0`)
	for name, text := range want {
		waitJS(t, ctx, 5*time.Second, fmt.Sprintf("fact %s shows %q", name, text), fmt.Sprintf(`(%s).includes(%q)`, factText(name), text))
	}
	if st := js[string](t, ctx, `document.querySelector('#facts [data-fact="permission_state"]').dataset.status`); st != "blocked" {
		t.Errorf("the permission state is shown %s, want blocked (approvals wait)", st)
	}

	// A run whose runtime sent no activity: its facts are unknown, with
	// the reason the read model gives.
	plain := readModel("ui-plain")
	if plain.ToolSummary.Status != projection.Unknown || plain.Diagnostics.Checks.FailedTools.Status != projection.Unknown {
		t.Fatalf("the plain run's tool facts are %s and %s, want unknown", plain.ToolSummary.Status, plain.Diagnostics.Checks.FailedTools.Status)
	}
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("run"), "ui-plain"), chromedp.Click(chromedp.CSS(`#pick button[type=submit]`))); err != nil {
		t.Fatal(err)
	}
	for name, reason := range map[string]string{"tool_summary": plain.ToolSummary.Reason, "checks.failed_tools": plain.Diagnostics.Checks.FailedTools.Reason,
		"model_routing": plain.ModelRouting.Reason} {
		waitJS(t, ctx, 10*time.Second, fmt.Sprintf("fact %s shows unknown: %s", name, reason), fmt.Sprintf(
			`document.querySelector('#facts [data-fact=%q]')?.dataset.status === "unknown" && (%s).includes(%q)`, name, factText(name), "unknown: "+reason))
	}
	if n := js[int](t, ctx, `[...document.querySelectorAll("#facts [data-fact]")].filter(d => d.dataset.status !== "known" && !d.querySelector(".why")).length`); n != 0 {
		t.Errorf("%d facts not known are shown without their status and reason", n)
	}
}

// checkAxe runs axe-core on the page of ctx: a serious or critical
// violation fails the test, a lesser one is logged.
func checkAxe(t *testing.T, ctx context.Context) {
	t.Helper()
	axe, err := os.ReadFile(filepath.Join("testdata", "axe", "axe-4.10.3.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](string(axe)+";undefined")); err != nil {
		t.Fatalf("injecting axe-core: %v", err)
	}
	type violation struct {
		ID, Impact, Help string
		Nodes            []struct{ Target []string }
	}
	vs, err := chromedp.Run(ctx, chromedp.Evaluate[[]violation](`axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("running axe-core: %v", err)
	}
	for _, v := range vs {
		msg := fmt.Sprintf("axe-core: %s (%s): %s, e.g. %v", v.ID, v.Impact, v.Help, v.Nodes[0].Target)
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
}
