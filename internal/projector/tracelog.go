package projector

import (
	"context"
	"runtime/trace"
	"strconv"
)

// tlog notes a step of a partition's commits in the execution trace
// (runtime/trace, category "canopy", message "<partition> <step>"), when
// one is being taken (-pprof's /debug/pprof/trace): where a human input
// waits can then be read off the goroutines' timelines around its steps.
// Human input's are h.dispatched (the poller hands it to the worker),
// h.taken, h.built, h.waited (the priority commit before it reaped), then
// on the commit's goroutine h.commit, h.counted, h.begun, h.produced,
// h.ended, h.writing, h.written, and h.reaped on the worker's; the agent
// lane's commits note a.publish, a.built, a.waited, a.prepared, the same
// commit steps with "a.", and a.reaped; g.pause and g.resume a worker's
// pause at the gate. bench/tracewait reads them. Free when no trace is
// taken.
func tlog(part int32, what string) {
	if trace.IsEnabled() {
		trace.Log(context.Background(), "canopy", strconv.Itoa(int(part))+" "+what)
	}
}
