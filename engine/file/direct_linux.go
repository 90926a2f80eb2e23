package file

import "golang.org/x/sys/unix"

// oDirect is the open flag for direct I/O; zero where the platform has none.
const oDirect = unix.O_DIRECT
