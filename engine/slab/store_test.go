package slab

import (
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
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
	for _, direct := range []bool{true, false} {
		name := "buffered"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
				s := openT(t, Options{Dir: dir, CapacityBytes: capacity, ExtentBytes: testExtent(capacity), DirectIO: direct})
				if s.Stats().DirectIO != direct {
					t.Fatalf("DirectIO = %v, want %v", s.Stats().DirectIO, direct)
				}
				// Runs after the suite's Close (cleanups are LIFO); the
				// allocator's state outlives the files.
				t.Cleanup(func() { checkAlloc(t, s) })
				return s
			})
		})
	}
}
