//go:build race

package projector

// raceDetectorOn: the race detector slows Pebble down by an order of
// magnitude (its invariant checks record a stack trace for every sstable
// iterator and cache value), so the heaviest tests size their load by it.
const raceDetectorOn = true
