package projector

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestGate: the gate is closed from the first hold to the last release; a
// waiter returns when it opens, when its own input arrives, or after
// maxPause, and then ignores that closing (generation) of the gate, but
// not the next.
func TestGate(t *testing.T) {
	var pauses, paused atomic.Int64
	g := newGate(&pauses, &paused)
	if g.closed(0) {
		t.Fatal("a new gate is closed")
	}
	g.hold()
	g.hold()
	if !g.closed(0) {
		t.Fatal("a held gate is open")
	}
	g.release()
	if !g.closed(0) {
		t.Fatal("the gate opened while one partition still holds it")
	}

	// Opened by the last release.
	done := make(chan uint64)
	go func() { done <- g.wait(0, nil, nil) }()
	g.release()
	select {
	case ignored := <-done:
		if ignored != 0 {
			t.Fatalf("a wait ended by the gate opening returned generation %d to ignore", ignored)
		}
	case <-time.After(maxPause / 2):
		t.Fatal("the wait did not end when the gate opened")
	}
	if g.closed(0) {
		t.Fatal("released as often as held, and still closed")
	}

	// Ended by the waiter's own input.
	g.hold()
	mine := make(chan struct{}, 1)
	go func() { done <- g.wait(0, mine, nil) }()
	mine <- struct{}{}
	if ignored := <-done; ignored != 0 {
		t.Fatalf("a wait ended by the waiter's input returned generation %d to ignore", ignored)
	}

	// Given up after maxPause: that generation is ignored from then on,
	// without waiting again.
	began := time.Now()
	ignored := g.wait(0, nil, nil)
	if took := time.Since(began); took < maxPause {
		t.Fatalf("gave up after %v, want maxPause %v", took, maxPause)
	}
	if ignored == 0 || g.closed(ignored) {
		t.Fatalf("after giving up: ignored generation %d, closed %v; want the gate's generation, no longer closed to the waiter", ignored, g.closed(ignored))
	}
	began = time.Now()
	if again := g.wait(ignored, nil, nil); again != ignored || time.Since(began) > maxPause/2 {
		t.Fatalf("waiting on an ignored generation: %d after %v, want %d at once", again, time.Since(began), ignored)
	}
	// The next closing is a new generation: waited on again.
	g.release()
	g.hold()
	defer g.release()
	if !g.closed(ignored) {
		t.Fatal("a new closing of the gate is ignored")
	}
	// The pause given up on is counted for certain; the two before it only
	// if their waiter got to block before the gate opened or its input
	// came.
	if got := pauses.Load(); got < 1 || got > 3 || time.Duration(paused.Load()) < maxPause {
		t.Fatalf("%d pauses counted, %v paused; want 1 to 3, at least maxPause %v", got, time.Duration(paused.Load()), maxPause)
	}
}
