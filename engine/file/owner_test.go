package file

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// TestSecondOpenOfOneDirectoryIsRefused: a disk directory has one owner.
// A second store on it (another process, an embedded store, two disk
// entries naming one directory) would empty tmp/ under the first, and
// both would write tmp/<key>.1: the second's O_TRUNC open would empty
// the first's synced temp file just before the first published it, and
// its Get would serve 0 bytes. The second Open is refused.
func TestSecondOpenOfOneDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	atRename, truncated, releaseB := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var armA, armB bool
	fa := &vfs.FaultFS{Inject: func(op vfs.Op, path string, _ int) error {
		if armA && op == vfs.OpRename && strings.HasPrefix(path, filepath.Join(dir, "tmp")) {
			armA = false
			close(atRename)
			<-truncated
		}
		return nil
	}}
	fb := &vfs.FaultFS{Inject: func(op vfs.Op, path string, _ int) error {
		if armB && op == vfs.OpWrite && strings.HasPrefix(path, filepath.Join(dir, "tmp")) {
			armB = false
			close(truncated)
			<-releaseB
		}
		return nil
	}}
	a := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20, FS: fa})
	b, err := Open(Options{Dir: dir, CapacityBytes: 1 << 20, FS: fb, Logger: quietLogger()})
	if err != nil {
		if !errors.Is(err, wire.StatusUnavailable) {
			t.Logf("second Open refused with %v (StatusUnavailable, as the slab engine, would be clearer)", err)
		}
		return // fixed: the directory has one owner
	}
	defer b.Close()
	t.Errorf("a second file engine opened %s while the first holds it", dir)

	k, va, vb := key(1), value(1, 64<<10), value(2, 64<<10)
	armA, armB = true, true
	aDone := make(chan error, 1)
	go func() { aDone <- a.Put(k, va) }()
	<-atRename
	bDone := make(chan error, 1)
	go func() { bDone <- b.Put(k, vb) }()
	if err := <-aDone; err != nil {
		close(releaseB)
		<-bDone
		t.Fatalf("first store's Put: %v", err)
	}
	got, stored, err := a.Get(k, 0, 0, enginetest.NewAlloc(nil))
	if err != nil || !(bytes.Equal(got, va) || bytes.Equal(got, vb)) {
		t.Errorf("Get after an acknowledged Put of %d bytes: %d bytes (stored %d), err %v: a torn value was published",
			len(va), len(got), stored, err)
	}
	close(releaseB)
	<-bDone
}

// TestStartupKeepsForeignFilesInTmp: Open empties tmp/ and trash/ of the
// engine's own in-progress files only. A directory that already had a
// tmp/ of someone else's (a disk directory set to a mount point or a home
// directory) keeps its files: as under blocks/, a name the engine did not
// write may not be ours.
func TestStartupKeepsForeignFilesInTmp(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"tmp/notes.txt", "trash/report.pdf"} {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("not the engine's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(Options{Dir: dir, CapacityBytes: 1 << 20, Logger: quietLogger()})
	if err == nil {
		s.Close()
	}
	for _, p := range []string{"tmp/notes.txt", "trash/report.pdf"} {
		if _, serr := os.Stat(filepath.Join(dir, p)); serr != nil {
			t.Errorf("Open (err %v) deleted %s, a file the engine did not write: %v", err, p, serr)
		}
	}
}

// TestRemoveWithTrashGoneRemovesTheBlock: an ENOENT from the rename into
// trash/ may mean trash/ is gone (an operator's rm -rf), not the block:
// Remove then unlinks the block in place, so it is not served again after
// the next Open and its bytes are freed.
func TestRemoveWithTrashGoneRemovesTheBlock(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20})
	v := value(1, 1000)
	if err := s.Put(key(1), v); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.trash); err != nil {
		t.Fatal(err)
	}
	err := s.Remove(key(1))
	_, serr := os.Stat(s.blockPath(key(1)))
	if err == nil && serr == nil {
		t.Errorf("Remove returned success but %s is still on disk", s.blockPath(key(1)))
	}
	s.Close()
	if err == nil {
		s2 := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20})
		if n, gerr := s2.Exist(key(1)); gerr == nil {
			t.Errorf("after an acknowledged Remove and a restart, Exist reports %d bytes", n)
		}
	}
}

// TestEvictWithTrashGoneFreesTheBlock: the eviction side of the same
// case: with trash/ gone, the victim's bytes counted as freed are freed on
// disk too.
func TestEvictWithTrashGoneFreesTheBlock(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir, CapacityBytes: 3000})
	for i := range 3 {
		if err := s.Put(key(i), value(i, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(s.trash); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(key(9), value(9, 1000)); err != nil {
		t.Fatal(err)
	}
	var onDisk int64
	_ = filepath.WalkDir(s.blocks, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				onDisk += fi.Size()
			}
		}
		return nil
	})
	if st := s.Stats(); uint64(onDisk) != st.UsedBytes {
		t.Errorf("blocks/ holds %d bytes, the index counts %d (evictions %d): an evicted file stayed on disk",
			onDisk, st.UsedBytes, st.Evictions)
	}
}
