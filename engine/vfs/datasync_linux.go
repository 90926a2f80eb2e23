package vfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// Datasync flushes f's data and the metadata needed to read it back (its
// size) but not its timestamps: fdatasync(2), one journal commit cheaper
// than fsync on ext4 and XFS. A File that implements Datasync() itself (a
// fault-injecting or in-memory file) is asked instead, so the engines never
// issue a syscall on a descriptor the seam did not hand out.
func Datasync(f File) error {
	if d, ok := f.(interface{ Datasync() error }); ok {
		return d.Datasync()
	}
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
		}
		return nil
	}
}
