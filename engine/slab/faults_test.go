package slab

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// In-process tests of the store under injected filesystem faults
// (vfs.FaultFS over t.TempDir()), each for an error path that once left
// the store saying something other than what happened.

// TestDirectOpenRefusedMidwayReopensEarlierExtents: when the O_DIRECT open
// of one extent is refused after earlier ones succeeded, the store falls
// back to buffered I/O for all of them; the earlier ones kept O_DIRECT and
// refused the unaligned writes buffered I/O sends them.
func TestDirectOpenRefusedMidwayReopensEarlierExtents(t *testing.T) {
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpOpen && flag&oDirect != 0 && filepath.Base(path) == "00003.ext" {
			return syscall.EINVAL
		}
		return nil
	}}
	opts := smallOpts(t.TempDir())
	opts.ExtentBytes = 2 << 20 // every enginetest size fits
	opts.FS = ffs
	opts.Logger = slog.New(&logBuf{})
	s := openT(t, opts)
	defer mustClose(t, s)
	if s.Stats().DirectIO {
		t.Fatal("DirectIO still on after an extent's direct open was refused")
	}
	for i, n := range enginetest.Sizes {
		k, v := enginetest.Key(i), enginetest.Value(uint64(n), n)
		mustCache(t, s, k, v)
		got, err := get(t, s, k)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("%d bytes: Get: %v (%d bytes back)", n, err, len(got))
		}
	}
}

// TestPutNotAcknowledgedWhenStoreFailsClosedInside: a PUT that replaces a
// value publishes, then clears the old value's record; when that clear
// fails the store fails closed, the new value can never be read back, and
// the PUT must say so rather than succeed. The error names the cause.
func TestPutNotAcknowledgedWhenStoreFailsClosedInside(t *testing.T) {
	var tableWrites atomic.Int64
	var counting atomic.Bool
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if counting.Load() && op == vfs.OpWrite && filepath.Base(path) == tableName && tableWrites.Add(1) == 2 {
			return syscall.EIO // the second: clearing the replaced record
		}
		return nil
	}}
	opts := smallOpts(t.TempDir())
	opts.FS = ffs
	opts.Logger = slog.New(&logBuf{})
	s := openT(t, opts)
	k := enginetest.Key(1)
	mustCache(t, s, k, enginetest.Value(1, 5000))
	puts := s.Stats().Puts
	counting.Store(true)
	err := s.Put(k, enginetest.Value(2, 5000))
	wantStatus(t, err, wire.StatusIOError, "Put whose old record cannot be cleared")
	if !errors.Is(err, engine.ErrFailedClosed) || !strings.Contains(err.Error(), syscall.EIO.Error()) {
		t.Fatalf("error %q: want ErrFailedClosed naming the cause (%v)", err, syscall.EIO)
	}
	if st := s.Stats(); st.Healthy || st.Puts != puts {
		t.Fatalf("after failing closed: healthy %v, puts %d (was %d)", st.Healthy, st.Puts, puts)
	}
	if err := s.Remove(k); err == nil || !strings.Contains(err.Error(), syscall.EIO.Error()) {
		t.Fatalf("Remove after failing closed: %v; want the cause named", err)
	}
	_ = s.Close()
}

// TestFailedReadIsNotAHit: a GET whose payload read fails counts as an
// I/O error, not as a hit.
func TestFailedReadIsNotAHit(t *testing.T) {
	var failReads atomic.Bool
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if failReads.Load() && op == vfs.OpRead && strings.HasSuffix(path, ".ext") {
			return syscall.EIO
		}
		return nil
	}}
	opts := smallOpts(t.TempDir())
	opts.FS = ffs
	s := openT(t, opts)
	defer mustClose(t, s)
	k := enginetest.Key(1)
	mustCache(t, s, k, enginetest.Value(1, 5000))
	failReads.Store(true)
	_, err := get(t, s, k)
	wantStatus(t, err, wire.StatusIOError, "Get with a failing read")
	failReads.Store(false)
	if st := s.Stats(); st.Hits != 0 || st.IOErrors != 1 {
		t.Fatalf("after a failed read: %d hits, %d I/O errors; want 0 and 1", st.Hits, st.IOErrors)
	}
	if _, err := get(t, s, k); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Hits != 1 {
		t.Fatalf("after a good read: %d hits, want 1", st.Hits)
	}
}

// TestFailedOpenChargesNoTenant: rebuild restores values tenant by
// tenant; when Open then fails (here marking the epoch dirty), the
// tenants must not stay charged for a store that never opened. A later
// Open that succeeds charges them once.
func TestFailedOpenChargesNoTenant(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, smallOpts(dir))
	want := map[uint64]int64{}
	for i := range 6 {
		k := enginetest.Key(i)
		k.Tenant = uint64(i % 3)
		mustCache(t, s, k, enginetest.Value(uint64(i), 3000+i))
		want[k.Tenant] += int64(3000 + i)
	}
	mustClose(t, s)

	var failState atomic.Bool
	failState.Store(true)
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if failState.Load() && op == vfs.OpWrite && filepath.Base(path) == stateName {
			return syscall.EIO
		}
		return nil
	}}
	rec := newRecorder()
	opts := smallOpts(dir)
	opts.FS = ffs
	opts.Accounting = rec
	if s, err := Open(opts); err == nil {
		s.Close()
		t.Fatal("Open succeeded with slab_state unwritable")
	}
	if got := rec.snapshot(); len(got) != 0 {
		t.Fatalf("a failed Open left tenants charged: %v", got)
	}
	failState.Store(false)
	s = openT(t, opts)
	defer mustClose(t, s)
	got := rec.snapshot()
	if len(got) != len(want) {
		t.Fatalf("charged %v, want %v", got, want)
	}
	for tenant, n := range want {
		if got[tenant] != n {
			t.Fatalf("charged %v, want %v", got, want)
		}
	}
}
