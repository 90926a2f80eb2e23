package enginetest

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dfkv/dfkv/engine"
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
	c := newConcurrentRun(t, e)
	c.worker(1, c.put)
	c.worker(2, c.put)
	c.worker(3, c.putOrRemove)
	c.worker(4, c.get)
	c.worker(5, c.get)
	c.wg.Wait()
	if t.Failed() {
		return
	}
	c.checkQuiescent()
}

// concurrentKeys is the number of keys testConcurrent's workers share.
const concurrentKeys = 6

// concurrentRun is the state testConcurrent's workers share: the engine,
// its keys, and every generation ever offered to Put for each key.
type concurrentRun struct {
	t       *testing.T
	e       engine.StoreEngine
	keys    [concurrentKeys]wire.BlockKey
	ops     int // per worker
	nextGen atomic.Uint64
	wg      sync.WaitGroup

	mu      sync.Mutex
	written [concurrentKeys]map[uint64]bool // gens ever offered to Put
}

func newConcurrentRun(t *testing.T, e engine.StoreEngine) *concurrentRun {
	c := &concurrentRun{t: t, e: e, ops: 150}
	if testing.Short() {
		c.ops = 40
	}
	for i := range c.keys {
		c.keys[i] = Key(400 + i)
		c.written[i] = map[uint64]bool{}
	}
	return c
}

// worker runs fn c.ops times on random keys in a goroutine of its own,
// stopping early once the test failed.
func (c *concurrentRun) worker(seed uint64, fn func(r *rand.Rand, k int)) {
	c.wg.Go(func() {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		for range c.ops {
			if c.t.Failed() {
				return
			}
			fn(r, r.IntN(concurrentKeys))
		}
	})
}

func (c *concurrentRun) wasWritten(k int, gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written[k][gen]
}

// put writes a new generation of key k, noting it first, so a reader can
// never see a generation not yet noted.
func (c *concurrentRun) put(_ *rand.Rand, k int) {
	gen := c.nextGen.Add(1)
	c.mu.Lock()
	c.written[k][gen] = true
	c.mu.Unlock()
	if err := c.e.Put(c.keys[k], stamped(k, gen)); err != nil {
		c.t.Errorf("Put key %d gen %d: %v", k, gen, err)
	}
}

// putOrRemove removes key k one time in four and puts it otherwise.
func (c *concurrentRun) putOrRemove(r *rand.Rand, k int) {
	if r.IntN(4) != 0 {
		c.put(r, k)
		return
	}
	if err := c.e.Remove(c.keys[k]); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
		c.t.Errorf("Remove key %d: %v", k, err)
	}
}

// get reads key k whole or a random range of it and checks what it got,
// then checks that Exist answers.
func (c *concurrentRun) get(r *rand.Rand, k int) {
	a := NewAlloc(nil)
	defer a.Release()
	var off, length uint64
	if r.IntN(2) == 1 {
		off = uint64(r.IntN(9000)) &^ 7
		length = uint64(r.IntN(3)) * uint64(r.IntN(20000))
	}
	data, stored, err := c.e.Get(c.keys[k], off, length, a)
	c.checkGet(k, off, length, data, stored, err)
	if _, err := c.e.Exist(c.keys[k]); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
		c.t.Errorf("key %d: Exist: %v", k, err)
	}
}

// checkGet checks the result of Get(key k, off, length) against the range
// contract and the values ever written.
func (c *concurrentRun) checkGet(k int, off, length uint64, data []byte, stored uint64, err error) {
	t := c.t
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
		c.check(k, off, data, stored)
	case wire.StatusNotFound:
	case wire.StatusInvalid:
		if off == 0 {
			t.Errorf("key %d: Get at offset 0: %v", k, err)
		}
	default:
		t.Errorf("key %d: Get: %v", k, err)
	}
}

// check verifies data read at off from key k with the given stored length.
func (c *concurrentRun) check(k int, off uint64, data []byte, stored uint64) {
	t := c.t
	t.Helper()
	gen, kk, ok := genOf(data)
	if !ok {
		// Fewer than 8 bytes: only the stored length can be checked.
		return
	}
	if kk != k || !c.wasWritten(k, gen) {
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

// checkQuiescent checks, with no worker left, that the index and the data
// agree for every key, and that Stats counts what Exist finds.
func (c *concurrentRun) checkQuiescent() {
	t := c.t
	var objects, used uint64
	for k, key := range c.keys {
		n, lerr := c.e.Exist(key)
		a := NewAlloc(nil)
		data, stored, rerr := c.e.Get(key, 0, 0, a)
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
		c.check(k, 0, data, stored)
		a.Release()
		objects++
		used += n
	}
	if st := c.e.Stats(); st.Objects != objects || st.UsedBytes != used {
		t.Fatalf("Stats Objects %d UsedBytes %d, want %d and %d", st.Objects, st.UsedBytes, objects, used)
	}
}
