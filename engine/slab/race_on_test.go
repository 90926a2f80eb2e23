//go:build race

package slab

// raceEnabled shortens the exhaustive, single-threaded loops (they prove
// nothing more under the race detector, only run 20x slower).
const raceEnabled = true
