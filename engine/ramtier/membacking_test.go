package ramtier

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// memBacking is an in-memory engine.StoreEngine for in-process tests of
// the tier: a map, call counters, and gates that hold Put or Get
// calls until the test opens them, so a test can hold a flush or a cold
// read in flight deterministically. Its lock is never held while a call
// waits at a gate.
type memBacking struct {
	mu     sync.Mutex
	vals   map[wire.BlockKey][]byte
	closed bool

	cacheGate    chan struct{} // nil: open; else Put waits for it to close
	rangeGate    chan struct{}
	failCache    atomic.Bool  // every Put fails with IO_ERROR
	failLen      atomic.Int64 // a Put of a value of this many bytes fails with IO_ERROR
	failRemove   atomic.Bool  // every Remove fails with IO_ERROR, changing nothing
	refuse       atomic.Bool  // every Put fails with TOO_LARGE
	failedClosed atomic.Bool  // every Put fails as a slab store that failed closed
	jitter       func()       // if set, called inside Put and Get to widen race windows

	caches    atomic.Int64 // Put calls (entered)
	ranges    atomic.Int64 // Get calls (entered)
	entered   chan wire.BlockKey
	cacheKeys map[wire.BlockKey]int // Put calls per key
}

func newMem() *memBacking {
	return &memBacking{vals: map[wire.BlockKey][]byte{}, cacheKeys: map[wire.BlockKey]int{}, entered: make(chan wire.BlockKey, 1024)}
}

var _ engine.StoreEngine = (*memBacking)(nil)

// gateCache makes later Put calls wait until open is called.
func (m *memBacking) gateCache() (open func()) {
	g := make(chan struct{})
	m.mu.Lock()
	m.cacheGate = g
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			m.cacheGate = nil
			m.mu.Unlock()
			close(g)
		})
	}
}

func (m *memBacking) gateRange() (open func()) {
	g := make(chan struct{})
	m.mu.Lock()
	m.rangeGate = g
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			m.rangeGate = nil
			m.mu.Unlock()
			close(g)
		})
	}
}

func (m *memBacking) get(key wire.BlockKey) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vals[key]
	return v, ok
}

func (m *memBacking) cacheCalls(key wire.BlockKey) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cacheKeys[key]
}

func (m *memBacking) Put(key wire.BlockKey, value []byte) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return wire.StatusUnavailable
	}
	g := m.cacheGate
	m.cacheKeys[key]++
	m.mu.Unlock()
	m.caches.Add(1)
	select {
	case m.entered <- key:
	default:
	}
	if g != nil {
		<-g
	}
	if m.jitter != nil {
		m.jitter()
	}
	if m.failCache.Load() || m.failLen.Load() == int64(len(value)) {
		return fmt.Errorf("mem backing: injected failure: %w", wire.StatusIOError)
	}
	if m.failedClosed.Load() {
		return fmt.Errorf("mem backing: failed closed: %w: %w", engine.ErrFailedClosed, wire.StatusIOError)
	}
	if m.refuse.Load() {
		return fmt.Errorf("mem backing: injected refusal: %w", wire.StatusTooLarge)
	}
	// Copy before taking the lock, so a slow copy is not serialized.
	v := append([]byte(nil), value...)
	m.mu.Lock()
	m.vals[key] = v
	m.mu.Unlock()
	return nil
}

func (m *memBacking) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	for i := range keys {
		errs[i] = m.Put(keys[i], values[i])
	}
}

func (m *memBacking) Get(key wire.BlockKey, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	// Like a disk engine that pinned the slot before reading, the value is
	// fixed when the read starts, however long it is held at the gate.
	m.mu.Lock()
	g := m.rangeGate
	v, ok := m.vals[key]
	m.mu.Unlock()
	m.ranges.Add(1)
	if g != nil {
		<-g
	}
	if m.jitter != nil {
		m.jitter()
	}
	if !ok {
		return nil, 0, wire.StatusNotFound
	}
	stored := uint64(len(v))
	if offset > stored {
		return nil, stored, wire.StatusInvalid
	}
	n := stored - offset
	if length != 0 && length < n {
		n = length
	}
	if n == 0 {
		return nil, stored, nil
	}
	b := alloc.Alloc(int(n))
	copy(b, v[offset:offset+n])
	return b[:n], stored, nil
}

func (m *memBacking) Exist(key wire.BlockKey) (uint64, error) {
	v, ok := m.get(key)
	if !ok {
		return 0, wire.StatusNotFound
	}
	return uint64(len(v)), nil
}

func (m *memBacking) Remove(key wire.BlockKey) error {
	if m.failRemove.Load() {
		return fmt.Errorf("mem backing: injected remove failure: %w", wire.StatusIOError)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.vals[key]; !ok {
		return wire.StatusNotFound
	}
	delete(m.vals, key)
	return nil
}

func (m *memBacking) Stats() engine.Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := engine.Stats{Engine: "mem", CapacityBytes: 1 << 40, Objects: uint64(len(m.vals)), Healthy: !m.closed}
	for _, v := range m.vals {
		s.UsedBytes += uint64(len(v))
	}
	return s
}

func (m *memBacking) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
