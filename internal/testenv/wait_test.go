package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestPoll: Poll returns as soon as the check holds, and otherwise the last
// error it returned, not the first.
func TestPoll(t *testing.T) {
	n := 0
	if err := Poll(time.Minute, time.Millisecond, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll: %v after %d checks, want nil after 3", err, n)
	}
	n = 0
	err := Poll(20*time.Millisecond, time.Millisecond, func() error { n++; return fmt.Errorf("check %d", n) })
	if want := fmt.Sprintf("check %d", n); err == nil || err.Error() != want {
		t.Fatalf("Poll past its deadline: %v, want the last check's error %q", err, want)
	}
	if err := Until("ready", func() bool { return false })(); err == nil || err.Error() != "ready" {
		t.Fatalf("Until: %v, want the condition's name", err)
	}
}
