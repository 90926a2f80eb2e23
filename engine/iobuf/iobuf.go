// Package iobuf pools the aligned buffers that payloads travel in, so the
// server's GET and PUT paths allocate nothing per request once warm and the
// engines can read and write them with O_DIRECT.
//
// Buffers come in power-of-two size classes from 4 KiB up to the pool's
// maximum. Each class is a sync.Pool of *Buf; a Buf's backing array is
// allocated once, aligned to Align, and reused until the GC trims the pool.
package iobuf

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Align is the alignment of every buffer's first byte.
const Align = 4096

const minShift = 12 // 4 KiB, the smallest class

// Buf is one pooled buffer. B is the usable slice; callers may reslice B
// within its capacity but must not append past it.
type Buf struct {
	B     []byte
	class int
}

// Pool hands out aligned buffers of up to Max bytes.
type Pool struct {
	max     int
	classes []sync.Pool
}

// NewPool returns a pool whose largest buffer holds max bytes (rounded up to
// a power of two).
func NewPool(max int) *Pool {
	if max < Align {
		max = Align
	}
	n := classOf(max) + 1
	p := &Pool{max: 1 << (minShift + n - 1), classes: make([]sync.Pool, n)}
	for i := range p.classes {
		size := 1 << (minShift + i)
		cls := i
		p.classes[i].New = func() any {
			return &Buf{B: alignedSlice(size), class: cls}
		}
	}
	return p
}

// Max is the largest size Get accepts.
func (p *Pool) Max() int { return p.max }

// Get returns a buffer with len(B) == n. n must be in [0, Max()].
func (p *Pool) Get(n int) *Buf {
	if n < 0 || n > p.max {
		panic("iobuf: Get size out of range")
	}
	b := p.classes[classOf(n)].Get().(*Buf)
	b.B = b.B[:n]
	return b
}

// Put returns b to the pool. b must not be used afterwards.
func (p *Pool) Put(b *Buf) {
	if b == nil {
		return
	}
	b.B = b.B[:cap(b.B)]
	p.classes[b.class].Put(b)
}

func classOf(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minShift
}

// alignedSlice allocates size bytes starting at an Align boundary.
func alignedSlice(size int) []byte {
	raw := make([]byte, size+Align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) & (Align - 1)); r != 0 {
		off = Align - r
	}
	return raw[off : off+size : off+size]
}

// AlignedSlice allocates an unpooled buffer of size bytes aligned to Align,
// for callers that keep one buffer for a long time.
func AlignedSlice(size int) []byte { return alignedSlice(size) }

// Heap is an engine.Allocator that allocates every buffer anew: Alloc(n)
// returns n bytes starting at an Align boundary, with a capacity rounded
// up to a multiple of Align, as O_DIRECT reads need. For reads whose
// buffer outlives any pool's reach (RDMA inline reads) or that are rare.
type Heap struct{}

// Alloc implements engine.Allocator.
func (Heap) Alloc(n int) []byte {
	size := (max(n, 1) + Align - 1) &^ (Align - 1)
	return alignedSlice(size)[:n]
}

// SizeFor is the size of the buffer a Pool's Get(n) returns (len(B) is n):
// n rounded up to its size class, what holding it costs in memory.
func SizeFor(n int) int { return 1 << (minShift + classOf(n)) }
