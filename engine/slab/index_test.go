package slab

import (
	"math/rand/v2"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// TestIndexAgainstMap runs random put/del/get against the open-addressing
// index and a Go map; they must agree after every step (this covers
// backward-shift deletion and growth).
func TestIndexAgainstMap(t *testing.T) {
	seed := uint64(7)
	r := rand.New(rand.NewPCG(seed, 0))
	keys := make([]wire.BlockKey, 5000)
	for i := range keys {
		keys[i].Tenant = uint64(r.IntN(3))
		// Groups of four keys share their first eight id bytes (so their
		// hash): long probe runs for deletion to shift through.
		keys[i].ID[0] = byte(i / 4)
		keys[i].ID[1] = byte(i / 4 >> 8)
		keys[i].ID[8] = byte(i)
		keys[i].ID[9] = byte(i >> 8)
	}
	// slot i holds keys[i] for the index's key lookups
	x := newIndex(func(id uint32) *wire.BlockKey { return &keys[id] })
	m := map[wire.BlockKey]uint32{}
	for step := range 200000 {
		i := uint32(r.IntN(len(keys)))
		k := &keys[i]
		switch r.IntN(3) {
		case 0:
			_, had := x.put(k, i)
			_, mhad := m[*k]
			if had != mhad {
				t.Fatalf("seed %d step %d: put replaced=%v, map says %v", seed, step, had, mhad)
			}
			m[*k] = i
		case 1:
			id, ok := x.del(k)
			mid, mok := m[*k]
			if ok != mok || id != mid {
				t.Fatalf("seed %d step %d: del = %d,%v, map %d,%v", seed, step, id, ok, mid, mok)
			}
			delete(m, *k)
		default:
			id, ok := x.get(k)
			mid, mok := m[*k]
			if ok != mok || id != mid {
				t.Fatalf("seed %d step %d: get = %d,%v, map %d,%v", seed, step, id, ok, mid, mok)
			}
		}
		if x.n != len(m) {
			t.Fatalf("seed %d step %d: %d entries, map %d", seed, step, x.n, len(m))
		}
	}
	for k, id := range m {
		if got, ok := x.get(&k); !ok || got != id {
			t.Fatalf("final: get(%v) = %d,%v want %d", k, got, ok, id)
		}
	}
}
