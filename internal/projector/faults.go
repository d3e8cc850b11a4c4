package projector

import (
	"github.com/canopy-dev/canopy/pkg/topics"
)

// faults make a worker fail on chosen input as a bug in canopy would: the
// tests of poison records (poison_test.go) show with them what a record
// that brings out a bug does to its partition, without a bug. They are set
// by this package's tests only, through Config.faults; a nil faults is
// never consulted beyond that nil check.
type faults struct {
	// apply, when set, is called with each event before it is applied,
	// and may panic.
	apply func(ev *topics.Event)
	// build and encode, when set, are called with each wake built, and
	// fail it when they return an error: as a wake whose snapshot could
	// not be built (projection.WakeError), or as one that could not be
	// encoded.
	build, encode func(w *topics.Wake) error
}
