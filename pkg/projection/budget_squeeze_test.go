package projection

import "testing"

// TestBudgetSqueeze: a squeezed budget's limit in force is the share of its
// limit, and eviction goes by it; 1 restores it.
func TestBudgetSqueeze(t *testing.T) {
	b := NewBudget(1000)
	b.used.Store(700)
	b.Squeeze(0.5)
	if st := b.Stats(); st.InForce != 500 || st.Limit != 1000 {
		t.Fatalf("squeezed to half: %+v, want 500 in force of 1000", st)
	}
	p := &Projection{cfg: Config{Memory: b}, hotBytes: 700, published: 700}
	r := &Run{id: "old", footprint: 300}
	r2 := &Run{id: "new", footprint: 400, lastUsed: 1}
	p.runs = map[string]*Run{"old": r, "new": r2}
	p.tick = 1
	p.evict()
	if _, ok := p.runs["old"]; ok || p.hotBytes != 400 {
		t.Errorf("over the squeezed limit: runs %v, %d bytes; want the older run evicted", p.runs, p.hotBytes)
	}
	b.Squeeze(1)
	if st := b.Stats(); st.InForce != 1000 {
		t.Errorf("squeeze(1): %d in force, want the limit again", st.InForce)
	}
	var nilBudget *Budget
	nilBudget.Squeeze(0.5) // a projection without a budget: nothing to do
}
