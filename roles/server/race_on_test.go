//go:build race

package server

// raceEnabled: the race detector allocates for its own bookkeeping, so
// allocation counts mean nothing under it.
const raceEnabled = true
