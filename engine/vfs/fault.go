package vfs

import (
	"os"
)

// Op names one filesystem operation a FaultFS can fail.
type Op string

// The operations a FaultFS reports to its Inject hook.
const (
	OpOpen     Op = "open"
	OpRead     Op = "read"
	OpWrite    Op = "write"
	OpTruncate Op = "truncate"
	OpSync     Op = "sync" // Sync and Datasync
	OpStat     Op = "stat" // FS.Stat and File.Stat
	OpRename   Op = "rename"
	OpRemove   Op = "remove"
	OpMkdir    Op = "mkdir"
	OpReadDir  Op = "readdir"
	OpSyncDir  Op = "syncdir"
	OpUsage    Op = "usage"
	// OpZeroRange is ZeroRange on a file (the package's ZeroRange), kept
	// apart from OpWrite so a test counting a file's writes does not count
	// the wipes of its ranges.
	OpZeroRange Op = "zerorange"
)

// FaultFS wraps an FS and asks Inject before every operation, so a test can
// fail exactly the call it cares about (the first write with ENOSPC, every
// open carrying O_DIRECT with EINVAL, one rename) while the rest of the run
// uses the real disk. It is the "error FS" of pebble's vfs/errorfs, kept to
// one hook.
type FaultFS struct {
	// FS is the filesystem underneath; nil means OS{}.
	FS FS
	// Inject is called before each operation with the operation, the path
	// it names (for Rename, the old path; for file operations, the file's
	// name) and, for OpOpen, the open flags (0 otherwise). A non-nil result
	// fails the operation with that error, which should look like what the
	// kernel returns (a syscall.Errno, or an *os.PathError wrapping one);
	// the operation is then not performed. Inject may be called from many
	// goroutines at once. A nil Inject injects nothing.
	Inject func(op Op, path string, flag int) error
	// InjectRange, when set, is asked after Inject before each operation
	// on a byte range of a file (OpRead, OpWrite, OpZeroRange), with the
	// file's name and the range [off, off+n), and fails it the same way:
	// Inject cannot tell one part of a file from another, and a bad
	// sector fails the reads of its part only. A failed call fails whole
	// (no bytes moved), as a pread does whose first page is unreadable.
	InjectRange func(op Op, path string, off, n int64) error
}

var _ FS = (*FaultFS)(nil)

func (f *FaultFS) under() FS {
	if f.FS == nil {
		return OS{}
	}
	return f.FS
}

func (f *FaultFS) inject(op Op, path string, flag int) error {
	if f.Inject == nil {
		return nil
	}
	return wrapFault(op, path, f.Inject(op, path, flag))
}

// injectRange asks both hooks about an operation on [off, off+n) of the
// file at path.
func (f *FaultFS) injectRange(op Op, path string, off, n int64) error {
	if err := f.inject(op, path, 0); err != nil {
		return err
	}
	if f.InjectRange == nil {
		return nil
	}
	return wrapFault(op, path, f.InjectRange(op, path, off, n))
}

// wrapFault returns a hook's error as the kernel's would come back: a
// bare errno inside an *os.PathError naming the operation and path.
func wrapFault(op Op, path string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*os.PathError); ok {
		return err
	}
	if _, ok := err.(*os.LinkError); ok {
		return err
	}
	return &os.PathError{Op: string(op), Path: path, Err: err}
}

func (f *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := f.inject(OpOpen, name, flag); err != nil {
		return nil, err
	}
	file, err := f.under().OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *FaultFS) Rename(oldpath, newpath string) error {
	if err := f.inject(OpRename, oldpath, 0); err != nil {
		return err
	}
	return f.under().Rename(oldpath, newpath)
}

func (f *FaultFS) Remove(name string) error {
	if err := f.inject(OpRemove, name, 0); err != nil {
		return err
	}
	return f.under().Remove(name)
}

func (f *FaultFS) MkdirAll(path string, perm os.FileMode) error {
	if err := f.inject(OpMkdir, path, 0); err != nil {
		return err
	}
	return f.under().MkdirAll(path, perm)
}

func (f *FaultFS) Mkdir(path string, perm os.FileMode) error {
	if err := f.inject(OpMkdir, path, 0); err != nil {
		return err
	}
	return f.under().Mkdir(path, perm)
}

func (f *FaultFS) ReadDir(name string) ([]os.DirEntry, error) {
	if err := f.inject(OpReadDir, name, 0); err != nil {
		return nil, err
	}
	return f.under().ReadDir(name)
}

func (f *FaultFS) Stat(name string) (os.FileInfo, error) {
	if err := f.inject(OpStat, name, 0); err != nil {
		return nil, err
	}
	return f.under().Stat(name)
}

func (f *FaultFS) Usage(path string) (Usage, error) {
	if err := f.inject(OpUsage, path, 0); err != nil {
		return Usage{}, err
	}
	return f.under().Usage(path)
}

func (f *FaultFS) SyncDir(path string) error {
	if err := f.inject(OpSyncDir, path, 0); err != nil {
		return err
	}
	return f.under().SyncDir(path)
}

// faultFile routes a File's data operations through the FaultFS hook.
type faultFile struct {
	File
	fs *FaultFS
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.fs.injectRange(OpRead, f.Name(), off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.injectRange(OpWrite, f.Name(), off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

// ZeroRange lets the hooks fail the zeroing of a range, then zeroes it in
// the file underneath (through that file's own ZeroRange, if it has one).
// Without it the embedded File would hide both: the engines would zero
// through the descriptor, past the hooks and past a simulated disk.
func (f *faultFile) ZeroRange(off, n int64) error {
	if err := f.fs.injectRange(OpZeroRange, f.Name(), off, n); err != nil {
		return err
	}
	return ZeroRange(f.File, off, n)
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.fs.inject(OpTruncate, f.Name(), 0); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *faultFile) Sync() error {
	if err := f.fs.inject(OpSync, f.Name(), 0); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) Datasync() error {
	if err := f.fs.inject(OpSync, f.Name(), 0); err != nil {
		return err
	}
	return Datasync(f.File)
}

func (f *faultFile) Stat() (os.FileInfo, error) {
	if err := f.fs.inject(OpStat, f.Name(), 0); err != nil {
		return nil, err
	}
	return f.File.Stat()
}
