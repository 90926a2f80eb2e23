package file

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/dfkv/dfkv/wire"
)

// entry is one published block. An entry is immutable once in the index
// except for ref and pos; a new Put of the same key publishes a new entry,
// so pointer identity tells an evictor or a reader whether the block it
// looked at is still the current one.
type entry struct {
	key  wire.BlockKey
	size uint64
	pos  int         // index in shard.ring; guarded by shard.mu
	ref  atomic.Bool // CLOCK reference bit, set by Get
}

// shard is one slice of the index: a map for lookups and a ring of the same
// entries for the CLOCK hand.
type shard struct {
	mu   sync.RWMutex
	m    map[wire.BlockKey]*entry
	ring []*entry
	hand int
	_    [64]byte // keep neighbouring shards' mutexes off one cache line
}

// index is the sharded in-memory map of published blocks.
type index struct {
	shards []shard
	cursor atomic.Uint64 // next shard the evictor visits
}

func newIndex(n int) *index {
	x := &index{shards: make([]shard, n)}
	for i := range x.shards {
		x.shards[i].m = make(map[wire.BlockKey]*entry)
	}
	return x
}

// mix64 is the splitmix64 finalizer. Object ids are SHA-256 prefixes and
// already uniform, but a caller that builds keys by hand (a test, a tool)
// should not land every key in one shard.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func keyHash(k wire.BlockKey) uint64 {
	return mix64(k.Tenant ^ mix64(binary.LittleEndian.Uint64(k.ID[:8])^binary.LittleEndian.Uint64(k.ID[8:])))
}

func (x *index) shardOf(k wire.BlockKey) *shard {
	return &x.shards[keyHash(k)%uint64(len(x.shards))]
}

// get returns the current entry of k, or nil.
func (x *index) get(k wire.BlockKey) *entry {
	sh := x.shardOf(k)
	sh.mu.RLock()
	e := sh.m[k]
	sh.mu.RUnlock()
	return e
}

// put publishes e under e.key and returns the entry it replaced, if any. A
// replacement takes over the old entry's place on the ring.
func (x *index) put(e *entry) (old *entry) {
	sh := x.shardOf(e.key)
	sh.mu.Lock()
	old = sh.m[e.key]
	if old != nil {
		e.pos = old.pos
		sh.ring[e.pos] = e
	} else {
		e.pos = len(sh.ring)
		sh.ring = append(sh.ring, e)
	}
	sh.m[e.key] = e
	sh.mu.Unlock()
	return old
}

// remove drops e if it is still the current entry of its key and reports
// whether it did.
func (x *index) remove(e *entry) bool {
	sh := x.shardOf(e.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m[e.key] != e {
		return false
	}
	delete(sh.m, e.key)
	last := len(sh.ring) - 1
	if e.pos != last {
		moved := sh.ring[last]
		sh.ring[e.pos] = moved
		moved.pos = e.pos
	}
	sh.ring[last] = nil
	sh.ring = sh.ring[:last]
	if sh.hand > len(sh.ring) {
		sh.hand = 0
	}
	return true
}

// clockScan bounds how many entries one visit of the evictor examines in a
// shard before moving on, so that the sweep stays close to one global CLOCK
// instead of exhausting one shard's unreferenced entries first.
const clockScan = 8

// pick runs the CLOCK hand of sh over at most clockScan entries (and never
// over the same entry twice): a referenced entry loses its bit and is
// skipped, the first unreferenced one is returned. With force the entry
// under the hand is returned regardless. The victim stays in the index; the
// caller removes it under the key's stripe mutex. empty reports a shard with
// nothing in it.
func (sh *shard) pick(force bool) (victim *entry, empty bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := len(sh.ring)
	if n == 0 {
		return nil, true
	}
	scan := min(clockScan, n)
	for range scan {
		if sh.hand >= n {
			sh.hand = 0
		}
		e := sh.ring[sh.hand]
		sh.hand++
		if force || !e.ref.Load() {
			return e, false
		}
		e.ref.Store(false)
	}
	return nil, false
}

// victim returns the next entry CLOCK would evict, or nil if the index is
// empty. After rounds full sweeps without a victim (readers keep setting
// bits faster than the hand clears them) it takes the entry under the hand.
func (x *index) victim() *entry {
	n := uint64(len(x.shards))
	emptyRun := uint64(0)
	// A full sweep clears up to clockScan bits per shard, so a shard of L
	// entries is clear after L/clockScan sweeps; 64 sweeps covers shards of
	// 512 entries before force kicks in, and larger shards merely lose a
	// referenced entry a little early.
	const rounds = 64
	for visits := uint64(0); ; visits++ {
		sh := &x.shards[x.cursor.Add(1)%n]
		e, empty := sh.pick(visits >= rounds*n)
		if e != nil {
			return e
		}
		if !empty {
			emptyRun = 0
			continue
		}
		if emptyRun++; emptyRun >= n {
			return nil
		}
	}
}

// each calls fn for every entry; fn must not call back into the index.
func (x *index) each(fn func(*entry)) {
	for i := range x.shards {
		sh := &x.shards[i]
		sh.mu.RLock()
		for _, e := range sh.ring {
			fn(e)
		}
		sh.mu.RUnlock()
	}
}
