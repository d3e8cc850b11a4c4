package harness

import (
	"fmt"
	"slices"
)

// summarize turns the targets of repeated runs into one target each: the
// median of the runs' values, judged against the limit, with the range
// beside it. A figure that swings between runs of the same code is not a
// figure: the median of three says what a run is likely to see, the range
// how far one may stray. Targets keep the order in which their first run
// reported them; one run's target is returned as it is.
func summarize(ts []Target) []Target {
	type key struct{ scenario, name string }
	var order []key
	byKey := map[key][]Target{}
	for _, t := range ts {
		k := key{t.Scenario, t.Name}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], t)
	}
	out := make([]Target, 0, len(order))
	for _, k := range order {
		runs := byKey[k]
		if len(runs) == 1 {
			out = append(out, runs[0])
			continue
		}
		vals := make([]float64, len(runs))
		for i, t := range runs {
			vals[i] = t.Value
		}
		med := median(vals)
		first := runs[0]
		var t Target
		if first.Floor {
			t = atLeast(k.scenario, k.name, med, first.Limit, first.Unit, "")
		} else {
			t = atMost(k.scenario, k.name, med, first.Limit, first.Unit, "")
		}
		t.Runs, t.Min, t.Max = len(runs), slices.Min(vals), slices.Max(vals)
		t.Measured = fmt.Sprintf("%s%s (median of %d; %s to %s)", num(med), first.Unit, len(runs), num(t.Min), num(t.Max))
		t.Note = first.Note
		out = append(out, t)
	}
	return out
}

// median is the middle value of vs (the mean of the middle two for an
// even count); vs is sorted in place.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}
