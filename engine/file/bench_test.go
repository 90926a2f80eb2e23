package file

import (
	"fmt"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

var benchSizes = []int{64 << 10, 1 << 20}

func benchModes(b *testing.B, fn func(b *testing.B, direct bool, size int)) {
	for _, direct := range []bool{true, false} {
		mode := "buffered"
		if direct {
			mode = "direct"
		}
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) { fn(b, direct, size) })
		}
	}
}

// BenchmarkCache stores size-byte values over 64 rotating keys (so it
// measures overwrite: write, fdatasync, rename). The value comes from an
// aligned pool buffer, as it does in the server, so the direct path writes
// it without a bounce copy.
func BenchmarkPut(b *testing.B) {
	benchModes(b, func(b *testing.B, direct bool, size int) {
		s := openStore(b, Options{Dir: b.TempDir(), CapacityBytes: 1 << 40, DirectIO: direct})
		pool := iobuf.NewPool(size)
		buf := pool.Get(size)
		copy(buf.B, enginetest.Value(1, size))
		keys := benchKeys()
		b.SetBytes(int64(size))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := s.Put(keys[i%len(keys)], buf.B); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(boolInt(s.Stats().DirectIO)), "direct")
	})
}

// BenchmarkRange reads whole size-byte values round-robin over 64 keys into
// pooled buffers, as a GET does.
func BenchmarkGet(b *testing.B) {
	benchModes(b, func(b *testing.B, direct bool, size int) {
		s := openStore(b, Options{Dir: b.TempDir(), CapacityBytes: 1 << 40, DirectIO: direct})
		keys := benchKeys()
		for i, k := range keys {
			if err := s.Put(k, enginetest.Value(uint64(i), size)); err != nil {
				b.Fatal(err)
			}
		}
		a := enginetest.NewAlloc(iobuf.NewPool(2 * size))
		b.SetBytes(int64(size))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			data, _, err := s.Get(keys[i%len(keys)], 0, 0, a)
			if err != nil || len(data) != size {
				b.Fatalf("Get: %d bytes, %v", len(data), err)
			}
			a.Release()
			i++
		}
	})
}

func benchKeys() []wire.BlockKey {
	keys := make([]wire.BlockKey, 64)
	for i := range keys {
		keys[i] = enginetest.Key(i)
	}
	return keys
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
