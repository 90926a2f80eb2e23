package ramtier

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The warm-up order must cover the arena exactly once and start with the
// extents the allocators hand out first.
func TestWarmOrderCoversArenaInAllocationOrder(t *testing.T) {
	tr := openTier(t, Options{Backing: newMem(), Bytes: 70 << 20, ExtentBytes: 1 << 20, LargeReserveBytes: NoLargeReserve, Shards: 2})
	defer tr.Close()
	if len(tr.shards) != 2 {
		t.Fatalf("%d shards, want 2", len(tr.shards))
	}
	chunks := tr.warmOrder()
	seen := make([]bool, tr.arenaBytes/tr.extent)
	var sum uint64
	for _, c := range chunks {
		if c.off%tr.extent != 0 || c.n != tr.extent {
			t.Fatalf("chunk %+v is not one whole extent", c)
		}
		if seen[c.off/tr.extent] {
			t.Fatalf("extent at %d warmed twice", c.off)
		}
		seen[c.off/tr.extent] = true
		sum += c.n
	}
	if sum != tr.arenaBytes {
		t.Fatalf("warm order covers %d bytes, the arena has %d", sum, tr.arenaBytes)
	}
	if chunks[0].off != tr.shards[0].first || chunks[1].off != tr.shards[1].first || chunks[2].off != tr.shards[0].first+tr.extent {
		t.Fatalf("order starts %+v; want shard 0's first extent, shard 1's, then shard 0's second", chunks[:3])
	}
}

// Open returns a tier that serves at once; the warm-up finishes behind it
// and leaves every arena page resident, without changing stored values.
func TestWarmUpFinishesBehindServingTier(t *testing.T) {
	tr := openTier(t, Options{Backing: newMem(), Bytes: 256 << 20, ExtentBytes: 1 << 20, LargeReserveBytes: NoLargeReserve, WarmWorkers: 2})
	defer tr.Close()
	val := bytes.Repeat([]byte("warm"), 64<<10)
	for i := range 32 {
		if err := tr.Put(key(i), val); err != nil {
			t.Fatalf("PUT %d while warming: %v", i, err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute) // a bound on a hang, not a speed check
	for tr.RAM().ArenaWarmSeconds == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("arena not warm after 2 minutes: %d of %d bytes", tr.RAM().ArenaWarmBytes, tr.arenaBytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := tr.RAM().ArenaWarmBytes; got != tr.arenaBytes {
		t.Fatalf("warm bytes %d, arena %d", got, tr.arenaBytes)
	}
	vec := make([]byte, len(tr.arena.mem)/pageBytes)
	if err := mincore(tr.arena.mem, vec); err != nil {
		t.Fatal(err)
	}
	for i, v := range vec {
		if v&1 == 0 {
			t.Fatalf("page %d of %d not resident after the warm-up", i, len(vec))
		}
	}
	for i := range 32 {
		got, err := get(t, tr, key(i))
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("GET %d after the warm-up: %d bytes, %v", i, len(got), err)
		}
	}
}

// Close during the warm-up stops it before the arena is unmapped.
func TestCloseDuringWarmUp(t *testing.T) {
	for range 5 {
		tr := openTier(t, Options{Backing: newMem(), Bytes: 512 << 20, ExtentBytes: 1 << 20, LargeReserveBytes: NoLargeReserve})
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// The fallback touch (kernels without MADV_POPULATE_WRITE) faults pages in
// while a writer fills the same pages, and loses none of its bytes.
func TestTouchKeepsConcurrentWrites(t *testing.T) {
	const size = 16 << 20
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range mem {
			mem[i] = byte(i*7 + 1)
		}
	}()
	touch(mem)
	wg.Wait()
	for i := range mem {
		if mem[i] != byte(i*7+1) {
			t.Fatalf("byte %d is %d after touch, the writer wrote %d", i, mem[i], byte(i*7+1))
		}
	}
	vec := make([]byte, size/pageBytes)
	if err := mincore(mem, vec); err != nil {
		t.Fatal(err)
	}
	for i, v := range vec {
		if v&1 == 0 {
			t.Fatalf("page %d not resident after touch", i)
		}
	}
}
