package slab

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/engine/vfs"
)

// oDirect is the open flag for direct I/O; zero where the platform has none.
const oDirect = unix.O_DIRECT

// fallocate reserves [0, size) of f (mode 0: allocate and extend), so the
// extent pool owns its disk space from startup and a full filesystem is a
// startup error, not an ENOSPC mid-PUT.
func fallocate(f vfs.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
		return nil
	}
}

// allocated returns the bytes fi's file holds on disk (st_blocks), less
// than its size where it is sparse or only partly preallocated; 0 where
// the FileInfo does not say (which only overstates what is still needed).
func allocated(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks > 0 {
		return uint64(st.Blocks) * 512
	}
	return 0
}

// mediaError reports a read error of the device's media (a bad sector, a
// checksum the filesystem found wrong), which costs the bytes read, as
// opposed to one of the descriptor or the call (EBADF, EFAULT), which says
// nothing about them.
func mediaError(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.EBADMSG) || errors.Is(err, unix.EUCLEAN)
}

// seekData returns the start of the next allocated range at or after off,
// and the start of the hole after it. ok=false with a nil error means no
// data is left. errNoSeekData means the filesystem cannot tell (the caller
// scans everything in bounded chunks).
func seekData(f vfs.File, off, size int64) (start, end int64, ok bool, err error) {
	fd := int(f.Fd())
	start, err = unix.Seek(fd, off, unix.SEEK_DATA)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return 0, 0, false, nil
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return 0, 0, false, errNoSeekData
		}
		return 0, 0, false, &os.PathError{Op: "seek data", Path: f.Name(), Err: err}
	}
	end, err = unix.Seek(fd, start, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, false, &os.PathError{Op: "seek hole", Path: f.Name(), Err: err}
	}
	return start, min(end, size), start < size, nil
}

// dioAlign asks statx for the file's O_DIRECT alignment (STATX_DIOALIGN,
// Linux 6.1+). It returns 0 where the kernel or filesystem does not say.
func dioAlign(path string) uint32 {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_DIOALIGN, &st); err != nil {
		return 0
	}
	if st.Mask&unix.STATX_DIOALIGN == 0 || st.Dio_offset_align == 0 {
		return 0
	}
	return max(st.Dio_offset_align, st.Dio_mem_align)
}

// directRefused reports whether an O_DIRECT open failed because the
// filesystem does not do direct I/O (as opposed to a missing file or a
// permission problem).
func directRefused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP)
}
