package enginetest

import (
	"sync"
	"unsafe"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
)

// Alloc is an engine.Allocator backed by an iobuf.Pool, the way the server
// hands buffers to the engines. It remembers every buffer it gave out, so a
// test can release them all at once and check that an engine asked for at
// most one buffer per Get and returned a slice of it. It is not safe for
// concurrent use: give each goroutine its own.
type Alloc struct {
	pool  *iobuf.Pool
	bufs  []*iobuf.Buf
	big   [][]byte // requests larger than the pool's maximum
	calls int
}

var _ engine.Allocator = (*Alloc)(nil)

var (
	sharedOnce sync.Once
	shared     *iobuf.Pool
)

// SharedPool is the pool NewAlloc(nil) uses: classes up to 4 MiB.
func SharedPool() *iobuf.Pool {
	sharedOnce.Do(func() { shared = iobuf.NewPool(4 << 20) })
	return shared
}

// NewAlloc returns an allocator drawing from pool (nil: SharedPool()).
func NewAlloc(pool *iobuf.Pool) *Alloc {
	if pool == nil {
		pool = SharedPool()
	}
	return &Alloc{pool: pool}
}

// Alloc implements engine.Allocator.
func (a *Alloc) Alloc(n int) []byte {
	a.calls++
	if n > a.pool.Max() {
		b := iobuf.AlignedSlice((n + engine.IOAlign - 1) &^ (engine.IOAlign - 1))
		a.big = append(a.big, b)
		return b[:n]
	}
	b := a.pool.Get(n)
	a.bufs = append(a.bufs, b)
	return b.B
}

// Calls is the number of Alloc calls since the last Release.
func (a *Alloc) Calls() int { return a.calls }

// Owns reports whether p lies inside a buffer this allocator handed out.
func (a *Alloc) Owns(p []byte) bool {
	if len(p) == 0 {
		return true
	}
	lo, hi := uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(unsafe.Pointer(unsafe.SliceData(p)))+uintptr(len(p))
	inside := func(b []byte) bool {
		b = b[:cap(b)]
		base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		return lo >= base && hi <= base+uintptr(len(b))
	}
	for _, b := range a.bufs {
		if inside(b.B) {
			return true
		}
	}
	for _, b := range a.big {
		if inside(b) {
			return true
		}
	}
	return false
}

// Release returns every buffer to the pool; slices from earlier Get calls
// must not be used afterwards.
func (a *Alloc) Release() {
	for _, b := range a.bufs {
		a.pool.Put(b)
	}
	clear(a.bufs)
	a.bufs = a.bufs[:0]
	a.big = nil
	a.calls = 0
}
