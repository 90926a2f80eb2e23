package objtier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// memBucket is an in-memory Bucket for the unit tests, with faults: the
// integration tests (roles/server, roles/e2e) use a real S3 server.
type memBucket struct {
	mu      sync.Mutex
	objects map[string][]byte
	fail    error         // every call fails with it while set
	gate    chan struct{} // Get waits for it while set
	gets    atomic.Int64
	heads   atomic.Int64
	puts    atomic.Int64
}

func newMemBucket() *memBucket { return &memBucket{objects: map[string][]byte{}} }

func (b *memBucket) setFail(err error) {
	b.mu.Lock()
	b.fail = err
	b.mu.Unlock()
}

func (b *memBucket) failing() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fail
}

func (b *memBucket) Get(ctx context.Context, name string, limit int64, alloc func(int) []byte) ([]byte, error) {
	b.gets.Add(1)
	b.mu.Lock()
	gate := b.gate
	b.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err := b.failing(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	obj, ok := b.objects[name]
	b.mu.Unlock()
	if !ok {
		return nil, ErrNotExist
	}
	if int64(len(obj)) > limit {
		return nil, ErrTooLarge
	}
	buf := alloc(len(obj))
	copy(buf, obj)
	return buf, nil
}

func (b *memBucket) Head(ctx context.Context, name string) (int64, error) {
	b.heads.Add(1)
	if err := b.failing(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	obj, ok := b.objects[name]
	if !ok {
		return 0, ErrNotExist
	}
	return int64(len(obj)), nil
}

func (b *memBucket) Put(ctx context.Context, name string, body []byte) error {
	b.puts.Add(1)
	if err := b.failing(); err != nil {
		return err
	}
	b.mu.Lock()
	b.objects[name] = bytes.Clone(body)
	b.mu.Unlock()
	return nil
}

func (b *memBucket) Delete(ctx context.Context, name string) error {
	if err := b.failing(); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.objects, name)
	b.mu.Unlock()
	return nil
}

func (b *memBucket) String() string { return "mem bucket" }

func (b *memBucket) Close() error { return nil }

func (b *memBucket) object(name string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objects[name]
	return o, ok
}

func (b *memBucket) setObject(name string, obj []byte) {
	b.mu.Lock()
	b.objects[name] = obj
	b.mu.Unlock()
}

// memEngine is a map-backed engine.StoreEngine: the disks under the tier.
type memEngine struct {
	mu     sync.Mutex
	values map[wire.BlockKey][]byte
	closed bool
	// putGate, when set, holds every Put until it is closed; afterMiss
	// runs after a Get misses, before it returns.
	putGate   chan struct{}
	gateOnce  bool // only the next Put waits at putGate
	afterMiss func()
	// afterPut, when set, runs once after the next Put stored its value,
	// before it returns.
	afterPut func()
	// misaligned counts Puts of values not 4 KiB-aligned in memory,
	// which a disk engine's O_DIRECT write would copy.
	misaligned atomic.Int64
}

func newMemEngine() *memEngine { return &memEngine{values: map[wire.BlockKey][]byte{}} }

func (m *memEngine) Put(key wire.BlockKey, value []byte) error {
	if len(value) == 0 {
		return fmt.Errorf("empty value: %w", wire.StatusInvalid)
	}
	if uintptr(unsafe.Pointer(&value[0]))%engine.IOAlign != 0 {
		m.misaligned.Add(1)
	}
	m.mu.Lock()
	gate := m.putGate
	if m.gateOnce {
		m.putGate = nil
	}
	m.mu.Unlock()
	if gate != nil {
		<-gate
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return wire.StatusUnavailable
	}
	m.values[key] = bytes.Clone(value)
	hook := m.afterPut
	m.afterPut = nil
	m.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

func (m *memEngine) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	for i := range keys {
		errs[i] = m.Put(keys[i], values[i])
	}
}

func (m *memEngine) Get(key wire.BlockKey, off, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	m.mu.Lock()
	v, ok := m.values[key]
	hook := m.afterMiss
	m.mu.Unlock()
	if !ok {
		if hook != nil {
			hook()
		}
		return nil, 0, wire.StatusNotFound
	}
	stored := uint64(len(v))
	if off > stored {
		return nil, stored, wire.StatusInvalid
	}
	n := stored - off
	if length != 0 && length < n {
		n = length
	}
	if n == 0 {
		return nil, stored, nil
	}
	dst := alloc.Alloc(int(n))
	copy(dst, v[off:off+n])
	return dst[:n], stored, nil
}

func (m *memEngine) Exist(key wire.BlockKey) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.values[key]
	if !ok {
		return 0, wire.StatusNotFound
	}
	return uint64(len(v)), nil
}

func (m *memEngine) Remove(key wire.BlockKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.values[key]; !ok {
		return wire.StatusNotFound
	}
	delete(m.values, key)
	return nil
}

// evict drops key as an eviction would: behind the tier's back.
func (m *memEngine) evict(key wire.BlockKey) {
	m.mu.Lock()
	delete(m.values, key)
	m.mu.Unlock()
}

func (m *memEngine) has(key wire.BlockKey) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.values[key]
	return v, ok
}

func (m *memEngine) Stats() engine.Stats { return engine.Stats{Engine: "mem", Healthy: true} }

func (m *memEngine) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// logBuf collects the tier's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

type fixture struct {
	tier    *Tier
	bucket  *memBucket
	backing *memEngine
	logs    *logBuf
}

func open(t *testing.T, mutate func(*Options)) *fixture {
	t.Helper()
	f := &fixture{bucket: newMemBucket(), backing: newMemEngine(), logs: &logBuf{}}
	o := Options{Backing: f.backing, Bucket: f.bucket, Prefix: "p", Timeout: time.Second,
		Workers: 2, MaxValueBytes: 4 << 20, Logger: slog.New(slog.NewTextHandler(f.logs, nil))}
	if mutate != nil {
		mutate(&o)
	}
	tier, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	f.tier = tier
	t.Cleanup(func() { _ = tier.Close() })
	return f
}

// settle waits until every queued upload and every promotion has ended.
func (f *fixture) settle(t *testing.T) {
	t.Helper()
	f.tier.promotions.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if items, _, _ := f.tier.queue.depth(); items == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("uploads still queued after 10s: %+v", f.tier.TierStats())
		}
		time.Sleep(time.Millisecond)
	}
}

func get(t *testing.T, e engine.StoreEngine, key wire.BlockKey) ([]byte, error) {
	t.Helper()
	a := enginetest.NewAlloc(enginetest.SharedPool())
	defer a.Release()
	data, _, err := e.Get(key, 0, 0, a)
	return bytes.Clone(data), err
}

var errDown = errors.New("connection refused (test fault)")

// markDown opens an outage of h's kind, as a failed call would, with
// its retry time at retry.
func markDown(h *health, retry time.Time) {
	now := time.Now()
	h.failure(now, now, "test", errDown)
	h.retryAt.Store(&retry)
}

// markUp ends h's outage, as a call answered now would.
func markUp(h *health) {
	now := time.Now()
	h.success(now, now, OpGet, CallOK)
}
