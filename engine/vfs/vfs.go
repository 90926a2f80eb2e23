// Package vfs is the file layer seam of the engines: the
// engines reach the disk only through FS, so tests can inject faults
// (ENOSPC, a refused O_DIRECT open, a failing rename) and a later
// deterministic simulation can swap in an in-memory disk.
package vfs

import (
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File is the subset of *os.File the engines use.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	Name() string
	Stat() (os.FileInfo, error)
	Sync() error
	Truncate(size int64) error
	// Fd is used for fallocate, fdatasync and SEEK_DATA/SEEK_HOLE.
	Fd() uintptr
}

// Usage describes the filesystem holding a path, in bytes.
type Usage struct {
	Total uint64
	Free  uint64 // available to an unprivileged writer
	// FS tells filesystems apart (statfs's f_fsid), so disks sharing one
	// can be sized together; 0 when unknown.
	FS uint64
}

// FS is the filesystem as the engines see it.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	MkdirAll(path string, perm os.FileMode) error
	// Mkdir creates one directory; it fails if anything (a directory, a
	// file, a dangling symlink) is already at path, so a caller can tell
	// what it made itself.
	Mkdir(path string, perm os.FileMode) error
	ReadDir(name string) ([]os.DirEntry, error)
	Stat(name string) (os.FileInfo, error)
	Usage(path string) (Usage, error)
	// SyncDir fsyncs a directory so a rename or create inside it survives a
	// crash.
	SyncDir(path string) error
}

// OS is the real filesystem.
type OS struct{}

var _ FS = OS{}

func (OS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (OS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }
func (OS) Remove(name string) error                     { return os.Remove(name) }
func (OS) MkdirAll(path string, perm os.FileMode) error { return os.MkdirAll(path, perm) }
func (OS) Mkdir(path string, perm os.FileMode) error    { return os.Mkdir(path, perm) }
func (OS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (OS) Stat(name string) (os.FileInfo, error)        { return os.Stat(name) }

func (OS) Usage(path string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Usage{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	bs := uint64(st.Bsize)
	id := uint64(uint32(st.Fsid.Val[0]))<<32 | uint64(uint32(st.Fsid.Val[1]))
	return Usage{Total: st.Blocks * bs, Free: st.Bavail * bs, FS: id}, nil
}

func (OS) SyncDir(path string) error {
	d, err := os.Open(filepath.Clean(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// ExistingAncestor returns dir's nearest ancestor that exists (dir itself
// when it does): the directory whose filesystem a missing dir would be
// created on, for sizing it before creating anything.
func ExistingAncestor(fsys FS, dir string) string {
	d := filepath.Clean(dir)
	for {
		if _, err := fsys.Stat(d); err == nil || filepath.Dir(d) == d {
			return d
		}
		d = filepath.Dir(d)
	}
}

// writeZeros writes n zero bytes at off of f, 1 MiB per call: ZeroRange
// where the filesystem can neither zero nor punch a range.
func writeZeros(f File, off, n int64) error {
	zero := make([]byte, min(n, 1<<20))
	for n > 0 {
		c := min(n, int64(len(zero)))
		if _, err := f.WriteAt(zero[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}
