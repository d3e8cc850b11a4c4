//go:build faults

package projector

import (
	"sync/atomic"

	"github.com/canopy-dev/canopy/pkg/topics"
)

// Faults injected, for the tests of poison records (poison_faults_test.go):
// they make a worker fail on chosen input as a bug in canopy would, so
// that the tests show what a record that brings out a bug does to its
// partition, without a bug. They exist only in builds with the faults tag
// (make test runs those tests so); other builds have nofaults.go's empty
// hooks instead, which the compiler drops.

// faults are the failures to inject: each, when set, is called with what
// it may fail.
type faults struct {
	// apply is called with each event before it is applied, and may
	// panic.
	apply func(ev *topics.Event)
	// build and encode are called with each wake built, and fail it when
	// they return an error: as a wake whose snapshot could not be built
	// (projection.WakeError), or as one that could not be encoded.
	build, encode func(w *topics.Wake) error
}

// injected are the faults of the test running: one at a time, as this
// package's tests run.
var injected atomic.Pointer[faults]

func (w *worker) faultApply(ev *topics.Event) {
	if f := injected.Load(); f != nil && f.apply != nil {
		f.apply(ev)
	}
}

func (w *worker) faultBuild(wk *topics.Wake) error {
	if f := injected.Load(); f != nil && f.build != nil {
		return f.build(wk)
	}
	return nil
}

func (w *worker) faultEncode(wk *topics.Wake) error {
	if f := injected.Load(); f != nil && f.encode != nil {
		return f.encode(wk)
	}
	return nil
}
