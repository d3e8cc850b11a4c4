package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReplayExitsOneOnIDConflicts: an event id reused with other content
// is a problem of the input, as an invalid line is: replay reports its
// line, counts it in its summary and exits 1; duplicates alone exit 0.
func TestReplayExitsOneOnIDConflicts(t *testing.T) {
	line := func(code string) string {
		return `{"specversion":"1.0","id":"e1","source":"/t","type":"signal.failed","time":"2026-02-14T10:00:00Z","runid":"run-1","agentid":"w1","schemaversion":1,"data":{"error_code":"` + code + `"}}`
	}
	for _, c := range []struct {
		in   []string
		code int
		says string
	}{
		{[]string{line("a"), line("a")}, 0, "1 duplicates, 0 id conflicts"},
		{[]string{line("a"), line("b")}, 1, "0 duplicates, 1 id conflicts"},
	} {
		var out, errw bytes.Buffer
		code := run([]string{"replay"}, strings.NewReader(strings.Join(c.in, "\n")), &out, &errw)
		if code != c.code || !strings.Contains(errw.String(), c.says) {
			t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, errw.String(), c.code, c.says)
		}
		if c.code == 1 && !strings.Contains(errw.String(), "line 2: duplicate_id_conflict: ") {
			t.Errorf("stderr:\n%s\nwant line 2 reported", errw.String())
		}
	}
}
