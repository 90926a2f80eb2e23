package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFaultFSInjects: every operation asks the hook first, a non-nil answer
// fails it (as an *os.PathError wrapping the errno) without doing it, and
// nil passes through to the real filesystem.
func TestFaultFSInjects(t *testing.T) {
	dir := t.TempDir()
	fail := map[Op]bool{}
	var flags []int
	fs := &FaultFS{Inject: func(op Op, path string, flag int) error {
		if op == OpOpen {
			flags = append(flags, flag)
		}
		if fail[op] {
			return syscall.EIO
		}
		return nil
	}}
	p := filepath.Join(dir, "f")
	f, err := fs.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) != 1 || flags[0] != os.O_RDWR|os.O_CREATE {
		t.Fatalf("hook saw open flags %v", flags)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := Datasync(f); err != nil {
		t.Fatal(err)
	}

	isEIO := func(what string, err error) {
		t.Helper()
		var pe *os.PathError
		if !errors.Is(err, syscall.EIO) || !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a PathError wrapping EIO", what, err)
		}
	}
	for _, op := range []Op{OpRead, OpWrite, OpTruncate, OpSync, OpStat, OpRename, OpRemove, OpMkdir, OpReadDir, OpSyncDir, OpUsage, OpOpen} {
		fail[op] = true
	}
	_, err = f.ReadAt(make([]byte, 5), 0)
	isEIO("ReadAt", err)
	_, err = f.WriteAt([]byte("x"), 0)
	isEIO("WriteAt", err)
	isEIO("Truncate", f.Truncate(0))
	isEIO("Sync", f.Sync())
	isEIO("Datasync", Datasync(f))
	_, err = f.Stat()
	isEIO("File.Stat", err)
	_, err = fs.Stat(p)
	isEIO("Stat", err)
	isEIO("Rename", fs.Rename(p, p+"2"))
	isEIO("Remove", fs.Remove(p))
	isEIO("MkdirAll", fs.MkdirAll(filepath.Join(dir, "d"), 0o755))
	_, err = fs.ReadDir(dir)
	isEIO("ReadDir", err)
	isEIO("SyncDir", fs.SyncDir(dir))
	_, err = fs.Usage(dir)
	isEIO("Usage", err)
	_, err = fs.OpenFile(p, os.O_RDONLY, 0)
	isEIO("OpenFile", err)

	// Nothing failed was done: the file is intact, nothing renamed or made.
	clear(fail)
	b := make([]byte, 5)
	if _, err := f.ReadAt(b, 0); err != nil || string(b) != "hello" {
		t.Fatalf("ReadAt after faults = %q, %v", b, err)
	}
	if ents, _ := fs.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "f" {
		t.Fatalf("directory after faults: %v", ents)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rename(p, p+"2"); err != nil {
		t.Fatal(err)
	}
	if _, err := (&FaultFS{}).Stat(p + "2"); err != nil {
		t.Fatalf("nil hook: %v", err)
	}
}
