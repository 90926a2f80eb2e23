//go:build race

package e2e

// raceEnabled builds the multi-process tests' binary with -race too, so
// the server process is checked for data races under real traffic.
const raceEnabled = true
