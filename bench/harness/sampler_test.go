package harness

import "testing"

// TestSamplerShortWindow: a window closed long before the sampler's first
// tick (a 3,000-event closed loop ends in ~30 ms) still has its sample, so
// a scenario never reports rates without one.
func TestSamplerShortWindow(t *testing.T) {
	s := &stage{reader: &wakeReader{}}
	s.acked.Store(3000)
	s.startSampler()
	s.sampler.close()
	sm := s.sampler
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if len(sm.publish) != 1 || len(sm.consume) != 1 {
		t.Fatalf("%d publish and %d consume samples after a short window, want 1 each", len(sm.publish), len(sm.consume))
	}
}
