package ramtier

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// warmer faults the arena in behind a tier that already serves. A first
// touch of fresh memory costs microseconds per page (zeroing it, building
// its page tables), so a lazily faulted arena makes its first fill many
// times slower than a warm one; touching all of it before serving, as the
// tier once did, kept a node with a 6 GiB tier unready for 12 s here and
// would keep the arenas of real hosts unready for minutes. So the tier
// serves at once and the warmer populates the arena on every core in the
// order the allocators hand extents out (each shard's lowest extent
// first, the shards interleaved), so the slots PUTs and fills take first
// are the ones warmed first. A slot used before its pages are warm is
// correct, only slower to fill: the kernel faults it in on first write.
type warmer struct {
	done   atomic.Bool
	bytes  atomic.Uint64 // bytes populated so far
	took   atomic.Int64  // nanoseconds the whole arena took, once done
	stop   atomic.Bool   // Close: leave the rest cold
	wg     sync.WaitGroup
	chunks []warmChunk
	next   atomic.Int64
}

// warmChunk is one extent of the arena: [off, off+n).
type warmChunk struct{ off, n uint64 }

// warmOrder lists the arena's extents in the order the shards' allocators
// take them: extent 0 of every shard, then extent 1 of every shard, and
// so on (an allocator binds its lowest unbound extent first).
func (t *Tier) warmOrder() []warmChunk {
	var out []warmChunk
	for round := uint64(0); ; round++ {
		added := false
		for i, s := range t.shards {
			end := t.arenaBytes
			if i+1 < len(t.shards) {
				end = t.shards[i+1].first
			}
			off := s.first + round*t.extent
			if off < end {
				out = append(out, warmChunk{off: off, n: min(t.extent, end-off)})
				added = true
			}
		}
		if !added {
			return out
		}
	}
}

// startWarm starts the warm-up on workers goroutines (all cores when 0)
// and logs one line when the whole arena is resident.
func (t *Tier) startWarm(workers int) {
	w := &t.warm
	w.chunks = t.warmOrder()
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(w.chunks))
	start := time.Now()
	var left atomic.Int32
	left.Store(int32(workers))
	for range workers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			t.warmWorker()
			if left.Add(-1) == 0 && !w.stop.Load() {
				w.took.Store(int64(time.Since(start)))
				w.done.Store(true)
				t.log.Info("ram tier: arena resident", "arena_bytes", t.arenaBytes, "took", time.Since(start).Round(time.Millisecond).String(), "workers", workers)
			}
		}()
	}
}

// warmWorker populates chunks until none is left or Close stops it.
func (t *Tier) warmWorker() {
	w := &t.warm
	for !w.stop.Load() {
		i := w.next.Add(1) - 1
		if i >= int64(len(w.chunks)) {
			return
		}
		c := w.chunks[i]
		populate(t.arena.mem[c.off : c.off+c.n])
		w.bytes.Add(c.n)
	}
}

// stopWarm makes the warm-up stop after the chunks in hand and waits for
// it, so Close never unmaps memory a worker is populating.
func (t *Tier) stopWarm() {
	t.warm.stop.Store(true)
	t.warm.wg.Wait()
}

// populate faults every page of mem in without changing its contents, so
// it may run while the tier already stores values there.
// MADV_POPULATE_WRITE (Linux 5.14) does it in the kernel, honoring the
// NUMA policy, far faster than a fault per page and without touching the
// bytes; where it is missing, touch does it by hand.
func populate(mem []byte) {
	if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err == nil {
		return
	}
	touch(mem)
}

// touch write-faults each page of mem that is not resident yet with an
// atomic add of zero: a write the kernel must back with a private page,
// which leaves the word as it was even when a PUT is copying into the same
// page at that moment (a plain store of a zero byte could clobber it).
// MAP_POPULATE is a request, not a promise (it is silently skipped under
// memory pressure or by some kernels), so residency is checked with
// mincore and only the missing pages are faulted in.
func touch(mem []byte) {
	vec := make([]byte, (len(mem)+pageBytes-1)/pageBytes)
	if err := mincore(mem, vec); err != nil {
		clear(vec) // cannot tell: touch everything, the cost is bounded by the size
	}
	for i, v := range vec {
		if v&1 == 0 {
			atomic.AddUint32((*uint32)(unsafe.Pointer(&mem[i*pageBytes])), 0)
		}
	}
}
