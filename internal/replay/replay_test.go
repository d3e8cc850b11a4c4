package replay_test

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/internal/replay"
	"github.com/canopy-dev/canopy/pkg/topics"
)

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
