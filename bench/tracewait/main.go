// Command tracewait reads an execution trace of a projector and says where
// each human input it saw waited. The projector notes the steps of its
// commits in a trace (internal/projector/tracelog.go: "<partition> h.taken"
// and so on); between two steps of an input, the goroutine that took the
// second one either ran, waited for a P (runnable) or was parked, and the
// trace says which, for how long, and where it parked (a lock, a channel,
// a wait for GC assist credit); it also says how much of that time the
// goroutine spent in GC mark assists, running or parked, and how much of
// the trace the GC spent marking. That is the question the stage
// histograms cannot answer.
//
//	curl -o trace.out 'http://<projector -http-addr>/debug/pprof/trace?seconds=20'   (-pprof)
//	go run ./bench/tracewait trace.out                 a summary per step
//	go run ./bench/tracewait -slow 100ms trace.out     and each input slower than that, step by step
//	go run ./bench/tracewait -agent -agent-slow 500ms trace.out
//	                                                    and the agent lane's commit cycles (how often each
//	                                                    partition commits, and where a long cycle went)
package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	slow := flag.Duration("slow", 0, "also print, step by step, each input slower than this from dispatch to reaped (0: none)")
	agent := flag.Bool("agent", false, "also report the agent lane's commit cycles, per partition and step by step")
	agentSlow := flag.Duration("agent-slow", 0, "with -agent, also print each commit cycle longer than this, step by step (0: none)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: tracewait [-slow d] [-agent [-agent-slow d]] trace.out")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracewait:", err)
		os.Exit(1)
	}
	defer f.Close()
	t, err := read(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracewait:", err)
		os.Exit(1)
	}
	report(os.Stdout, t, *slow)
	if *agent {
		reportAgent(os.Stdout, t, *agentSlow)
	}
}

// step is one note of the projector's: a step of a partition's commit.
type step struct {
	at        trace.Time
	g         trace.GoID
	partition string
	name      string // h.taken, a.prepared, ...
}

// span is a stretch of a goroutine in one state; why is where it parked.
type span struct {
	from, to trace.Time
	state    trace.GoState
	why      string
}

// parsed is what the report needs of a trace: the notes, the goroutines'
// states, the stretches each goroutine spent in GC mark assists (counted
// as running, or parked waiting for credit, by its states), and the GC
// mark phases.
type parsed struct {
	steps   []step
	spans   map[trace.GoID][]span
	assists map[trace.GoID][]stretch
	marks   []stretch
	first   trace.Time
	last    trace.Time
}

// stretch is a time range.
type stretch struct{ from, to trace.Time }

// read parses a trace: the projector's notes, and every goroutine's states.
func read(rd io.Reader) (*parsed, error) {
	r, err := trace.NewReader(rd)
	if err != nil {
		return nil, fmt.Errorf("reading the trace: %w", err)
	}
	p := &parsed{spans: map[trace.GoID][]span{}, assists: map[trace.GoID][]stretch{}}
	open := map[trace.GoID]span{}
	assisting := map[trace.GoID]trace.Time{}
	var marking trace.Time
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the trace: %w", err)
		}
		if p.first == 0 {
			p.first = ev.Time()
		}
		p.last = ev.Time()
		switch ev.Kind() {
		case trace.EventRangeBegin, trace.EventRangeEnd:
			begin := ev.Kind() == trace.EventRangeBegin
			switch name := ev.Range().Name; {
			case name == "GC mark assist":
				g := ev.Goroutine()
				if begin {
					assisting[g] = ev.Time()
				} else if from, ok := assisting[g]; ok {
					p.assists[g] = append(p.assists[g], stretch{from, ev.Time()})
					delete(assisting, g)
				}
			case name == "GC concurrent mark phase":
				if begin {
					marking = ev.Time()
				} else if marking != 0 {
					p.marks = append(p.marks, stretch{marking, ev.Time()})
					marking = 0
				}
			}
		case trace.EventLog:
			if l := ev.Log(); l.Category == "canopy" {
				part, name, _ := strings.Cut(l.Message, " ")
				p.steps = append(p.steps, step{ev.Time(), ev.Goroutine(), part, name})
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			id := st.Resource.Goroutine()
			if s, ok := open[id]; ok {
				s.to = ev.Time()
				p.spans[id] = append(p.spans[id], s)
			}
			_, to := st.Goroutine()
			s := span{from: ev.Time(), state: to}
			if to == trace.GoWaiting {
				s.why = st.Reason + " in " + caller(ev.Stack())
			}
			open[id] = s
		}
	}
	return p, nil
}

// caller is the innermost function of a stack outside the runtime and the
// standard library's sync: where a goroutine parked.
func caller(st trace.Stack) string {
	for f := range st.Frames() {
		if !strings.HasPrefix(f.Func, "runtime.") && !strings.HasPrefix(f.Func, "sync.") && !strings.HasPrefix(f.Func, "internal/") {
			return short(f.Func)
		}
	}
	return "?"
}

func short(fn string) string {
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

// split is how goroutine g spent [a, b): running, runnable, parked, and
// parked by reason.
type split struct {
	running, runnable, parked time.Duration
	// assist is the part of the three spent in GC mark assists.
	assist time.Duration
	why    map[string]time.Duration
}

// overlap is how much of [a, b) the stretches cover.
func overlap(ss []stretch, a, b trace.Time) time.Duration {
	var d time.Duration
	for _, s := range ss {
		if lo, hi := max(s.from, a), min(s.to, b); hi > lo {
			d += time.Duration(hi - lo)
		}
	}
	return d
}

func (p *parsed) split(g trace.GoID, a, b trace.Time) split {
	s := split{why: map[string]time.Duration{}, assist: overlap(p.assists[g], a, b)}
	for _, sp := range p.spans[g] {
		lo, hi := max(sp.from, a), min(sp.to, b)
		if hi <= lo {
			continue
		}
		d := time.Duration(hi - lo)
		switch sp.state {
		case trace.GoRunning:
			s.running += d
		case trace.GoRunnable:
			s.runnable += d
		default:
			s.parked += d
			s.why[sp.why] += d
		}
	}
	return s
}

// input is one human input's steps, from dispatched to reaped.
type input struct {
	partition string
	steps     []step
}

func (in input) total() time.Duration {
	return time.Duration(in.steps[len(in.steps)-1].at - in.steps[0].at)
}

// inputs are the human inputs whose every step from dispatched to reaped
// is in the trace. Input handed over together (one fetch, one commit) is
// one.
func (p *parsed) inputs() []input {
	var out []input
	for i, s := range p.steps {
		if s.name != "h.dispatched" {
			continue
		}
		in := input{partition: s.partition, steps: []step{s}}
		for _, n := range p.steps[i+1:] {
			if n.partition != s.partition || !strings.HasPrefix(n.name, "h.") {
				continue
			}
			if n.name == "h.dispatched" {
				continue // more input on its way: the same commit carries it
			}
			in.steps = append(in.steps, n)
			if n.name == "h.reaped" {
				out = append(out, in)
				break
			}
		}
	}
	return out
}

func report(w io.Writer, p *parsed, slow time.Duration) {
	ins := p.inputs()
	fmt.Fprintf(w, "%d human inputs from dispatch to reaped in the trace\n", len(ins))
	if len(ins) == 0 {
		return
	}
	var totals []time.Duration
	for _, in := range ins {
		totals = append(totals, in.total())
	}
	fmt.Fprintf(w, "dispatched to reaped: %s\n", quantiles(totals))
	if all := time.Duration(p.last - p.first); all > 0 {
		fmt.Fprintf(w, "the GC was marking %.0f%% of the trace's %v (%d phases)\n", 100*float64(overlap(p.marks, p.first, p.last))/float64(all),
			all.Round(time.Millisecond), len(p.marks))
	}
	fmt.Fprintln(w)
	stepTable(w, p, ins)
	printSlow(w, p, ins, slow, "from dispatch to reaped")
}

// printSlow writes, step by step, each of ins that took slow or longer,
// headed "partition <p>, <its time> <what>"; none when slow is 0.
func printSlow(w io.Writer, p *parsed, ins []input, slow time.Duration, what string) {
	if slow <= 0 {
		return
	}
	for _, in := range ins {
		if in.total() < slow {
			continue
		}
		fmt.Fprintf(w, "\npartition %s, %v %s:\n", in.partition, in.total().Round(100*time.Microsecond), what)
		for i := 1; i < len(in.steps); i++ {
			a, b := in.steps[i-1], in.steps[i]
			s := p.split(b.g, a.at, b.at)
			fmt.Fprintf(w, "  %8.1f ms  %-12s g%-6d ran %.1f, runnable %.1f, parked %.1f ms, in GC assist %.1f ms  %s\n", ms(b.at-in.steps[0].at), b.name, b.g,
				ms(trace.Time(s.running)), ms(trace.Time(s.runnable)), ms(trace.Time(s.parked)), ms(trace.Time(s.assist)), top(s.why, 2))
		}
	}
}

// stepTable writes, for each pair of consecutive steps of ins, the time
// between them and how the goroutine that took the second one spent it.
func stepTable(w io.Writer, p *parsed, ins []input) {
	// Per step: the time since the step before, and how the goroutine
	// that took it spent that time.
	type agg struct {
		d                                 []time.Duration
		running, runnable, parked, assist time.Duration
		why                               map[string]time.Duration
	}
	by := map[string]*agg{}
	var order []string
	for _, in := range ins {
		for i := 1; i < len(in.steps); i++ {
			a, b := in.steps[i-1], in.steps[i]
			k := a.name + " > " + b.name
			g := by[k]
			if g == nil {
				g = &agg{why: map[string]time.Duration{}}
				by[k] = g
				order = append(order, k)
			}
			g.d = append(g.d, time.Duration(b.at-a.at))
			s := p.split(b.g, a.at, b.at)
			g.running += s.running
			g.runnable += s.runnable
			g.parked += s.parked
			g.assist += s.assist
			for r, d := range s.why {
				g.why[r] += d
			}
		}
	}
	fmt.Fprintf(w, "%-28s %-40s %9s %9s %9s %10s  %s\n", "step", "time since the step before", "running", "runnable", "parked", "GC assist", "parked most in")
	for _, k := range order {
		g := by[k]
		pct := func(d time.Duration) float64 {
			if all := g.running + g.runnable + g.parked; all > 0 {
				return 100 * float64(d) / float64(all)
			}
			return 0
		}
		fmt.Fprintf(w, "%-28s %-40s %8.0f%% %8.0f%% %8.0f%% %9.0f%%  %s\n", k, quantiles(g.d),
			pct(g.running), pct(g.runnable), pct(g.parked), pct(g.assist), top(g.why, 2))
	}
}

// cycles are the agent lane's commit cycles: for each partition, the steps
// from one a.publish up to the next (which the next cycle begins with).
// The last cycle of each partition, with no publish after it, is left out.
func (p *parsed) cycles() []input {
	var out []input
	open := map[string]*input{}
	for _, s := range p.steps {
		if !strings.HasPrefix(s.name, "a.") {
			continue
		}
		cur := open[s.partition]
		if s.name == "a.publish" {
			if cur != nil {
				cur.steps = append(cur.steps, s)
				out = append(out, *cur)
			}
			open[s.partition] = &input{partition: s.partition, steps: []step{s}}
			continue
		}
		if cur != nil {
			cur.steps = append(cur.steps, s)
		}
	}
	return out
}

// reportAgent writes the agent lane's commit cycles: per partition how
// often it published, then the steps of a cycle, and with slow each cycle
// longer than that.
func reportAgent(w io.Writer, p *parsed, slow time.Duration) {
	cs := p.cycles()
	fmt.Fprintf(w, "\n%d agent-lane commit cycles (a.publish to the next) in the trace\n", len(cs))
	if len(cs) == 0 {
		return
	}
	byPart := map[string][]time.Duration{}
	for _, c := range cs {
		byPart[c.partition] = append(byPart[c.partition], c.total())
	}
	for _, part := range slices.Sorted(maps.Keys(byPart)) {
		fmt.Fprintf(w, "partition %-3s %4d cycles: %s\n", part, len(byPart[part]), quantiles(byPart[part]))
	}
	fmt.Fprintln(w)
	stepTable(w, p, cs)
	printSlow(w, p, cs, slow, "a commit cycle")
}

func ms(d trace.Time) float64 { return float64(d) / 1e6 }

func quantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(f float64) time.Duration { return s[int(f*float64(len(s)-1))] }
	r := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s p99 %s max %s", r(q(0.5)), r(q(0.99)), r(s[len(s)-1]))
}

// top names the n reasons that took longest.
func top(m map[string]time.Duration, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return int(m[b] - m[a]) })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s (%v)", k, m[k].Round(100*time.Microsecond)))
	}
	return strings.Join(parts, ", ")
}
