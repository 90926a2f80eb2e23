package enginetest

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// stamped returns generation gen of key index k: a value whose every 8-byte
// word is gen<<32 | k<<24 | word index, so any read from an 8-aligned
// offset names the one write it came from, and a torn value (two writes
// mixed) shows up as two generations. Its size depends on (k, gen) and is
// rarely aligned.
func stamped(k int, gen uint64) []byte {
	n := 1 + int((gen*2654435761+uint64(k)*40503)%70001)
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b)/8; i++ {
		binary.LittleEndian.PutUint64(b[8*i:], gen<<32|uint64(k)<<24|uint64(i))
	}
	return b[:n:n]
}

// genOf decodes the generation from a word read at an 8-aligned offset.
func genOf(data []byte) (gen uint64, k int, ok bool) {
	if len(data) < 8 {
		return 0, 0, false
	}
	w := binary.LittleEndian.Uint64(data)
	return w >> 32, int(w >> 24 & 0xff), true
}

// testConcurrent runs writers, readers and a remover on a few shared keys.
// Every read must be byte-exact against one value ever written for that key
// (never a mix of two), and afterwards Exist and Get must agree.
func testConcurrent(t *testing.T, open Opener) {
	e, _ := openNew(t, open, bigCapacity)
	const nkeys = 6
	opsPerWorker := 150
	if testing.Short() {
		opsPerWorker = 40
	}
	keys := make([]wire.BlockKey, nkeys)
	for i := range keys {
		keys[i] = Key(400 + i)
	}
	var (
		nextGen atomic.Uint64
		mu      sync.Mutex
		written = make([]map[uint64]bool, nkeys) // gens ever offered to Put
	)
	for i := range written {
		written[i] = map[uint64]bool{}
	}
	wasWritten := func(k int, gen uint64) bool {
		mu.Lock()
		defer mu.Unlock()
		return written[k][gen]
	}
	// check verifies data read at off from key k with the given stored length.
	check := func(t *testing.T, k int, off uint64, data []byte, stored uint64) {
		t.Helper()
		if len(data) == 0 {
			return
		}
		gen, kk, ok := genOf(data)
		if !ok {
			// Fewer than 8 bytes: only the stored length can be checked.
			return
		}
		if kk != k || !wasWritten(k, gen) {
			t.Errorf("key %d off %d: read a word of key %d generation %d that was never written for it", k, off, kk, gen)
			return
		}
		want := stamped(k, gen)
		if stored != uint64(len(want)) {
			t.Errorf("key %d gen %d: stored length %d, want %d (length and bytes from different writes)", k, gen, stored, len(want))
			return
		}
		if !equal(data, want[off:off+uint64(len(data))]) {
			t.Errorf("key %d gen %d off %d: %s", k, gen, off, diff(data, want[off:off+uint64(len(data))]))
		}
	}

	var wg sync.WaitGroup
	worker := func(seed uint64, fn func(r *rand.Rand, k int)) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, 0x5eed))
			for range opsPerWorker {
				if t.Failed() {
					return
				}
				fn(r, r.IntN(nkeys))
			}
		})
	}
	put := func(r *rand.Rand, k int) {
		gen := nextGen.Add(1)
		mu.Lock()
		written[k][gen] = true
		mu.Unlock()
		if err := e.Put(keys[k], stamped(k, gen)); err != nil {
			t.Errorf("Put key %d gen %d: %v", k, gen, err)
		}
	}
	get := func(r *rand.Rand, k int) {
		a := NewAlloc(nil)
		defer a.Release()
		var off, length uint64
		if r.IntN(2) == 1 {
			off = uint64(r.IntN(9000)) &^ 7
			length = uint64(r.IntN(3)) * uint64(r.IntN(20000))
		}
		data, stored, err := e.Get(keys[k], off, length, a)
		switch wire.StatusOf(err) {
		case wire.StatusOK:
			if length != 0 && uint64(len(data)) > length || off+uint64(len(data)) > stored {
				t.Errorf("key %d: Get(%d, %d) returned %d bytes of %d stored", k, off, length, len(data), stored)
				return
			}
			if length == 0 && off+uint64(len(data)) != stored {
				t.Errorf("key %d: Get(%d, 0) returned %d bytes of %d stored, want the remainder", k, off, len(data), stored)
				return
			}
			check(t, k, off, data, stored)
		case wire.StatusNotFound:
		case wire.StatusInvalid:
			if off == 0 {
				t.Errorf("key %d: Get at offset 0: %v", k, err)
			}
		default:
			t.Errorf("key %d: Get: %v", k, err)
		}
		if _, err := e.Exist(keys[k]); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
			t.Errorf("key %d: Exist: %v", k, err)
		}
	}
	remove := func(r *rand.Rand, k int) {
		if err := e.Remove(keys[k]); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
			t.Errorf("Remove key %d: %v", k, err)
		}
	}
	worker(1, put)
	worker(2, put)
	worker(3, func(r *rand.Rand, k int) {
		if r.IntN(4) == 0 {
			remove(r, k)
		} else {
			put(r, k)
		}
	})
	worker(4, get)
	worker(5, get)
	wg.Wait()
	if t.Failed() {
		return
	}

	// Quiescent: the index and the data agree for every key.
	var objects, used uint64
	for k, key := range keys {
		n, lerr := e.Exist(key)
		a := NewAlloc(nil)
		data, stored, rerr := e.Get(key, 0, 0, a)
		if wire.StatusOf(lerr) == wire.StatusNotFound {
			WantStatus(t, rerr, wire.StatusNotFound, "Get of a key Exist does not find")
			a.Release()
			continue
		}
		if lerr != nil || rerr != nil {
			t.Fatalf("key %d: Exist %v, Get %v", k, lerr, rerr)
		}
		if n != stored || uint64(len(data)) != stored {
			t.Fatalf("key %d: Exist %d, Get stored %d with %d bytes", k, n, stored, len(data))
		}
		check(t, k, 0, data, stored)
		a.Release()
		objects++
		used += n
	}
	if st := e.Stats(); st.Objects != objects || st.UsedBytes != used {
		t.Fatalf("Stats Objects %d UsedBytes %d, want %d and %d", st.Objects, st.UsedBytes, objects, used)
	}
}
