package ramtier

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

// gen returns generation g of key index k: every 8-byte word is
// g<<32 | k<<24 | word, so a read names the write it came from and a torn
// or misplaced value shows. Sizes span arena slots, the dedicated budget
// (past the 64 KiB extent) and the bypass (past the reserve).
func gen(k int, g uint64) []byte {
	sizes := [...]int{1, 700, 4096, 9000, 40000, 65536, 100000, 300000}
	n := sizes[(g*7+uint64(k))%uint64(len(sizes))] + int(g%13)
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b)/8; i++ {
		binary.LittleEndian.PutUint64(b[8*i:], g<<32|uint64(k)<<24|uint64(i))
	}
	return b[:n:n]
}

// TestStateMachineConcurrent (in-process, memBacking with scheduling
// jitter, run it with -race): PUT, GET (whole and partial), REMOVE and
// Flush race on a few keys over an arena small enough that evictions,
// dedicated allocations, bypass writes and coalesced cold reads all occur.
// Every read must be byte-exact for one generation written to that key;
// once quiescent and flushed, RAM and the backing agree on every key, and
// after removing everything and closing, nothing comes back.
//
// The "sharded" runs use two lock shards (64 extents) and three flush
// queues (DiskOf), so admissions, fills and flushes of different keys run
// under different locks; the arena is then too large to evict, which the
// single-shard runs cover. The "delayed" run holds each flush back for a
// millisecond, so flushes race with rewrites and removals while queued
// and the queue's timer and parked generations take part.
func TestStateMachineConcurrent(t *testing.T) {
	for _, ack := range []string{AckRAM, AckDisk} {
		t.Run(ack, func(t *testing.T) { stateMachine(t, ack, false, 0) })
		t.Run(ack+"/sharded", func(t *testing.T) { stateMachine(t, ack, true, 0) })
	}
	t.Run(AckRAM+"/delayed", func(t *testing.T) { stateMachine(t, AckRAM, false, time.Millisecond) })
	t.Run(AckRAM+"/sharded/delayed", func(t *testing.T) { stateMachine(t, AckRAM, true, time.Millisecond) })
}

func stateMachine(t *testing.T, ack string, sharded bool, delay time.Duration) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	m := newMem()
	var jit atomic.Uint64
	m.jitter = func() {
		if jit.Add(1)%3 == 0 {
			runtime.Gosched()
		}
	}
	o := Options{Backing: m, Bytes: 256<<10 + 128<<10, ExtentBytes: 64 << 10,
		LargeReserveBytes: 128 << 10, AckMode: ack, DirtyWatermark: 1, FlushThreads: 3, ReadCoalesce: true, FlushDelay: delay}
	if sharded {
		o.Bytes, o.Shards = 64*64<<10+128<<10, 2
		o.DiskOf = func(k wire.BlockKey) int { return int(k.ID[1]) % 3 }
		o.Disks = 3
	}
	tr := openTier(t, o)
	if sharded && tr.RAM().Shards != 2 {
		t.Fatalf("%d shards, want 2", tr.RAM().Shards)
	}
	const nkeys = 6
	ops := 400
	if testing.Short() {
		ops = 100
	}
	var (
		next    atomic.Uint64
		mu      sync.Mutex
		written [nkeys]map[uint64]bool
	)
	for i := range written {
		written[i] = map[uint64]bool{}
	}
	check := func(k int, off uint64, data []byte, stored uint64) {
		if len(data) < 8 {
			return
		}
		w := binary.LittleEndian.Uint64(data)
		g, kk := w>>32, int(w>>24&0xff)
		mu.Lock()
		ok := written[k][g]
		mu.Unlock()
		if kk != k || !ok {
			t.Errorf("key %d off %d: read generation %d of key %d, never written to it", k, off, g, kk)
			return
		}
		want := gen(k, g)
		if stored != uint64(len(want)) || !bytes.Equal(data, want[off:off+uint64(len(data))]) {
			t.Errorf("key %d gen %d off %d: wrong bytes or length (stored %d, want %d)", k, g, off, stored, len(want))
		}
	}
	var wg sync.WaitGroup
	worker := func(id uint64, fn func(r *rand.Rand, k int)) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, id))
			for range ops {
				if t.Failed() {
					return
				}
				fn(r, r.IntN(nkeys))
			}
		})
	}
	put := func(r *rand.Rand, k int) {
		g := next.Add(1)
		mu.Lock()
		written[k][g] = true
		mu.Unlock()
		v := gen(k, g)
		if r.IntN(2) == 0 {
			// Straight into a reserved slot, as the server does.
			if buf, loan, ok := tr.Receive(key(k), uint64(len(v))); ok {
				copy(buf, v)
				runtime.Gosched()
				if err := tr.CommitReceive(key(k), buf, loan); err != nil && wire.StatusOf(err) != wire.StatusCacheFull {
					t.Errorf("CommitReceive key %d gen %d: %v", k, g, err)
				}
				return
			}
		}
		if err := tr.Put(key(k), v); err != nil && wire.StatusOf(err) != wire.StatusCacheFull {
			t.Errorf("Put key %d gen %d: %v", k, g, err)
		}
	}
	getOne := func(r *rand.Rand, k int) {
		var off, length uint64
		if r.IntN(3) == 0 {
			off, length = uint64(r.IntN(5000))&^7, uint64(r.IntN(9000))
		}
		if r.IntN(2) == 0 {
			// Lent in place: the bytes must stay those of one written
			// generation until Return, however the other workers evict,
			// overwrite or remove meanwhile.
			data, stored, loan, ok, err := tr.Lend(key(k), off, length)
			if ok && err == nil && len(data) > 0 {
				check(k, off, data, stored)
				before := append([]byte(nil), data...)
				runtime.Gosched()
				if !bytes.Equal(data, before) {
					t.Errorf("key %d: lent bytes changed before Return", k)
				}
				tr.Return(loan)
				return
			}
			if ok && err != nil && (off == 0 || wire.StatusOf(err) != wire.StatusInvalid) {
				t.Errorf("key %d: Lend at offset %d: %v", k, off, err)
			}
			if ok {
				return
			}
		}
		data, stored, err := tr.Get(key(k), off, length, iobuf.Heap{})
		switch wire.StatusOf(err) {
		case wire.StatusOK:
			check(k, off, data, stored)
		case wire.StatusNotFound:
		case wire.StatusInvalid:
			if off == 0 {
				t.Errorf("key %d: Get at offset 0: %v", k, err)
			}
		default:
			t.Errorf("key %d: Get: %v", k, err)
		}
	}
	worker(1, put)
	worker(2, put)
	worker(3, func(r *rand.Rand, k int) {
		if r.IntN(3) == 0 {
			if err := tr.Remove(key(k)); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
				t.Errorf("Remove key %d: %v", k, err)
			}
		} else {
			put(r, k)
		}
	})
	worker(4, getOne)
	worker(5, getOne)
	worker(6, getOne)
	worker(7, func(r *rand.Rand, k int) {
		if r.IntN(20) == 0 {
			if err := tr.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
		} else {
			getOne(r, k)
		}
	})
	wg.Wait()
	if t.Failed() {
		tr.Close()
		return
	}
	if err := tr.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if s := tr.RAM(); s.DirtyObjects != 0 || s.DirtyBytes != 0 || !s.Healthy {
		t.Fatalf("quiescent and flushed: %+v", s)
	} else {
		t.Logf("RAM: %+v", s)
	}
	checkTier(t, tr)
	checkIdle(t, tr)
	// RAM and the backing agree: whatever the tier serves is what the
	// backing holds, and a key the backing lacks is not served.
	for k := range nkeys {
		data, err := get(t, tr, key(k))
		disk, onDisk := m.get(key(k))
		switch {
		case wire.StatusOf(err) == wire.StatusNotFound:
			if onDisk {
				t.Fatalf("key %d: tier says NOT_FOUND, backing holds %d bytes", k, len(disk))
			}
		case err != nil:
			t.Fatalf("key %d: %v", k, err)
		default:
			check(k, 0, data, uint64(len(data)))
			if !onDisk || !bytes.Equal(data, disk) {
				t.Fatalf("key %d: RAM serves %d bytes the backing does not hold (on disk: %v, %d bytes)", k, len(data), onDisk, len(disk))
			}
		}
	}
	for k := range nkeys {
		_ = tr.Remove(key(k))
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := len(m.vals); n != 0 {
		t.Fatalf("%d removed keys came back on the backing after Close", n)
	}
}
