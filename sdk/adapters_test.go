package sdk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/cluster"
	"github.com/canopy-dev/canopy/internal/gateway"
	"github.com/canopy-dev/canopy/internal/kafkaconn"
	"github.com/canopy-dev/canopy/internal/projector"
	"github.com/canopy-dev/canopy/internal/projectorhttp"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// adapterDemo is a framework adapter's demo program (examples/python) and
// what canopy must make of it: its three levels of agents (root, the agent
// it delegates to, and that agent's sub-agent, which asks for a person's
// approval), its tool calls, and its model usage before the approval and
// in all.
type adapterDemo struct {
	name, script string
	// agents from the root down: each the parent of the next.
	agents [3]string
	// tools are the calls the program makes, once each; waiting are those
	// running while the approval waits (the tool that asked, and the call
	// of the agent used as a tool that runs it).
	tools, waiting []string
	before, after  projection.ModelUsageTotals
}

var adapterDemos = []adapterDemo{{
	name:    "openai-agents",
	script:  "examples/python/openai_agents_demo.py",
	agents:  [3]string{"triage", "billing", "refunds"},
	tools:   []string{"get_invoice", "issue_refund", "lookup_order", "refunds"},
	waiting: []string{"issue_refund", "refunds"},
	before:  projection.ModelUsageTotals{Calls: 5, InputTokens: 820, OutputTokens: 68},
	after:   projection.ModelUsageTotals{Calls: 7, InputTokens: 1320, OutputTokens: 101},
}, {
	name:    "langgraph",
	script:  "examples/python/langgraph_demo.py",
	agents:  [3]string{"support", "billing", "refunds"},
	tools:   []string{"ask_refunds", "get_invoice", "issue_refund", "lookup_order"},
	waiting: []string{"ask_refunds", "issue_refund"},
	before:  projection.ModelUsageTotals{Calls: 5, InputTokens: 820, OutputTokens: 68},
	after:   projection.ModelUsageTotals{Calls: 8, InputTokens: 1720, OutputTokens: 111},
}}

// TestAdapters: the adapters' demos, real programs of the OpenAI Agents SDK
// and LangGraph (three levels of agents: handoffs, an agent used as a tool,
// subgraphs; tool calls; a tool that waits for a person's approval), their
// models scripted, run with the canopy package against a real projector and
// gateway on both brokers. While each waits for its approval, canopy shows
// it through the gateway, as the live view reads it: the snapshot and the
// nodes page hold the three agents with their parents, all blocked; the
// read model has the approval pending from the sub-agent, the two calls
// waiting for it running, the others succeeded, and the model usage so far;
// the wake stream has delivered the request's wake; and the live view
// (/ui/ in headless Chromium) draws the three agents in tree order, the
// approval waiting, the calls running and the request's wake. A person approves
// through the gateway (POST .../input, input_kind approve); the program
// takes the decision from its priority wake, resumes and exits; then the
// run is completed, the approval resolved, every call succeeded (each
// counted once: a call that waited and ran is one call) and the usage is
// the script's.
func TestAdapters(t *testing.T) { brokertest.Run(t, testAdapters) }

func testAdapters(t *testing.T, b *brokertest.Broker) {
	python := testenv.PythonSDK(t)
	root := testenv.RepoRoot(t)
	names := topics.Names{Prefix: b.Prefix(t, "adapters"), Version: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	deadline, _ := ctx.Deadline()
	gw := startCanopy(ctx, t, b, names)
	page := liveView(t)

	for _, demo := range adapterDemos {
		t.Run(demo.name, func(t *testing.T) {
			run := "run-" + demo.name
			wakes := gw.wakeStream(ctx, t, run)
			var out testenv.Buffer
			cmd := exec.CommandContext(ctx, python, filepath.Join(root, demo.script), "--brokers", strings.Join(b.Addrs, ","),
				"--prefix", names.Prefix, "--run", run, "--approve", "canopy", "--group", names.Prefix+"-"+demo.name)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			done := false
			defer func() {
				if !done {
					_ = cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					t.Logf("%s:\n%s", demo.script, out.String())
				}
			}()

			// The approval waits: everything the program sent before it
			// waits is applied once the root is blocked (its last event).
			var rm projection.ReadModel
			testenv.WaitEvery(t, time.Until(deadline), 200*time.Millisecond, func() error {
				select {
				case err := <-exited:
					done = true
					return fmt.Errorf("%s exited before its approval: %v", demo.script, err)
				default:
				}
				rm = gw.readModel(ctx, t, run)
				if rm.PendingApprovals.Value == nil || rm.PendingApprovals.Value.Total != 1 || rm.Status.Value == nil ||
					*rm.Status.Value != topics.StatusBlocked {
					return fmt.Errorf("the read model of %s has no approval waiting and root blocked yet: %s", run, brief(rm))
				}
				return nil
			})
			checkWaiting(t, demo, gw, ctx, run, rm)
			checkLiveView(t, page, gw, demo, run, rm.PendingApprovals.Value.Requests[0].RequestID)
			// The wake for the approval request reached the wake stream.
			wakes.await(t, time.Until(deadline), "the request's wake", func(w *topics.Wake) bool {
				return slices.ContainsFunc(w.Triggers, func(tr topics.Trigger) bool {
					return tr.Kind == topics.TriggerRequest && tr.AgentID == demo.agents[2] && tr.Detail != nil && *tr.Detail == "approval"
				})
			})

			gw.post(ctx, t, run, `{"input_kind":"approve"}`)
			select {
			case err := <-exited:
				done = true
				if err != nil {
					t.Fatalf("%s: %v", demo.script, err)
				}
			case <-time.After(time.Until(deadline)):
				t.Fatalf("%s did not finish after the approval", demo.script)
			}
			wakes.await(t, time.Until(deadline), "the approval's priority wake", func(w *topics.Wake) bool {
				return w.Lane == topics.LanePriority && slices.ContainsFunc(w.Triggers, func(tr topics.Trigger) bool {
					return tr.Kind == topics.TriggerHumanInput && tr.Input != nil && tr.Input.InputKind == "approve"
				})
			})
			testenv.WaitEvery(t, time.Until(deadline), 200*time.Millisecond, func() error {
				rm = gw.readModel(ctx, t, run)
				if rm.Status.Value == nil || *rm.Status.Value != topics.StatusCompleted || rm.ModelRouting.Value == nil ||
					rm.ModelRouting.Value.Totals.Calls != demo.after.Calls {
					return fmt.Errorf("the read model of %s is not the finished run's yet: %s", run, brief(rm))
				}
				return nil
			})
			checkFinished(t, demo, rm)
			wakes.await(t, time.Until(deadline), "the root's completion wake", func(w *topics.Wake) bool {
				return slices.ContainsFunc(w.Triggers, func(tr topics.Trigger) bool {
					return tr.Kind == topics.TriggerCompleted && tr.AgentID == demo.agents[0]
				})
			})
		})
	}
}

// checkWaiting checks what canopy shows of demo's run while its approval
// waits: the snapshot, the nodes page and the read model rm.
func checkWaiting(t *testing.T, demo adapterDemo, gw *canopyGateway, ctx context.Context, run string, rm projection.ReadModel) {
	t.Helper()
	parent := func(i int) *string {
		if i == 0 {
			return nil
		}
		return &demo.agents[i-1]
	}
	var snap topics.AgentTreeSnapshot
	gw.get(ctx, t, "/v1/runs/"+run+"/snapshot", &snap)
	if snap.RootAgentID == nil || *snap.RootAgentID != demo.agents[0] || len(snap.Nodes) != 3 {
		t.Fatalf("snapshot: root %v, %d nodes; want root %s and 3 nodes", snap.RootAgentID, len(snap.Nodes), demo.agents[0])
	}
	for i, want := range demo.agents {
		j := slices.IndexFunc(snap.Nodes, func(n topics.NodeDigest) bool { return n.AgentID == want })
		if j < 0 {
			t.Errorf("snapshot: no node %s", want)
			continue
		}
		n := snap.Nodes[j]
		role := topics.RoleWorker
		if i == 0 {
			role = topics.RoleConductor
		}
		if !equalPtr(n.ParentAgentID, parent(i)) || n.Role != role || n.Status != topics.StatusBlocked {
			t.Errorf("snapshot: node %s: parent %v, role %s, status %s; want parent %v, %s, blocked",
				want, str(n.ParentAgentID), n.Role, n.Status, str(parent(i)), role)
		}
		if i == 2 && (n.OpenRequestCount != 1 || n.LastRequestKind == nil || *n.LastRequestKind != "approval") {
			t.Errorf("snapshot: %s has %d open requests, last of kind %v; want its approval", want, n.OpenRequestCount, str(n.LastRequestKind))
		}
	}

	// The live view draws the tree from the nodes pages.
	var page projection.NodesPage
	gw.get(ctx, t, "/v1/runs/"+run+"/nodes?limit=1000", &page)
	if page.Total != 3 {
		t.Errorf("nodes: %d, want 3", page.Total)
	}
	for i, want := range demo.agents {
		j := slices.IndexFunc(page.Nodes, func(n projection.NodeView) bool { return n.AgentID == want })
		if j < 0 || page.Nodes[j].Depth != i || !equalPtr(page.Nodes[j].ParentAgentID, parent(i)) {
			t.Errorf("nodes: %s missing, or not at depth %d under %v: %+v", want, i, str(parent(i)), page.Nodes)
		}
	}

	approvals := rm.PendingApprovals.Value
	if approvals.Requests[0].AgentID != demo.agents[2] {
		t.Errorf("read model: the approval is %s's, want %s's", approvals.Requests[0].AgentID, demo.agents[2])
	}
	if p := rm.PermissionState; p.Status != projection.Blocked || p.Value == nil || p.Value.PendingApprovals != 1 {
		t.Errorf("read model: permission_state %s %+v, want blocked by one approval", p.Status, p.Value)
	}
	tools := rm.ToolSummary.Value
	if tools == nil {
		t.Fatalf("read model: tool_summary %s, want known", rm.ToolSummary.Status)
	}
	var running []string
	for _, c := range tools.RunningCalls {
		running = append(running, c.ToolName)
	}
	slices.Sort(running)
	if tools.Started != int64(len(demo.tools)) || !slices.Equal(running, demo.waiting) ||
		tools.Outcomes["succeeded"] != int64(len(demo.tools)-len(demo.waiting)) {
		t.Errorf("read model: %d calls started, %v running, outcomes %v; want %d started, %v running (waiting for the approval), the others succeeded",
			tools.Started, running, tools.Outcomes, len(demo.tools), demo.waiting)
	}
	if m := rm.ModelRouting.Value; m == nil || m.Totals != demo.before {
		t.Errorf("read model: model usage %+v, want %+v", rm.ModelRouting.Value, demo.before)
	}
}

// liveView starts Debian's headless Chromium (testenv.Tool's CI rule) for
// the test and returns its context.
func liveView(t *testing.T) context.Context {
	t.Helper()
	chrome := testenv.Tool(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.Headless, chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000), chromedp.Flag("disable-gpu", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser, with no deadline of its own
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// checkLiveView opens run's page of the live view in a new tab of browser
// and waits until it shows the demo's agents (root first, each above its
// sub-agent), the approval request waiting from the sub-agent, the calls
// waiting for it running, and the request's wake in its feed.
func checkLiveView(t *testing.T, browser context.Context, gw *canopyGateway, demo adapterDemo, run, request string) {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	defer cancel()
	agents, _ := json.Marshal(demo.agents)
	waiting, _ := json.Marshal(demo.waiting)
	cond := fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll("#tree-body tr[data-agent]")].map(tr => tr.dataset.agent);
		const text = document.body.textContent, feed = [...document.querySelectorAll("#feed li")].map(li => li.textContent);
		return document.getElementById("tree-count").textContent === "(3 nodes)" && JSON.stringify(rows) === %[1]q &&
			text.includes(%[2]q) && %[3]s.every(tool => text.includes(tool + " · ")) &&
			feed.some(li => li.includes("request") && li.includes(%[4]q)); })()`,
		agents, request+" · "+demo.agents[2], waiting, demo.agents[2])
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	err := chromedp.Do(wctx, chromedp.Navigate(gw.srv.URL+gateway.UIPath+"#token="+gw.token+"&run="+run))
	if err == nil {
		_, err = chromedp.Run(wctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(25*time.Second)))
	}
	if err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({count: document.getElementById("tree-count").textContent,
			rows: [...document.querySelectorAll("#tree-body tr[data-agent]")].map(tr => tr.dataset.agent),
			feed: [...document.querySelectorAll("#feed li")].map(li => li.textContent).slice(0, 5),
			message: document.getElementById("message").textContent})`))
		t.Fatalf("the live view of %s does not show the agents, the approval waiting and its wake: %v; page: %s", run, err, state)
	}
}

// checkFinished checks the read model of demo's run once the program ended.
func checkFinished(t *testing.T, demo adapterDemo, rm projection.ReadModel) {
	t.Helper()
	if rm.PendingApprovals.Value == nil || rm.PendingApprovals.Value.Total != 0 || rm.PendingRequests.Total != 0 {
		t.Errorf("read model: approvals %+v, requests %+v still pending; want the approval resolved", rm.PendingApprovals.Value, rm.PendingRequests)
	}
	// The fourth node is the person who approved (human:alice, the
	// gateway's), whose input has no status of its own.
	if rm.Counts.Nodes != 4 || rm.Counts.ByStatus.Completed != 3 || rm.Counts.ByStatus.Unknown != 1 {
		t.Errorf("read model: counts %+v, want the three agents completed and the person who approved", rm.Counts)
	}
	tools := rm.ToolSummary.Value
	var names []string
	for _, c := range tools.ByTool {
		names = append(names, c.ToolName)
		if c.Calls != 1 {
			t.Errorf("read model: %s called %d times, want once (the call that waited is one call)", c.ToolName, c.Calls)
		}
	}
	slices.Sort(names)
	if tools.Started != int64(len(demo.tools)) || tools.Running != 0 || tools.Outcomes["succeeded"] != int64(len(demo.tools)) ||
		!slices.Equal(names, demo.tools) {
		t.Errorf("read model: tools %v: %d started, %d running, outcomes %v; want %v, each succeeded", names, tools.Started,
			tools.Running, tools.Outcomes, demo.tools)
	}
	if m := rm.ModelRouting.Value; m.Totals != demo.after {
		t.Errorf("read model: model usage %+v, want %+v", m.Totals, demo.after)
	}
	if o := rm.LastOutcome.Value; o == nil || o.Outcome != "succeeded" {
		t.Errorf("read model: last outcome %+v, want the last turn succeeded", o)
	}
}

// canopyGateway is a projector (with its query endpoint) and a gateway in
// front of it, on one broker, for the test.
type canopyGateway struct {
	srv   *httptest.Server
	token string
}

// startCanopy creates names' topics and starts a projector and a gateway
// until the test ends.
func startCanopy(ctx context.Context, t *testing.T, b *brokertest.Broker, names topics.Names) *canopyGateway {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cluster.CreateTopics(ctx, kadm.NewClient(cl), names, 4, 1); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("projector and gateway log:\n%s", logs.String())
		}
	})
	// The projector's query endpoint listens first: the projector advertises
	// its address, where the gateway routes the reads of its runs.
	query := httptest.NewUnstartedServer(nil)
	t.Cleanup(query.Close)
	group := names.Prefix + "-projector"
	pctx, stop := context.WithCancel(context.Background())
	// Every event is its own batch and commit, so that each wake is one
	// event's; no timer falls due during the test (the forward grace is an
	// hour: the demos' conductors stop acknowledging once decided).
	p, err := projector.New(pctx, projector.Config{Kafka: kafkaconn.Conn{Brokers: b.Addrs}, Names: names, DataDir: t.TempDir(),
		Group: group, SessionTimeout: 2 * time.Second, AdvertiseAddr: query.Listener.Addr().String(),
		Projection: projection.Config{ForwardGrace: time.Hour}, Logger: logger})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	projected := make(chan error, 1)
	go func() { projected <- p.Run(pctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-projected; err != nil {
			t.Errorf("projector: %v", err)
		}
	})
	query.Config.Handler = projectorhttp.New(projectorhttp.Config{Source: p})
	query.Start()

	key := []byte("the-adapters-test-jwt-key-0123456789abcdef")
	g, err := gateway.New(ctx, gateway.Config{Kafka: kafkaconn.Conn{Brokers: b.Addrs}, Names: names, ProjectorGroup: group,
		JWTKey: key, Logger: logger, RatePerSecond: 100, RateBurst: 100})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(g)
	srv.Config.RegisterOnShutdown(g.Drain)
	srv.Start()
	t.Cleanup(func() { g.Drain(); srv.Close(); g.Close() })
	testenv.WaitFor(t, 60*time.Second, testenv.Until("the projector owns every partition", func() bool { return len(p.Owned()) == 4 }))
	return &canopyGateway{srv: srv, token: gateway.SignJWT(key, gateway.Principal{Subject: "alice", Runs: []string{"*"}}, time.Now().Add(time.Hour))}
}

// do sends a request to the gateway with the test's token and returns the
// status and body.
func (g *canopyGateway) do(ctx context.Context, t *testing.T, method, path, body string, header http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, g.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// get reads path into v, failing the test unless it answers 200.
func (g *canopyGateway) get(ctx context.Context, t *testing.T, path string, v any) {
	t.Helper()
	status, body := g.do(ctx, t, "GET", path, "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// readModel is run's read model; a run not projected yet reads as empty.
func (g *canopyGateway) readModel(ctx context.Context, t *testing.T, run string) projection.ReadModel {
	t.Helper()
	var rm projection.ReadModel
	status, body := g.do(ctx, t, "GET", "/v1/runs/"+run+"/read-model", "", nil)
	switch status {
	case http.StatusOK:
		if err := json.Unmarshal(body, &rm); err != nil {
			t.Fatalf("read model of %s: %v\n%s", run, err, body)
		}
	case http.StatusNotFound:
	default:
		t.Fatalf("read model of %s: %d %s", run, status, body)
	}
	return rm
}

// post sends a person's input to run through the gateway.
func (g *canopyGateway) post(ctx context.Context, t *testing.T, run, body string) {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"adapters-" + run}}
	if status, b := g.do(ctx, t, "POST", "/v1/runs/"+run+"/input", body, h); status != http.StatusAccepted && status != http.StatusOK {
		t.Fatalf("POST input to %s: %d %s", run, status, b)
	}
}

// wakeStream is the run's wake stream (GET /v1/runs/{run}/wakes), as the
// live view reads it: the wakes it delivered.
type wakeStream struct {
	wakes chan *topics.Wake
	seen  []*topics.Wake
}

// wakeStream opens run's wake stream until the test ends; it starts at the
// wakes' end, so open it before the run's events are produced.
func (g *canopyGateway) wakeStream(ctx context.Context, t *testing.T, run string) *wakeStream {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(sctx, "GET", g.srv.URL+"/v1/runs/"+run+"/wakes", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+g.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		resp.Body.Close()
		t.Fatalf("wake stream of %s: %d", run, resp.StatusCode)
	}
	s := &wakeStream{wakes: make(chan *topics.Wake, 256)}
	opened := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer close(s.wakes)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var name string
		var data bytes.Buffer
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if name == "open" {
					close(opened)
				}
				if name == "wake" {
					if w, err := topics.DecodeWake(data.Bytes()); err == nil {
						s.wakes <- w
					}
				}
				name = ""
				data.Reset()
			case strings.HasPrefix(line, "event: "):
				name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data.WriteString(line[len("data: "):])
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-ended
	})
	select {
	case <-opened:
	case <-ended:
		t.Fatalf("the wake stream of %s ended before it opened", run)
	case <-time.After(30 * time.Second):
		t.Fatalf("the wake stream of %s did not open", run)
	}
	return s
}

// await waits at most d for a wake that match holds for, among those the
// stream delivered so far and after.
func (s *wakeStream) await(t *testing.T, d time.Duration, what string, match func(*topics.Wake) bool) {
	t.Helper()
	if slices.ContainsFunc(s.seen, match) {
		return
	}
	timeout := time.After(d)
	for {
		select {
		case w, ok := <-s.wakes:
			if !ok {
				t.Fatalf("the wake stream ended before %s", what)
			}
			s.seen = append(s.seen, w)
			if match(w) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s on the wake stream within %s (%d wakes)", what, d, len(s.seen))
		}
	}
}

// brief sums up a read model for a wait's message.
func brief(rm projection.ReadModel) string {
	b, _ := json.Marshal(map[string]any{"seq": rm.AsOfEventSeq, "status": rm.Status, "pending_approvals": rm.PendingApprovals,
		"counts": rm.Counts})
	return string(b)
}

func equalPtr(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func str(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}
