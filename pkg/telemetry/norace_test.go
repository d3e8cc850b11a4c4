//go:build !race

package telemetry_test

// raceDetectorOn: see race_test.go.
const raceDetectorOn = false
