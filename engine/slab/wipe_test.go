package slab

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
)

// heldWipeFS hands out the slot table with a ZeroRange that, once armed,
// blocks until open is closed: a slow fallocate on a busy filesystem.
type heldWipeFS struct {
	vfs.FS
	armed   chan struct{} // closed to arm
	entered chan struct{}
	open    chan struct{}
}

func (h *heldWipeFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != "slots.tbl" {
		return f, err
	}
	return &heldWipeFile{File: f, fs: h}, nil
}

type heldWipeFile struct {
	vfs.File
	fs *heldWipeFS
}

func (f *heldWipeFile) ZeroRange(off, n int64) error {
	select {
	case <-f.fs.armed:
		f.fs.entered <- struct{}{}
		<-f.fs.open
	default:
	}
	return vfs.ZeroRange(f.File, off, n)
}

// TestExtentWipeHoldsNoLock: while an extent that changed class has its
// old records wiped (stuck here, as a slow fallocate would be), GETs and
// EXISTs of the disk's other values are served; the wipe used to run
// under the disk's metadata lock, so every request of the disk waited for
// it. The PUT that moved the extent is stored once the wipe is done.
func TestExtentWipeHoldsNoLock(t *testing.T) {
	fs := &heldWipeFS{FS: vfs.OS{}, armed: make(chan struct{}), entered: make(chan struct{}, 1), open: make(chan struct{})}
	s, err := Open(Options{Dir: t.TempDir(), CapacityBytes: 8 * 64 << 10, ExtentBytes: 64 << 10, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	small := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 4096) }
	for i := range 128 {
		if err := s.Put(enginetest.Key(i), small(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(fs.armed)
	big := bytes.Repeat([]byte{0xBB}, 60<<10)
	bigKey := enginetest.Key(1000)
	stored := make(chan error, 1)
	go func() { stored <- s.Put(bigKey, big) }()
	<-fs.entered

	served := 0
	for i := range 128 {
		k := enginetest.Key(i)
		if _, err := s.Exist(k); err != nil {
			continue // evicted to make room for the big value
		}
		got, _, err := s.Get(k, 0, 0, enginetest.NewAlloc(nil))
		if err != nil || !bytes.Equal(got, small(i)) {
			t.Fatalf("GET of %s during the wipe: %d bytes, %v", k, len(got), err)
		}
		served++
	}
	if served == 0 {
		t.Fatal("no small value left to read during the wipe")
	}
	close(fs.open)
	if err := <-stored; err != nil {
		t.Fatalf("the PUT that moved an extent: %v", err)
	}
	got, _, err := s.Get(bigKey, 0, 0, enginetest.NewAlloc(nil))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the moved-in value: %d bytes, %v", len(got), err)
	}
	if st := s.Stats(); st.ExtentMoves != 1 {
		t.Fatalf("extent moves %d, want 1", st.ExtentMoves)
	}
}
