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
	if err := f.Inject(op, path, flag); err != nil {
		if _, ok := err.(*os.PathError); ok {
			return err
		}
		if _, ok := err.(*os.LinkError); ok {
			return err
		}
		return &os.PathError{Op: string(op), Path: path, Err: err}
	}
	return nil
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
	if err := f.fs.inject(OpRead, f.Name(), 0); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.inject(OpWrite, f.Name(), 0); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
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
