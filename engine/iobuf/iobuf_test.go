package iobuf

import (
	"fmt"
	"runtime/debug"
	"testing"
	"unsafe"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// raceEnabled reports a -race build, where sync.Pool deliberately drops
// items at random and allocation counts mean nothing.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func TestNewPoolMax(t *testing.T) {
	f := func(max, want int) {
		t.Helper()
		if got := NewPool(max).Max(); got != want {
			t.Errorf("NewPool(%d).Max() = %d, want %d", max, got, want)
		}
	}
	f(-1, Align)
	f(0, Align)
	f(1, Align)
	f(Align, Align)
	f(Align+1, 2*Align)
	f(1<<20, 1<<20)
	f(1<<20+1, 2<<20)
	f(64<<20, 64<<20)
}

// TestEveryClassAligned: each class hands out buffers whose first byte is
// aligned to Align, with len n and the class size as capacity, and every
// size maps to the smallest class that holds it.
func TestEveryClassAligned(t *testing.T) {
	p := NewPool(4 << 20)
	for shift := minShift; 1<<shift <= p.Max(); shift++ {
		size := 1 << shift
		smallest := size/2 + 1 // the first size that needs this class
		if shift == minShift {
			smallest = 0
		}
		for _, n := range []int{smallest, smallest + 1, size - 1, size} {
			b := p.Get(n)
			if len(b.B) != n {
				t.Fatalf("Get(%d): len %d", n, len(b.B))
			}
			if cap(b.B) != size {
				t.Fatalf("Get(%d): cap %d, want class size %d", n, cap(b.B), size)
			}
			if a := addr(b.B[:cap(b.B)]); a%Align != 0 {
				t.Fatalf("Get(%d): first byte at %#x, not %d-aligned", n, a, Align)
			}
			// The whole capacity is usable.
			full := b.B[:cap(b.B)]
			full[0], full[len(full)-1] = 1, 2
			p.Put(b)
		}
	}
}

func TestClassOf(t *testing.T) {
	f := func(n, want int) {
		t.Helper()
		if got := classOf(n); got != want {
			t.Errorf("classOf(%d) = %d, want %d", n, got, want)
		}
	}
	f(0, 0)
	f(1, 0)
	f(4096, 0)
	f(4097, 1)
	f(8192, 1)
	f(8193, 2)
	f(1<<20, 8)
	f(1<<20+1, 9)
}

// TestPutResetsLength: a buffer resliced by its user comes back at full
// capacity and is handed out again with the requested length.
func TestPutResetsLength(t *testing.T) {
	p := NewPool(1 << 16)
	b := p.Get(100)
	b.B = b.B[:3]
	p.Put(b)
	p.Put(nil) // a no-op
	for range 4 {
		c := p.Get(5000)
		if len(c.B) != 5000 || cap(c.B) != 8192 {
			t.Fatalf("len %d cap %d", len(c.B), cap(c.B))
		}
		p.Put(c)
	}
	c := p.Get(4096)
	if len(c.B) != 4096 || cap(c.B) != 4096 {
		t.Fatalf("len %d cap %d", len(c.B), cap(c.B))
	}
}

// TestNoAllocAfterWarmup: once a class has a buffer in it, Get and Put
// allocate nothing (the point of the pool: a warm GET/PUT path is
// allocation-free).
func TestNoAllocAfterWarmup(t *testing.T) {
	if raceEnabled() {
		t.Skip("sync.Pool drops items at random under -race")
	}
	p := NewPool(1 << 20)
	for _, n := range []int{1, 4096, 65536, 1 << 20} {
		p.Put(p.Get(n))
		if allocs := testing.AllocsPerRun(100, func() { p.Put(p.Get(n)) }); allocs != 0 {
			t.Errorf("Get(%d)/Put: %v allocations per run, want 0", n, allocs)
		}
	}
}

func TestGetOutOfRangePanics(t *testing.T) {
	p := NewPool(1 << 16)
	for _, n := range []int{-1, p.Max() + 1, 1 << 30} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Get(%d) did not panic", n)
				}
			}()
			p.Get(n)
		})
	}
	// The boundary itself is fine.
	p.Put(p.Get(p.Max()))
}

func TestAlignedSlice(t *testing.T) {
	for _, n := range []int{1, 4096, 10000, 1 << 20} {
		b := AlignedSlice(n)
		if len(b) != n || cap(b) != n || addr(b)%Align != 0 {
			t.Errorf("AlignedSlice(%d): len %d cap %d addr %#x", n, len(b), cap(b), addr(b))
		}
	}
}

func BenchmarkGetPut(b *testing.B) {
	p := NewPool(1 << 20)
	for _, n := range []int{4096, 1 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Put(p.Get(n))
			}
		})
	}
}

// TestSizeForIsWhatGetHandsOut: SizeFor, which the server charges its
// payload budget and the configuration check sizes it by, is the capacity
// of the buffer Get returns: n rounded up to a power of two, at least 4 KiB.
func TestSizeForIsWhatGetHandsOut(t *testing.T) {
	p := NewPool(64 << 20)
	for _, c := range []struct{ n, want int }{{0, 4096}, {1, 4096}, {4096, 4096}, {4097, 8192}, {65536, 65536},
		{1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20}, {3 << 20, 4 << 20}, {64 << 20, 64 << 20}} {
		b := p.Get(c.n)
		if got := cap(b.B); got != c.want || SizeFor(c.n) != c.want {
			t.Errorf("value of %d bytes: pool buffer %d, SizeFor %d, want %d", c.n, got, SizeFor(c.n), c.want)
		}
		p.Put(b)
	}
}

// Heap's buffers are what an O_DIRECT read needs: the length asked for,
// the first byte on an Align boundary, a capacity of whole Align blocks.
func TestHeapBuffersFitDirectIO(t *testing.T) {
	for _, n := range []int{0, 1, Align - 1, Align, Align + 1, 1 << 20} {
		b := Heap{}.Alloc(n)
		if len(b) != n || cap(b)%Align != 0 || cap(b) < max(n, 1) {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b[:cap(b)]))); p%Align != 0 {
			t.Fatalf("Alloc(%d) starts at %#x, not on a %d-byte boundary", n, p, Align)
		}
	}
}
