package ramtier

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

// All tests here are in-process: the backing is memBacking (in memory,
// with gates) or a slab engine in t.TempDir().

var (
	key = enginetest.Key
	val = enginetest.Value
)

// eventually polls cond until it holds or 10 s pass (a deadline, not a
// sleep standing in for synchronization): for states no channel announces.
// The 200 µs sleep is only the poll interval.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// smallOpts: a 1 MiB arena of 64 KiB extents (one shard), no large
// reserve, read coalescing on (the server's default).
func smallOpts(b *memBacking) Options {
	return Options{Backing: b, Bytes: 1 << 20, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve, FlushThreads: 2, ReadCoalesce: true}
}

func get(t *testing.T, tr *Tier, k wire.BlockKey) ([]byte, error) {
	t.Helper()
	data, stored, err := tr.Get(k, 0, 0, iobuf.Heap{})
	if err == nil && uint64(len(data)) != stored {
		t.Fatalf("Get(%s): %d bytes of %d stored", k, len(data), stored)
	}
	return data, err
}

func mustGet(t *testing.T, tr *Tier, k wire.BlockKey, want []byte) {
	t.Helper()
	got, err := get(t, tr, k)
	if err != nil {
		t.Fatalf("Get(%s): %v", k, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%s): wrong bytes (%d, want %d)", k, len(got), len(want))
	}
}

func wantNotFound(t *testing.T, tr *Tier, k wire.BlockKey, what string) {
	t.Helper()
	_, err := tr.Exist(k)
	enginetest.WantStatus(t, err, wire.StatusNotFound, what+": Exist")
	_, err = get(t, tr, k)
	enginetest.WantStatus(t, err, wire.StatusNotFound, what+": Get")
}

// TestOpenRejectsImpossibleArenaSizes: a failure to allocate the arena
// rejects startup: a budget that holds no extent, a bad extent size or a
// mapping the kernel refuses is an Open error, never a disk-only tier.
func TestOpenRejectsImpossibleArenaSizes(t *testing.T) {
	cases := []struct {
		name string
		opts Options
	}{
		{"zero bytes", Options{Bytes: 0}},
		{"less than one extent", Options{Bytes: 32 << 10, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve}},
		{"reserve leaves no extent", Options{Bytes: 64 << 10, ExtentBytes: 64 << 10}},
		{"extent not page-aligned", Options{Bytes: 1 << 20, ExtentBytes: 5000}},
		{"bad mode", Options{Bytes: 1 << 20, ExtentBytes: 64 << 10, Mode: "writethrough"}},
		{"bad ack", Options{Bytes: 1 << 20, ExtentBytes: 64 << 10, AckMode: "maybe"}},
		{"bad watermark", Options{Bytes: 1 << 20, ExtentBytes: 64 << 10, DirtyWatermark: 1.5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Backing = newMem()
			tr, err := Open(c.opts)
			if err == nil {
				tr.Close()
				t.Fatalf("Open(%+v) succeeded", c.opts)
			}
			enginetest.WantStatus(t, err, wire.StatusInvalid, "Open")
		})
	}
	t.Run("mmap refused", func(t *testing.T) {
		// 8 TiB: under the heuristic overcommit policy (0) or strict (2)
		// the kernel refuses it. Under "always" (1) it would be granted
		// and populated, so do not try.
		if b, err := readFile("/proc/sys/vm/overcommit_memory"); err != nil || (b != "0" && b != "2") {
			t.Skipf("vm.overcommit_memory=%q (%v): an 8 TiB mapping might be granted", b, err)
		}
		_, err := Open(Options{Backing: newMem(), Bytes: 8 << 40, ExtentBytes: 1 << 30, LargeReserveBytes: NoLargeReserve})
		if err == nil {
			t.Fatal("Open of an 8 TiB arena succeeded")
		}
		t.Logf("refused as expected: %v", err)
	})
	t.Run("no backing", func(t *testing.T) {
		_, err := Open(Options{Bytes: 1 << 20, ExtentBytes: 64 << 10})
		enginetest.WantStatus(t, err, wire.StatusInvalid, "Open without a backing")
	})
}

// TestAckModeRAMReturnsBeforeBackingHasIt: write-back with RAM ack (the
// default) returns once the value is visible in RAM, while its flush is
// still held at the backing; the flush lands later.
func TestAckModeRAMReturnsBeforeBackingHasIt(t *testing.T) {
	m := newMem()
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	open := m.gateCache()
	defer open()
	k, v := key(1), val(1, 10000)
	if err := tr.Put(k, v); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if _, ok := m.get(k); ok {
		t.Fatal("backing has the value although its flush is held at the gate")
	}
	mustGet(t, tr, k, v)
	if s := tr.RAM(); s.DirtyObjects != 1 || s.DirtyBytes != 10000 {
		t.Fatalf("dirty %d objects %d bytes, want 1 and 10000", s.DirtyObjects, s.DirtyBytes)
	}
	if st := tr.Stats(); st.Objects != 1 || st.UsedBytes != 10000 {
		t.Fatalf("Stats while dirty: Objects %d UsedBytes %d, want 1 and 10000", st.Objects, st.UsedBytes)
	}
	open()
	if err := tr.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got, ok := m.get(k); !ok || !bytes.Equal(got, v) {
		t.Fatal("backing lacks the flushed value")
	}
	if st := tr.Stats(); st.Objects != 1 || st.UsedBytes != 10000 {
		t.Fatalf("Stats after flush: Objects %d UsedBytes %d, want 1 and 10000 (counted once)", st.Objects, st.UsedBytes)
	}
	if s := tr.RAM(); s.DirtyObjects != 0 || s.Flushed != 1 || s.Objects != 1 {
		t.Fatalf("after flush: %+v", s)
	}
}

// TestAckModeDiskWaitsForBacking: with disk ack, Put does not return
// before the flush committed, and the backing has the value when it does.
func TestAckModeDiskWaitsForBacking(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.AckMode = AckDisk
	tr := openTier(t, o)
	defer tr.Close()
	open := m.gateCache()
	defer open()
	k, v := key(2), val(2, 5000)
	done := make(chan error, 1)
	go func() { done <- tr.Put(k, v) }()
	if got := <-m.entered; got != k {
		t.Fatalf("backing saw %s, want %s", got, k)
	}
	select {
	case err := <-done:
		t.Fatalf("Put returned (%v) while its flush is held", err)
	default:
	}
	// Visible in RAM already (admission), although not acknowledged.
	mustGet(t, tr, k, v)
	open()
	if err := <-done; err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got, ok := m.get(k); !ok || !bytes.Equal(got, v) {
		t.Fatal("disk-ack Put returned but the backing lacks the value")
	}
}

// TestWatermarkRejectsNewKeysWithCacheFull: at the dirty-byte watermark a
// PUT of a new key gets CACHE_FULL before admission, and nothing of it
// reaches the backing (no silent direct-disk fallback); an overwrite of a
// key RAM already owns is still admitted.
func TestWatermarkRejectsNewKeysWithCacheFull(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.DirtyWatermark = 0.5 // 512 KiB of the 1 MiB arena
	tr := openTier(t, o)
	defer tr.Close()
	open := m.gateCache()
	defer open()
	const n = 64 << 10
	for i := range 8 {
		if err := tr.Put(key(100+i), val(uint64(100+i), n)); err != nil {
			t.Fatalf("Put %d (under the watermark): %v", i, err)
		}
	}
	full := key(200)
	enginetest.WantStatus(t, tr.Put(full, val(200, n)), wire.StatusCacheFull, "Put of a new key past the watermark")
	if err := tr.Put(key(100), val(1000, n)); err != nil {
		t.Fatalf("overwrite of an owned key past the watermark: %v", err)
	}
	open()
	if err := tr.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if m.cacheCalls(full) != 0 {
		t.Fatal("the rejected value reached the backing")
	}
	wantNotFound(t, tr, full, "rejected key")
	mustGet(t, tr, key(100), val(1000, n))
	if got, _ := m.get(key(100)); !bytes.Equal(got, val(1000, n)) {
		t.Fatal("backing does not hold the overwrite")
	}
	// Below the watermark again: admitted.
	if err := tr.Put(full, val(200, n)); err != nil {
		t.Fatalf("Put after the flushes drained: %v", err)
	}
}

// TestArenaExhaustedByPinnedSlotsTakesSyncDiskPath: when every arena slot
// is flush-pinned (not evictable), a PUT takes the one synchronous disk
// path: it writes the backing directly and returns its result.
func TestArenaExhaustedByPinnedSlotsTakesSyncDiskPath(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.DirtyWatermark = 1
	tr := openTier(t, o)
	defer tr.Close()
	open := m.gateCache()
	defer open()
	// 40 KiB values get a whole 64 KiB extent each: 16 fill the arena
	// with 640 KiB dirty, well under the watermark.
	const n = 40 << 10
	for i := range 16 {
		if err := tr.Put(key(300+i), val(uint64(300+i), n)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	k, v := key(400), val(400, n)
	done := make(chan error, 1)
	go func() { done <- tr.Put(k, v) }()
	eventually(t, "the bypass write at the backing", func() bool { return m.cacheCalls(k) == 1 })
	open()
	if err := <-done; err != nil {
		t.Fatalf("bypass Put: %v", err)
	}
	if got, ok := m.get(k); !ok || !bytes.Equal(got, v) {
		t.Fatal("bypass Put returned but the backing lacks the value")
	}
	if s := tr.RAM(); s.PutBypass != 1 {
		t.Fatalf("PutBypass %d, want 1", s.PutBypass)
	}
	mustGet(t, tr, k, v)
}

// TestSameKeyOverlappingPutsJoinPendingCommit: with disk ack, a second PUT
// of the same key and bytes while the first one's flush is pending does
// not report success before that commit, and causes no second flush; a PUT
// of different bytes supersedes, and its flush lands after the first.
func TestSameKeyOverlappingPutsJoinPendingCommit(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.AckMode = AckDisk
	tr := openTier(t, o)
	defer tr.Close()
	open := m.gateCache()
	k, v := key(5), val(5, 20000)
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- tr.Put(k, v) }()
	<-m.entered
	go func() { second <- tr.Put(k, append([]byte(nil), v...)) }()
	eventually(t, "the second PUT to join", func() bool { return tr.RAM().PutsJoined == 1 })
	select {
	case err := <-second:
		t.Fatalf("joined PUT returned (%v) before the commit", err)
	default:
	}
	open()
	if err := <-first; err != nil {
		t.Fatalf("first Put: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("joined Put: %v", err)
	}
	if c := m.cacheCalls(k); c != 1 {
		t.Fatalf("backing saw %d writes of the key, want 1 (the join shares the flush)", c)
	}

	// Different bytes while a flush is in flight: the newer value wins on
	// both RAM and the backing.
	open = m.gateCache()
	v1, v2 := val(51, 30000), val(52, 7000)
	go func() { first <- tr.Put(k, v1) }()
	for got := <-m.entered; got != k; got = <-m.entered {
	}
	go func() { second <- tr.Put(k, v2) }()
	eventually(t, "the superseding PUT to be admitted", func() bool {
		sh := tr.shardOf(&k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		p := sh.dirty[k]
		return p != nil && p.n == uint64(len(v2))
	})
	mustGet(t, tr, k, v2)
	open()
	if err := <-first; err != nil {
		t.Fatalf("superseded Put: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("superseding Put: %v", err)
	}
	if got, _ := m.get(k); !bytes.Equal(got, v2) {
		t.Fatalf("backing holds %d bytes, want the newer %d-byte value", len(got), len(v2))
	}
	mustGet(t, tr, k, v2)
}

// TestCoalescedColdReadsCountOneBackingRead: identical concurrent
// whole-value misses share one backing read, which fills RAM; the next
// read is a RAM hit.
func TestCoalescedColdReadsCountOneBackingRead(t *testing.T) {
	m := newMem()
	k, v := key(6), val(6, 50000)
	m.vals[k] = v
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	const readers = 8
	concurrentGets(t, tr, k, v, readers, "all readers on one fill", func() bool {
		sh := tr.shardOf(&k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		f := sh.fills[k]
		return f != nil && f.waiters == readers-1 && m.ranges.Load() == 1
	}, m.gateRange())
	if r := m.ranges.Load(); r != 1 {
		t.Fatalf("%d backing reads for %d identical misses, want 1", r, readers)
	}
	mustGet(t, tr, k, v)
	if r := m.ranges.Load(); r != 1 {
		t.Fatalf("a warm read went to the backing (%d reads)", r)
	}
	if s := tr.RAM(); s.Objects != 1 || s.Hits < 1 {
		t.Fatalf("after the fill: %+v", s)
	}
	// A partial miss fills RAM with the whole value; the next range of it
	// is a RAM hit.
	k2 := key(7)
	m.vals[k2] = val(7, 9000)
	data, stored, err := tr.Get(k2, 100, 50, iobuf.Heap{})
	if err != nil || stored != 9000 || !bytes.Equal(data, val(7, 9000)[100:150]) {
		t.Fatalf("partial Get: %v stored %d", err, stored)
	}
	if s := tr.RAM(); s.Objects != 2 {
		t.Fatalf("a partial miss left %d objects in RAM, want 2", s.Objects)
	}
	reads := m.ranges.Load()
	data, stored, err = tr.Get(k2, 8000, 0, iobuf.Heap{})
	if err != nil || stored != 9000 || !bytes.Equal(data, val(7, 9000)[8000:]) || m.ranges.Load() != reads {
		t.Fatalf("range after a partial fill: %v stored %d, backing reads %d -> %d", err, stored, reads, m.ranges.Load())
	}
}

// TestConcurrentRangeMissesShareOneFill: the layers of a block asked for
// at once, each a range, read the backing once; every range gets its own
// bytes, and the next load of the block is served from RAM.
func TestConcurrentRangeMissesShareOneFill(t *testing.T) {
	m := newMem()
	const size, layers = 48 << 10, 12
	k, v := key(8), val(8, size)
	m.vals[k] = v
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	open := m.gateRange()
	var wg sync.WaitGroup
	errs := make([]error, layers)
	layer := uint64(size / layers)
	for l := range uint64(layers) {
		wg.Go(func() {
			data, stored, err := tr.Get(k, l*layer, layer, iobuf.Heap{})
			if err == nil && (stored != size || !bytes.Equal(data, v[l*layer:(l+1)*layer])) {
				err = fmt.Errorf("layer %d: %d bytes of %d stored, wrong bytes", l, len(data), stored)
			}
			errs[l] = err
		})
	}
	eventually(t, "every layer waiting on one fill", func() bool {
		sh := tr.shardOf(&k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		f := sh.fills[k]
		return f != nil && f.waiters == layers-1 && m.ranges.Load() == 1
	})
	open()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for l := range uint64(layers) {
		data, _, err := tr.Get(k, l*layer, layer, iobuf.Heap{})
		if err != nil || !bytes.Equal(data, v[l*layer:(l+1)*layer]) {
			t.Fatalf("second load, layer %d: %v", l, err)
		}
	}
	if r := m.ranges.Load(); r != 1 {
		t.Fatalf("two loads of %d layers read the backing %d times, want 1", layers, r)
	}
}

// TestRangeMissWithoutASlotReadsItsRange: a range of a value no arena slot
// can hold (larger than an extent, no large reserve) is read from the
// backing as a range, never as the whole value, and fills nothing.
func TestRangeMissWithoutASlotReadsItsRange(t *testing.T) {
	m := newMem()
	k, v := key(9), val(9, 200<<10) // extents are 64 KiB
	m.vals[k] = v
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	a := &countAlloc{}
	data, stored, err := tr.Get(k, 1000, 100, a)
	if err != nil || stored != 200<<10 || !bytes.Equal(data, v[1000:1100]) {
		t.Fatalf("range of a large value: %v stored %d", err, stored)
	}
	if a.largest > 100 {
		t.Fatalf("a 100-byte range asked its caller for %d bytes", a.largest)
	}
	if s := tr.RAM(); s.Objects != 0 {
		t.Fatalf("%d objects in RAM after a range of a value no slot holds", s.Objects)
	}
}

// TestRangesDoNotWaitForAWholeReadThatFillsNothing: while a whole-value
// miss of a value no slot holds reads the backing, range misses of the
// same key read their own ranges rather than wait for it (which would
// cost the leader a heap copy of the whole value for them).
func TestRangesDoNotWaitForAWholeReadThatFillsNothing(t *testing.T) {
	m := newMem()
	k, v := key(11), val(11, 200<<10) // extents are 64 KiB
	m.vals[k] = v
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	open := m.gateRange()
	defer open() // a failed wait below must not leave reads at the gate
	var wg sync.WaitGroup
	wg.Go(func() {
		if d, _, err := tr.Get(k, 0, 0, iobuf.Heap{}); err != nil || !bytes.Equal(d, v) {
			t.Errorf("whole read: %v", err)
		}
	})
	eventually(t, "the whole read at the backing", func() bool { return m.ranges.Load() == 1 })
	const layers = 8
	for l := range uint64(layers) {
		wg.Go(func() {
			a := &countAlloc{}
			d, _, err := tr.Get(k, l*1000, 100, a)
			if err != nil || !bytes.Equal(d, v[l*1000:l*1000+100]) || a.largest > 100 {
				t.Errorf("range %d: %v, or wrong bytes, or asked for %d bytes", l, err, a.largest)
			}
		})
	}
	// Held at the gate, each range is at the backing beside the whole read.
	eventually(t, "every range at the backing", func() bool { return m.ranges.Load() == 1+layers })
	open()
	wg.Wait()
}

// TestRangePastTheEndFillsNothing: a range whose offset is past the value
// is INVALID, with the stored length, and brings nothing into RAM (it must
// not evict anything either).
func TestRangePastTheEndFillsNothing(t *testing.T) {
	m := newMem()
	k := key(10)
	m.vals[k] = val(10, 5000)
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	_, stored, err := tr.Get(k, 6000, 10, iobuf.Heap{})
	if wire.StatusOf(err) != wire.StatusInvalid || stored != 5000 {
		t.Fatalf("range past the end: %v, stored %d; want INVALID and 5000", err, stored)
	}
	if s := tr.RAM(); s.Objects != 0 {
		t.Fatalf("a range past the end left %d objects in RAM", s.Objects)
	}
}

// countAlloc records the largest buffer asked of it.
type countAlloc struct{ largest int }

func (a *countAlloc) Alloc(n int) []byte {
	a.largest = max(a.largest, n)
	return iobuf.Heap{}.Alloc(n)
}

// TestLargeValuesUseDedicatedBudget: values larger than one extent live in
// dedicated allocations charged to the large reserve; resident large bytes
// never pass it (idle durable ones are evicted), a value larger than the
// reserve goes to the backing directly, and with no reserve every such
// value bypasses RAM.
func TestLargeValuesUseDedicatedBudget(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.Bytes = 1<<20 + 1<<20
	o.LargeReserveBytes = 1 << 20
	tr := openTier(t, o)
	defer tr.Close()
	const n = 300 << 10
	for i := range 5 {
		k, v := key(500+i), val(uint64(500+i), n)
		if err := tr.Put(k, v); err != nil {
			t.Fatalf("Put large %d: %v", i, err)
		}
		mustGet(t, tr, k, v)
		if s := tr.RAM(); s.LargeUsedBytes > s.LargeReserveBytes {
			t.Fatalf("large bytes %d past the reserve %d", s.LargeUsedBytes, s.LargeReserveBytes)
		}
		if err := tr.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	s := tr.RAM()
	if s.LargeUsedBytes != 3*roundPage(n) || s.Evictions != 2 || s.PutBypass != 0 {
		t.Fatalf("after 5 large values in a 3-value reserve: %+v", s)
	}
	for i := range 5 {
		mustGet(t, tr, key(500+i), val(uint64(500+i), n)) // evicted ones come from the backing
	}
	big := val(600, 2<<20)
	if err := tr.Put(key(600), big); err != nil {
		t.Fatalf("Put of a value past the reserve: %v", err)
	}
	if got, _ := m.get(key(600)); !bytes.Equal(got, big) {
		t.Fatal("a value past the reserve did not go to the backing synchronously")
	}

	m2 := newMem()
	tr2 := openTier(t, smallOpts(m2)) // NoLargeReserve
	defer tr2.Close()
	if err := tr2.Put(key(601), val(601, n)); err != nil {
		t.Fatalf("Put without a reserve: %v", err)
	}
	if _, ok := m2.get(key(601)); !ok {
		t.Fatal("without a reserve a large value must be written to the backing directly")
	}
	if s := tr2.RAM(); s.Objects != 0 || s.LargeUsedBytes != 0 {
		t.Fatalf("without a reserve: %+v", s)
	}
}

// TestRemoveDuringFlushNeverResurrects: REMOVE while the key's flush is
// held in the backing hides the key at once; when the flush completes it
// does not bring the key back, in RAM or on the backing.
func TestRemoveDuringFlushNeverResurrects(t *testing.T) {
	m := newMem()
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	open := m.gateCache()
	k, v := key(8), val(8, 12345)
	if err := tr.Put(k, v); err != nil {
		t.Fatalf("Put: %v", err)
	}
	<-m.entered // the flush is in the backing, held
	done := make(chan error, 1)
	go func() { done <- tr.Remove(k) }()
	eventually(t, "the key hidden", func() bool {
		_, err := tr.Exist(k)
		return wire.StatusOf(err) == wire.StatusNotFound
	})
	wantNotFound(t, tr, k, "during the held flush")
	open()
	if err := <-done; err != nil {
		t.Fatalf("Remove: %v", err)
	}
	eventually(t, "the held flush to settle", func() bool {
		sh := tr.shardOf(&k)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return len(sh.active) == 0
	})
	if _, ok := m.get(k); ok {
		t.Fatal("the fenced flush left the value on the backing")
	}
	wantNotFound(t, tr, k, "after the flush completed")
	if s := tr.RAM(); s.Objects != 0 || s.DirtyObjects != 0 {
		t.Fatalf("RAM after the fenced flush: %+v", s)
	}
}

// TestRemoveCancelsQueuedFlush: a REMOVE of a key whose flush is still
// queued cancels it: the backing never sees the value.
func TestRemoveCancelsQueuedFlush(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.FlushThreads = 1
	tr := openTier(t, o)
	defer tr.Close()
	open := m.gateCache()
	if err := tr.Put(key(9), val(9, 100)); err != nil {
		t.Fatal(err)
	}
	<-m.entered // the only worker is held on key 9
	q := key(10)
	if err := tr.Put(q, val(10, 100)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Remove(q); err != nil {
		t.Fatalf("Remove of a queued key: %v", err)
	}
	open()
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	if c := m.cacheCalls(q); c != 0 {
		t.Fatalf("the canceled flush reached the backing %d times", c)
	}
	wantNotFound(t, tr, q, "removed while queued")
}

// TestRemoveDuringColdReadDoesNotPublish: REMOVE while a whole-value miss
// is reading the backing into a hidden reservation fences it: the reader
// may get the bytes it read, but the slot is never published.
func TestRemoveDuringColdReadDoesNotPublish(t *testing.T) {
	m := newMem()
	k, v := key(11), val(11, 30000)
	m.vals[k] = v
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	open := m.gateRange()
	type res struct {
		data []byte
		err  error
	}
	done := make(chan res, 1)
	go func() {
		d, err := get(t, tr, k)
		done <- res{d, err}
	}()
	eventually(t, "the cold read at the backing", func() bool { return m.ranges.Load() == 1 })
	if err := tr.Remove(k); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	open()
	r := <-done
	if r.err == nil && !bytes.Equal(r.data, v) {
		t.Fatal("the cold read returned wrong bytes")
	}
	wantNotFound(t, tr, k, "after the fenced cold read")
	if s := tr.RAM(); s.Objects != 0 {
		t.Fatalf("the fenced cold read published: %d objects in RAM", s.Objects)
	}
}

// TestWriteAroundFillsOnRead: write-around PUTs go to the backing before
// they return, and only a later GET (a range, here) fills RAM.
func TestWriteAroundFillsOnRead(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.Mode = ModeWriteAround
	tr := openTier(t, o)
	defer tr.Close()
	k, v := key(12), val(12, 40000)
	if err := tr.Put(k, v); err != nil {
		t.Fatal(err)
	}
	if got, ok := m.get(k); !ok || !bytes.Equal(got, v) {
		t.Fatal("write-around Put returned before the backing had the value")
	}
	if s := tr.RAM(); s.Objects != 0 {
		t.Fatalf("write-around admitted to RAM: %+v", s)
	}
	if _, _, err := tr.Get(k, 10, 10, iobuf.Heap{}); err != nil {
		t.Fatal(err)
	}
	reads := m.ranges.Load()
	mustGet(t, tr, k, v)
	if s := tr.RAM(); s.Objects != 1 || m.ranges.Load() != reads {
		t.Fatalf("a read did not fill RAM: %+v, backing reads %d -> %d", s, reads, m.ranges.Load())
	}
	// An overwrite drops the stale RAM copy.
	v2 := val(13, 500)
	if err := tr.Put(k, v2); err != nil {
		t.Fatal(err)
	}
	mustGet(t, tr, k, v2)
}

// TestFlushFailureMarksUnhealthy: a flush that fails every retry turns the
// tier unhealthy, drops the value and reports IO_ERROR to a disk-ack PUT.
func TestFlushFailureMarksUnhealthy(t *testing.T) {
	defer func(a int, b time.Duration) { flushAttempts, flushBackoff = a, b }(flushAttempts, flushBackoff)
	flushAttempts, flushBackoff = 3, time.Millisecond
	m := newMem()
	k := key(14)
	m.vals[k] = val(114, 100) // an older value: a dropped PUT must not bring it back
	m.failCache.Store(true)
	o := smallOpts(m)
	o.AckMode = AckDisk
	tr := openTier(t, o)
	enginetest.WantStatus(t, tr.Put(k, val(14, 100)), wire.StatusIOError, "disk-ack Put with a failing backing")
	if st := tr.Stats(); st.Healthy {
		t.Fatal("Stats().Healthy after exhausted flush retries")
	}
	if s := tr.RAM(); s.Healthy || s.FlushDropped != 1 || s.Objects != 0 {
		t.Fatalf("RAM after the failure: %+v", s)
	}
	if c := m.cacheCalls(k); c != 3 {
		t.Fatalf("%d flush attempts, want 3", c)
	}
	wantNotFound(t, tr, k, "dropped value")
	if err := tr.Close(); err == nil {
		t.Fatal("Close after a dropped flush reported no error")
	}
}

// TestFlushRefusedByBackingStaysHealthy: a flush the backing refuses
// outright (TOO_LARGE) is not retried, drops the value, and leaves the
// tier healthy: the disks are fine. The key's older disk value goes too:
// it reads as a miss, not as what the dropped PUT replaced.
func TestFlushRefusedByBackingStaysHealthy(t *testing.T) {
	m := newMem()
	k := key(15)
	m.vals[k] = val(115, 100) // an older value: a dropped PUT must not bring it back
	m.refuse.Store(true)
	o := smallOpts(m)
	o.AckMode = AckDisk
	tr := openTier(t, o)
	defer tr.Close()
	enginetest.WantStatus(t, tr.Put(k, val(15, 100)), wire.StatusTooLarge, "disk-ack Put the backing refuses")
	if c := m.cacheCalls(k); c != 1 {
		t.Fatalf("%d attempts of a refused flush, want 1", c)
	}
	if s := tr.RAM(); !s.Healthy || s.FlushDropped != 1 || s.Objects != 0 {
		t.Fatalf("after the refusal: %+v", s)
	}
	wantNotFound(t, tr, k, "refused value")
}

// TestCloseFlushesDirtyValues: Close flushes every dirty value before it
// closes the backing; reopening the slab store alone finds them all.
func TestCloseFlushesDirtyValues(t *testing.T) {
	dir := t.TempDir()
	const capacity = 64 << 20
	s := openSlab(t, dir, capacity)
	g := &gatedEngine{StoreEngine: s, gate: make(chan struct{})}
	tr := openTier(t, Options{Backing: g, Bytes: 4 << 20, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve})
	const n = 20
	for i := range n {
		if err := tr.Put(key(700+i), val(uint64(700+i), 3000+i*1000)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if d := tr.RAM().DirtyObjects; d != n {
		t.Fatalf("%d dirty values before Close, want %d (flushes are held)", d, n)
	}
	go close(g.gate)
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2 := openSlab(t, dir, capacity)
	defer s2.Close()
	for i := range n {
		enginetest.MustEqual(t, s2, key(700+i), val(uint64(700+i), 3000+i*1000))
	}
}

// TestFailedClosedDiskNotRetriedNorAdmitted: a flush whose disk has failed
// closed is tried once, not flushAttempts times with pauses (a shutdown
// with 25,000 dirty values took almost 4 minutes to drop them), and later
// write-back PUTs for that disk are refused IO_ERROR instead of being
// acknowledged from RAM and dropped a moment later.
func TestFailedClosedDiskNotRetriedNorAdmitted(t *testing.T) {
	m := newMem()
	m.failedClosed.Store(true)
	tr := openTier(t, smallOpts(m)) // write-back, RAM acknowledgement
	defer tr.Close()
	k := key(16)
	if err := tr.Put(k, val(16, 100)); err != nil {
		t.Fatalf("the first PUT, before any flush met the failed disk: %v", err)
	}
	_ = tr.Flush()
	if c := m.cacheCalls(k); c != 1 {
		t.Fatalf("%d flush attempts against a failed-closed disk, want 1", c)
	}
	err := tr.Put(key(17), val(17, 100))
	enginetest.WantStatus(t, err, wire.StatusIOError, "write-back PUT for a failed-closed disk")
	if !errors.Is(err, engine.ErrFailedClosed) {
		t.Fatalf("the refusal does not say the disk failed closed: %v", err)
	}
	if s := tr.RAM(); s.FlushDropped != 1 || s.Objects != 0 {
		t.Fatalf("after the refusal: %+v", s)
	}
}
