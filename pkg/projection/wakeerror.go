package projection

import (
	"fmt"
	"runtime/debug"
)

// WakeError is the error of a wake that could not be built: its run, and
// why. The state is sound (the run's events were applied); the wake of
// these triggers cannot be made from it. A projector that meets one blames
// the records that raised the triggers (internal/projector, poison.go).
type WakeError struct {
	Run string
	Err error
	// Stack is where the build panicked, when it did: for the log, not
	// for the error's text.
	Stack []byte
}

func (e *WakeError) Error() string {
	return fmt.Sprintf("projection: run %q: building its wake: %v", e.Run, e.Err)
}

func (e *WakeError) Unwrap() error { return e.Err }

// recoverWake turns a panic while building run's wake into a WakeError in
// *err: a snapshot builder that panics on some state is a bug, and the
// caller must be able to go on without that wake.
func recoverWake(run string, err *error) {
	if v := recover(); v != nil {
		*err = &WakeError{Run: run, Err: fmt.Errorf("panic: %v", v), Stack: debug.Stack()}
	}
}
