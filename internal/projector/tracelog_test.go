package projector

import (
	"bytes"
	"runtime/trace"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canopy-dev/canopy/internal/brokertest"
	"github.com/canopy-dev/canopy/internal/testenv"
	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestTraceNotesThePriorityPath takes an execution trace while a human
// input goes through, and looks for the steps tlog notes in it: with them,
// where an input waited can be read off the goroutines' timelines
// (docs/ARCHITECTURE.md, "The priority path").
func TestTraceNotesThePriorityPath(t *testing.T) {
	b := brokertest.NewKfake(t)
	e := newEnvOn(t, b, 1)
	start := time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC)
	cfg := e.config(t.TempDir())
	cfg.Now = func() time.Time { return start }
	p, stop := e.start(cfg)
	defer stop()
	e.produce(e.names.AgentEvents(), testEvent("e-1", "run-1", "conductor", start, &topics.NodeCreated{Role: topics.RoleConductor}))
	testenv.WaitFor(t, 30*time.Second, until(p, "the first event is applied", func() bool { return p.stats.Applied.Load() >= 1 }))

	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatalf("taking a trace: %v (is the test run with -trace?)", err)
	}
	input := testEvent("human-1", "run-1", "human", start, &topics.Input{InputID: "in-1", InputKind: "interrupt", Text: "stop"})
	e.produce(e.names.HumanInput(), input)
	e.reader(e.names.PriorityWakes()).until(30*time.Second, "the priority wake", func(*kgo.Record) bool { return true })
	// The wake is readable once its transaction ends at the broker, before
	// the commit's goroutine notes it and the worker reaps it: wait for
	// the count the worker makes after the last step.
	testenv.WaitFor(t, 30*time.Second, until(p, "the priority commit is reaped", func() bool { return p.stats.PriorityWakes.Load() >= 1 }))
	trace.Stop()
	for _, step := range []string{"0 h.dispatched", "0 h.taken", "0 h.built", "0 h.waited", "0 h.commit", "0 h.produced", "0 h.ended", "0 h.reaped"} {
		if !bytes.Contains(buf.Bytes(), []byte(step)) {
			t.Errorf("the trace does not note %q", step)
		}
	}
}
