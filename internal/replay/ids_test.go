package replay_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/snapshot"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// idLog is an event log that TestOneIDOneContent replays at several wall
// clocks, under each of its byte budgets.
type idLog struct {
	name    string
	log     []byte
	budgets []int // max snapshot bytes; 0 is the default
	batch   int
	// nows are wall clocks of the log's own, beyond the common ones.
	nows []time.Time
}

// TestOneIDOneContent replays every generated log with -now values years
// apart (and some before its leases expire): any two wakes with one wake_id
// must be byte-identical once the wall-clock fields (generated_at,
// snapshot_age_ms, stale, each node's lease_remaining_ms) are blanked. At
// the end of input replay advances every run's clock to -now, so the final
// timer wakes have one id at every -now that fires the same timers, while
// their lease_remaining_ms grows with -now: if the byte budget counted it at
// its real width, a later -now would fit fewer nodes under the same id.
func TestOneIDOneContent(t *testing.T) {
	// The generators the other determinism tests use: the examples, and
	// workload runs as pkg/projection's TestEqualIDsMeanEqualContent makes
	// them, several interleaved, with many leases held. The budgets are the
	// default and ones under which a budget that counted the real widths
	// gave one id two node sets (the thousand-node example's final wake: 45
	// nodes at one -now, 44 at another).
	root := testenv.RepoRoot(t)
	example := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(root, "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	logs := []idLog{
		{name: "examples/small-run.jsonl", log: example("small-run.jsonl"), budgets: []int{0}, batch: 1},
		{name: "examples/thousand-nodes.jsonl", log: example("thousand-nodes.jsonl"), budgets: []int{22405}, batch: 1},
	}
	// Three runs interleaved, 70% of their nodes left holding a lease, cut
	// into batches of 7 lines.
	var evs []topics.Event
	for i, n := range []int{30, 120, 400} {
		evs = append(evs, workload.Generate(workload.Spec{RunID: fmt.Sprintf("run-%d", i), Nodes: n, Seed: uint64(i) + 21, RunningShare: 0.7,
			Start: time.Date(2026, 2, 14, 10, 0, 0, 14e6, time.UTC)})...)
	}
	logs = append(logs, idLog{name: "workload", log: interleave(t, evs), budgets: []int{0, 3850}, batch: 7})
	six, sixNows := sixLeasedWorkers(t)
	logs = append(logs, idLog{name: "six-leased-workers-3850-bytes", log: six, budgets: []int{3850}, batch: 1, nows: sixNows})

	totalOtherLeaseTimes := 0
	for _, l := range logs {
		t.Run(l.name, func(t *testing.T) {
			last := lastEventTime(t, l.log)
			nows := append([]time.Time{
				last.Add(time.Millisecond),
				last.AddDate(3, 0, 0),
				last.AddDate(30, 0, 0),
				// Past the ±292 years of a time.Duration, and the last
				// instant a snapshot can say.
				last.AddDate(300, 0, 0),
				time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
			}, l.nows...)
			for _, budget := range l.budgets {
				byID := map[string]replayed{}
				compared, otherLeaseTimes := 0, 0
				for _, now := range nows {
					for _, w := range replayAt(t, l.log, budget, l.batch, now) {
						prev, ok := byID[w.id]
						if !ok {
							byID[w.id] = w
							continue
						}
						compared++
						if prev.blanked != w.blanked {
							t.Fatalf("budget %d, -now %v: wake %s has other content under the same id (%d nodes before, %d now):\n%s",
								budget, now.Format(time.RFC3339Nano), w.id, prev.nodes, w.nodes, firstDiff(prev.blanked, w.blanked))
						}
						if prev.leases != w.leases {
							otherLeaseTimes++
						}
					}
				}
				if compared == 0 {
					t.Fatalf("budget %d: no two wakes had one id", budget)
				}
				t.Logf("budget %d: %d wakes compared with another of their id, %d with other lease_remaining_ms", budget, compared, otherLeaseTimes)
				totalOtherLeaseTimes += otherLeaseTimes
			}
		})
	}
	// The wakes of the input are the same at every -now; the final timer
	// wakes, whose lease_remaining_ms differ, are the ones this test is
	// about.
	if totalOtherLeaseTimes == 0 {
		t.Fatal("no two wakes of one id had other lease_remaining_ms: the test no longer varies what it should")
	}
}

// replayed is one wake of a replay: its id, its encoding with the
// wall-clock fields blanked, its lease_remaining_ms values and its node
// count.
type replayed struct {
	id, blanked, leases string
	nodes               int
}

// wallClockKeys are the keys of a wake's wall-clock fields, the last
// lease_remaining_ms. A key can only match as a key: inside a string its
// quotes would be escaped.
var wallClockKeys = []string{`"generated_at":`, `"snapshot_age_ms":`, `"stale":`, `"lease_remaining_ms":`}

// blank returns a wake's encoding with its wall-clock fields set to 0 (a
// null lease_remaining_ms stays null), and the lease_remaining_ms values.
func blank(line []byte) (blanked, leases []byte) {
	type span struct {
		from, to int
		lease    bool
	}
	var spans []span
	for k, key := range wallClockKeys {
		for i := 0; ; {
			j := bytes.Index(line[i:], []byte(key))
			if j < 0 {
				break
			}
			from := i + j + len(key)
			to := from + 1
			if line[from] == '"' {
				to += bytes.IndexByte(line[to:], '"') + 1
			} else {
				for line[to] != ',' && line[to] != '}' {
					to++
				}
			}
			spans = append(spans, span{from, to, k == len(wallClockKeys)-1})
			i = to
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	blanked = make([]byte, 0, len(line))
	prev := 0
	for _, s := range spans {
		blanked = append(blanked, line[prev:s.from]...)
		v := line[s.from:s.to]
		if string(v) == "null" {
			blanked = append(blanked, v...)
		} else {
			blanked = append(blanked, '0')
		}
		if s.lease {
			leases = append(append(leases, v...), ' ')
		}
		prev = s.to
	}
	return append(blanked, line[prev:]...), leases
}

// replayAt replays log as `projector replay -now now -batch batch
// -max-snapshot-bytes budget` does.
func replayAt(t *testing.T, log []byte, budget, batch int, now time.Time) []replayed {
	t.Helper()
	var out, errw bytes.Buffer
	st, err := replay.Run(bytes.NewReader(log), &out, &errw, replay.Options{
		Projection: projection.Config{Limits: snapshot.Limits{MaxBytes: budget}},
		Now:        now,
		Batch:      batch,
	})
	if err != nil {
		t.Fatalf("replay at %v: %v", now, err)
	}
	if st.Invalid != 0 || errw.Len() != 0 {
		t.Fatalf("replay at %v: %d invalid lines: %s", now, st.Invalid, errw.String())
	}
	var ws []replayed
	for line := range bytes.Lines(out.Bytes()) {
		const idKey = `{"wake_id":"`
		if !bytes.HasPrefix(line, []byte(idKey)) || len(line) < len(idKey)+26 {
			t.Fatalf("replay at %v: not a wake: %.80s", now, line)
		}
		blanked, leases := blank(bytes.TrimSuffix(line, []byte("\n")))
		ws = append(ws, replayed{
			id:      string(line[len(idKey) : len(idKey)+26]),
			blanked: string(blanked),
			leases:  string(leases),
			// Every trigger and every node has an agent_id; only a
			// trigger has a kind.
			nodes: bytes.Count(line, []byte(`"agent_id":`)) - bytes.Count(line, []byte(`"kind":`)),
		})
	}
	if len(ws) == 0 {
		t.Fatalf("replay at %v: no wakes", now)
	}
	return ws
}

// sixLeasedWorkers is the log of a run whose conductor has six workers that
// hold a lease for two hours, and twenty helpers that signalled progress, one
// of them dispatched with a deadline ten minutes on; and wall clocks of its
// own: two before the leases expire, at which only the deadline falls due,
// so that the final wake has one id while the six lease_remaining_ms are 7
// and 6 digits long, and one past them. Under 3850 bytes that wake holds 6 or
// 7 nodes: which, a budget that counted the real widths decided by -now.
func sixLeasedWorkers(t *testing.T) ([]byte, []time.Time) {
	t0 := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	var evs []topics.Event
	seq := 0
	emit := func(agent, corr string, at time.Time, data topics.Payload) {
		seq++
		evs = append(evs, topics.Event{ID: fmt.Sprintf("01JM00000000000000000%05d", seq), Source: "/agents/" + agent, Type: data.EventType(),
			Time: topics.NewTime(at), RunID: "run-six", AgentID: agent, SchemaVersion: topics.CurrentSchemaVersion, CorrelationID: corr, Data: data})
	}
	emit("conductor", "", t0, &topics.NodeCreated{Role: topics.RoleConductor, Capability: "orchestrate"})
	emit("conductor", "", t0, &topics.NodeStatus{Status: topics.StatusRunning, Reason: "planning"})
	leaseEnd := t0.Add(2 * time.Hour)
	for i := range 6 {
		id := fmt.Sprintf("w-%d", i)
		at := t0.Add(time.Duration(i+1) * time.Second)
		emit(id, "", at, &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker})
		emit(id, "", at, topics.NewLease(topics.TypeLeaseAcquired, topics.Lease{Owner: "p", ExpiresAt: topics.NewTime(leaseEnd.Add(time.Duration(i) * time.Second))}))
	}
	expected := topics.NewTime(t0.Add(10 * time.Minute))
	for i := range 20 {
		id := fmt.Sprintf("helper-%02d", i)
		at := t0.Add(time.Minute + time.Duration(i)*time.Second)
		emit(id, "", at, &topics.NodeCreated{ParentAgentID: "conductor", Role: topics.RoleWorker, Capability: "search"})
		if i == 0 {
			emit(id, "corr-0", at, &topics.NodeDelegated{ExpectedBy: &expected, TaskID: "task-0"})
		}
		emit(id, "", at, &topics.Progress{StepID: "step-" + id})
	}
	// helper-00's dispatch deadline falls due at t0+10m, the leases two
	// hours on.
	return marshalLog(t, evs), []time.Time{t0.Add(20 * time.Minute), t0.Add(110 * time.Minute), leaseEnd.Add(time.Hour)}
}

// interleave marshals the events of several runs taking turns, one event of
// each in turn, as a producer of many runs would send them.
func interleave(t *testing.T, evs []topics.Event) []byte {
	byRun := map[string][]topics.Event{}
	var runs []string
	for _, ev := range evs {
		if _, ok := byRun[ev.RunID]; !ok {
			runs = append(runs, ev.RunID)
		}
		byRun[ev.RunID] = append(byRun[ev.RunID], ev)
	}
	var out []topics.Event
	for i := 0; len(out) < len(evs); i++ {
		for _, r := range runs {
			if i < len(byRun[r]) {
				out = append(out, byRun[r][i])
			}
		}
	}
	return marshalLog(t, out)
}

func marshalLog(t *testing.T, evs []topics.Event) []byte {
	var b bytes.Buffer
	for _, ev := range evs {
		enc, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(enc)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// lastEventTime is the newest event time in log.
func lastEventTime(t *testing.T, log []byte) time.Time {
	var last time.Time
	for line := range bytes.Lines(log) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		ev, err := topics.DecodeEvent(line)
		if err != nil {
			t.Fatal(err)
		}
		if at := ev.Time.Std(); at.After(last) {
			last = at
		}
	}
	return last
}

// firstDiff shows where two encodings first differ.
func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(i-80, 0)
	return fmt.Sprintf("first difference at byte %d:\nbefore: ...%s\nnow:    ...%s", i, clip(a[from:], 240), clip(b[from:], 240))
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return strings.TrimSpace(s)
}
