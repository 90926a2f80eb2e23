//go:build !linux

package file

// oDirect is the open flag for direct I/O; zero where the platform has none,
// which turns Options.DirectIO off.
const oDirect = 0
