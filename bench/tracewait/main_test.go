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
