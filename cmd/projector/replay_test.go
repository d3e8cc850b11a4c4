package main

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestReplayWakeBounds: replay takes the wake bounds as flags (and
// CANOPY_* variables): a byte bound too small for a wake is refused before
// any input is read, saying what to raise, and a trigger bound splits the
// wakes it writes into parts.
func TestReplayWakeBounds(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"replay", "-max-wake-bytes", "100000"}, strings.NewReader(""), &out, &errs); code != 2 ||
		!strings.Contains(errs.String(), "raise the max wake bytes (-max-wake-bytes) to at least") {
		t.Errorf("-max-wake-bytes 100000: exit %d, %s; want 2 and what to raise", code, errs.String())
	}
	in, err := os.ReadFile("../../examples/small-run.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []bool{false, true} {
		args := []string{"replay", "-batch", "1000", "-max-wake-triggers", "1"}
		if env {
			args = []string{"replay", "-batch", "1000"}
			t.Setenv("CANOPY_MAX_WAKE_TRIGGERS", "1")
		}
		out.Reset()
		errs.Reset()
		if code := run(args, bytes.NewReader(in), &out, &errs); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs.String())
		}
		parts := 0
		for sc := bufio.NewScanner(&out); sc.Scan(); {
			w, err := topics.DecodeWake(sc.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Triggers) != 1 {
				t.Errorf("%v: a wake of %d triggers", args, len(w.Triggers))
			}
			if w.Part != nil {
				parts++
			}
		}
		if parts < 2 {
			t.Errorf("%v: %d parts of split wakes, want the batch's triggers split one a wake", args, parts)
		}
	}
}

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
