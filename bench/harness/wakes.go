package harness

import "github.com/canopy-dev/canopy/pkg/topics"

// Wakes reports whether the projector wakes the run's conductor for ev (the
// triggers of pkg/projection, but for progress, which wakes at most once per
// interval, and timers): those are the events whose latency to their wake
// the harness measures.
func Wakes(ev *topics.Event) bool {
	switch p := ev.Data.(type) {
	case *topics.Failed, *topics.Result, *topics.Request, *topics.NodeCompleted, *topics.Input:
		return true
	case *topics.NodeStatus:
		return p.Status == topics.StatusBlocked || p.Status == topics.StatusFailed || p.Status == topics.StatusCompleted
	}
	return false
}
