package main

import (
	"bytes"
	"context"
	"runtime"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestReportSplitsAWait takes a trace of two goroutines noting a human
// input's steps as the projector does, the worker parked on a channel
// between dispatch and taking it up, and checks that the report finds the
// input and puts the wait where it was: parked, in a channel receive; and
// that it finds the GC's mark phase that ran meanwhile.
func TestReportSplitsAWait(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatalf("taking a trace: %v (is the test run with -trace?)", err)
	}
	note := func(s string) { trace.Log(context.Background(), "canopy", "3 "+s) }
	handed := make(chan struct{})
	done := make(chan struct{})
	go func() { // the worker
		defer close(done)
		<-handed
		for _, s := range []string{"h.taken", "h.built", "h.waited", "h.commit", "h.produced", "h.ended", "h.reaped"} {
			note(s)
		}
	}()
	note("h.dispatched")
	runtime.GC()                      // a mark phase for the report to find
	time.Sleep(30 * time.Millisecond) // the wait to find, not a synchronisation
	close(handed)
	<-done
	trace.Stop()

	p, err := read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	ins := p.inputs()
	if len(ins) != 1 || ins[0].partition != "3" || len(ins[0].steps) != 8 {
		t.Fatalf("inputs %+v, want one of partition 3 with 8 steps", ins)
	}
	if d := ins[0].total(); d < 30*time.Millisecond {
		t.Errorf("dispatched to reaped %v, want 30ms or more", d)
	}
	var out strings.Builder
	report(&out, p, time.Millisecond)
	got := out.String()
	if len(p.marks) == 0 {
		t.Errorf("no GC mark phase found in the trace, although one ran")
	}
	for _, want := range []string{"1 human inputs", "the GC was marking", "GC assist", "h.dispatched > h.taken", "partition 3, ", "chan receive"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	s := p.split(ins[0].steps[1].g, ins[0].steps[0].at, ins[0].steps[1].at)
	if s.parked < 25*time.Millisecond {
		t.Errorf("the worker was parked %v of the wait, want most of 30ms:\n%s", s.parked, got)
	}
}

// TestAgentCycles takes a trace of a worker noting two agent-lane commits
// of partition 2 as the projector does, and a commit of partition 5 that
// never publishes again, and checks that the report finds one cycle, from
// the first a.publish to the second, with every step between, and prints
// it as a cycle longer than -agent-slow.
func TestAgentCycles(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatalf("taking a trace: %v (is the test run with -trace?)", err)
	}
	note := func(part, s string) { trace.Log(context.Background(), "canopy", part+" "+s) }
	steps := []string{"a.publish", "a.built", "a.waited", "a.prepared", "a.commit", "a.begun", "a.produced", "a.ended", "a.writing", "a.written"}
	for _, s := range steps {
		note("2", s)
		note("5", s)
	}
	note("2", "h.dispatched")         // another lane's: not the cycle's
	time.Sleep(20 * time.Millisecond) // the cycle's length to find, not a synchronisation
	note("2", "a.publish")
	note("2", "a.reaped")
	trace.Stop()

	p, err := read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	cs := p.cycles()
	if len(cs) != 1 || cs[0].partition != "2" || len(cs[0].steps) != len(steps)+1 {
		t.Fatalf("cycles %+v, want one of partition 2 with %d steps", cs, len(steps)+1)
	}
	if d := cs[0].total(); d < 20*time.Millisecond {
		t.Errorf("the cycle took %v, want 20ms or more", d)
	}
	var out strings.Builder
	reportAgent(&out, p, 10*time.Millisecond)
	got := out.String()
	for _, want := range []string{"1 agent-lane commit cycles", "partition 2      1 cycles", "a.written > a.publish", "a commit cycle:"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "partition 5") {
		t.Errorf("the report counts partition 5's commit, which has no next publish:\n%s", got)
	}
}
