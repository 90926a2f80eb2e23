package server

import (
	"fmt"
	"sync"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// memEngine is an in-memory StoreEngine for testing the server's protocol
// handling apart from any disk. gate, when set, is called at the start of
// Put so a test can hold a PUT in flight.
type memEngine struct {
	mu   sync.Mutex
	m    map[wire.BlockKey][]byte
	gate func()
	// unhealthy and full make Stats report a failed-closed or full disk.
	unhealthy, full bool
}

func newMemEngine() *memEngine { return &memEngine{m: make(map[wire.BlockKey][]byte)} }

func (e *memEngine) Put(k wire.BlockKey, v []byte) error {
	if e.gate != nil {
		e.gate()
	}
	if len(v) == 0 {
		return fmt.Errorf("zero-byte value: %w", wire.StatusInvalid)
	}
	e.mu.Lock()
	e.m[k] = append([]byte(nil), v...)
	e.mu.Unlock()
	return nil
}

func (e *memEngine) PutBatch(ks []wire.BlockKey, vs [][]byte, errs []error) {
	for i := range ks {
		errs[i] = e.Put(ks[i], vs[i])
	}
}

func (e *memEngine) Get(k wire.BlockKey, off, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	e.mu.Lock()
	v, ok := e.m[k]
	e.mu.Unlock()
	if !ok {
		return nil, 0, wire.StatusNotFound
	}
	n := uint64(len(v))
	if off > n {
		return nil, n, fmt.Errorf("offset %d past stored length %d: %w", off, n, wire.StatusInvalid)
	}
	if length == 0 || length > n-off {
		length = n - off
	}
	dst := alloc.Alloc(int(length))
	copy(dst, v[off:off+length])
	return dst, n, nil
}

func (e *memEngine) Exist(k wire.BlockKey) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.m[k]
	if !ok {
		return 0, wire.StatusNotFound
	}
	return uint64(len(v)), nil
}

func (e *memEngine) Remove(k wire.BlockKey) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.m[k]; !ok {
		return wire.StatusNotFound
	}
	delete(e.m, k)
	return nil
}

func (e *memEngine) Stats() engine.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return engine.Stats{Engine: "mem", Objects: uint64(len(e.m)), Healthy: !e.unhealthy, DiskFull: e.full}
}

func (e *memEngine) Close() error { return nil }
