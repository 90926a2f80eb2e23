package ramtier

import (
	"fmt"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

var _ engine.Lender = (*Tier)(nil)

// Lend implements engine.Lender: a value resident in an arena slot is lent
// in place under a transfer-pin, so the server writes it to the socket
// from the arena with no copy (memcached serves from its slabs the same
// way). The pin keeps the slot from being evicted or reused until Return;
// Close waits for every loan. Dedicated large values and misses are not
// lent (ok false): Range copies the former and fills RAM with the latter.
func (t *Tier) Lend(key wire.BlockKey, offset, length uint64) ([]byte, uint64, engine.Loan, bool, error) {
	if err := t.enter(); err != nil {
		return nil, 0, engine.Loan{}, false, nil // Range reports the closed tier
	}
	defer t.exit()
	si := t.shardIndex(&key)
	s := t.shards[si]
	s.mu.Lock()
	if s.removing[key] != nil {
		s.mu.Unlock()
		return nil, 0, engine.Loan{}, false, nil
	}
	r, n, ok, err := s.alloc.Acquire(&key)
	s.mu.Unlock()
	if !ok || err != nil {
		return nil, 0, engine.Loan{}, false, nil
	}
	stored := uint64(n)
	if offset > stored {
		t.release(s, r)
		return nil, stored, engine.Loan{}, true, fmt.Errorf("ram tier: range %s: offset %d past the stored length %d: %w", key, offset, stored, wire.StatusInvalid)
	}
	t.hits.Add(1)
	count := stored - offset
	if length != 0 && length < count {
		count = length
	}
	if count == 0 {
		t.release(s, r)
		return nil, stored, engine.Loan{}, true, nil
	}
	t.loans.Add(1)
	data := t.slotBytes(s, r, stored)[offset : offset+count]
	return data, stored, engine.Loan{A: uint64(si), B: uint64(r)}, true, nil
}

// Return implements engine.Lender: the transfer-pin of a loan drops.
func (t *Tier) Return(loan engine.Loan) {
	t.release(t.shards[loan.A], slab.SlotRef(loan.B))
	t.loans.Done()
}

func (t *Tier) release(s *shard, r slab.SlotRef) {
	s.mu.Lock()
	s.alloc.Release(r)
	s.mu.Unlock()
}
