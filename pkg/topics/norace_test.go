//go:build !race

package topics_test

// raceDetectorOn: see race_test.go.
const raceDetectorOn = false
