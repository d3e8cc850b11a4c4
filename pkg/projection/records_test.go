package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// longID is an identifier at the contract's limit, topics.MaxIDLength
// characters, each but its tag of 4 bytes: the longest valid id in bytes
// whichever unit the limit counts in.
func longID(tag string, i int) string {
	suffix := tag + strconv.Itoa(i)
	return strings.Repeat("𝔸", topics.MaxIDLength-len(suffix)) + suffix
}

// bounded feeds the same events to a projection in memory and to one on a
// memStorage, commits the latter, checks that every change it makes is
// within MaxRecordBytes (memStorage refuses more, too) and that the run
// read back from the store is the one in memory.
type bounded struct {
	t   *testing.T
	cfg Config
	mem *Projection
	st  *memStorage
	p   *Projection
	run string
	at  time.Time
	n   int
	// largest is the largest change seen per record kind: 'm', 'n', 'j'...
	// for a run's records, 'o', 'd', 'w' for the others.
	largest map[byte]int
	// chunks counts the journal chunks each commit wrote, in order.
	chunks []int
}

func newBounded(t *testing.T, cfg Config, run string) *bounded {
	mem, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStorage()
	p, err := Open(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	return &bounded{t: t, cfg: cfg, mem: mem, st: st, p: p, run: run, at: time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC),
		largest: map[byte]int{}}
}

// apply applies an event of agent with payload data (and, when corr is
// set, that correlation id), a second later than the last, to both.
func (b *bounded) apply(agent string, data topics.Payload, corr string) *topics.Event {
	b.t.Helper()
	b.n++
	ev := &topics.Event{ID: longID("ev-", b.n), Source: "/t", Type: data.EventType(), Time: topics.NewTime(b.at.Add(time.Duration(b.n) * time.Second)),
		RunID: b.run, AgentID: agent, SchemaVersion: 1, CorrelationID: corr, Data: data}
	for _, p := range []*Projection{b.mem, b.p} {
		if _, dup, err := p.ApplyEvent(ev); dup || err != nil {
			b.t.Fatalf("event %d: dup %v, %v", b.n, dup, err)
		}
	}
	return ev
}

// commit commits the store-backed projection, checking every change.
func (b *bounded) commit() {
	b.t.Helper()
	c, err := b.p.Prepare(map[string]int64{"agent-events": int64(b.n)})
	if err != nil {
		b.t.Fatal(err)
	}
	chunks := 0
	for _, ch := range c {
		kind := ch.Key[0]
		if kind == 'r' {
			kind = ch.Key[len(b.run)+2]
		}
		if kind == 'j' && !ch.Delete {
			chunks++
		}
		size := len(ch.Key) + len(ch.Value)
		b.largest[kind] = max(b.largest[kind], size)
		if size > MaxRecordBytes {
			b.t.Errorf("a change of %d bytes to a %c record, over MaxRecordBytes (%d)", size, kind, MaxRecordBytes)
		}
	}
	b.chunks = append(b.chunks, chunks)
	if err := b.p.Finish(c, nil); err != nil {
		b.t.Fatal(err)
	}
}

// reload opens the store again and checks that the run read back from it
// is the one in memory; the reopened projection goes on.
func (b *bounded) reload() *Run {
	b.t.Helper()
	p, err := Open(b.cfg, b.st)
	if err != nil {
		b.t.Fatal(err)
	}
	b.p = p
	got, ok := p.Run(b.run)
	if !ok {
		b.t.Fatalf("run not in the store: %v", p.Err())
	}
	loadAll(b.t, got)
	if want, have := fullDump(b.t, b.mem, b.run), fullDump(b.t, p, b.run); want != have {
		b.t.Fatalf("the run read back differs:\nin memory:\n%s\nread back:\n%s", want, have)
	}
	return got
}

// logLargest logs the largest change of each kind seen.
func (b *bounded) logLargest() {
	for _, k := range slices.Sorted(maps.Keys(b.largest)) {
		b.t.Logf("largest %c record: %d bytes (%.1f%% of MaxRecordBytes)", k, b.largest[k], 100*float64(b.largest[k])/MaxRecordBytes)
	}
}

// fullDump is everything a run holds that its records carry: its tree,
// diagnostics, plans, requests, node request lists, history window and
// dedupe window.
func fullDump(t *testing.T, p *Projection, run string) string {
	t.Helper()
	r, ok := p.Run(run)
	if !ok {
		t.Fatalf("no run %s", run)
	}
	var s strings.Builder
	s.WriteString(dumpRun(r))
	for _, id := range slices.Sorted(maps.Keys(r.nodes)) {
		if n := r.peek(id); len(n.requests) > 0 {
			fmt.Fprintf(&s, "node %.12q requests %q\n", id, n.requests)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.requests)) {
		q := r.requests[id]
		fmt.Fprintf(&s, "request %q agent %.12q expires %s key %q\n", id, q.agentID, clock(q.expires), q.dedupeKey)
	}
	for _, id := range slices.Sorted(maps.Keys(r.plans)) {
		pl := r.plans[id]
		fmt.Fprintf(&s, "plan %q agent %.12q bands %d replan %v created %s\n", id, pl.AgentID, pl.BandCount, pl.Replan, clock(pl.CreatedAt))
		for _, i := range slices.Sorted(maps.Keys(pl.Bands)) {
			band := pl.Bands[i]
			fmt.Fprintf(&s, "  band %d parallel %v steps %d: %d kept\n", band.Index, band.Parallelizable, band.StepCount, len(band.Steps))
			for _, st := range band.Steps {
				fmt.Fprintf(&s, "    %q %d %q\n", st.StepID, st.Index, st.ChildAgentID)
			}
		}
	}
	fmt.Fprintf(&s, "history %s", historyDump(t, p, run))
	n := len(r.ids.ring)
	for k := range n {
		e := r.ids.ring[(r.ids.head+k)%n]
		fmt.Fprintf(&s, "id %#016x %#x\n", e.key, e.hash)
	}
	return s.String()
}

// TestRecordsAreBounded builds, for each record kind that grows with the
// input, the largest state valid events make (ids at their longest, lists
// at their bounds) and checks that every change a commit makes is within
// MaxRecordBytes and that the run read back from its records is the same.
func TestRecordsAreBounded(t *testing.T) {
	t.Run("journal", func(t *testing.T) {
		// One commit applies 2,000 events of a run with long event,
		// agent and correlation ids: about 6 MB of journal entries, split
		// over chunks; the next commit's push the first's out of the
		// windows, and their chunks are deleted.
		cfg := Config{DedupeWindow: 2000, HistorySize: 300}
		b := newBounded(t, cfg, longID("run-journal-", 0))
		var evs []*topics.Event
		for round := range 2 {
			for i := range 2000 {
				evs = append(evs, b.apply(longID("agent-", i%50), &topics.Heartbeat{}, longID("corr-", i)))
			}
			b.commit()
			if b.chunks[round] < 2 {
				t.Fatalf("commit %d wrote %d journal chunks, want several", round, b.chunks[round])
			}
			r := b.reload()
			spans, _, err := Journal(b.st, b.run)
			if err != nil {
				t.Fatal(err)
			}
			// The chunks are consecutive, end at the run's seq and hold
			// no chunk older than the windows.
			if spans[len(spans)-1].Last != r.Seq() || spans[0].First > r.Seq()-cfg.journalKeep()+1 || spans[0].Last <= r.Seq()-cfg.journalKeep() {
				t.Fatalf("commit %d: chunks %v for seq %d, keep %d", round, spans, r.Seq(), cfg.journalKeep())
			}
			for i := 1; i < len(spans); i++ {
				if spans[i].First != spans[i-1].Last+1 {
					t.Fatalf("commit %d: chunks %v are not consecutive", round, spans)
				}
			}
		}
		t.Logf("journal chunks per commit: %v", b.chunks)
		// Read back, the window still knows every id and its content.
		newest, oldest := evs[len(evs)-1], evs[len(evs)-cfg.DedupeWindow]
		for _, ev := range []*topics.Event{newest, oldest} {
			if _, dup, err := b.p.ApplyEvent(ev); !dup || err != nil {
				t.Errorf("event %.12q sent again after the reload: dup %v, %v", ev.ID, dup, err)
			}
			other := *ev
			other.AgentID = "somebody-else"
			if _, _, err := b.p.ApplyEvent(&other); !errors.Is(err, ErrDuplicateConflict) {
				t.Errorf("event %.12q with other content after the reload: %v, want a conflict", ev.ID, err)
			}
		}
		b.logLargest()
	})

	t.Run("node", func(t *testing.T) {
		// Every string of a node at its longest, 16 dedupe keys and 300
		// requests, of which it keeps the newest maxOpenRequestsPerNode.
		b := newBounded(t, Config{}, longID("run-node-", 0))
		root, w := longID("root-", 0), longID("worker-", 0)
		b.apply(root, &topics.NodeCreated{Role: topics.RoleConductor, Capability: longID("cap-", 0), TaskID: longID("task-", 0)}, "")
		b.apply(w, &topics.NodeCreated{ParentAgentID: root, Role: topics.RoleWorker, Capability: longID("cap-", 1), TaskID: longID("task-", 1)}, longID("corr-", 0))
		exp := topics.NewTime(b.at.Add(time.Hour))
		b.apply(w, &topics.NodeDelegated{ExpectedBy: &exp, TaskID: longID("task-", 2), ChildRunID: longID("child-", 0),
			ChildSessionKey: longID("session-", 0), Capability: longID("cap-", 2)}, longID("corr-", 1))
		b.apply(w, topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: longID("owner-", 0), ExpiresAt: exp}), longID("corr-", 2))
		b.apply(w, &topics.NodeStatus{Status: topics.StatusRunning, Reason: longID("reason-", 0)}, longID("corr-", 3))
		for i := range 300 {
			b.apply(w, &topics.Request{RequestID: longID("req-", i), RequestKind: longID("kind-", i), DedupeKey: longID("key-", i), TTLMs: 3_600_000}, longID("corr-", 4))
			if i%100 == 99 {
				b.commit()
			}
		}
		b.apply(w, &topics.NodeCompleted{ResultSource: "manual_recovery"}, longID("corr-", 5))
		b.commit()
		r := b.reload()
		if n := r.peek(w); n.OpenRequestCount != 0 {
			t.Errorf("after completion: %d open requests", n.OpenRequestCount)
		}
		// Before completion it held the newest 128, and said so.
		var over int
		for _, d := range r.diagnostics {
			if d.Kind == DiagnosticOpenRequestsOverLimit {
				over++
			}
		}
		if over == 0 {
			t.Errorf("no %s diagnostic after 300 requests", DiagnosticOpenRequestsOverLimit)
		}
		b.logLargest()
	})

	t.Run("node-requests", func(t *testing.T) {
		b := newBounded(t, Config{}, longID("run-requests-", 0))
		w := longID("worker-", 0)
		for i := range 300 {
			b.apply(w, &topics.Request{RequestID: longID("req-", i), RequestKind: "approval"}, "")
		}
		b.commit()
		r := b.reload()
		n := r.peek(w)
		if n.OpenRequestCount != maxOpenRequestsPerNode || n.requests[0] != longID("req-", 300-maxOpenRequestsPerNode) || len(r.requests) != maxOpenRequestsPerNode {
			t.Errorf("after 300 requests: %d open, the oldest %.12q, %d in the run; want the newest %d", n.OpenRequestCount, n.requests[0], len(r.requests), maxOpenRequestsPerNode)
		}
		b.logLargest()
	})

	t.Run("meta", func(t *testing.T) {
		// Long session, thread and root ids; 300 plans (whose order the
		// meta record once listed); 150 diagnostics of the longest kind.
		b := newBounded(t, Config{}, longID("run-meta-", 0))
		root := longID("root-", 0)
		b.n++
		ev := &topics.Event{ID: "first", Source: "/t", Type: topics.TypeNodeCreated, Time: topics.NewTime(b.at), RunID: b.run, AgentID: root,
			SchemaVersion: 1, SessionID: longID("session-", 0), ThreadID: longID("thread-", 0), Data: &topics.NodeCreated{Role: topics.RoleConductor}}
		for _, p := range []*Projection{b.mem, b.p} {
			p.Apply(ev)
		}
		for i := range 300 {
			b.apply(root, &topics.PlanCreated{PlanID: longID("plan-", i), BandCount: 1}, "")
		}
		for i := range 150 {
			agent := longID("w-", i)
			b.apply(agent, topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: longID("holder-", i), ExpiresAt: topics.NewTime(b.at.Add(time.Hour))}), "")
			b.apply(agent, &topics.LeaseReleased{Owner: longID("other-", i)}, "")
		}
		b.commit()
		r := b.reload()
		if len(r.diagnostics) >= maxDiagnostics || r.diagBytes > maxDiagnosticBytes || r.diagnostics[len(r.diagnostics)-1].AgentID != longID("w-", 149) {
			t.Errorf("%d diagnostics of %d bytes kept, the newest of %.12q; want fewer than %d, at most %d bytes, the newest kept",
				len(r.diagnostics), r.diagBytes, r.diagnostics[len(r.diagnostics)-1].AgentID, maxDiagnostics, maxDiagnosticBytes)
		}
		b.logLargest()
	})

	t.Run("plan", func(t *testing.T) {
		// A plan of 8 bands (up to index 63) of 256 steps with long step
		// and child ids, about 4 MB as one record; then created again,
		// which drops its steps, and given new ones.
		b := newBounded(t, Config{}, longID("run-plan-", 0))
		root, plan := longID("root-", 0), longID("plan-", 0)
		b.apply(root, &topics.NodeCreated{Role: topics.RoleConductor}, "")
		b.apply(root, &topics.PlanCreated{PlanID: plan, BandCount: maxBandsPerPlan}, "")
		for band := 0; band < maxBandsPerPlan; band += 9 {
			b.apply(root, &topics.PlanBandCreated{PlanID: plan, BandIndex: band, Parallelizable: band%2 == 0, StepCount: maxStepsPerBand}, "")
			for i := range maxStepsPerBand + 1 { // one more than a band keeps
				b.apply(root, &topics.StepCreated{PlanID: plan, BandIndex: band, StepID: longID("step-", band*1000+i), StepIndex: i,
					ChildAgentID: longID("child-", band*1000+i)}, "")
			}
			if band%3 == 0 {
				b.commit()
			}
		}
		b.commit()
		b.reload()
		b.apply(root, &topics.PlanCreated{PlanID: plan, BandCount: 2, Replan: true}, "")
		b.apply(root, &topics.StepCreated{PlanID: plan, BandIndex: 1, StepID: "again", StepIndex: 0}, "")
		b.commit()
		b.reload()
		records := 0
		_ = b.st.Scan(rel([]byte{'r'}, []byte(b.run), []byte{0, 's'}), func(k, v []byte) error { records++; return nil })
		if records != 1 {
			t.Errorf("%d step records after the plan was created again with one step, want 1", records)
		}
		b.logLargest()
	})
}

// TestExpiryRecordsAreBounded: a run with the longest id expires: its
// deletes and its expiry marker are within MaxRecordBytes, and the run
// reads as expired.
func TestExpiryRecordsAreBounded(t *testing.T) {
	b := newBounded(t, Config{Retention: time.Hour}, longID("run-expiry-", 0))
	root := longID("root-", 0)
	b.apply(root, &topics.NodeCreated{Role: topics.RoleConductor}, longID("corr-", 0))
	b.apply(root, &topics.NodeCompleted{}, longID("corr-", 0))
	b.commit()
	var pending Pending
	b.p.FireDue(topics.NewTime(b.at.Add(2*time.Hour)), &pending)
	if n := b.p.ExpireDue(topics.NewTime(b.at.Add(2*time.Hour)), &pending); n != 1 {
		t.Fatalf("%d expiries, want 1", n)
	}
	b.commit()
	if _, err := b.p.Lookup(b.run); !errors.Is(err, ErrRunExpired) {
		t.Fatalf("after the expiry: %v, want ErrRunExpired", err)
	}
	if b.largest['x'] == 0 {
		t.Fatal("no expiry marker written")
	}
	b.logLargest()
}

// TestEarlierPlansAndMetaMigrate: a plan stored as one JSON record with
// its steps, and a meta record with a plan order and diagnostics beyond
// maxDiagnosticBytes (earlier builds), load as they were (the diagnostics
// trimmed); the run's next commit writes them within MaxRecordBytes, as a
// plan header and step records, and they load the same again.
func TestEarlierPlansAndMetaMigrate(t *testing.T) {
	st := newMemStorage()
	run := "run-old"
	m := metaRecord{Seq: 3, Clock: 3000, Root: "root", PlanOrder: []string{"p1"}}
	for i := range 100 {
		m.Diagnostics = append(m.Diagnostics, Diagnostic{Kind: DiagnosticLeaseReleaseIgnored, AgentID: longID("w-", i), At: fromMs(1000),
			Detail: "released by " + longID("a-", i) + ", held by " + longID("b-", i)})
	}
	meta, _ := json.Marshal(m)
	plan, _ := json.Marshal(planRecord{AgentID: "root", BandCount: 2, CreatedAt: 1000, Bands: []Band{
		{Index: 0, StepCount: 2, Steps: []Step{{StepID: "s0", Index: 0, ChildAgentID: "c0"}, {StepID: "s1", Index: 1}}},
		{Index: 1, Parallelizable: true, StepCount: 1, Steps: []Step{{StepID: "s2", Index: 0, ChildAgentID: "c2"}}},
	}})
	node, _ := json.Marshal((&node{created: true, depth: 0}).record(nil))
	// Written directly, as an earlier build did (memStorage.Write would
	// refuse the meta record: it is over the bound).
	st.m[string(runKey(run, 'm', ""))] = meta
	st.m[string(runKey(run, 'p', "p1"))] = plan
	st.m[string(runKey(run, 'n', "root"))] = node
	dump := func(p *Projection) string {
		r, ok := p.Run(run)
		if !ok {
			t.Fatalf("no run: %v", p.Err())
		}
		pl := r.plans["p1"]
		var s strings.Builder
		for _, i := range slices.Sorted(maps.Keys(pl.Bands)) {
			fmt.Fprintf(&s, "band %+v\n", *pl.Bands[i])
		}
		fmt.Fprintf(&s, "%d diagnostics, the newest of %.8q", len(r.diagnostics), r.diagnostics[len(r.diagnostics)-1].AgentID)
		return s.String()
	}
	p, err := Open(Config{}, st)
	if err != nil {
		t.Fatal(err)
	}
	before := dump(p)
	if r, _ := p.Run(run); r.diagBytes > maxDiagnosticBytes || len(r.diagnostics) == 100 {
		t.Errorf("%d diagnostics of %d bytes loaded, want them trimmed to %d bytes", len(r.diagnostics), r.diagBytes, maxDiagnosticBytes)
	}
	if err := p.Commit(map[string]int64{"t": 1}); err != nil {
		t.Fatalf("the migrating commit: %v", err)
	}
	if v := st.m[string(runKey(run, 'p', "p1"))]; v[0] != planBinaryVersion {
		t.Errorf("the plan header after the commit starts with %q, want version %d", v[0], planBinaryVersion)
	}
	p, err = Open(Config{}, st)
	if err != nil {
		t.Fatal(err)
	}
	if after := dump(p); after != before {
		t.Errorf("after the migration:\n%s\nbefore:\n%s", after, before)
	}
	if !strings.Contains(before, `Steps:[{StepID:s0 Index:0 ChildAgentID:c0} {StepID:s1 Index:1 ChildAgentID:}]`) {
		t.Errorf("the steps did not load:\n%s", before)
	}
}
