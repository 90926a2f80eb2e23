package slab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine/vfs"
)

// TestDanglingSymlinkKept: a disk directory that is a symlink to a disk not
// mounted yet (the link dangles) makes Open fail, and the failed Open does
// not remove the operator's link, which it did not make (Stat follows the
// link, so it reads as missing).
func TestDanglingSymlinkKept(t *testing.T) {
	root := t.TempDir()
	link := filepath.Join(root, "disk0")
	if err := os.Symlink(filepath.Join(root, "mnt", "nvme0", "dfkv"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: link, CapacityBytes: 64 << 20}); err == nil {
		t.Fatal("Open through a dangling symlink succeeded")
	}
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("the symlink that existed before Open is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "mnt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open made the link's target: %v", err)
	}
}

// otherStoreFS lets another store take the directory at a chosen moment of
// this Open: when this Open makes the directory (mkdir) or opens it to
// lock it (lock).
type otherStoreFS struct {
	vfs.FS
	dir   string
	at    string // "mkdir" or "lock"
	other func()
	done  bool
}

func (f *otherStoreFS) Mkdir(p string, m os.FileMode) error {
	if f.at == "mkdir" && p == f.dir && !f.done {
		f.done = true
		f.other()
	}
	return f.FS.Mkdir(p, m)
}

func (f *otherStoreFS) OpenFile(p string, flag int, m os.FileMode) (vfs.File, error) {
	if f.at == "lock" && p == f.dir && !f.done {
		f.done = true
		f.other()
	}
	return f.FS.OpenFile(p, flag, m)
}

// TestOtherStoreKeepsItsDir: when another store makes or locks the
// directory between this Open's look at it and its own claim, the failed
// Open removes nothing of the other's, not even the empty directory it is
// about to format.
func TestOtherStoreKeepsItsDir(t *testing.T) {
	for _, at := range []string{"mkdir", "lock"} {
		t.Run(at, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "disk")
			var lock *os.File
			other := func() {
				if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
					t.Fatal(err)
				}
				var err error
				if lock, err = os.Open(dir); err != nil {
					t.Fatal(err)
				}
				if err := vfs.LockDir(lock); err != nil {
					t.Fatal(err)
				}
				// Not formatted yet: an empty directory is what a
				// careless cleanup would remove.
			}
			_, err := Open(Options{Dir: dir, CapacityBytes: 64 << 20, FS: &otherStoreFS{FS: vfs.OS{}, dir: dir, at: at, other: other}})
			if lock != nil {
				defer lock.Close()
			}
			if err == nil {
				t.Fatal("Open of a directory another store holds succeeded")
			}
			if _, serr := os.Stat(dir); serr != nil {
				t.Fatalf("the other store's directory is gone after the failed Open: %v (Open: %v)", serr, err)
			}
		})
	}
}

// A second store refused a directory is told which process holds it.
func TestSecondOwnerIsToldTheHolder(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, CapacityBytes: 16 << 20, ExtentBytes: testExtent(16 << 20)}
	s := openT(t, opts)
	defer s.Close()
	_, err := Open(opts)
	if err == nil {
		t.Fatal("a second store opened the same directory")
	}
	if want := fmt.Sprintf("in use by pid %d (", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("refusal %q does not name the holder (%q)", err, want)
	}
}
