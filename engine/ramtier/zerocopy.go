package ramtier

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

var _ engine.LeaseLender = (*Tier)(nil)

// Lend implements engine.Lender: a value resident in an arena slot is lent
// in place under a transfer-pin, so the server writes it to the socket
// from the arena with no copy (memcached serves from its slabs the same
// way). The pin keeps the slot from being evicted or reused until Return;
// Close waits for every loan. Dedicated large values and misses are not
// lent (ok false): Get copies the former and fills RAM with the latter.
func (t *Tier) Lend(key wire.BlockKey, offset, length uint64) ([]byte, uint64, engine.Loan, bool, error) {
	return t.lend(key, offset, length, true, false)
}

// LendLease implements engine.LeaseLender: Lend for a loan a client will
// hold as a lease, for up to the lease TTL. It leaves the last 4,096 of a
// slot's pins to reads (ok false: the caller serves the bytes another
// way), so leases of one hot key, however many, never make its GETs
// busy. hit says whether it counts as a GET answered from RAM.
func (t *Tier) LendLease(key wire.BlockKey, offset, length uint64, hit bool) ([]byte, uint64, engine.Loan, bool, error) {
	return t.lend(key, offset, length, hit, true)
}

// lend is Lend; hit says whether it counts as a GET answered from RAM (a
// pin does not); held says the loan may be held past one send (a lease or
// a pin), and so stays clear of the pins kept for reads.
func (t *Tier) lend(key wire.BlockKey, offset, length uint64, hit, held bool) ([]byte, uint64, engine.Loan, bool, error) {
	if err := t.enter(); err != nil {
		return nil, 0, engine.Loan{}, false, nil // Get reports the closed tier
	}
	defer t.exit()
	si := t.shardIndex(&key)
	s := t.shards[si]
	s.mu.Lock()
	if s.removing[key] != nil {
		s.mu.Unlock()
		return nil, 0, engine.Loan{}, false, nil
	}
	acquire := s.alloc.Acquire
	if held {
		acquire = s.alloc.AcquireLease
	}
	r, n, ok, err := acquire(&key)
	var slot []byte
	if ok && err == nil {
		slot = t.slotBytes(s, r, uint64(n)) // the allocator is read under its lock
	}
	s.mu.Unlock()
	if !ok || err != nil {
		return nil, 0, engine.Loan{}, false, nil
	}
	stored := uint64(n)
	count, inRange := wire.RangeLen(stored, offset, length)
	if !inRange {
		t.release(s, r)
		return nil, stored, engine.Loan{}, true, fmt.Errorf("ram tier: range %s: offset %d past the stored length %d: %w", key, offset, stored, wire.StatusInvalid)
	}
	if hit {
		t.hits.Add(1)
	}
	if count == 0 {
		t.release(s, r)
		return nil, stored, engine.Loan{}, true, nil
	}
	t.loans.Add(1)
	return slot[offset : offset+count], stored, engine.Loan{A: uint64(si), B: uint64(r)}, true, nil
}

// Return implements engine.Lender: the transfer-pin of a loan drops.
func (t *Tier) Return(loan engine.Loan) {
	t.release(t.shards[loan.A], slab.SlotRef(loan.B))
	t.loans.Done()
}

var _ engine.Receiver = (*Tier)(nil)

// Receive implements engine.Receiver: for a write-back PUT that will live
// in an arena slot, it reserves the slot up front (RESERVED: hidden and
// pinned) so the server reads the payload from the socket straight into
// it, and CommitReceive then admits it without the copy Put makes.
// Values the tier would not admit to an arena slot (write-around, a
// quota-limited tenant, larger than an extent, past the dirty watermark,
// no free slot) get ok false: the caller reads into its own buffer and
// calls Put, which gives the exact answer.
//
// The slots reserved for bodies still arriving hold at most
// 1/receiveShare of the arena: a reservation evicts at once, before the
// body has come, and a client that sends PUT headers and then nothing
// must not be able to empty the cache for as long as its body deadline.
// Past the share a PUT takes the copying path, whose buffers the server
// bounds and cuts from stalled clients.
func (t *Tier) Receive(key wire.BlockKey, n uint64) ([]byte, engine.Loan, bool) {
	if !t.writeBack || n == 0 || n > t.extent || n > t.maxValue || n >= 1<<32 || (t.limited != nil && t.limited(key.Tenant)) {
		return nil, engine.Loan{}, false
	}
	if t.dirtyLimit > 0 && t.dirtyBytes.Load()+n > t.dirtyLimit {
		return nil, engine.Loan{}, false
	}
	if t.receiving.Add(int64(n)) > int64(t.arenaBytes/receiveShare) {
		t.receiving.Add(-int64(n))
		return nil, engine.Loan{}, false
	}
	if err := t.enter(); err != nil {
		t.receiving.Add(-int64(n))
		return nil, engine.Loan{}, false
	}
	defer t.exit()
	si := t.shardIndex(&key)
	s := t.shards[si]
	s.mu.Lock()
	r, err := s.alloc.Reserve(n)
	var buf []byte
	if err == nil {
		t.evictions.Add(uint64(len(s.alloc.Victims())))
		buf = t.slotBytes(s, r, n)
	}
	s.mu.Unlock()
	if err != nil {
		t.receiving.Add(-int64(n))
		return nil, engine.Loan{}, false
	}
	t.loans.Add(1)
	return buf, engine.Loan{A: uint64(si) | n<<32, B: uint64(r)}, true
}

// receiveShare: the slots reserved for bodies still arriving hold at most
// 1/receiveShare of the arena (Receive).
const receiveShare = 8

// received ends a Receive loan's share of t.receiving and returns the
// index of the shard the loan's slot belongs to (a receive loan carries
// the shard in the low 32 bits of A, the reserved bytes in the high).
func (t *Tier) received(loan engine.Loan) uint64 {
	t.receiving.Add(-int64(loan.A >> 32))
	return loan.A & (1<<32 - 1)
}

// CommitReceive implements engine.Receiver: buf, the slot Receive
// reserved, now holds the value; it is admitted as Put would admit it
// (join, supersede, watermark, fences), without copying.
func (t *Tier) CommitReceive(key wire.BlockKey, buf []byte, loan engine.Loan) error {
	if err := t.enter(); err != nil {
		t.AbortReceive(loan)
		return err
	}
	defer t.exit()
	return t.answer(t.commitReceived(key, buf, loan))
}

// CommitReceiveBatch implements engine.Receiver: the received values are
// admitted in order, and with disk acknowledgement their flushes are
// waited for together (as PutBatch does).
func (t *Tier) CommitReceiveBatch(keys []wire.BlockKey, bufs [][]byte, loans []engine.Loan, errs []error) {
	if err := t.enter(); err != nil {
		for i := range keys {
			t.AbortReceive(loans[i])
			errs[i] = err
		}
		return
	}
	defer t.exit()
	t.admitBatch(errs[:len(keys)], func(i int) (*entry, error) { return t.commitReceived(keys[i], bufs[i], loans[i]) })
}

// commitReceived admits one received value and ends its loan. The caller
// is inside enter/exit.
func (t *Tier) commitReceived(key wire.BlockKey, buf []byte, loan engine.Loan) (*entry, error) {
	defer t.loans.Done()
	r := slab.SlotRef(loan.B)
	si := t.received(loan)
	if int(si) != t.shardIndex(&key) {
		// The slot belongs to another key's shard: admitting it here
		// would corrupt that shard's allocator.
		t.abortSlot(t.shards[si], r)
		return nil, fmt.Errorf("ram tier: commit of %s with a slot received for another key: %w", key, wire.StatusInvalid)
	}
	return t.cache(key, buf, &r)
}

// AbortReceive implements engine.Receiver: the payload never arrived, the
// reserved slot is given back.
func (t *Tier) AbortReceive(loan engine.Loan) {
	t.abortSlot(t.shards[t.received(loan)], slab.SlotRef(loan.B))
	t.loans.Done()
}

// ArenaFile is the memory file of a shared arena (Options.SharedArena),
// or nil. The tier owns it: Close closes it.
func (t *Tier) ArenaFile() *os.File { return t.arena.file }

// ArenaBytes is the size of the arena.
func (t *Tier) ArenaBytes() uint64 { return t.arenaBytes }

// ArenaOffset reports where b, bytes Lend returned, begins in the arena;
// false for bytes outside it (a dedicated large value).
func (t *Tier) ArenaOffset(b []byte) (uint64, bool) {
	if len(b) == 0 || len(t.arena.mem) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(t.arena.mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p+uintptr(len(b)) > base+uintptr(len(t.arena.mem)) {
		return 0, false
	}
	return uint64(p - base), true
}

var _ engine.Pinner = (*Tier)(nil)

// diskPin marks a Loan of Pin that the backing holds (bit 63 of A: a
// shard index never reaches it).
const diskPin = 1 << 63

// Pin implements engine.Pinner: a value resident in an arena slot is held
// there (a transfer-pin, as Lend takes); one only on the backing is held
// there when the backing pins. Dedicated large values are not pinned.
func (t *Tier) Pin(key wire.BlockKey) (engine.Loan, bool) {
	if _, _, loan, ok, err := t.lend(key, 0, 0, false, true); ok {
		if err != nil {
			return engine.Loan{}, false
		}
		return loan, true
	}
	p, ok := t.backing.(engine.Pinner)
	if !ok {
		return engine.Loan{}, false
	}
	l, ok := p.Pin(key)
	if !ok || l.A&diskPin != 0 {
		if ok {
			p.Unpin(l)
		}
		return engine.Loan{}, false
	}
	return engine.Loan{A: l.A | diskPin, B: l.B}, true
}

// Unpin implements engine.Pinner.
func (t *Tier) Unpin(l engine.Loan) {
	if l.A&diskPin != 0 {
		t.backing.(engine.Pinner).Unpin(engine.Loan{A: l.A &^ diskPin, B: l.B})
		return
	}
	t.Return(l)
}

// ArenaMem is the arena's memory, one contiguous mapping with a stable
// address for the life of the tier, so a transport can register it once
// (RDMA). The tier owns it: the caller only lets peers read it, and
// stops them (deregisters) before Close.
func (t *Tier) ArenaMem() []byte { return t.arena.mem }
