// Package wakefmt renders wakes for people: one line per wake with its lane,
// triggers and snapshot summary, as "make run" and the example conductor
// print them.
package wakefmt

import (
	"fmt"
	"strings"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Line returns a one-line summary of w.
func Line(w *topics.Wake) string {
	var b strings.Builder
	s := &w.AgentTreeSnapshot
	lane := "wake"
	if w.Lane == topics.LanePriority {
		lane = "WAKE!"
	}
	fmt.Fprintf(&b, "%s %s run=%s seq=%d", lane, w.WakeID, w.RunID, s.AsOfEventSeq)
	for i, t := range w.Triggers {
		if i == 0 {
			b.WriteString(" triggers=[")
		} else {
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
	if len(w.Triggers) > 0 {
		b.WriteString("]")
	}
	c := s.Summary.CountsByStatus
	fmt.Fprintf(&b, " nodes=%d/%d running=%d blocked=%d failed=%d completed=%d overdue_leases=%d open_requests=%d",
		s.Summary.NodeCountIncluded, s.Summary.NodeCountTotal, c.Running, c.Blocked, c.Failed, c.Completed,
		s.Summary.OverdueLeaseCount, s.Summary.OpenRequestCount)
	if m := s.TruncationMeta; s.Truncated {
		fmt.Fprintf(&b, " truncated(nodes=%d handles=%d cut_strings=%d)", m.OmittedCountTotal, m.OmittedCorrelationHandles, m.CutStrings)
	}
	if s.Stale {
		fmt.Fprintf(&b, " STALE(age=%dms)", s.SnapshotAgeMs)
	}
	return b.String()
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
