package slab

import (
	"log/slog"
	"syscall"
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/uring"
)

// testExtent picks an extent size for a conformance-suite capacity: a
// sixteenth of it (so several classes can hold extents at once, as in a
// production pool of hundreds), at most 8 MiB, so a 1 GiB test store is 128
// preallocated extents.
func testExtent(capacity uint64) uint64 {
	return max(MinClass, min((capacity/16)&^(MinClass-1), 8<<20))
}

func openT(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", opts.Dir, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name          string
		direct, uring bool
	}{{"direct", true, false}, {"buffered", false, false}, {"direct+io_uring", true, true}} {
		t.Run(mode.name, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
				s := openT(t, Options{Dir: dir, CapacityBytes: capacity, ExtentBytes: testExtent(capacity), DirectIO: mode.direct, URing: mode.uring})
				if s.Stats().DirectIO != mode.direct {
					t.Fatalf("DirectIO = %v, want %v", s.Stats().DirectIO, mode.direct)
				}
				if mode.uring && s.ring == nil {
					t.Skip("io_uring is refused here; the pread/pwrite path is the one tested")
				}
				// Runs after the suite's Close (cleanups are LIFO); the
				// allocator's state outlives the files.
				t.Cleanup(func() { checkAlloc(t, s) })
				return s
			})
		})
	}
}

// TestURingRefusedFallsBack: where the kernel refuses io_uring the store
// says so once and serves through pread/pwrite; where it does not, small
// payload I/O goes through the ring (its counters move) and large I/O
// does not need it.
func TestURingRefusedFallsBack(t *testing.T) {
	old := newRing
	defer func() { newRing = old }()
	newRing = func(uint32) (*uring.Ring, error) { return nil, syscall.EPERM }
	logs := &logBuf{}
	opts := smallOpts(t.TempDir())
	opts.URing = true
	opts.Logger = slog.New(logs)
	s := openT(t, opts)
	if s.ring != nil || logs.count("io_uring is not available") != 1 {
		t.Fatalf("ring %v, log %v; want no ring and one notice", s.ring, logs.msgs)
	}
	v := enginetest.Value(1, 5000)
	mustCache(t, s, enginetest.Key(1), v)
	enginetest.MustEqual(t, s, enginetest.Key(1), v)
	mustClose(t, s)

	newRing = old
	s = openT(t, opts)
	defer mustClose(t, s)
	if s.ring == nil {
		t.Skip("io_uring is refused here")
	}
	before := s.ring.Ops.Load()
	mustCache(t, s, enginetest.Key(2), v)
	enginetest.MustEqual(t, s, enginetest.Key(1), v)
	enginetest.MustEqual(t, s, enginetest.Key(2), v)
	if got := s.ring.Ops.Load() - before; got < 3 {
		t.Fatalf("%d I/Os through the ring for a write and two reads, want at least 3", got)
	}
}
