package vfs

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// ZeroRange makes [off, off+n) of f read as zeros, keeping its size and,
// where the filesystem can (ext4 and xfs: FALLOC_FL_ZERO_RANGE turns the
// range back into unwritten, still allocated blocks), its disk space, so
// a preallocated file never has to allocate again. Where it cannot, it
// punches a hole and allocates it again, and where it cannot punch, it
// writes zeros. A File that zeroes ranges itself (a fault-injecting file,
// or a simulated disk, which must be able to undo it on a power cut) is
// asked instead, so the engines never zero through a descriptor the seam
// did not hand out.
func ZeroRange(f File, off, n int64) error {
	if n == 0 {
		return nil // fallocate refuses a zero length
	}
	if z, ok := f.(interface{ ZeroRange(off, n int64) error }); ok {
		return z.ZeroRange(off, n)
	}
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return nil
	}
	if !unsupported(err) {
		return &os.PathError{Op: "fallocate zero range", Path: f.Name(), Err: err}
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		// Allocate the hole again (it still reads as zeros), so a later
		// write there need not allocate on a full filesystem. Best
		// effort: the range reads as zeros either way.
		_ = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
		return nil
	}
	if !unsupported(err) {
		return &os.PathError{Op: "fallocate punch", Path: f.Name(), Err: err}
	}
	return writeZeros(f, off, n)
}

// unsupported reports an fallocate mode the filesystem does not have.
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)
}
