package slab

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

var modelSeed = flag.Uint64("slab.seed", 0, "seed of TestAgainstModel (0: from the clock)")

// TestAgainstModel replays a random sequence of PUT, overwrite, REMOVE,
// partial GET and graceful restart against the store and a map, and
// compares after every step. The store is big enough never to evict, so
// the map is the exact expected content. The random seed is printed for replay.
func TestAgainstModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -slab.seed=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	opts := Options{Dir: dir, CapacityBytes: 512 << 20, ExtentBytes: 4 << 20, DirectIO: r.IntN(2) == 0}
	acct := newRecorder()
	opts.Accounting = acct
	s := openT(t, opts)
	defer func() { mustClose(t, s) }()
	model := map[wire.BlockKey][]byte{}
	const nkeys = 80
	steps := 1500
	if testing.Short() {
		steps = 300
	}
	for step := range steps {
		k := enginetest.Key(r.IntN(nkeys))
		switch x := r.IntN(100); {
		case x < 40:
			n := 1 + r.IntN(200<<10)
			if r.IntN(4) == 0 {
				n = 4096 * (1 + r.IntN(32))
			}
			v := enginetest.Value(r.Uint64(), n)
			mustCache(t, s, k, v)
			model[k] = v
		case x < 55:
			err := s.Remove(k)
			if _, ok := model[k]; ok {
				if err != nil {
					t.Fatalf("seed %d step %d: Remove of a present key: %v", seed, step, err)
				}
				delete(model, k)
			} else {
				wantStatus(t, err, wire.StatusNotFound, "Remove of an absent key")
			}
		case x < 97:
			v, ok := model[k]
			if !ok {
				_, err := s.Exist(k)
				wantStatus(t, err, wire.StatusNotFound, "Exist of an absent key")
				continue
			}
			off := uint64(r.IntN(len(v) + 1))
			length := uint64(r.IntN(len(v) + 1))
			enginetest.CheckRange(t, s, k, v, off, length)
		default:
			mustClose(t, s)
			acct = newRecorder()
			opts.Accounting = acct
			s = openT(t, opts)
		}
		if step%100 == 0 || step == steps-1 {
			var used uint64
			byTenant := map[uint64]int64{}
			for k, v := range model {
				used += uint64(len(v))
				byTenant[k.Tenant] += int64(len(v))
			}
			st := s.Stats()
			if st.Objects != uint64(len(model)) || st.UsedBytes != used || st.Evictions != 0 {
				t.Fatalf("seed %d step %d: Stats %+v, model %d objects %d bytes", seed, step, st, len(model), used)
			}
			got := acct.snapshot()
			for tn, n := range byTenant {
				if got[tn] != n {
					t.Fatalf("seed %d step %d: accounting %v, model %v", seed, step, got, byTenant)
				}
			}
			checkAlloc(t, s)
		}
	}
	for k, v := range model {
		got, err := get(t, s, k)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("seed %d: final %s: err %v", seed, k, err)
		}
	}
}
