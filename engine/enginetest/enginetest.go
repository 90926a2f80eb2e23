// Package enginetest is the conformance suite every engine.StoreEngine runs
// (the slab and file engines and the RAM tier), in the way bbolt runs one
// suite over both freelists and etcd ships wal/testing. The range contract
// every engine shares is written down here once.
//
// An engine's test calls
//
//	enginetest.Run(t, func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
//		... open the engine on dir with this capacity, t.Fatal on error ...
//	})
//
// The suite closes what it opens and reopens dir when it tests restart;
// open must therefore find what an earlier open of the same dir stored.
//
// Beyond the interface's doc, the suite pins these choices for every
// engine:
//   - a zero-byte value is INVALID, a value larger than the capacity is
//     TOO_LARGE;
//   - Get asks its Allocator for at most one buffer and returns a slice of
//     it;
//   - eviction is CLOCK-like: with the disk full of equal-sized values, a
//     value read since it was stored outlives one never read.
package enginetest

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// Opener opens an engine on dir with the given capacity in bytes.
type Opener = func(t *testing.T, dir string, capacity uint64) engine.StoreEngine

// Sizes are the value sizes every data-path test covers: the smallest, both
// sides of the alignment boundary, a size past the common 64 KiB, and one
// just over a megabyte.
var Sizes = []int{1, 7, 4095, 4096, 4097, 65537, 1<<20 + 3}

// bigCapacity is the capacity of tests that must not evict.
const bigCapacity = 1 << 30

// Run runs the whole suite against the engine open returns.
func Run(t *testing.T, open Opener) {
	t.Run("Basic", func(t *testing.T) { testBasic(t, open) })
	t.Run("Overwrite", func(t *testing.T) { testOverwrite(t, open) })
	t.Run("InvalidValues", func(t *testing.T) { testInvalidValues(t, open) })
	t.Run("Sizes", func(t *testing.T) { testSizes(t, open) })
	t.Run("RangeContract", func(t *testing.T) { testRangeContract(t, open) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, open) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, open) })
	t.Run("Reopen", func(t *testing.T) { testReopen(t, open) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, open) })
	t.Run("EvictionAtCapacity", func(t *testing.T) { testEviction(t, open) })
	t.Run("ClockSecondChance", func(t *testing.T) { testClock(t, open) })
	t.Run("Stats", func(t *testing.T) { testStats(t, open) })
}

// openNew opens an engine on a fresh directory and closes it at cleanup.
func openNew(t *testing.T, open Opener, capacity uint64) (engine.StoreEngine, string) {
	t.Helper()
	dir := t.TempDir()
	return openAt(t, open, dir, capacity), dir
}

func openAt(t *testing.T, open Opener, dir string, capacity uint64) engine.StoreEngine {
	t.Helper()
	e := open(t, dir, capacity)
	if e == nil {
		t.Fatalf("open(%s) returned nil", dir)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Key returns the i-th test key: a SHA-256-derived object id (as real ids
// are) under one of three tenants.
func Key(i int) wire.BlockKey {
	tenants := [...]uint64{0x0123456789abcdef, 0xfedcba9876543210, 0x00000000000000a1}
	sum := sha256.Sum256(fmt.Appendf(nil, "enginetest key %d", i))
	k := wire.BlockKey{Tenant: tenants[i%len(tenants)]}
	copy(k.ID[:], sum[:16])
	return k
}

// Value returns n deterministic pseudo-random bytes for seed, so a value
// read from the wrong offset or the wrong key never compares equal.
func Value(seed uint64, n int) []byte {
	b := make([]byte, n+8)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := 0; i < n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b[:n:n]
}

// WantStatus fails t unless err wraps status (StatusOK: err == nil).
func WantStatus(t testing.TB, err error, want wire.Status, what string) {
	t.Helper()
	if got := wire.StatusOf(err); got != want {
		t.Fatalf("%s: status %v (err %v), want %v", what, got, err, want)
	}
}

// Get reads the whole value of key and fails t on any error.
func Get(t testing.TB, e engine.StoreEngine, key wire.BlockKey) []byte {
	t.Helper()
	a := NewAlloc(nil)
	defer a.Release()
	data, stored, err := e.Get(key, 0, 0, a)
	if err != nil {
		t.Fatalf("Get(%s, 0, 0): %v", key, err)
	}
	if uint64(len(data)) != stored {
		t.Fatalf("Get(%s, 0, 0): %d bytes, stored %d", key, len(data), stored)
	}
	return append([]byte(nil), data...)
}

// MustEqual fails t unless e holds exactly want under key, through Exist
// and a whole-value Get.
func MustEqual(t testing.TB, e engine.StoreEngine, key wire.BlockKey, want []byte) {
	t.Helper()
	n, err := e.Exist(key)
	if err != nil {
		t.Fatalf("Exist(%s): %v", key, err)
	}
	if n != uint64(len(want)) {
		t.Fatalf("Exist(%s) = %d, want %d", key, n, len(want))
	}
	if got := Get(t, e, key); !equal(got, want) {
		t.Fatalf("Get(%s): %s", key, diff(got, want))
	}
}

func equal(a, b []byte) bool { return string(a) == string(b) }

func diff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d of %d: got %#x, want %#x", i, len(got), got[i], want[i])
		}
	}
	return "equal"
}

func mustCache(t testing.TB, e engine.StoreEngine, key wire.BlockKey, v []byte) {
	t.Helper()
	if err := e.Put(key, v); err != nil {
		t.Fatalf("Put(%s, %d bytes): %v", key, len(v), err)
	}
}

func testBasic(t *testing.T, open Opener) {
	e, _ := openNew(t, open, bigCapacity)
	k := Key(1)
	_, err := e.Exist(k)
	WantStatus(t, err, wire.StatusNotFound, "Exist of a missing key")
	_, _, err = e.Get(k, 0, 0, NewAlloc(nil))
	WantStatus(t, err, wire.StatusNotFound, "Get of a missing key")
	WantStatus(t, e.Remove(k), wire.StatusNotFound, "Remove of a missing key")

	v := Value(1, 10000)
	mustCache(t, e, k, v)
	MustEqual(t, e, k, v)
	_, err = e.Exist(Key(2))
	WantStatus(t, err, wire.StatusNotFound, "Exist of another key")
	if err != wire.StatusNotFound {
		// The engine.StoreEngine contract: a miss is the bare status, so
		// the misses of a busy cache cost no allocation.
		t.Errorf("Exist of a missing key returned %q, want the bare wire.StatusNotFound", err)
	}

	if err := e.Remove(k); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	_, err = e.Exist(k)
	WantStatus(t, err, wire.StatusNotFound, "Exist after Remove")
	_, _, err = e.Get(k, 0, 0, NewAlloc(nil))
	WantStatus(t, err, wire.StatusNotFound, "Get after Remove")
	WantStatus(t, e.Remove(k), wire.StatusNotFound, "second Remove")

	// The engine must not keep the caller's slice.
	v2 := Value(2, 5000)
	buf := append([]byte(nil), v2...)
	mustCache(t, e, k, buf)
	clear(buf)
	MustEqual(t, e, k, v2)
}

func testOverwrite(t *testing.T, open Opener) {
	e, _ := openNew(t, open, bigCapacity)
	k := Key(3)
	for i, n := range []int{4096, 100, 70000, 1, 4097} {
		v := Value(uint64(100+i), n)
		mustCache(t, e, k, v)
		MustEqual(t, e, k, v)
	}
	st := e.Stats()
	if st.Objects != 1 || st.UsedBytes != 4097 {
		t.Fatalf("after overwrites: Objects %d UsedBytes %d, want 1 and 4097", st.Objects, st.UsedBytes)
	}
}

func testInvalidValues(t *testing.T, open Opener) {
	const capacity = 1 << 20
	e, _ := openNew(t, open, capacity)
	k := Key(4)
	WantStatus(t, e.Put(k, nil), wire.StatusInvalid, "Put of a nil value")
	WantStatus(t, e.Put(k, []byte{}), wire.StatusInvalid, "Put of a zero-byte value")
	WantStatus(t, e.Put(k, make([]byte, capacity+1)), wire.StatusTooLarge, "Put of a value larger than the capacity")
	_, err := e.Exist(k)
	WantStatus(t, err, wire.StatusNotFound, "Exist after rejected values")
	// A rejected overwrite leaves the old value.
	v := Value(4, 300)
	mustCache(t, e, k, v)
	WantStatus(t, e.Put(k, nil), wire.StatusInvalid, "zero-byte overwrite")
	MustEqual(t, e, k, v)
	if st := e.Stats(); st.Objects != 1 || st.UsedBytes != 300 {
		t.Fatalf("Objects %d UsedBytes %d, want 1 and 300", st.Objects, st.UsedBytes)
	}
}

func testSizes(t *testing.T, open Opener) {
	e, _ := openNew(t, open, bigCapacity)
	for i, n := range Sizes {
		mustCache(t, e, Key(100+i), Value(uint64(n), n))
	}
	for i, n := range Sizes {
		MustEqual(t, e, Key(100+i), Value(uint64(n), n))
	}
}
