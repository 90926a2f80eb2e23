//go:build race

package ramtier

const raceEnabled = true
