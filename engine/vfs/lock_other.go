//go:build !linux

package vfs

import "errors"

// ErrLocked is LockDir's error when another open file holds the lock.
var ErrLocked = errors.New("directory locked")

// LockDir does nothing where flock is not wired up: the engines need
// Linux for their disks.
func LockDir(d File) error { return nil }
