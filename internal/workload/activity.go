package workload

import (
	"fmt"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// What a runtime reports inside the nodes, when Spec.Activity is set:
// chosen by the node's number, never by the generator's random source, so
// that the tree's own events are the same with and without it.

var (
	models = []struct{ model, provider, profile string }{
		{"gpt-5", "openai", "fast"}, {"claude-opus", "anthropic", "deep"}, {"gemini-pro", "google", "long-context"},
	}
	tools = map[string]string{"search": "web_search", "summarize": "read_file", "code": "shell", "browse": "browser", "analyze": "python"}
)

// rootActivityStart is what the conductor's runtime reports as the run
// begins: the session, its configuration and channel, its first turn, a
// limit and an incident (resolved as the run ends).
func (g *gen) rootActivityStart(id string) {
	g.emit(id, "", &topics.SessionUpdated{Title: "Demo session " + g.spec.RunID, WorkspaceID: "workspace-demo", AccountID: "account-demo",
		PinnedThreadIDs: []string{"thread-main"}})
	net := false
	g.emit(id, "", &topics.RuntimeConfigured{PermissionMode: "ask", SandboxProfile: "workspace-write", NetworkAccess: &net,
		ExecutionEnvironment: "container", EnvironmentRef: "image-agent-runtime"})
	g.emit(id, "", &topics.ChannelState{ChannelID: "web-1", ChannelKind: "web", State: "connected"})
	g.emit(id, "", &topics.TurnStarted{TurnID: "turn-1", InputID: "input-1"})
	g.emit(id, "", &topics.TurnQueued{TurnID: "turn-2", InputID: "input-2"})
	remaining := int64(400000)
	reset := topics.NewTime(g.now.Add(time.Hour))
	g.emit(id, "", &topics.LimitUpdated{LimitKind: "tokens", State: "ok", Remaining: &remaining, ResetAt: &reset})
	g.emit(id, "", &topics.IncidentOpened{IncidentID: "incident-provider", IncidentKind: "provider_latency", Severity: "info",
		Title: "the model provider answers slowly"})
}

// rootActivityEnd closes the conductor's first turn, compacts its context
// and starts the queued turn, which stays active.
func (g *gen) rootActivityEnd(id string) {
	g.emit(id, "", &topics.IncidentResolved{IncidentID: "incident-provider", Resolution: "recovered"})
	g.emit(id, "", &topics.ContextCompacted{BoundaryID: "boundary-1", TokensBefore: 180000, TokensAfter: 24000, ThroughTurnID: "turn-1"})
	g.emit(id, "", &topics.TurnCompleted{TurnID: "turn-1", Outcome: "succeeded", Summary: "delegated the plan and collected the results"})
	g.emit(id, "", &topics.TurnStarted{TurnID: "turn-2", InputID: "input-2"})
	remaining := int64(40000)
	g.emit(id, "", &topics.LimitUpdated{LimitKind: "tokens", State: "near", Remaining: &remaining})
}

// nodeActivity is node i's model call, tool call and, for some, a process.
func (g *gen) nodeActivity(i int, id, corr string) []func() {
	m := models[i%len(models)]
	tool := tools[capabilities[i%len(capabilities)]]
	call := fmt.Sprintf("call-%05d", i)
	steps := []func(){
		func() {
			g.emit(id, corr, &topics.ModelUsage{Model: m.model, Provider: m.provider, Profile: m.profile,
				InputTokens: int64(800 + 37*(i%50)), OutputTokens: int64(120 + 11*(i%30)), CostMicros: int64(900 + 13*(i%70))})
		},
	}
	started := &topics.ToolStarted{CallID: call, ToolName: tool}
	if tool == "shell" {
		started.CallKind, started.Command = "command", "go test ./..."
	}
	finished := &topics.ToolFinished{CallID: call, Outcome: "succeeded", DurationMs: int64(40 + i%900), OutputRef: "blob://calls/" + call}
	if i%9 == 0 {
		finished.Outcome, finished.ErrorCode = "failed", "tool_error"
		if tool == "shell" {
			code := int64(1)
			finished.ExitCode = &code
		}
	}
	steps = append(steps, func() { g.emit(id, corr, started) }, func() { g.emit(id, corr, finished) })
	if i%6 == 0 {
		proc := fmt.Sprintf("process-%05d", i)
		code := int64(0)
		if i%12 == 0 {
			code = 2
		}
		steps = append(steps,
			func() {
				g.emit(id, corr, &topics.ProcessStarted{ProcessID: proc, Command: "npm run build", Environment: "container",
					EnvironmentRef: "image-agent-runtime", OutputRef: "blob://processes/" + proc})
			})
		if i%30 != 0 { // a dev server keeps running
			steps = append(steps, func() { g.emit(id, corr, &topics.ProcessExited{ProcessID: proc, ExitCode: &code}) })
		}
	}
	return steps
}
