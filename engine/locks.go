package engine

// LockNotify, when set before any engine opens, is told the descriptor
// of each file lock an engine takes (held) and, before closing it, gives
// back (the slab engine's disk locks, the object store tier's marks
// file). libdfkv sets it: a process that forks without exec (a Python
// engine's workers) would otherwise leave each child holding every lock
// the parent holds, since a flock belongs to the open file, which the
// child shares, until the last child exits. The library closes these
// descriptors in the child right after fork.
var LockNotify func(fd uintptr, held bool)

// NoteLock tells LockNotify, if set, that fd holds (or no longer holds)
// a lock.
func NoteLock(fd uintptr, held bool) {
	if LockNotify != nil {
		LockNotify(fd, held)
	}
}
