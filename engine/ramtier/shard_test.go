package ramtier

import (
	"bytes"
	"fmt"
	"testing"
	"testing/synctest"
	"unsafe"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// In-process tests of the lock shards, the per-disk flush queues, the
// read-coalescing switch and the quota-limited bypass.

func TestShardCount(t *testing.T) {
	for _, c := range []struct {
		want    int
		extents uint64
		got     int
	}{
		{8, 1, 1}, {8, 31, 1}, {8, 63, 1}, {8, 64, 2}, {8, 255, 4}, {8, 256, 8}, {8, 100000, 8},
		{64, 64 * 32, 64}, {64, 64*32 - 1, 32}, {1, 100000, 1}, {3, 96, 3}, {3, 95, 1},
	} {
		if n := shardCount(c.want, c.extents); n != c.got {
			t.Errorf("shardCount(%d, %d) = %d, want %d", c.want, c.extents, n, c.got)
		}
	}
	for _, c := range []struct{ extents, n uint64 }{{64, 2}, {100, 3}, {257, 8}, {5, 5}} {
		sum := uint64(0)
		for i := range int(c.n) {
			s := splitExtents(c.extents, int(c.n), i)
			if s != c.extents/c.n && s != c.extents/c.n+1 {
				t.Errorf("splitExtents(%d, %d, %d) = %d: uneven", c.extents, c.n, i, s)
			}
			sum += s
		}
		if sum != c.extents {
			t.Errorf("splitExtents(%d, %d, ·) sums to %d", c.extents, c.n, sum)
		}
	}
}

// TestShardsPartitionTheArena: with several shards, every shard's slots
// are distinct arena bytes (values written through different shards never
// overwrite each other), the reported shard count is the halved one, and
// an out-of-range request is refused.
func TestShardsPartitionTheArena(t *testing.T) {
	m := newMem()
	// 128 extents of 64 KiB: 4 shards of 32 (8 asked, halved twice).
	tr := openTier(t, Options{Backing: m, Bytes: 128 * 64 << 10, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve,
		Shards: 8, FlushThreads: 2})
	defer tr.Close()
	if s := tr.RAM(); s.Shards != 4 {
		t.Fatalf("Shards = %d, want 4 (8 halved while a shard would hold < 32 extents)", s.Shards)
	}
	used := map[*shard]int{}
	const n = 400
	for i := range n {
		k := key(1000 + i)
		used[tr.shardOf(&k)]++
		if err := tr.Put(k, val(uint64(i), 5000+i)); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if len(used) != 4 {
		t.Fatalf("%d keys landed on %d shards, want all 4", n, len(used))
	}
	for i := range n {
		mustGet(t, tr, key(1000+i), val(uint64(i), 5000+i))
	}
	if s := tr.RAM(); s.Objects != n || s.Hits != n {
		t.Fatalf("after %d PUTs and GETs: %+v", n, s)
	}
	checkTier(t, tr)

	// A slot received for one key cannot be committed under a key of
	// another shard: refused, the slot given back, nothing stored.
	k1, k2 := key(5000), key(5001)
	for i := 5002; tr.shardIndex(&k2) == tr.shardIndex(&k1); i++ {
		k2 = key(i)
	}
	buf, loan, ok := tr.Receive(k1, 3000)
	if !ok {
		t.Fatal("Receive refused")
	}
	enginetest.WantStatus(t, tr.CommitReceive(k2, buf, loan), wire.StatusInvalid, "CommitReceive under another shard's key")
	wantNotFound(t, tr, k2, "after the refused commit")
	checkTier(t, tr)
	if err := tr.Flush(); err != nil { // the PUTs' flushes unpin their slots
		t.Fatal(err)
	}
	checkIdle(t, tr)

	for _, bad := range []int{-1, MaxShards + 1} {
		_, err := Open(Options{Backing: newMem(), Bytes: 1 << 20, ExtentBytes: 64 << 10, Shards: bad})
		enginetest.WantStatus(t, err, wire.StatusInvalid, fmt.Sprintf("Open with %d shards", bad))
	}
}

// diskGated is a backing whose Put of keys on disk 0 (by diskOfTest)
// waits for gate: one slow disk.
type diskGated struct {
	*memBacking
	gate chan struct{}
}

func diskOfTest(k wire.BlockKey) int { return int(k.ID[0] & 1) }

func (d *diskGated) Put(k wire.BlockKey, v []byte) error {
	if diskOfTest(k) == 0 {
		<-d.gate
	}
	return d.memBacking.Put(k, v)
}

func keyOnDisk(disk, from int) wire.BlockKey {
	for i := from; ; i++ {
		if k := key(i); diskOfTest(k) == disk {
			return k
		}
	}
}

// TestSlowDiskBacksUpOnlyItsOwnFlushes: with one flush queue per disk, a
// disk whose writes hang holds back only its own keys' flushes; the other
// disk's flushes complete. One worker was asked for; the tier runs one
// per queue and reports it.
func TestSlowDiskBacksUpOnlyItsOwnFlushes(t *testing.T) {
	d := &diskGated{memBacking: newMem(), gate: make(chan struct{})}
	o := smallOpts(d.memBacking)
	o.Backing = d
	o.FlushThreads = 1
	o.DiskOf, o.Disks = diskOfTest, 2
	tr := openTier(t, o)
	defer tr.Close()
	defer close(d.gate)
	if s := tr.RAM(); s.FlushThreads != 2 || s.FlushQueues != 2 {
		t.Fatalf("FlushThreads %d FlushQueues %d, want 2 and 2", s.FlushThreads, s.FlushQueues)
	}
	slow := []wire.BlockKey{keyOnDisk(0, 1), keyOnDisk(0, 100)}
	fast := keyOnDisk(1, 200)
	for i, k := range slow {
		if err := tr.Put(k, val(uint64(i), 3000)); err != nil {
			t.Fatalf("Put on the slow disk: %v", err)
		}
	}
	if err := tr.Put(fast, val(9, 3000)); err != nil {
		t.Fatalf("Put on the fast disk: %v", err)
	}
	eventually(t, "the fast disk's flush while the slow disk hangs", func() bool {
		_, ok := d.get(fast)
		return ok
	})
	for _, k := range slow {
		if _, ok := d.get(k); ok {
			t.Fatal("a slow-disk flush completed through a closed gate")
		}
		mustGet(t, tr, k, val(uint64(map[wire.BlockKey]int{slow[0]: 0, slow[1]: 1}[k]), 3000))
	}
	if s := tr.RAM(); s.DirtyObjects != 2 {
		t.Fatalf("DirtyObjects = %d, want the 2 slow-disk values", s.DirtyObjects)
	}
}

// TestReadCoalesceOff: without coalescing, identical concurrent misses
// each read the backing (none waits for another's fill), every reader gets
// the bytes, and one of them still fills RAM for the next read.
func TestReadCoalesceOff(t *testing.T) {
	m := newMem()
	k, v := key(6), val(6, 50000)
	m.vals[k] = v
	o := smallOpts(m)
	o.ReadCoalesce = false
	tr := openTier(t, o)
	defer tr.Close()
	const readers = 4
	concurrentGets(t, tr, k, v, readers, "every reader at the backing",
		func() bool { return m.ranges.Load() == readers }, m.gateRange())
	mustGet(t, tr, k, v)
	if r := m.ranges.Load(); r != readers {
		t.Fatalf("the read after the fill went to the backing (%d reads)", r)
	}
}

// quotaBacking refuses every write of tenant 7 with QUOTA_EXCEEDED, as a
// Group with that tenant at its quota does.
type quotaBacking struct{ *memBacking }

func (q quotaBacking) Put(k wire.BlockKey, v []byte) error {
	if k.Tenant == 7 {
		return fmt.Errorf("tenant 7 at its quota: %w", wire.StatusQuotaExceeded)
	}
	return q.memBacking.Put(k, v)
}

// TestLimitedTenantBypassesWriteBack: a tenant with a quota gets its
// PUT's quota verdict synchronously (the backing's QUOTA_EXCEEDED, not a
// RAM acknowledgement whose flush would later be refused and dropped), and
// nothing of it is left in RAM; other tenants still go through write-back.
func TestLimitedTenantBypassesWriteBack(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.Backing = quotaBacking{m}
	o.Limited = func(tenant uint64) bool { return tenant == 7 }
	tr := openTier(t, o)
	defer tr.Close()

	limited := key(1)
	limited.Tenant = 7
	enginetest.WantStatus(t, tr.Put(limited, val(1, 4000)), wire.StatusQuotaExceeded, "PUT of a tenant at its quota")
	wantNotFound(t, tr, limited, "after the refused PUT")
	if s := tr.RAM(); s.Objects != 0 || s.DirtyObjects != 0 || s.PutBypass != 1 {
		t.Fatalf("after the refused PUT: %+v", s)
	}

	// An unlimited tenant's PUT is acknowledged from RAM: with the flush
	// held, it is visible before the backing has it.
	open := m.gateCache()
	free := key(2)
	if err := tr.Put(free, val(2, 4000)); err != nil {
		t.Fatalf("PUT of an unlimited tenant: %v", err)
	}
	if _, ok := m.get(free); ok {
		t.Fatal("the unlimited tenant's PUT went to the backing synchronously")
	}
	mustGet(t, tr, free, val(2, 4000))
	open()
	if err := tr.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	// Without Limited, the same PUT is acknowledged from RAM and its
	// flush is then refused and dropped: what the bypass exists to avoid.
	o.Limited = nil
	tr2 := openTier(t, o)
	defer tr2.Close()
	if err := tr2.Put(limited, val(1, 4000)); err != nil {
		t.Fatalf("write-back PUT without the bypass: %v", err)
	}
	// Flush reports the refusal when it finds the value still dirty; a
	// worker may have been refused first, and then there is nothing left
	// to wait for. Either way the flush was dropped.
	if err := tr2.Flush(); err != nil {
		enginetest.WantStatus(t, err, wire.StatusQuotaExceeded, "the flush of the over-quota value")
	}
	if s := tr2.RAM(); s.FlushDropped != 1 || s.Flushed != 0 {
		t.Fatalf("the over-quota value's flush: %d dropped, %d flushed; want it dropped", s.FlushDropped, s.Flushed)
	}
	wantNotFound(t, tr2, limited, "after the dropped flush")
}

var _ engine.StoreEngine = (*diskGated)(nil)

// TestLendInPlace: a resident value is lent from the arena itself (no
// copy) under a transfer-pin: while lent it survives eviction pressure and
// a Remove (hidden at once, bytes intact until Return), Close waits for
// the loan, and the range contract holds. Misses and dedicated large
// values are not lent.
func TestLendInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem()
		o := smallOpts(m)
		o.LargeReserveBytes = 256 << 10
		o.Bytes = 1<<20 + 256<<10
		tr := openTier(t, o)
		k, v := key(1), val(1, 40000)
		if err := tr.Put(k, v); err != nil {
			t.Fatal(err)
		}
		data, stored, loan, ok, err := tr.Lend(k, 0, 0)
		if !ok || err != nil || stored != uint64(len(v)) || !bytes.Equal(data, v) {
			t.Fatalf("Lend: ok %v err %v stored %d", ok, err, stored)
		}
		arena := tr.arena.mem
		if p := uintptr(unsafe.Pointer(&data[0])); p < uintptr(unsafe.Pointer(&arena[0])) || p >= uintptr(unsafe.Pointer(&arena[0]))+uintptr(len(arena)) {
			t.Fatal("lent bytes are not the arena's: a copy was made")
		}
		// Eviction pressure: 60 more 40 KB values through a 1 MiB arena.
		if err := tr.Flush(); err != nil {
			t.Fatal(err)
		}
		for i := range 60 {
			if err := tr.Put(key(100+i), val(uint64(100+i), 40000)); err != nil {
				t.Fatalf("Put %d: %v", i, err)
			}
			if err := tr.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.Remove(k); err != nil {
			t.Fatal(err)
		}
		wantNotFound(t, tr, k, "removed while lent")
		if !bytes.Equal(data, v) {
			t.Fatal("lent bytes changed before Return")
		}
		closed := closeWhile(t, tr, "bytes were lent")
		tr.Return(loan)
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}

		tr = openTier(t, o)
		defer tr.Close()
		if err := tr.Put(k, v); err != nil {
			t.Fatal(err)
		}
		_, _, _, ok, err = tr.Lend(k, uint64(len(v))+1, 0)
		enginetest.WantStatus(t, err, wire.StatusInvalid, "Lend past the stored length")
		if !ok {
			t.Fatal("Lend past the stored length: not a final answer")
		}
		data, stored, _, ok, err = tr.Lend(k, uint64(len(v)), 0)
		if !ok || err != nil || len(data) != 0 || stored != uint64(len(v)) {
			t.Fatalf("Lend at the stored length: ok %v err %v %d bytes", ok, err, len(data))
		}
		data, _, loan, ok, err = tr.Lend(k, 100, 50)
		if !ok || err != nil || !bytes.Equal(data, v[100:150]) {
			t.Fatalf("ranged Lend: ok %v err %v", ok, err)
		}
		tr.Return(loan)
		if _, _, _, ok, _ := tr.Lend(key(2), 0, 0); ok {
			t.Fatal("a miss was lent")
		}
		big := val(3, 100000) // past the 64 KiB extent: a dedicated allocation
		if err := tr.Put(key(3), big); err != nil {
			t.Fatal(err)
		}
		if _, _, _, ok, _ := tr.Lend(key(3), 0, 0); ok {
			t.Fatal("a dedicated large value was lent")
		}
		mustGet(t, tr, key(3), big)
	})
}

// TestIdenticalRePutWritesNothing: a PUT of the bytes RAM already holds
// durably (and the disk holds a value of that length) admits and flushes
// nothing; different bytes, or a key the disk lost, are written as usual.
func TestIdenticalRePutWritesNothing(t *testing.T) {
	m := newMem()
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	k, v := key(1), val(1, 30000)
	for range 3 {
		if err := tr.Put(k, v); err != nil {
			t.Fatal(err)
		}
		if err := tr.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if c := m.cacheCalls(k); c != 1 {
		t.Fatalf("3 identical PUTs wrote the backing %d times, want 1", c)
	}
	if s := tr.RAM(); s.PutsUnchanged != 2 || s.Puts != 3 {
		t.Fatalf("PutsUnchanged %d Puts %d, want 2 and 3", s.PutsUnchanged, s.Puts)
	}
	v2 := val(2, 30000) // same length, other bytes
	if err := tr.Put(k, v2); err != nil {
		t.Fatal(err)
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.get(k); !bytes.Equal(got, v2) || m.cacheCalls(k) != 2 {
		t.Fatalf("different bytes of the same length: backing writes %d, holds the new value: %v", m.cacheCalls(k), bytes.Equal(got, v2))
	}
	// The disk lost the key (its own eviction) while RAM still holds it:
	// the re-PUT must reach the disk again.
	if err := m.Remove(k); err != nil {
		t.Fatal(err)
	}
	if err := tr.Put(k, v2); err != nil {
		t.Fatal(err)
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, ok := m.get(k); !ok || !bytes.Equal(got, v2) {
		t.Fatal("a re-PUT of a key the disk lost did not reach the disk")
	}
}

// TestReceiveInPlace: a write-back PUT read straight into a reserved
// arena slot is hidden until CommitReceive, then served and flushed like
// a Put; an aborted receive leaves nothing; values the tier would not
// hold in a slot are refused to the copying path; Close waits for an open
// receive, which then fails UNAVAILABLE.
func TestReceiveInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem()
		o := smallOpts(m)
		o.Limited = func(tenant uint64) bool { return tenant == 7 }
		tr := openTier(t, o)
		k, v := key(1), val(1, 20000)
		buf, loan, ok := tr.Receive(k, uint64(len(v)))
		if !ok || len(buf) != len(v) {
			t.Fatalf("Receive: ok %v, %d bytes", ok, len(buf))
		}
		arena := tr.arena.mem
		if p := uintptr(unsafe.Pointer(&buf[0])); p < uintptr(unsafe.Pointer(&arena[0])) || p >= uintptr(unsafe.Pointer(&arena[0]))+uintptr(len(arena)) {
			t.Fatal("Receive did not hand out arena memory")
		}
		copy(buf, v)
		wantNotFound(t, tr, k, "received, not committed")
		if err := tr.CommitReceive(k, buf, loan); err != nil {
			t.Fatalf("CommitReceive: %v", err)
		}
		mustGet(t, tr, k, v)
		if err := tr.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, _ := m.get(k); !bytes.Equal(got, v) {
			t.Fatal("the received value did not reach the backing")
		}
		// Identical bytes again: nothing admitted, the reservation given back.
		buf, loan, _ = tr.Receive(k, uint64(len(v)))
		copy(buf, v)
		if err := tr.CommitReceive(k, buf, loan); err != nil {
			t.Fatal(err)
		}
		if s := tr.RAM(); s.PutsUnchanged != 1 || s.Objects != 1 {
			t.Fatalf("identical receive: %+v", s)
		}
		k2 := key(2)
		_, loan, _ = tr.Receive(k2, 5000)
		tr.AbortReceive(loan)
		wantNotFound(t, tr, k2, "aborted receive")
		checkTier(t, tr)
		checkIdle(t, tr)

		limited := key(3)
		limited.Tenant = 7
		for _, c := range []struct {
			what string
			key  wire.BlockKey
			n    uint64
		}{{"zero bytes", k2, 0}, {"larger than an extent", k2, 64<<10 + 1}, {"a quota-limited tenant", limited, 100}} {
			if _, _, ok := tr.Receive(c.key, c.n); ok {
				t.Errorf("Receive of %s was accepted", c.what)
			}
		}

		buf, loan, ok = tr.Receive(k2, 5000)
		if !ok {
			t.Fatal("Receive refused")
		}
		closed := closeWhile(t, tr, "a receive was open")
		copy(buf, val(2, 5000))
		enginetest.WantStatus(t, tr.CommitReceive(k2, buf, loan), wire.StatusUnavailable, "CommitReceive after Close began")
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}

		o.Mode = ModeWriteAround
		tr = openTier(t, o)
		defer tr.Close()
		if _, _, ok := tr.Receive(k, 100); ok {
			t.Error("Receive accepted in write-around mode")
		}
	})
}

// TestColdReadOverSlabLandsInArena: over a real slab store (O_DIRECT when
// the filesystem allows it, in t.TempDir()), a whole-value miss reads
// straight into the reserved arena slot: the tier publishes a value only
// when the backing read into that slot (no staging copy), so the value
// being resident after one backing read is the proof; the next GET is a
// RAM hit.
func TestColdReadOverSlabLandsInArena(t *testing.T) {
	backing := openSlab(t, t.TempDir(), 64<<20)
	k, v := key(1), val(1, 300000)
	if err := backing.Put(k, v); err != nil {
		t.Fatal(err)
	}
	tr := openTier(t, Options{Backing: backing, Bytes: 16 << 20, ExtentBytes: 1 << 20, LargeReserveBytes: NoLargeReserve, ReadCoalesce: true})
	defer tr.Close()
	mustGet(t, tr, k, v)
	if s := tr.RAM(); s.Objects != 1 || s.BackingReads != 1 || s.Misses != 1 {
		t.Fatalf("after the cold read: %+v", s)
	}
	mustGet(t, tr, k, v)
	if s := tr.RAM(); s.BackingReads != 1 || s.Hits != 1 {
		t.Fatalf("the warm read: %+v", s)
	}
}

// heldBacking holds every Put of one key inside the backing until open is
// closed, as a slow disk would.
type heldBacking struct {
	*memBacking
	held    wire.BlockKey
	entered chan struct{}
	open    chan struct{}
}

func (h *heldBacking) Put(k wire.BlockKey, v []byte) error {
	if k == h.held {
		h.entered <- struct{}{}
		<-h.open
	}
	return h.memBacking.Put(k, v)
}

// TestSyncWriteHoldsOnlyItsKey: a PUT stuck in its synchronous disk write
// (here a quota-limited tenant's) holds back the next PUT of its key, and
// no PUT of another key, even one on the same key stripe. The stripe was
// a mutex held through the write, so a slow disk stalled every PUT that
// hashed to it.
func TestSyncWriteHoldsOnlyItsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem()
		o := smallOpts(m)
		a := key(1)
		a.Tenant = 7
		hb := &heldBacking{memBacking: m, held: a, entered: make(chan struct{}, 1), open: make(chan struct{})}
		o.Backing = hb
		o.Limited = func(tenant uint64) bool { return tenant == 7 }
		tr := openTier(t, o)
		defer tr.Close()

		stripeOf := func(k wire.BlockKey) uint64 { return tr.keyHash(&k) % stripes }
		var b wire.BlockKey // another key of the tenant, on a's stripe
		for i := 2; b == (wire.BlockKey{}) || stripeOf(b) != stripeOf(a); i++ {
			b = key(i)
			b.Tenant = 7
		}

		first := make(chan error, 1)
		go func() { first <- tr.Put(a, val(1, 4000)) }()
		<-hb.entered
		if err := tr.Put(b, val(2, 4000)); err != nil {
			t.Fatalf("PUT of another key on the stuck write's stripe: %v", err)
		}
		mustGet(t, tr, b, val(2, 4000))

		second := make(chan error, 1)
		go func() { second <- tr.Put(a, val(3, 4000)) }()
		synctest.Wait()
		select {
		case err := <-second:
			t.Fatalf("a second PUT of the stuck key did not wait for the first (%v)", err)
		default:
		}
		close(hb.open)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-second; err != nil {
			t.Fatal(err)
		}
		mustGet(t, tr, a, val(3, 4000))
	})
}

// TestReceivesInFlightHoldAShareOfTheArena: slots reserved for PUT bodies
// still arriving (a reservation evicts at once) hold at most an eighth of
// the arena, so clients that send PUT headers and then nothing cannot
// empty the cache; a commit or an abort gives the share back.
func TestReceivesInFlightHoldAShareOfTheArena(t *testing.T) {
	tr := openTier(t, Options{Backing: newMem(), Bytes: 128 * 64 << 10, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve})
	defer tr.Close()
	const size = 32 << 10
	for i := range 200 {
		if err := tr.Put(key(i), val(uint64(i), size)); err != nil {
			t.Fatal(err)
		}
	}
	var loans []engine.Loan
	for i := 1000; len(loans) < 400; i++ {
		_, loan, ok := tr.Receive(key(i), size)
		if !ok {
			break
		}
		loans = append(loans, loan)
	}
	share := tr.ArenaBytes() / 8
	if held := uint64(len(loans)) * size; held > share || held+size <= share {
		t.Fatalf("%d bytes reserved for bodies in flight, want the largest multiple of %d within %d (an eighth of the arena)", held, size, share)
	}
	if s := tr.RAM(); s.Objects < uint64(200-len(loans)) {
		t.Fatalf("%d of 200 values left in RAM beside %d reservations", s.Objects, len(loans))
	}
	tr.AbortReceive(loans[0])
	buf, loan, ok := tr.Receive(key(5000), size)
	if !ok {
		t.Fatal("Receive refused after an abort gave its share back")
	}
	copy(buf, val(5000, size))
	if err := tr.CommitReceive(key(5000), buf, loan); err != nil {
		t.Fatal(err)
	}
	_, loan, ok = tr.Receive(key(5001), size)
	if !ok {
		t.Fatal("Receive refused after a commit gave its share back")
	}
	tr.AbortReceive(loan)
	for _, l := range loans[1:] {
		tr.AbortReceive(l)
	}
	mustGet(t, tr, key(5000), val(5000, size))
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	checkIdle(t, tr)
}
