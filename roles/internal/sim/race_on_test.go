//go:build race

package sim_test

// raceEnabled shrinks the default seed set under the race detector, which
// runs the cluster ten times slower: one short seed there looks for data
// races in the cluster's code; the full set runs without it.
const raceEnabled = true
