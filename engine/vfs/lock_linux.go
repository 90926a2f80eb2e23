package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// ErrLocked is LockDir's error when another open file holds the lock.
var ErrLocked = errors.New("directory locked")

// LockDir takes an exclusive, non-blocking flock on the open directory d,
// so two processes (or two stores in one process) never run one disk
// directory at once. The lock dies with the descriptor, also on SIGKILL.
func LockDir(d File) error {
	err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return ErrLocked
	}
	if err != nil {
		return &os.PathError{Op: "flock", Path: d.Name(), Err: err}
	}
	return nil
}
