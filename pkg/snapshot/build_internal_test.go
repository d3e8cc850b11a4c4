package snapshot

import (
	"testing"
	"time"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// TestWidestRemainingMs: the budget counts every lease_remaining_ms at
// widestRemainingMs, so no value the builder writes may be wider. The
// bound is the span of the times a snapshot can say, not of an int64, and
// within it the value is exact.
func TestWidestRemainingMs(t *testing.T) {
	// firstTime and lastTime are the ends of what topics.Time encodes: a
	// millisecond beyond either does not encode.
	for _, tm := range []time.Time{firstTime, lastTime} {
		if _, err := topics.NewTime(tm).MarshalJSON(); err != nil {
			t.Errorf("%v: %v", tm, err)
		}
	}
	for _, tm := range []time.Time{firstTime.Add(-time.Millisecond), lastTime.Add(time.Millisecond)} {
		if _, err := topics.NewTime(tm).MarshalJSON(); err == nil {
			t.Errorf("%v encodes: the widest lease_remaining_ms is measured on a narrower range", tm)
		}
	}
	if got := remainingMs(topics.NewTime(firstTime), topics.NewTime(lastTime)); got != widestRemainingMs || intLen(got) != 16 {
		t.Errorf("a lease expired at %v, at %v: %d, want %d (16 characters)", firstTime, lastTime, got, widestRemainingMs)
	}
	if got := remainingMs(topics.NewTime(lastTime), topics.NewTime(firstTime)); got != -widestRemainingMs {
		t.Errorf("a lease expiring at %v, at %v: %d, want %d", lastTime, firstTime, got, -widestRemainingMs)
	}
	times := []time.Time{
		firstTime, lastTime, {}, time.Unix(0, 0), time.Date(2026, 2, 14, 10, 0, 0, 0, time.UTC),
		time.Date(2326, 2, 14, 10, 0, 0, 1e6, time.UTC), time.Date(1726, 2, 14, 10, 0, 0, 0, time.UTC),
		// Beyond what encodes: clamped, never wider.
		time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, a := range times {
		for _, b := range times {
			ea, eb := topics.NewTime(a), topics.NewTime(b)
			got := remainingMs(ea, eb)
			if intLen(got) > intLen(widestRemainingMs) {
				t.Errorf("expires %v, at %v: %d is wider than %d", a, b, got, widestRemainingMs)
			}
			inRange := !a.Before(firstTime) && !a.After(lastTime) && !b.Before(firstTime) && !b.After(lastTime)
			if want := ea.UnixMilli() - eb.UnixMilli(); inRange && got != want {
				// 300 years: a time.Duration would stop at 292.
				t.Errorf("expires %v, at %v: %d, want the exact %d", a, b, got, want)
			}
		}
	}
}
