package ramtier

import (
	"hash/maphash"
	"sync"

	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

// shard is one metadata lock shard: a contiguous run of the arena's
// extents, its own slab allocator over them, and the lifecycle maps of the
// keys that hash to it. Keys of different shards never share a lock on the
// PUT/GET path, so readers of hot keys on one shard do not queue behind
// admissions on another.
//
// mu guards every field below it. No backing I/O and no payload copy
// happens under it. Lock order: stripe → shard.mu → large.mu → queue.mu.
type shard struct {
	first uint64 // arena byte offset of the shard's first extent

	mu       sync.Mutex
	alloc    *slab.Allocator
	dirty    map[wire.BlockKey]*entry // latest unflushed generation per key
	active   map[wire.BlockKey]*entry // generation whose backing write is in flight
	fills    map[wire.BlockKey]*fill
	removing map[wire.BlockKey]*removal
}

func newShard(lat *slab.Lattice, first uint64, extents uint32) (*shard, error) {
	a, err := slab.NewAllocator(lat, extents)
	if err != nil {
		return nil, err
	}
	return &shard{
		first:    first,
		alloc:    a,
		dirty:    map[wire.BlockKey]*entry{},
		active:   map[wire.BlockKey]*entry{},
		fills:    map[wire.BlockKey]*fill{},
		removing: map[wire.BlockKey]*removal{},
	}, nil
}

// shardCount is the number of shards for extents arena extents when
// asked for want: halved while a shard would hold fewer than
// minShardExtents extents, never below one.
func shardCount(want int, extents uint64) int {
	n := want
	for n > 1 && extents/uint64(n) < minShardExtents {
		n /= 2
	}
	return max(n, 1)
}

// splitExtents gives shard i of n its share of extents: the first
// extents%n shards get one more.
func splitExtents(extents uint64, n, i int) uint64 {
	share := extents / uint64(n)
	if uint64(i) < extents%uint64(n) {
		share++
	}
	return share
}

// keyHash spreads a key over stripes and shards. The hash seed is per process,
// so a client cannot aim its keys at one shard of every node.
func (t *Tier) keyHash(key *wire.BlockKey) uint64 {
	return maphash.Bytes(t.seed, key.ID[:]) ^ key.Tenant*0x9e3779b97f4a7c15
}

// locate is a key's foreground PUT stripe (one of 1,024 fixed stripes, so
// no per-request allocation) and its shard, from one hash of the key.
func (t *Tier) locate(key *wire.BlockKey) (*keyTurns, *shard) {
	h := t.keyHash(key)
	return &t.turns[h%stripes], t.shards[t.shardAt(h)]
}

func (t *Tier) shardOf(key *wire.BlockKey) *shard { return t.shards[t.shardIndex(key)] }

func (t *Tier) shardIndex(key *wire.BlockKey) int { return t.shardAt(t.keyHash(key)) }

// shardAt is the shard of a key hash: the bits above the stripe's.
func (t *Tier) shardAt(h uint64) int { return int((h / stripes) % uint64(len(t.shards))) }

// slotBytes is the arena memory of slot r of shard s holding n bytes,
// with capacity to the end of the slot (a multiple of 4 KiB, so O_DIRECT
// can read into it). The caller holds a pin on r.
func (t *Tier) slotBytes(s *shard, r slab.SlotRef, n uint64) []byte {
	e, _ := s.alloc.Split(r)
	base := s.first + uint64(e)*t.extent + s.alloc.Offset(r)
	size := s.alloc.Lattice().Size(s.alloc.Class(r))
	return t.arena.mem[base : base+n : base+size]
}

// release drops one pin of slot r of shard s (a read's or a loan's).
func (t *Tier) release(s *shard, r slab.SlotRef) {
	s.mu.Lock()
	s.alloc.Release(r)
	s.mu.Unlock()
}

// abortSlot gives back a slot still RESERVED by its writer.
func (t *Tier) abortSlot(s *shard, r slab.SlotRef) {
	s.mu.Lock()
	s.alloc.Abort(r)
	s.alloc.Release(r)
	s.mu.Unlock()
}

// largeStore holds the values larger than one extent: dedicated mappings
// charged to one budget shared by every shard. Its lock nests inside a
// shard's (a shard evicting an idle large value of another shard's key
// touches only this store: an idle large value has no lifecycle state in
// its shard).
type largeStore struct {
	mu     sync.Mutex
	m      map[wire.BlockKey]*largeBuf
	used   uint64 // page-rounded bytes mapped
	budget uint64
}

// charge reserves n bytes of the budget, evicting idle durable large
// values when needed; it reports how many it evicted and whether the
// bytes are reserved. The caller holds l.mu.
func (l *largeStore) charge(n uint64) (evicted int, ok bool) {
	if n > l.budget {
		return 0, false
	}
	for l.used+n > l.budget {
		var victim wire.BlockKey
		found := false
		for k, lg := range l.m {
			if lg.refs == 1 && !lg.dirty {
				victim, found = k, true
				break
			}
		}
		if !found {
			return evicted, false
		}
		l.unref(l.m[victim])
		delete(l.m, victim)
		evicted++
	}
	l.used += n
	return evicted, true
}

// unref drops one reference to lg, unmapping it with the last one. The
// caller holds l.mu. The munmap runs under the lock; large values
// are rare and it is one syscall, not I/O.
func (l *largeStore) unref(lg *largeBuf) error {
	lg.refs--
	if lg.refs > 0 {
		return nil
	}
	l.used -= uint64(len(lg.mem))
	err := unmap(lg.mem)
	lg.mem = nil
	return err
}
