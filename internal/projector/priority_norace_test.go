//go:build !race

package projector

// raceDetectorOn: see priority_race_test.go.
const raceDetectorOn = false
