package slab

import (
	"encoding/binary"
	"math/bits"

	"github.com/dfkv/dfkv/wire"
)

// index is the key→slot map: an open-addressing (linear probing) table of
// slot ids. It stores no keys: an entry is a slot id + 1 (0 = empty), and a
// probe compares against the key held in that slot's slotMeta. The key of a
// live value is therefore owned exactly once, by its slot, and eviction
// (which starts from a slot) can find and delete the map entry without a
// second copy of the key. A Go map[wire.BlockKey]slotRef cannot do that: it
// would need the key in the slot too. 4 bytes per bucket, kept at most 3/4
// full, so 5.3–10.7 bytes per live value.
//
// It is not safe for concurrent use; the Allocator's caller serialises.
type index struct {
	tab  []uint32
	mask uint64
	n    int
	key  func(id uint32) *wire.BlockKey // the key held by slot id
}

const minIndexBuckets = 1024

func newIndex(key func(uint32) *wire.BlockKey) *index {
	return &index{tab: make([]uint32, minIndexBuckets), mask: minIndexBuckets - 1, key: key}
}

// hashKey mixes the tenant into the object id's first word and runs one
// multiply-xorshift round. Real ids are SHA-256 prefixes and would do as
// they are, but linear probing punishes any structure in the low bits
// (test keys, a buggy client) with merged probe runs, and the round costs
// about a nanosecond.
func hashKey(k *wire.BlockKey) uint64 {
	h := binary.LittleEndian.Uint64(k.ID[:8]) ^ bits.RotateLeft64(k.Tenant, 32)
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>32
}

// get returns the slot id holding k.
func (x *index) get(k *wire.BlockKey) (uint32, bool) {
	for i := hashKey(k) & x.mask; ; i = (i + 1) & x.mask {
		e := x.tab[i]
		if e == 0 {
			return 0, false
		}
		if *x.key(e - 1) == *k {
			return e - 1, true
		}
	}
}

// put maps k (already stored in slot id) to id and returns the slot it
// replaced, if any.
func (x *index) put(k *wire.BlockKey, id uint32) (old uint32, replaced bool) {
	if (x.n+1)*4 > len(x.tab)*3 {
		x.grow()
	}
	for i := hashKey(k) & x.mask; ; i = (i + 1) & x.mask {
		e := x.tab[i]
		if e == 0 {
			x.tab[i] = id + 1
			x.n++
			return 0, false
		}
		if *x.key(e - 1) == *k {
			x.tab[i] = id + 1
			return e - 1, true
		}
	}
}

// del removes k and returns the slot it mapped to.
func (x *index) del(k *wire.BlockKey) (uint32, bool) {
	i := hashKey(k) & x.mask
	for ; ; i = (i + 1) & x.mask {
		e := x.tab[i]
		if e == 0 {
			return 0, false
		}
		if *x.key(e - 1) == *k {
			break
		}
	}
	id := x.tab[i] - 1
	x.n--
	// Backward-shift deletion: move later members of the probe run into the
	// hole when their home position allows it, so no tombstones are left.
	j := i
	for {
		j = (j + 1) & x.mask
		e := x.tab[j]
		if e == 0 {
			break
		}
		home := hashKey(x.key(e-1)) & x.mask
		// e may move to i iff home is not in the cyclic range (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.tab[i] = e
			i = j
		}
	}
	x.tab[i] = 0
	return id, true
}

func (x *index) grow() { x.rehash(2 * len(x.tab)) }

func (x *index) rehash(size int) {
	old := x.tab
	x.tab = make([]uint32, size)
	x.mask = uint64(len(x.tab) - 1)
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := hashKey(x.key(e-1)) & x.mask
		for x.tab[i] != 0 {
			i = (i + 1) & x.mask
		}
		x.tab[i] = e
	}
}

// reserve sizes the table for n entries at once (rebuild), so a restart
// does not rehash log2(n) times.
func (x *index) reserve(n int) {
	want := minIndexBuckets
	for n*4 > want*3 {
		want *= 2
	}
	if want > len(x.tab) {
		x.rehash(want)
	}
}
