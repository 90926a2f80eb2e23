package ramtier

import (
	"fmt"
	"testing"

	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

// Benchmarks run in-process over memBacking: they measure the tier's own
// path (lock, pin, copy out of the arena; admission and flush hand-off),
// not a disk.

// reuseAlloc hands out one aligned buffer again and again, as a server
// connection reuses its reply buffer.
type reuseAlloc struct{ buf []byte }

func (a *reuseAlloc) Alloc(n int) []byte {
	if cap(a.buf) < n {
		a.buf = iobuf.AlignedSlice((n + 4095) &^ 4095)
	}
	return a.buf[:n]
}

// discardBacking accepts every write without keeping it, so a PUT
// benchmark is not bounded by the fake disk.
type discardBacking struct{ *memBacking }

func (discardBacking) Put(wire.BlockKey, []byte) error { return nil }

func BenchmarkWarmGet(b *testing.B) {
	for _, size := range []int{256 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			m := newMem()
			tr := openTier(b, Options{Backing: m, Bytes: 64 << 20, LargeReserveBytes: NoLargeReserve})
			defer tr.Close()
			const keys = 8
			ks := make([]wire.BlockKey, keys)
			for i := range keys {
				ks[i] = key(i)
				if err := tr.Put(ks[i], val(uint64(i), size)); err != nil {
					b.Fatal(err)
				}
			}
			if err := tr.Flush(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				a := &reuseAlloc{}
				i := 0
				for pb.Next() {
					if _, _, err := tr.Get(ks[i%keys], 0, 0, a); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			if r := m.ranges.Load(); r != 0 {
				b.Fatalf("%d warm reads went to the backing", r)
			}
		})
	}
}

func BenchmarkWriteBackPut1MiB(b *testing.B) {
	const size = 1 << 20
	tr := openTier(b, Options{Backing: discardBacking{newMem()}, Bytes: 256 << 20, LargeReserveBytes: NoLargeReserve})
	defer tr.Close()
	v := val(1, size)
	keys := make([]wire.BlockKey, 4096) // made up front: allocs/op is the tier's
	for i := range keys {
		keys[i] = key(i)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := tr.Put(keys[i%len(keys)], v); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWriteBackPutAllocatesOneEntry: a write-back PUT allocates only its
// pending-flush entry (the generation that waiters and the flush queue
// share); the queue reuses its slots and the entry settles without a
// channel. Not meaningful under -race, which instruments sync.
func TestWriteBackPutAllocatesOneEntry(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	tr := openTier(t, Options{Backing: discardBacking{newMem()}, Bytes: 64 << 20, LargeReserveBytes: NoLargeReserve})
	defer tr.Close()
	v := val(1, 4096)
	keys := make([]wire.BlockKey, 256)
	for i := range keys {
		keys[i] = key(i)
	}
	i := 0
	put := func() {
		if err := tr.Put(keys[i%len(keys)], v); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range 2 * len(keys) { // maps and queue at their steady size
		put()
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(1000, put); a > 1 {
		t.Fatalf("%.2f allocations per write-back PUT, want at most 1 (its entry)", a)
	}
}

// TestExistMissAllocatesNothing: a key in neither RAM nor the backing is
// answered with the bare wire.StatusNotFound, without an allocation (a
// cache's EXISTs miss as often as they hit).
func TestExistMissAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	tr := openTier(t, Options{Backing: newMem(), Bytes: 64 << 20, LargeReserveBytes: NoLargeReserve})
	defer tr.Close()
	missing := key(12345)
	miss := func() {
		if _, err := tr.Exist(missing); err != wire.StatusNotFound {
			t.Fatalf("lookup of a missing key: %v", err)
		}
	}
	miss()
	if a := testing.AllocsPerRun(1000, miss); a != 0 {
		t.Fatalf("%.2f allocations per missing lookup, want 0", a)
	}
}
