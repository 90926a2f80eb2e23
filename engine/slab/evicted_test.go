package slab

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// An evicted value's record stays in the slot table until the PUT that
// evicted it writes its own record over it (or wipes the extent it
// moved). A REMOVE of that key acknowledged in between, followed by a
// SIGKILL, used to bring the evicted value back at the next Open. These
// tests take a copy of the disk directory the instant REMOVE returns,
// which is what a SIGKILL then leaves, and open the copy.

// copyDir copies the files of src into dst as the kernel holds them now.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fullDisk opens a store of eight 64 KiB extents on fs and fills it with
// 128 values of 4 KiB, so the next PUT evicts.
func fullDisk(t *testing.T, fs vfs.FS) (*Store, Options) {
	t.Helper()
	opts := Options{Dir: t.TempDir(), CapacityBytes: 8 * 64 << 10, ExtentBytes: 64 << 10, FS: fs}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 128 {
		mustCache(t, s, enginetest.Key(i), bytes.Repeat([]byte{byte(i)}, 4096))
	}
	return s, opts
}

// removeEvictedThenKill runs while the PUT that evicted (stored is its
// outcome) is held by the test's filesystem; release lets it go on. It
// picks a key that PUT evicted, stores it anew, removes it, copies the
// directory the instant the REMOVE is acknowledged, and checks that the
// copy, opened as after a SIGKILL, does not serve the key.
func removeEvictedThenKill(t *testing.T, s *Store, opts Options, release func(), stored <-chan error) {
	t.Helper()
	victim := -1
	for i := range 128 {
		if _, err := s.Exist(enginetest.Key(i)); err != nil {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("the held PUT evicted nothing")
	}
	k := enginetest.Key(victim)
	mustCache(t, s, k, bytes.Repeat([]byte{0xEE}, 4096))
	killed := t.TempDir()
	removed := make(chan error, 1)
	go func() {
		err := s.Remove(k)
		copyDir(t, opts.Dir, killed) // the SIGKILL, right at the acknowledgment
		removed <- err
	}()
	// The REMOVE may answer only once the evicted record is gone; give it
	// a moment to answer early (the old behaviour) before the PUT goes on.
	var err error
	select {
	case err = <-removed:
		release()
	case <-time.After(100 * time.Millisecond):
		release()
		err = <-removed
	}
	if err != nil {
		t.Fatalf("REMOVE of key %d: %v", victim, err)
	}
	if err := <-stored; err != nil {
		t.Fatalf("the PUT that evicted: %v", err)
	}
	mustClose(t, s)
	opts.Dir, opts.FS = killed, nil
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := get(t, s2, k); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("key %d, removed before the SIGKILL, is served after it (%d bytes, its evicted value: %v, err %v)",
			victim, len(got), bytes.Equal(got, bytes.Repeat([]byte{byte(victim)}, 4096)), err)
	}
}

// TestRemoveOfKeyInMovedExtentSurvivesSIGKILL: the evicted values of an
// extent that changed class keep their records until its wipe is done.
func TestRemoveOfKeyInMovedExtentSurvivesSIGKILL(t *testing.T) {
	fs := &heldWipeFS{FS: vfs.OS{}, armed: make(chan struct{}), entered: make(chan struct{}, 1), open: make(chan struct{})}
	s, opts := fullDisk(t, fs)
	close(fs.armed)
	stored := make(chan error, 1)
	go func() { stored <- s.Put(enginetest.Key(1000), bytes.Repeat([]byte{0xBB}, 60<<10)) }()
	<-fs.entered
	removeEvictedThenKill(t, s, opts, func() { close(fs.open) }, stored)
}

// heldWriteFS holds the first write to an extent file after it is armed,
// until open is closed; it waits for the test to hear of it on entered
// (a send that gave up when the test was not listening yet let the write
// through un-held, and the test then waited for good).
type heldWriteFS struct {
	vfs.FS
	armed, entered, open chan struct{}
	held                 atomic.Bool
}

func (h *heldWriteFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Ext(name) != ".ext" {
		return f, err
	}
	return &heldWriteFile{File: f, fs: h}, nil
}

type heldWriteFile struct {
	vfs.File
	fs *heldWriteFS
}

func (f *heldWriteFile) WriteAt(p []byte, off int64) (int, error) {
	select {
	case <-f.fs.armed:
		if f.fs.held.CompareAndSwap(false, true) {
			f.fs.entered <- struct{}{}
			<-f.fs.open
		}
	default:
	}
	return f.File.WriteAt(p, off)
}

// TestRemoveOfClockVictimSurvivesSIGKILL: a slot taken from a value the
// clock evicted keeps that value's record until the new value's record
// is written over it.
func TestRemoveOfClockVictimSurvivesSIGKILL(t *testing.T) {
	fs := &heldWriteFS{FS: vfs.OS{}, armed: make(chan struct{}), entered: make(chan struct{}), open: make(chan struct{})}
	s, opts := fullDisk(t, fs)
	close(fs.armed)
	stored := make(chan error, 1)
	go func() { stored <- s.Put(enginetest.Key(1000), bytes.Repeat([]byte{200}, 4096)) }()
	<-fs.entered
	removeEvictedThenKill(t, s, opts, func() { close(fs.open) }, stored)
}

// heldTableFS holds the hold-th write to slots.tbl after it is armed,
// until open is closed, saying on entered that it got there.
type heldTableFS struct {
	vfs.FS
	armed         atomic.Bool
	count         atomic.Int32
	hold          int32
	entered, open chan struct{}
}

func (h *heldTableFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Base(name) != tableName {
		return f, err
	}
	return &heldTableFile{File: f, fs: h}, nil
}

type heldTableFile struct {
	vfs.File
	fs *heldTableFS
}

func (f *heldTableFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.armed.Load() && f.fs.count.Add(1) == f.fs.hold {
		f.fs.entered <- struct{}{}
		<-f.fs.open
	}
	return f.File.WriteAt(p, off)
}

// An overwrite clears the replaced value's record after it published the
// new one; a REMOVE in between waits for that clear, so a SIGKILL right
// after the REMOVE does not bring the replaced value back.
func TestRemoveDuringAnOverwriteSurvivesSIGKILL(t *testing.T) {
	fs := &heldTableFS{FS: vfs.OS{}, hold: 2, entered: make(chan struct{}, 1), open: make(chan struct{})}
	opts := Options{Dir: t.TempDir(), CapacityBytes: 8 * 64 << 10, ExtentBytes: 64 << 10, FS: fs}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	k, v1 := enginetest.Key(1), bytes.Repeat([]byte{1}, 4096)
	mustCache(t, s, k, v1)
	fs.armed.Store(true) // table write 1: the new value's record; 2: the clear of v1's (held)
	stored := make(chan error, 1)
	go func() { stored <- s.Put(k, bytes.Repeat([]byte{2}, 4096)) }()
	<-fs.entered
	killed, removed := t.TempDir(), make(chan error, 1)
	go func() {
		err := s.Remove(k)
		copyDir(t, opts.Dir, killed) // what a SIGKILL the instant REMOVE returned leaves
		removed <- err
	}()
	var rerr error
	select {
	case rerr = <-removed: // returned with the clear still held: the fault
		close(fs.open)
	case <-time.After(200 * time.Millisecond): // waiting for the clear, as it should
		close(fs.open)
		rerr = <-removed
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	if err := <-stored; err != nil {
		t.Fatal(err)
	}
	mustClose(t, s)
	opts.Dir, opts.FS = killed, nil
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, s2)
	if got, err := get(t, s2, k); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("a removed key served after a SIGKILL: %d bytes (the replaced value: %v), %v", len(got), bytes.Equal(got, v1), err)
	}
}
