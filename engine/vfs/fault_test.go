package vfs

import (
	"bytes"
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

// zeroingFS hands out files that zero ranges themselves, as a simulated
// disk's do, and notes each range.
type zeroingFS struct {
	FS
	zeroed [][2]int64
}

func (z *zeroingFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := z.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &zeroingFile{File: f, fs: z}, nil
}

type zeroingFile struct {
	File
	fs *zeroingFS
}

func (f *zeroingFile) ZeroRange(off, n int64) error {
	f.fs.zeroed = append(f.fs.zeroed, [2]int64{off, n})
	return writeZeros(f.File, off, n)
}

// TestFaultFSZeroRange: a FaultFS file zeroes ranges through the hooks
// (OpZeroRange, with the range) and then through the file underneath,
// its own ZeroRange where it has one, so neither a fault test nor a
// simulated disk is bypassed by a zeroing the engines do through the
// descriptor. A failed zeroing leaves the bytes as they were.
func TestFaultFSZeroRange(t *testing.T) {
	for _, under := range []string{"os", "own ZeroRange"} {
		t.Run(under, func(t *testing.T) {
			var zfs *zeroingFS
			fsys := FS(OS{})
			if under != "os" {
				zfs = &zeroingFS{FS: OS{}}
				fsys = zfs
			}
			type call struct {
				op     Op
				off, n int64
			}
			var calls []call
			fail := false
			ffs := &FaultFS{FS: fsys,
				Inject: func(op Op, path string, flag int) error {
					if op == OpZeroRange && fail {
						return syscall.EIO
					}
					return nil
				},
				InjectRange: func(op Op, path string, off, n int64) error {
					calls = append(calls, call{op, off, n})
					return nil
				},
			}
			f, err := ffs.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			data := bytes.Repeat([]byte{0xAB}, 64<<10)
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			fail = true
			if err := ZeroRange(f, 4096, 8192); !errors.Is(err, syscall.EIO) {
				t.Fatalf("ZeroRange with the hook failing it: %v, want EIO", err)
			}
			got := make([]byte, len(data))
			if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("a failed ZeroRange changed the file (%v)", err)
			}
			fail = false
			calls = calls[:0]
			if err := ZeroRange(f, 4096, 8192); err != nil {
				t.Fatal(err)
			}
			if len(calls) != 1 || calls[0] != (call{OpZeroRange, 4096, 8192}) {
				t.Fatalf("InjectRange saw %v, want one zerorange of [4096, 12288)", calls)
			}
			if zfs != nil && (len(zfs.zeroed) != 1 || zfs.zeroed[0] != [2]int64{4096, 8192}) {
				t.Fatalf("the file's own ZeroRange saw %v, want the one range", zfs.zeroed)
			}
			if _, err := f.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			want := bytes.Clone(data)
			clear(want[4096 : 4096+8192])
			if !bytes.Equal(got, want) {
				t.Fatal("ZeroRange did not zero exactly [4096, 12288)")
			}
		})
	}
}

// TestFaultFSInjectRange: InjectRange sees the range of each read and
// write, so a test can fail one part of a file, as a bad sector fails the
// reads of its part, while the rest reads.
func TestFaultFSInjectRange(t *testing.T) {
	ffs := &FaultFS{InjectRange: func(op Op, path string, off, n int64) error {
		if op == OpRead && off < 8192 && off+n > 4096 {
			return syscall.EIO
		}
		return nil
	}}
	f, err := ffs.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 16384), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off, n int64
		fail   bool
	}{{0, 4096, false}, {8192, 8192, false}, {0, 16384, true}, {4096 + 64, 64, true}, {4032, 128, true}} {
		_, err := f.ReadAt(make([]byte, c.n), c.off)
		var pe *os.PathError
		if failed := errors.Is(err, syscall.EIO) && errors.As(err, &pe); failed != c.fail || !c.fail && err != nil {
			t.Fatalf("read of [%d, %d): %v; want failed=%v", c.off, c.off+c.n, err, c.fail)
		}
	}
}
