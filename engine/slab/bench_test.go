package slab

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
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

func benchStore(b *testing.B, direct bool) *Store {
	s := openT(b, Options{Dir: b.TempDir(), CapacityBytes: 1 << 30, DirectIO: direct})
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkCache overwrites size-byte values over 64 rotating keys (payload
// write, record write, publish, old record cleared). The value sits in an
// aligned pool buffer, as it does in the server, so the direct path needs
// no bounce copy.
func BenchmarkPut(b *testing.B) {
	benchModes(b, func(b *testing.B, direct bool, size int) {
		s := benchStore(b, direct)
		pool := iobuf.NewPool(size)
		buf := pool.Get(size)
		copy(buf.B, enginetest.Value(1, size))
		b.SetBytes(int64(size))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := s.Put(enginetest.Key(i%64), buf.B); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkRange reads whole size-byte values round-robin over 64 keys into
// pooled buffers, as a GET does.
func BenchmarkGet(b *testing.B) {
	benchModes(b, func(b *testing.B, direct bool, size int) {
		s := benchStore(b, direct)
		for i := range 64 {
			mustCache(b, s, enginetest.Key(i), enginetest.Value(uint64(i), size))
		}
		a := enginetest.NewAlloc(nil)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, _, err := s.Get(enginetest.Key(i%64), 0, 0, a); err != nil {
				b.Fatal(err)
			}
			a.Release()
			i++
		}
	})
}

// BenchmarkGetParallel16 is the GET target shape: 1 MiB values
// from disk (O_DIRECT, 256 MiB of them, so not one cache line of reuse) at
// 16 concurrent readers. Compare with
// fio --direct=1 --bs=1M --iodepth=16 --rw=randread on the same filesystem.
func BenchmarkGetParallel16(b *testing.B) {
	const size, nkeys = 1 << 20, 256
	s := benchStore(b, true)
	for i := range nkeys {
		mustCache(b, s, enginetest.Key(i), enginetest.Value(uint64(i), size))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.SetParallelism(16 / runtime.GOMAXPROCS(0))
	var next atomic.Uint64 // readers spread over the keys, not in lockstep
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// One resident buffer per reader, as a server connection keeps:
		// the benchmark measures the engine, not sync.Pool under GC.
		a := &fixedAlloc{iobuf.AlignedSlice(size)}
		for pb.Next() {
			i := int(next.Add(1)*7919) % nkeys
			if _, _, err := s.Get(enginetest.Key(i), 0, 0, a); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// fixedAlloc hands out the same aligned buffer every time.
type fixedAlloc struct{ b []byte }

func (f *fixedAlloc) Alloc(n int) []byte { return f.b[:n] }

// buildTable makes a cleanly closed store whose slots.tbl holds n records
// of 4 KiB values, written straight into the table (no payload I/O), for
// the rebuild and heap benchmarks. 64 MiB extents, enough of them for n.
func buildTable(b *testing.B, n int) Options {
	b.Helper()
	const ext = 64 << 20
	perExt := ext / MinClass
	extents := (n + perExt - 1) / perExt
	opts := Options{Dir: b.TempDir(), CapacityBytes: uint64(extents) * ext, ExtentBytes: ext, DirectIO: true}
	s := openT(b, opts)
	mustClose(b, s)
	f, err := os.OpenFile(filepath.Join(opts.Dir, tableName), os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 0, 1<<20)
	flush := func(off int64) {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	var rec record
	start := int64(0)
	for i := range n {
		e, sl := uint32(i/perExt), uint32(i%perExt)
		rec = record{class: 0, extent: e, slot: sl, length: 4096, gen: uint64(i + 1)}
		rec.key.Tenant = uint64(i % 7)
		rec.key.ID = idOf(i)
		var rb [RecordSize]byte
		rec.encode(rb[:])
		buf = append(buf, rb[:]...)
		if len(buf) == cap(buf) {
			flush(start)
			start += int64(len(buf))
			buf = buf[:0]
		}
	}
	if len(buf) > 0 {
		flush(start)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return opts
}

func idOf(i int) (id [16]byte) {
	x := uint64(i)*0x9e3779b97f4a7c15 + 12345
	for j := range 2 {
		x ^= x >> 31
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 29
		for k := range 8 {
			id[8*j+k] = byte(x >> (8 * k))
		}
	}
	return id
}

// BenchmarkRebuild1M times Open of a store holding 1,000,000 slot records
// (target: under 2 s on the 2-core VM), after a clean stop and after an
// unclean one (the process died: the epoch is still dirty, and Open keeps
// every record that validates just the same), and reports the resident
// heap it keeps per block (target: at most 128 bytes).
func BenchmarkRebuild1M(b *testing.B) {
	const n = 1_000_000
	opts := buildTable(b, n)
	for _, clean := range []bool{true, false} {
		name := "clean"
		if !clean {
			name = "unclean"
		}
		b.Run(name, func(b *testing.B) {
			if !clean {
				s, err := Open(opts)
				if err != nil {
					b.Fatal(err)
				}
				s.closeFiles() // the process dies: the epoch stays dirty
			}
			var heap float64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				b.StartTimer()
				s, err := Open(opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if st := s.Stats(); st.Objects != n {
					b.Fatalf("rebuilt %d objects, want %d", st.Objects, n)
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				heap = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / n
				if _, err := s.Exist(wire.BlockKey{Tenant: 3, ID: idOf(3)}); err != nil {
					b.Fatal(err)
				}
				runtime.KeepAlive(s)
				if clean {
					if err := s.Close(); err != nil {
						b.Fatal(err)
					}
				} else {
					s.closeFiles() // the process dies: no clean mark
				}
				b.StartTimer()
			}
			b.ReportMetric(heap, "heap-bytes/block")
		})
	}
}

// BenchmarkRawPreadParallel16 is the same-run yardstick for
// BenchmarkGetParallel16: the same 1 MiB values on the same extent files,
// read with bare O_DIRECT preads at 16 goroutines, without the store.
func BenchmarkRawPreadParallel16(b *testing.B) {
	const size, nkeys = 1 << 20, 256
	s := benchStore(b, true)
	type loc struct {
		e   uint32
		off uint64
	}
	var locs []loc
	for i := range nkeys {
		mustCache(b, s, enginetest.Key(i), enginetest.Value(uint64(i), size))
		k := enginetest.Key(i)
		r, _, _ := s.alloc.Exist(&k)
		e, _ := s.alloc.Split(r)
		locs = append(locs, loc{e, s.alloc.Offset(r)})
	}
	b.SetBytes(size)
	b.SetParallelism(16 / runtime.GOMAXPROCS(0))
	var next atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := iobuf.AlignedSlice(1 << 20)
		for pb.Next() {
			l := locs[int(next.Add(1)*7919)%nkeys]
			if _, err := s.extents[l.e].ReadAt(buf, int64(l.off)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPutBatch16 stores batches of 16 distinct 64 KiB values
// (direct I/O), the shape of an engine's batch_set of one prefix.
func BenchmarkPutBatch16(b *testing.B) {
	const size, items = 64 << 10, 16
	s := benchStore(b, true)
	buf := iobuf.AlignedSlice(size)
	copy(buf, enginetest.Value(1, size))
	keys := make([]wire.BlockKey, items)
	values := make([][]byte, items)
	errs := make([]error, items)
	b.SetBytes(size * items)
	b.ReportAllocs()
	round := 0
	for b.Loop() {
		for i := range keys {
			keys[i] = enginetest.Key((round*items + i) % 1024)
			values[i] = buf
		}
		s.PutBatch(keys, values, errs)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		round++
	}
}

// BenchmarkGetVerify1MiB is a GET of a 1 MiB value from disk (O_DIRECT,
// 256 MiB of values, one reader) with payload verification on and off:
// the difference is what verification costs a GET. "range" reads the
// first 64 KiB of the value, which with verification reads it all.
func BenchmarkGetVerify1MiB(b *testing.B) {
	const size, nkeys = 1 << 20, 256
	s := benchStore(b, true)
	for i := range nkeys {
		mustCache(b, s, enginetest.Key(i), enginetest.Value(uint64(i), size))
	}
	for _, shape := range []struct {
		name      string
		off, n    uint64
		bytesRead int64
	}{{"whole", 0, 0, size}, {"range64KiB", 0, 64 << 10, 64 << 10}} {
		for _, verify := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/verify=%v", shape.name, verify), func(b *testing.B) {
				defer func(v bool) { verifyPayloads = v }(verifyPayloads)
				verifyPayloads = verify
				a := &fixedAlloc{iobuf.AlignedSlice(size)}
				b.SetBytes(shape.bytesRead)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, _, err := s.Get(enginetest.Key(i*7919%nkeys), shape.off, shape.n, a); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
	// Sixteen readers at once, as sixteen connections would: the disk, not
	// one reader's latency, bounds them, so what verification costs here
	// is its CPU share.
	for _, verify := range []bool{true, false} {
		b.Run(fmt.Sprintf("whole16/verify=%v", verify), func(b *testing.B) {
			defer func(v bool) { verifyPayloads = v }(verifyPayloads)
			verifyPayloads = verify
			b.SetBytes(size)
			b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				a := &fixedAlloc{iobuf.AlignedSlice(size)}
				for pb.Next() {
					if _, _, err := s.Get(enginetest.Key(int(next.Add(1)*7919%nkeys)), 0, 0, a); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkPayloadSum is the CPU cost of a 1 MiB payload checksum alone
// (CRC-32C, the SSE4.2 instruction on amd64), and of the PUT path's copy
// into the bounce buffer with and without the checksum folded in.
func BenchmarkPayloadSum(b *testing.B) {
	const size = 1 << 20
	v := enginetest.Value(1, size)
	dst := iobuf.AlignedSlice(size)
	k := enginetest.Key(1)
	b.Run("sum", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			payloadSum(&k, 1, 2, v)
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			copy(dst, v)
		}
	})
	b.Run("copySum", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			copySum(dst, v, 0)
		}
	})
	b.Run("copyThenSum", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			copy(dst, v)
			payloadSum(&k, 1, 2, dst)
		}
	})
}

// BenchmarkLayerLoad1MiB restores 1 MiB blocks from disk (O_DIRECT) the
// way a layer-by-layer load asks for them: 32 ranged reads of 32 KiB per
// block, all at once from 32 goroutines, each block read for the first
// time (its section sums forgotten before each). "sections" is the engine
// as it is; "whole-per-layer" reads and verifies the whole block for every
// range, as it did before ranges were read by sections; "whole" is one
// whole-block read per block, the floor. Bytes are block bytes restored.
func BenchmarkLayerLoad1MiB(b *testing.B) {
	const size, nkeys, layers = 1 << 20, 256, 32
	s := benchStore(b, true)
	for i := range nkeys {
		mustCache(b, s, enginetest.Key(i), enginetest.Value(uint64(i), size))
	}
	allocs := make([]*fixedAlloc, layers)
	for i := range allocs {
		allocs[i] = &fixedAlloc{iobuf.AlignedSlice(size)}
	}
	for _, mode := range []string{"sections", "whole-per-layer", "whole"} {
		b.Run(mode, func(b *testing.B) {
			defer func(v bool) { rangeSections = v }(rangeSections)
			rangeSections = mode != "whole-per-layer"
			b.SetBytes(size)
			i := 0
			for b.Loop() {
				key := enginetest.Key(i * 7919 % nkeys)
				i++
				s.sections = newSectionCache()
				if mode == "whole" {
					if _, _, err := s.Get(key, 0, 0, allocs[0]); err != nil {
						b.Fatal(err)
					}
					continue
				}
				var wg sync.WaitGroup
				for l := range layers {
					wg.Go(func() {
						if _, _, err := s.Get(key, uint64(l*size/layers), size/layers, allocs[l]); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}
