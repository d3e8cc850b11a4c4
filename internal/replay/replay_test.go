package replay_test

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/internal/workload"
	"github.com/canopy-dev/canopy/pkg/projection"
	"github.com/canopy-dev/canopy/pkg/topics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jsonl encodes events one a line, as `projector replay` reads them.
func jsonl(t *testing.T, events []topics.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	for i := range events {
		enc, err := events[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(enc)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestReplayWritesEveryPart: the events whose one record raises more
// triggers than a wake holds (a chain of 20,000 nodes created leaf-first:
// 19,996 guard triggers, once a 2.8 MB line; 8,000 leases falling due
// together: once a 1 MB line) come out of replay as wakes of at most
// DefaultMaxWakeBytes and DefaultMaxWakeTriggers each, every trigger in
// exactly one of them and in order, numbered parts with ids of their own;
// and in any batching, the same lines.
func TestReplayWritesEveryPart(t *testing.T) {
	leases, _ := workload.Burst{RunID: "run-leases", Nodes: 8000, Owner: "pool-of-workers-in-eu-west-1"}.LeasesDueTogether()
	for _, c := range []struct {
		name     string
		events   []topics.Event
		triggers int
		kind     topics.TriggerKind
	}{
		{"chain created leaf-first", workload.Burst{RunID: "run-chain"}.LeafFirstChain(), 20_000 - projection.DefaultMaxDepth, topics.TriggerGuard},
		{"leases falling due together", leases, 8000, topics.TriggerLeaseExpired},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := jsonl(t, c.events)
			var out, errs bytes.Buffer
			st, err := replay.Run(bytes.NewReader(in), &out, &errs, replay.Options{})
			if err != nil || errs.Len() > 0 || st.Applied != len(c.events) {
				t.Fatalf("replay: %+v, %v\n%s", st, err, errs.String())
			}
			var trigs []topics.Trigger
			ids := map[string]bool{}
			sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
			sc.Buffer(nil, 4<<20)
			n := 0
			for sc.Scan() {
				n++
				line := sc.Bytes()
				w, err := topics.DecodeWake(line)
				if err != nil {
					t.Fatalf("wake %d: %v", n, err)
				}
				if len(line) > projection.DefaultMaxWakeBytes || len(w.Triggers) > projection.DefaultMaxWakeTriggers {
					t.Errorf("wake %d: %d bytes and %d triggers, over %d and %d", n, len(line), len(w.Triggers), projection.DefaultMaxWakeBytes, projection.DefaultMaxWakeTriggers)
				}
				if ids[w.WakeID] {
					t.Errorf("wake %d: id %s again", n, w.WakeID)
				}
				ids[w.WakeID] = true
				if w.Part == nil || w.Part.Number != n || w.Part.Count != st.Wakes {
					t.Errorf("wake %d of %d: part %+v", n, st.Wakes, w.Part)
				}
				trigs = append(trigs, w.Triggers...)
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			if want := (c.triggers + projection.DefaultMaxWakeTriggers - 1) / projection.DefaultMaxWakeTriggers; n != want || st.Wakes != n {
				t.Errorf("%d wakes (%d counted), want %d", n, st.Wakes, want)
			}
			if len(trigs) != c.triggers {
				t.Fatalf("%d triggers in the wakes, %d raised", len(trigs), c.triggers)
			}
			for i, tr := range trigs {
				// The chain's guards from agent-00005 down, the leases from agent-00001.
				want := fmt.Sprintf("agent-%05d", i+1+len(c.events)-1-c.triggers)
				if c.kind == topics.TriggerLeaseExpired {
					want = fmt.Sprintf("agent-%05d", i+1)
				}
				if tr.Kind != c.kind || tr.AgentID != want {
					t.Fatalf("trigger %d: %s %s, want %s %s", i, tr.Kind, tr.AgentID, c.kind, want)
				}
			}
			// One batch of everything, the same wakes: only the last
			// record raises triggers, and the split depends on nothing else.
			var all bytes.Buffer
			if _, err := replay.Run(bytes.NewReader(in), &all, &errs, replay.Options{Batch: len(c.events)}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(all.Bytes(), out.Bytes()) {
				t.Error("replayed in one batch, other wakes")
			}
		})
	}
}

// event is one structured-mode line; agent is spliced in as raw bytes,
// so that it can hold what is not UTF-8.
func event(id, typ, agent, data string) string {
	return `{"specversion":"1.0","id":"` + id + `","source":"/agents/w","type":"` + typ + `","time":"2026-02-14T10:00:00Z",` +
		`"runid":"run-text","agentid":"` + agent + `","schemaversion":1,"data":` + data + `}`
}

// TestReplayReportsInvalidUTF8AndGoesOn: a line with text that is not
// UTF-8 (raw bytes, an overlong, an escaped lone surrogate) is reported
// with its number, the field and invalid_utf8, and refused; the lines
// around it are applied, and no node is made of the bad text.
func TestReplayReportsInvalidUTF8AndGoesOn(t *testing.T) {
	in := strings.Join([]string{
		event("e1", "tree.node_created", "conductor", `{"role":"conductor"}`),
		event("e2", "tree.node_created", "w1\xff\xfe", `{"role":"worker","parent_agent_id":"conductor"}`),
		event("e3", "tree.node_created", "w1\xc0\xaf", `{"role":"worker","parent_agent_id":"conductor"}`),
		event("e4", "tree.node_created", `w1\ud800`, `{"role":"worker","parent_agent_id":"conductor"}`),
		event("e5", "signal.failed", "conductor", "{\"error_code\":\"e\xed\xa0\x80\"}"),
		event("e6", "signal.failed", "conductor", `{"error_code":"tool_error"}`),
	}, "\n") + "\n"
	var out, errw bytes.Buffer
	st, err := replay.Run(strings.NewReader(in), &out, &errw, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines != 6 || st.Applied != 2 || st.Invalid != 4 {
		t.Errorf("stats %+v, want 6 lines, 2 applied, 4 invalid", st)
	}
	want := []string{
		"line 2: topics: invalid event (tree.node_created e2): agentid: invalid_utf8: byte 0xff at offset 2 is not UTF-8",
		"line 3: topics: invalid event (tree.node_created e3): agentid: invalid_utf8: byte 0xc0 at offset 2 is not UTF-8",
		`line 4: topics: invalid event (tree.node_created e4): agentid: invalid_utf8: \ud800 at offset 2 is an unpaired surrogate, not a character`,
		"line 5: topics: invalid event (signal.failed e5): data.error_code: invalid_utf8: byte 0xed at offset 1 is not UTF-8",
	}
	got := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("reported\n%s\nwant\n%s", errw.String(), strings.Join(want, "\n"))
	}
	// The replay went on: the failure after the bad lines wakes the run,
	// whose tree is the conductor alone.
	var last *topics.Wake
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		w, err := topics.DecodeWake(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		last = w
	}
	if last == nil || len(last.Triggers) != 1 || last.Triggers[0].Kind != topics.TriggerFailed {
		t.Fatalf("last wake %+v, want the failure's", last)
	}
	if n := last.AgentTreeSnapshot.Summary.NodeCountTotal; n != 1 {
		t.Errorf("%d nodes, want the conductor alone: %+v", n, last.AgentTreeSnapshot.Nodes)
	}
}

// TestReplayReportsIDConflicts: an event sent again is a duplicate; an
// event id reused with other content is reported by line as
// duplicate_id_conflict, counted, and not applied (the first content
// stays: no wake for it); the same id in another run is another event.
func TestReplayReportsIDConflicts(t *testing.T) {
	ev := func(id, run, agent, typ, data string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/t","type":"` + typ + `","time":"2026-02-14T10:00:00Z","runid":"` + run +
			`","agentid":"` + agent + `","schemaversion":1,"data":` + data + `}`
	}
	in := strings.Join([]string{
		ev("e1", "run-1", "root", "tree.node_created", `{"role":"conductor"}`),
		ev("e2", "run-1", "w1", "tree.node_created", `{"role":"worker","parent_agent_id":"root"}`),
		ev("e2", "run-1", "w1", "tree.node_created", `{"parent_agent_id":"root","role":"worker"}`), // sent again
		ev("e2", "run-1", "w1", "signal.failed", `{"error_code":"boom"}`),                          // another content
		ev("e2", "run-2", "w1", "signal.failed", `{"error_code":"boom"}`),                          // another run
	}, "\n")
	var out, errw bytes.Buffer
	st, err := replay.Run(strings.NewReader(in), &out, &errw, replay.Options{Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	want := replay.Stats{Lines: 5, Applied: 3, Duplicates: 1, Conflicts: 1, Wakes: 1}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if got := errw.String(); !strings.HasPrefix(got, `line 4: duplicate_id_conflict: projection: run "run-1": event id "e2" was applied as the run's event 2 with other content`) ||
		strings.Count(got, "\n") != 1 {
		t.Errorf("reports:\n%s\nwant one, line 4's conflict", got)
	}
	// The only wake is run-2's failure: run-1's conflicting failure woke
	// nobody.
	if wakes := out.String(); !strings.Contains(wakes, "run-2") || strings.Contains(wakes, "run-1") {
		t.Errorf("wakes:\n%s\nwant run-2's only", wakes)
	}
}
