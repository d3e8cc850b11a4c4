package testenv

import (
	"errors"
	"testing"
	"time"
)

// PollEvery is how often WaitFor calls its check.
const PollEvery = 10 * time.Millisecond

// WaitFor calls check every PollEvery until it returns nil, and fails t with
// check's last error if d passes first, so that the failure shows the last
// state seen, not just that time ran out (nats-server's checkFor). It is for
// state owned by something that offers nothing to wait on (a group's
// assignment, a projector's counters, another process); check runs on the
// test's goroutine, so it may end the test itself (t.Fatal) when waiting
// longer is pointless.
func WaitFor(t testing.TB, d time.Duration, check func() error) {
	t.Helper()
	WaitEvery(t, d, PollEvery, check)
}

// WaitEvery is WaitFor calling check every every: for a check that is
// costly (a query to another process) or state that changes at a known
// pace.
func WaitEvery(t testing.TB, d, every time.Duration, check func() error) {
	t.Helper()
	if err := Poll(d, every, check); err != nil {
		t.Fatalf("not within %v: %v", d, err)
	}
}

// Poll calls check every every until it returns nil, and returns check's
// last error if d passes first: WaitEvery for a caller that has no test to
// fail.
func Poll(d, every time.Duration, check func() error) error {
	err := check()
	if err == nil {
		return nil
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return err
		case <-tick.C:
		}
		if err = check(); err == nil {
			return nil
		}
	}
}

// Until is a check for WaitFor that holds once cond does; until then its
// error is what, the condition awaited.
func Until(what string, cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errors.New(what)
	}
}

// Holds is a check for WaitFor that holds once cond does; until then its
// error is what state reports, called only then: for a message that shows
// the state seen.
func Holds(cond func() bool, state func() string) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errors.New(state())
	}
}
