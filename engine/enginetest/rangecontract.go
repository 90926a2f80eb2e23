package enginetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// CheckRange calls e.Get(key, off, length) on a key holding value and
// checks the result against the range contract:
//   - length == 0 reads the whole remainder from off;
//   - off == stored length succeeds with zero bytes;
//   - off > stored length is INVALID;
//   - a length past the end (even one that overflows off+length) is clamped;
//   - the full stored length is always returned alongside the bytes.
//
// It also checks that the engine asked the allocator for at most one buffer
// and returned a slice of it.
func CheckRange(t testing.TB, e engine.StoreEngine, key wire.BlockKey, value []byte, off, length uint64) {
	t.Helper()
	a := NewAlloc(nil)
	defer a.Release()
	what := fmt.Sprintf("Get(%d-byte value, off %d, len %d)", len(value), off, length)
	data, stored, err := e.Get(key, off, length, a)
	size := uint64(len(value))
	if off > size {
		WantStatus(t, err, wire.StatusInvalid, what)
		return
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if stored != size {
		t.Fatalf("%s: stored length %d, want %d", what, stored, size)
	}
	want := size - off
	if length != 0 && length < want {
		want = length
	}
	if uint64(len(data)) != want {
		t.Fatalf("%s: %d bytes, want %d", what, len(data), want)
	}
	if !equal(data, value[off:off+want]) {
		t.Fatalf("%s: %s", what, diff(data, value[off:off+want]))
	}
	if a.Calls() > 1 {
		t.Fatalf("%s: engine called Alloc %d times, want at most once", what, a.Calls())
	}
	if !a.Owns(data) {
		t.Fatalf("%s: returned bytes are not inside the buffer the allocator gave", what)
	}
}

// rangePoints are the offsets or lengths worth trying for a value of size n:
// the edges of the value, of the first and last alignment blocks, and far
// past the end.
func rangePoints(n uint64) []uint64 {
	pts := []uint64{0, 1, 7, 511, 512, 4095, 4096, 4097, 8192, n / 2, n - 1, n, n + 1, n + 4096, 1 << 40, math.MaxUint64 - 1, math.MaxUint64}
	out := pts[:0]
	seen := map[uint64]bool{}
	for _, p := range pts {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

func testRangeContract(t *testing.T, open Opener) {
	e, _ := openNew(t, open, bigCapacity)
	for i, n := range Sizes {
		key, value := Key(200+i), Value(uint64(1000+n), n)
		mustCache(t, e, key, value)
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			pts := rangePoints(uint64(n))
			for _, off := range pts {
				for _, length := range pts {
					CheckRange(t, e, key, value, off, length)
				}
			}
		})
	}
}
