package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDataDriven runs the scenarios in testdata/scenarios/. Each file is a sequence of
// commands against one projection:
//
//	apply [batch=N]      events, one per line (see parseEvent); prints the
//	                     wakes raised, one batch of N lines at a time
//	advance run=R to=T   moves run R's clock to T; prints the wakes of timers
//	tree [run=R]         prints every node of the run and its totals
//	snapshot [run=R] [max-nodes=N] [agents=a,b] [corr=c]
//	                     prints a snapshot's inclusion order and counters
//	config max-depth=N progress-interval=D forward-grace=D history-size=N
//	       max-wake-bytes=N max-wake-triggers=N max-snapshot-bytes=N max-nodes=N
//	                     starts a new projection with that config (or
//	                     prints why Validate refuses it)
//	burst chain|leases|results [nodes=N] [owner-length=N]
//	                     applies a workload.Burst run's events in one batch:
//	                     a chain created leaf-first, N leases falling due
//	                     together, or N results; prints its wakes with their triggers
//	                     summarised (count, first, last, bytes), and of
//	                     many wakes the first three and the last two
//	read-model [run=R] [stale] [only=field,field]
//	                     prints the run's read model (or only some of its
//	                     top-level fields) as JSON, built at the run's clock
//	history [run=R] [limit=N] [pages=N]
//	                     prints up to N pages (default 1) of the run's
//	                     history window, following the cursors
//	config ... retention=D
//	                     the projection has a store (in memory: memStorage)
//	                     and expires finished runs after D (retention.go)
//	commit               commits to the store
//	fire now=T           fires every timer due by wall clock T (expiries
//	                     among them); prints the wakes and the expiries
//	lookup [run=R]       prints whether the run is live, unknown or expired
//	keys [run=R]         prints the run's keys in the store (after commit)
//	config ... store max-hot-nodes=N
//	                     the projection has a store (in memory), and keeps N
//	                     nodes in memory: after a commit, the runs it drops
//	                     are read back from the store
//	in-memory            prints the ids of the runs in memory
//	session [session=S] [limit=N] [history=N] [only=r1,r2] [pages=N]
//	                     prints up to N pages (default 1) of what the
//	                     projection holds of session S (default s1), following
//	                     the run list's cursor (session_test.go)
//	session-history [session=S] [limit=N] [cursor=C] [pages=N]
//	                     prints up to N pages of the session's history
//
// Every wake printed is checked (checkParts): each run's triggers are in
// its wakes exactly once and in order, every wake is within the wake
// bounds, split wakes are numbered, and no two wakes have one id. A split
// wake prints its part and id, and, unless summarised, its snapshot's nodes.
//
// Rewrite the expected output with: go test ./pkg/projection -rewrite
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		h := &harness{t: t}
		if err := h.reset(Config{}); err != nil {
			t.Fatal(err)
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return h.run(t, d)
		})
	})
}

type harness struct {
	t   *testing.T
	p   *Projection
	seq int
	// stored: the config asked for a store (config store).
	stored bool
	// ids are the wake ids printed so far: no two wakes may share one.
	ids map[string]bool
}

func (h *harness) reset(c Config) error {
	p, err := New(c)
	if c.Retention > 0 || h.stored { // retention needs a store
		p, err = Open(c, newMemStorage())
	}
	if err != nil {
		return err
	}
	h.p, h.ids = p, map[string]bool{}
	return nil
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	arg := func(key, def string) string {
		for _, a := range d.CmdArgs {
			if a.Key == key && len(a.Vals) > 0 {
				return strings.Join(a.Vals, ",")
			}
		}
		return def
	}
	switch d.Cmd {
	case "config":
		var c Config
		if v := arg("max-depth", ""); v != "" {
			c.MaxDepth, _ = strconv.Atoi(v)
		}
		if v := arg("progress-interval", ""); v != "" {
			c.ProgressInterval, _ = time.ParseDuration(v)
		}
		if v := arg("forward-grace", ""); v != "" {
			c.ForwardGrace, _ = time.ParseDuration(v)
		}
		if v := arg("history-size", ""); v != "" {
			c.HistorySize, _ = strconv.Atoi(v)
		}
		if v := arg("dedupe-window", ""); v != "" {
			c.DedupeWindow, _ = strconv.Atoi(v)
		}
		if v := arg("retention", ""); v != "" {
			c.Retention, _ = time.ParseDuration(v)
		}
		if v := arg("max-wake-bytes", ""); v != "" {
			c.MaxWakeBytes, _ = strconv.Atoi(v)
		}
		if v := arg("max-wake-triggers", ""); v != "" {
			c.MaxWakeTriggers, _ = strconv.Atoi(v)
		}
		if v := arg("max-snapshot-bytes", ""); v != "" {
			c.Limits.MaxBytes, _ = strconv.Atoi(v)
		}
		if v := arg("max-nodes", ""); v != "" {
			c.Limits.MaxNodes, _ = strconv.Atoi(v)
		}
		if v := arg("max-hot-nodes", ""); v != "" {
			c.MaxHotNodes, _ = strconv.Atoi(v)
		}
		h.stored = d.HasArg("store")
		if err := h.reset(c); err != nil {
			return err.Error()
		}
		return "ok"
	case "burst":
		b := workload.Burst{RunID: "run-1", Seed: 31}
		if v := arg("nodes", ""); v != "" {
			b.Nodes, _ = strconv.Atoi(v)
		}
		if v := arg("owner-length", ""); v != "" {
			n, _ := strconv.Atoi(v)
			b.Owner = strings.Repeat("o", n)
		}
		var events []topics.Event
		switch {
		case d.HasArg("chain"):
			events = b.LeafFirstChain()
		case d.HasArg("leases"):
			events, _ = b.LeasesDueTogether()
		case d.HasArg("results"):
			events = b.Results()
		default:
			t.Fatalf("%s: burst chain or burst leases", d.Pos)
		}
		var pending Pending
		for i := range events {
			trigs, _, err := h.p.ApplyEvent(&events[i])
			if err != nil {
				t.Fatal(err)
			}
			pending.Add(events[i].RunID, trigs)
		}
		var out strings.Builder
		fmt.Fprintf(&out, "%d events, %d triggers\n", len(events), pending.Most())
		h.flushWith(t, &out, &pending, true)
		return out.String()
	case "apply":
		batch, _ := strconv.Atoi(arg("batch", "1"))
		var out strings.Builder
		var pending Pending
		lines := strings.Split(strings.TrimSpace(d.Input), "\n")
		for i, line := range lines {
			ev, err := h.parseEvent(line)
			if err != nil {
				fmt.Fprintf(&out, "line %d: %v\n", i+1, err)
			} else {
				trigs, dup, err := h.p.ApplyEvent(ev)
				if err != nil {
					fmt.Fprintf(&out, "refused %s: %v\n", ev.ID, err)
				}
				if dup {
					fmt.Fprintf(&out, "duplicate %s\n", ev.ID)
				}
				pending.Add(ev.RunID, trigs)
			}
			if (i+1)%batch == 0 || i == len(lines)-1 {
				h.flush(t, &out, &pending)
			}
		}
		return out.String()
	case "advance":
		run := arg("run", "run-1")
		to := parseClock(t, arg("to", ""))
		var pending Pending
		pending.Add(run, h.p.Advance(run, to))
		var out strings.Builder
		h.flush(t, &out, &pending)
		if out.Len() == 0 {
			return "no wakes"
		}
		return out.String()
	case "read-model":
		run := arg("run", "run-1")
		var now time.Time
		if r, ok := h.p.Run(run); ok {
			now = r.Clock().Std()
		}
		m, err := h.p.ReadModel(run, now, d.HasArg("stale"))
		if err != nil {
			return err.Error()
		}
		var v any = m
		if only := arg("only", ""); only != "" {
			// Only some top-level fields, to keep long scenarios readable.
			b, _ := json.Marshal(m)
			var all map[string]json.RawMessage
			_ = json.Unmarshal(b, &all)
			some := map[string]json.RawMessage{}
			for _, k := range strings.Split(only, ",") {
				some[k] = all[k]
			}
			v = some
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	case "history":
		run := arg("run", "run-1")
		limit, _ := strconv.Atoi(arg("limit", "0"))
		pages, _ := strconv.Atoi(arg("pages", "1"))
		var out strings.Builder
		cursor := arg("cursor", "")
		for i := 0; i < pages; i++ {
			pg, err := h.p.History(run, cursor, limit)
			if err != nil {
				return err.Error()
			}
			fmt.Fprintf(&out, "page %d: as_of=%d oldest=%d truncated=%v window=%d\n", i+1, pg.AsOfEventSeq, pg.OldestRetainedSeq, pg.Truncated, pg.WindowSize)
			for _, e := range pg.Entries {
				fmt.Fprintf(&out, "  %d %s %s %s @%s", e.Seq, e.EventID, e.Type, e.AgentID, clock(e.At))
				if e.CorrelationID != nil {
					fmt.Fprintf(&out, " corr=%s", *e.CorrelationID)
				}
				if e.Status != nil {
					fmt.Fprintf(&out, " status=%s", *e.Status)
				}
				out.WriteString("\n")
			}
			if pg.NextCursor == "" {
				out.WriteString("end\n")
				break
			}
			seq, err := DecodeCursor(pg.NextCursor)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "next below %d\n", seq)
			cursor = pg.NextCursor
		}
		return out.String()
	case "in-memory":
		ids := h.p.RunIDs()
		slices.Sort(ids)
		return fmt.Sprint(ids)
	case "session":
		return h.session(t, d, arg)
	case "session-history":
		return h.sessionHistory(t, d, arg)
	case "commit":
		if err := h.p.Commit(nil); err != nil {
			return err.Error()
		}
		return "ok"
	case "fire":
		var pending Pending
		now := parseClock(t, arg("now", ""))
		h.p.FireDue(now, &pending)
		expired := h.p.ExpireDue(now, &pending)
		var out strings.Builder
		h.flush(t, &out, &pending)
		fmt.Fprintf(&out, "expired %d\n", expired)
		return out.String()
	case "lookup":
		r, err := h.p.Lookup(arg("run", "run-1"))
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("live seq=%d finished=%v", r.Seq(), r.Finished())
	case "keys":
		prefix := rel([]byte{'r'}, []byte(arg("run", "run-1")), []byte{0})
		var out strings.Builder
		err := h.p.store.scan(prefix, func(k, _ []byte) error {
			fmt.Fprintf(&out, "%c %q\n", k[0], k[1:])
			return nil
		})
		if err != nil {
			return err.Error()
		}
		if out.Len() == 0 {
			return "none"
		}
		return out.String()
	case "tree":
		r, ok := h.p.Run(arg("run", "run-1"))
		if !ok {
			return "no such run"
		}
		return dumpRun(r)
	case "snapshot":
		r, ok := h.p.Run(arg("run", "run-1"))
		if !ok {
			return "no such run"
		}
		l := h.p.cfg.Limits
		if v := arg("max-nodes", ""); v != "" {
			l.MaxNodes, _ = strconv.Atoi(v)
		}
		if v := arg("max-handles", ""); v != "" {
			l.MaxCorrelationHandles, _ = strconv.Atoi(v)
		}
		w := snapshot.Wake{SnapshotID: "snap", Seq: r.Seq(), At: r.Clock()}
		if v := arg("agents", ""); v != "" {
			w.AgentIDs = strings.Split(v, ",")
		}
		if v := arg("corr", ""); v != "" {
			w.CorrelationIDs = strings.Split(v, ",")
		}
		s, info, err := snapshot.Build(r, w, l, r.Clock().Std())
		if err != nil {
			return err.Error()
		}
		return dumpSnapshot(s, info)
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		return ""
	}
}

func (h *harness) flush(t *testing.T, out *strings.Builder, pending *Pending) {
	h.flushWith(t, out, pending, false)
}

// flushWith builds and prints pending's wakes, each trigger on a line of
// its own, or, summarised, only how many, the first and the last, and the
// wake's size.
func (h *harness) flushWith(t *testing.T, out *strings.Builder, pending *Pending, summarise bool) {
	want := map[string][]topics.Trigger{}
	for _, run := range pending.order {
		want[run] = slices.Clone(pending.trigs[run])
	}
	built, err := h.p.Wakes(pending, time.Time{}, topics.Time{})
	pending.Reset()
	if err != nil {
		t.Fatal(err)
	}
	checkParts(t, h.p.cfg, built, want, h.ids)
	// Given back once checked, as a projector gives back a commit's wakes'
	// buffers and nodes: the next wakes are built in memory that held
	// these, and must still give Marshal's bytes (below).
	defer func() {
		for _, b := range built {
			h.p.RecycleWakeBuffers([][]byte{b.Info.Framed})
			h.p.RecycleWakeNodes(b.Wake.AgentTreeSnapshot.Nodes)
		}
	}()
	for i, b := range built {
		// Summarised, the first three wakes and the last two of many.
		if summarise && len(built) > 6 && i >= 3 && i < len(built)-2 {
			if i == 3 {
				fmt.Fprintf(out, "... %d more wakes alike\n", len(built)-5)
			}
			continue
		}
		w := b.Wake
		// The snapshot's encoding the builder kept, spliced into the wake,
		// gives the bytes Marshal does.
		enc, err := topics.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := topics.AppendWakeJSON(nil, w, b.Info.Encoded); err != nil || string(got) != string(enc) {
			t.Fatalf("the wake with its snapshot's kept encoding is not Marshal's (%v):\n%s\n%s", err, got, enc)
		}
		// And written around it, in the room the builder left
		// (WakeJSONAround changes only the room and the byte after it).
		room := len(b.Info.Framed) - len(b.Info.Encoded)
		if got, ok := topics.WakeJSONAround(b.Info.Framed, room, w); !ok || string(got) != string(enc) {
			t.Fatalf("the wake written around its snapshot's encoding (room %d, ok %v) is not Marshal's:\n%s\n%s", room, ok, got, enc)
		}
		s := &w.AgentTreeSnapshot
		fmt.Fprintf(out, "wake %s seq=%d nodes=%d/%d", w.Lane, s.AsOfEventSeq, s.Summary.NodeCountIncluded, s.Summary.NodeCountTotal)
		if w.Part != nil {
			fmt.Fprintf(out, " part=%d/%d id=%s", w.Part.Number, w.Part.Count, w.WakeID)
		}
		out.WriteString("\n")
		trigger := func(tr topics.Trigger) {
			fmt.Fprintf(out, "%s %s", tr.Kind, tr.AgentID)
			if tr.Detail != nil {
				fmt.Fprintf(out, " (%s)", clip(*tr.Detail))
			}
			fmt.Fprintf(out, " @%s", clock(tr.At))
			if tr.EventID == nil {
				out.WriteString(" timer")
			}
			if tr.Input != nil {
				fmt.Fprintf(out, " input=%q", tr.Input.Text)
			}
		}
		if summarise {
			fmt.Fprintf(out, "  %d triggers in %d bytes: ", len(w.Triggers), len(enc))
			trigger(w.Triggers[0])
			out.WriteString(" ... ")
			trigger(w.Triggers[len(w.Triggers)-1])
			out.WriteString("\n")
			continue
		}
		for _, tr := range w.Triggers {
			out.WriteString("  ")
			trigger(tr)
			out.WriteString("\n")
		}
		if w.Part != nil {
			out.WriteString("  snapshot:")
			for _, n := range s.Nodes {
				fmt.Fprintf(out, " %s", n.AgentID)
			}
			out.WriteString("\n")
		}
	}
}

// clip shortens a long detail (a long lease owner) for printing.
func clip(s string) string {
	if len(s) > 24 {
		return fmt.Sprintf("%s...(%d)", s[:8], len(s))
	}
	return s
}

// checkParts checks built, the wakes of the triggers want (by run): each
// run's triggers are those of its wakes, in order, each once (as the wakes
// carry them: ids cut at the snapshot's cut); a run's wakes are
// consecutive, numbered 1 to count when there are several and not
// numbered when there is one; every wake encodes within cfg.MaxWakeBytes,
// holds at most cfg.MaxWakeTriggers triggers and names at most
// topics.MaxAckAgents agents in acknowledged triggers; and no wake has an id
// in ids (or another of built's), to which their ids are added.
func checkParts(t *testing.T, cfg Config, built []Built, want map[string][]topics.Trigger, ids map[string]bool) {
	t.Helper()
	var runs []string
	byRun := map[string][]Built{}
	for _, b := range built {
		run := b.Wake.RunID
		if len(runs) == 0 || runs[len(runs)-1] != run {
			if _, ok := byRun[run]; ok {
				t.Errorf("run %s: its wakes are not consecutive", run)
			}
			runs = append(runs, run)
		}
		byRun[run] = append(byRun[run], b)
	}
	for run, parts := range byRun {
		pos := 0
		for i, b := range parts {
			w := b.Wake
			switch {
			case len(parts) == 1 && w.Part != nil:
				t.Errorf("run %s: its only wake has part %+v", run, *w.Part)
			case len(parts) > 1 && (w.Part == nil || *w.Part != topics.WakePart{Number: i + 1, Count: len(parts)}):
				t.Errorf("run %s: wake %d of %d has part %+v", run, i+1, len(parts), w.Part)
			}
			if w.Lane != parts[0].Wake.Lane {
				t.Errorf("run %s: part %d is on lane %s, part 1 on %s", run, i+1, w.Lane, parts[0].Wake.Lane)
			}
			enc, err := topics.AppendWakeJSON(nil, w, b.Info.Encoded)
			if err != nil {
				t.Fatal(err)
			}
			if len(enc) > cfg.MaxWakeBytes || len(w.Triggers) > cfg.MaxWakeTriggers || len(w.Triggers) == 0 {
				t.Errorf("run %s: wake %d of %d: %d bytes and %d triggers, want at most %d and 1 to %d",
					run, i+1, len(parts), len(enc), len(w.Triggers), cfg.MaxWakeBytes, cfg.MaxWakeTriggers)
			}
			acked := map[string]bool{}
			for _, tr := range w.Triggers {
				if tr.Kind.Acknowledged() {
					acked[tr.AgentID] = true
				}
			}
			if len(acked) > topics.MaxAckAgents {
				t.Errorf("run %s: wake %d of %d names %d agents in acknowledged triggers, more than one acknowledgement holds (%d)",
					run, i+1, len(parts), len(acked), topics.MaxAckAgents)
			}
			end := min(pos+len(w.Triggers), len(want[run]))
			if exp := cutTriggers(want[run][pos:end], b.Info.Cut); !reflect.DeepEqual(w.Triggers, exp) {
				t.Errorf("run %s: wake %d of %d holds triggers %d to %d other than those raised", run, i+1, len(parts), pos, pos+len(w.Triggers))
			}
			pos += len(w.Triggers)
			if ids[w.WakeID] {
				t.Errorf("run %s: wake %d of %d has the id %s of another wake", run, i+1, len(parts), w.WakeID)
			}
			ids[w.WakeID] = true
		}
		if pos != len(want[run]) {
			t.Errorf("run %s: its wakes hold %d triggers, %d were raised", run, pos, len(want[run]))
		}
	}
	for run := range want {
		if _, ok := byRun[run]; !ok {
			t.Errorf("run %s: no wake for its %d triggers", run, len(want[run]))
		}
	}
}

// parseEvent reads the compact event notation of the testdata files:
//
//	TIME AGENT TYPE [JSON-DATA] [key=value ...]
//
// TIME is HH:MM:SS[.mmm] on 2026-02-14 UTC; keys are id, run, corr, session,
// thread, and trace (the trace id a traceparent header would carry). The
// event id defaults to e1, e2, ... in file order.
func (h *harness) parseEvent(line string) (*topics.Event, error) {
	fields := strings.Fields(line)
	if len(fields) < 3 {
		return nil, fmt.Errorf("want TIME AGENT TYPE [DATA] [k=v...], got %q", line)
	}
	h.seq++
	e := map[string]any{
		"specversion": "1.0", "id": "e" + strconv.Itoa(h.seq), "source": "/test", "type": fields[2],
		"time": "2026-02-14T" + fields[0] + "Z", "runid": "run-1", "agentid": fields[1], "schemaversion": 1,
	}
	rest := strings.TrimSpace(strings.TrimPrefix(line, strings.Join(fields[:3], " ")))
	if strings.HasPrefix(rest, "{") {
		dec := json.NewDecoder(strings.NewReader(rest))
		var data json.RawMessage
		if err := dec.Decode(&data); err != nil {
			return nil, err
		}
		e["data"] = data
		rest = strings.TrimSpace(rest[dec.InputOffset():])
	}
	trace := ""
	for _, kv := range strings.Fields(rest) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "trace":
			trace = v
		case "id":
			e["id"] = v
		case "run":
			e["runid"] = v
		case "corr":
			e["correlationid"] = v
		case "session":
			e["sessionid"] = v
		case "thread":
			e["threadid"] = v
		default:
			return nil, fmt.Errorf("unknown key %q", k)
		}
	}
	b, _ := json.Marshal(e)
	ev, err := topics.DecodeEvent(b)
	if ev != nil {
		ev.TraceID = trace
	}
	return ev, err
}

func parseClock(t *testing.T, s string) topics.Time {
	tt, err := topics.ParseTime("2026-02-14T" + s + "Z")
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

// clock prints a time of the test day compactly.
func clock(t topics.Time) string {
	if t.IsZero() {
		return "-"
	}
	s := t.Std().Format("15:04:05.000")
	return strings.TrimSuffix(s, ".000")
}

func dumpRun(r *Run) string {
	var b strings.Builder
	ids := make([]string, 0, len(r.nodes))
	for id := range r.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := r.nodes[id]
		fmt.Fprintf(&b, "%s role=%s", id, orDash(string(n.Role)))
		fmt.Fprintf(&b, " parent=%s depth=%d status=%s", orDash(n.ParentAgentID), n.depth, n.Status)
		if n.statusReason != "" {
			fmt.Fprintf(&b, "(%s)", n.statusReason)
		}
		if !n.LeaseExpiresAt.IsZero() {
			fmt.Fprintf(&b, " lease=%s@%s", n.LeaseOwner, clock(n.LeaseExpiresAt))
			if n.overdue {
				b.WriteString("(overdue)")
			}
		}
		if n.LastSignalKind != "" {
			fmt.Fprintf(&b, " signal=%s@%s", n.LastSignalKind, clock(n.LastSignalAt))
		}
		if n.LastCorrelationID != "" {
			fmt.Fprintf(&b, " corr=%s", n.LastCorrelationID)
		}
		if n.OpenRequestCount > 0 || n.LastRequestKind != "" {
			fmt.Fprintf(&b, " requests=%d(%s) keys=%v", n.OpenRequestCount, n.LastRequestKind, n.RecentDedupeKeys)
		}
		if w := n.watchdog; w.Dispatched {
			fmt.Fprintf(&b, " watchdog=%s", w.Status)
			if w.ForwardedToMain {
				b.WriteString(" forwarded")
			}
		}
		b.WriteString("\n")
	}
	s := r.Stats()
	c := s.ByStatus
	fmt.Fprintf(&b, "stats nodes=%d idle=%d running=%d blocked=%d failed=%d completed=%d unknown=%d overdue=%d open_requests=%d\n",
		s.NodeCount, c.Idle, c.Running, c.Blocked, c.Failed, c.Completed, c.Unknown, s.OverdueLeases, s.OpenRequests)
	var handles []string
	for h := range r.ActiveCorrelations() {
		handles = append(handles, h)
	}
	fmt.Fprintf(&b, "handles %v\n", handles)
	fmt.Fprintf(&b, "clock %s seq %d root %s\n", clock(r.clock), r.seq, orDash(r.root))
	for _, d := range r.diagnostics {
		fmt.Fprintf(&b, "diagnostic %s %s @%s %s\n", d.Kind, d.AgentID, clock(d.At), d.Detail)
	}
	if r.act != nil {
		enc, err := json.Marshal(r.act)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(&b, "activity %s\n", enc)
	}
	return b.String()
}

func dumpSnapshot(s *topics.AgentTreeSnapshot, info snapshot.Info) string {
	var b strings.Builder
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, "%s %s", n.AgentID, n.Status)
		if n.LeaseRemainingMs != nil {
			fmt.Fprintf(&b, " lease_remaining_ms=%d", *n.LeaseRemainingMs)
		}
		if n.LastSignalAt != nil {
			fmt.Fprintf(&b, " signal@%s", clock(*n.LastSignalAt))
		}
		b.WriteString("\n")
	}
	m := s.TruncationMeta
	fmt.Fprintf(&b, "truncated=%v omitted=%d omitted_handles=%d overdue=%d handles=%v bytes=%d\n",
		s.Truncated, m.OmittedCountTotal, m.OmittedCorrelationHandles, s.Summary.OverdueLeaseCount, s.Summary.ActiveCorrelationHandles, info.Bytes)
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// TestHistoryPageUpToWindow: a history page may hold the whole window
// (-history-size, default 256), not only 100 entries: with the default
// window, limit=256 was refused with a 400 while 256 entries were kept.
func TestHistoryPageUpToWindow(t *testing.T) {
	for _, window := range []int{DefaultHistorySize, 24} {
		p, err := New(Config{HistorySize: window})
		if err != nil {
			t.Fatal(err)
		}
		evs := workload.Generate(workload.Spec{RunID: "run-h", Nodes: 80, Seed: 5})
		for i := range evs {
			p.Apply(&evs[i])
		}
		if len(evs) < window {
			t.Fatalf("%d events do not fill a window of %d", len(evs), window)
		}
		most := MaxPage(window)
		pg, err := p.History("run-h", "", most)
		if err != nil || len(pg.Entries) != min(most, window) {
			t.Errorf("window %d: a page of %d: %v entries, %v; want %d", window, most, pageLen(pg), err, min(most, window))
		}
		if _, err := p.History("run-h", "", most+1); !errors.Is(err, ErrBadLimit) {
			t.Errorf("window %d: a page of %d: %v, want ErrBadLimit", window, most+1, err)
		}
	}
}

func pageLen(pg *HistoryPage) int {
	if pg == nil {
		return -1
	}
	return len(pg.Entries)
}
