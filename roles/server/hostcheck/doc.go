// Package hostcheck compares, at a node's start, what the host gives the
// process with what its configuration asks for: memory for the RAM tier's
// arena, the kernel's cap on socket buffers, the open-file limit, and how
// the filesystems under its slab disks are mounted. A mismatch here shows
// up much later as an OOM kill, slow large GETs, refused connections or
// stalled PUTs, far from its cause; checked at start, it is one line that
// names the setting or sysctl to change.
//
// CheckRAMTier refuses (a node that would be killed should not start);
// the others only warn. They read /proc and /sys; a figure that cannot be
// read is not judged.
package hostcheck
