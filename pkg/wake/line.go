package wake

import (
	"fmt"
	"strings"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Line summarises a wake on one line, for logs and terminals: when it was
// received (if r has a receipt time), its lane (WAKE! for the priority
// lane), id, run and seq, its part (part=n/c) when it is one of a split
// wake, its triggers, and the snapshot's counts, with its
// truncation and, when stale, its age. A stale mark uses r's staleness at
// receipt when r has a receipt time, else the snapshot's own. It is how the
// example conductor, `make run` and `projector replay -format summary` print
// wakes.
func Line(w *topics.Wake, r Received) string {
	var b strings.Builder
	s := &w.AgentTreeSnapshot
	if !r.ReceivedAt.IsZero() {
		b.WriteString(r.ReceivedAt.Format("15:04:05.000 "))
	}
	lane := "wake "
	if w.Lane == topics.LanePriority {
		lane = "WAKE!"
	}
	fmt.Fprintf(&b, "%s %s run=%s seq=%d ", lane, w.WakeID, w.RunID, s.AsOfEventSeq)
	if w.Part != nil {
		fmt.Fprintf(&b, "part=%d/%d ", w.Part.Number, w.Part.Count)
	}
	b.WriteString("triggers=[")
	for i, t := range w.Triggers {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(t.Kind))
		b.WriteString(":")
		b.WriteString(t.AgentID)
		if t.Detail != nil {
			fmt.Fprintf(&b, "(%s)", *t.Detail)
		}
		if t.Input != nil && t.Input.Text != "" {
			fmt.Fprintf(&b, " %q", clip(t.Input.Text, 60))
		}
	}
	c := s.Summary.CountsByStatus
	fmt.Fprintf(&b, "] nodes=%d/%d running=%d blocked=%d failed=%d completed=%d overdue_leases=%d open_requests=%d",
		s.Summary.NodeCountIncluded, s.Summary.NodeCountTotal, c.Running, c.Blocked, c.Failed, c.Completed,
		s.Summary.OverdueLeaseCount, s.Summary.OpenRequestCount)
	if m := s.TruncationMeta; s.Truncated {
		fmt.Fprintf(&b, " truncated(nodes=%d handles=%d cut_strings=%d)", m.OmittedCountTotal, m.OmittedCorrelationHandles, m.CutStrings)
	}
	stale, age := s.Stale, s.SnapshotAgeMs
	if !r.ReceivedAt.IsZero() {
		stale, age = r.Stale, r.AgeMs
	}
	if stale {
		fmt.Fprintf(&b, " STALE(age=%dms)", age)
	}
	return b.String()
}

// clip cuts s to n characters, marking the cut.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
