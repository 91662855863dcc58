//go:build race

package examples_test

// raceEnabled is true when the tests run with the race detector.
const raceEnabled = true
