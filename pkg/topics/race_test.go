//go:build race

package topics_test

// raceDetectorOn: the race detector's runtime allocates for its own
// bookkeeping, so the tests count allocations only without it (make test
// runs them again so: its norace target).
const raceDetectorOn = true
