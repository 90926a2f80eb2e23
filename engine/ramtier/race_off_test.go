//go:build !race

package ramtier

const raceEnabled = false
