package ramtier

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// In-process tests of Options.FlushDelay over memBacking. The delays are an
// hour, so "nothing flushed yet" cannot be a race the test happens to win.
// Tests that check it run in a synctest bubble: synctest.Wait returns once
// every flush worker is idle, so a broken delay (one that flushes at once)
// has flushed by then.

const noFlushForAnHour = time.Hour

// delayedTier is smallOpts over m with a flush delay; edit adjusts the
// options further before Open.
func delayedTier(t *testing.T, m *memBacking, delay time.Duration, edit func(*Options)) *Tier {
	t.Helper()
	o := smallOpts(m)
	o.FlushDelay = delay
	if edit != nil {
		edit(&o)
	}
	return openTier(t, o)
}

// promptly runs call and fails the test when it does not return within
// 10 s: what must never wait out an hour-long flush delay.
func promptly(t *testing.T, what string, call func() error) {
	t.Helper()
	if err := returnsWithin(t, what, call); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// cacheAll puts val(first+i, size) under key(first+i) for i < n.
func cacheAll(t *testing.T, tr *Tier, first, n, size int) {
	t.Helper()
	for i := range n {
		if err := tr.Put(key(first+i), val(uint64(first+i), size)); err != nil {
			t.Fatalf("Put %d: %v", first+i, err)
		}
	}
}

// wantBacking checks that the backing holds val(first+i, size) for i < n.
func wantBacking(t *testing.T, m *memBacking, first, n, size int, what string) {
	t.Helper()
	for i := range n {
		if got, _ := m.get(key(first + i)); !bytes.Equal(got, val(uint64(first+i), size)) {
			t.Fatalf("%s: the backing lacks value %d", what, first+i)
		}
	}
}

// TestFlushDelayWritesARewrittenKeyOnce: three generations of one key and
// a key removed within the delay reach the backing as one write of the
// last generation and no write at all.
func TestFlushDelayWritesARewrittenKeyOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem()
		tr := delayedTier(t, m, noFlushForAnHour, nil)
		defer tr.Close()
		k, gone := key(1), key(2)
		for g := range 3 {
			if err := tr.Put(k, val(uint64(10+g), 20000)); err != nil {
				t.Fatalf("Put generation %d: %v", g, err)
			}
		}
		if err := tr.Put(gone, val(2, 3000)); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if err := tr.Remove(gone); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		synctest.Wait() // every flush worker idle
		if n := m.caches.Load(); n != 0 {
			t.Fatalf("%d backing writes within the flush delay, want 0", n)
		}
		mustGet(t, tr, k, val(12, 20000))
		if s := tr.RAM(); s.DirtyObjects != 1 || s.FlushBacklog == 0 {
			t.Fatalf("before Flush: %d dirty objects, backlog %d; want 1 and the held items", s.DirtyObjects, s.FlushBacklog)
		}
		promptly(t, "Flush", tr.Flush) // waives the delay
		if c := m.cacheCalls(k); c != 1 {
			t.Fatalf("the rewritten key was written %d times, want once", c)
		}
		if got, _ := m.get(k); !bytes.Equal(got, val(12, 20000)) {
			t.Fatal("the backing does not hold the last generation")
		}
		if c := m.cacheCalls(gone); c != 0 {
			t.Fatalf("the removed key was written %d times, want never", c)
		}
		wantNotFound(t, tr, gone, "removed within the delay")
		if s := tr.RAM(); s.Flushed != 1 || s.DirtyObjects != 0 || s.DirtyBytes != 0 || s.FlushSkipped != 3 || s.FlushDelayMS != noFlushForAnHour.Milliseconds() {
			t.Fatalf("after Flush: %d flushed, %d dirty (%d bytes), %d skipped, delay %d ms; want 1, 0, 0, 3 (two superseded, one removed), %d",
				s.Flushed, s.DirtyObjects, s.DirtyBytes, s.FlushSkipped, s.FlushDelayMS, noFlushForAnHour.Milliseconds())
		}
		checkIdle(t, tr)
	})
}

// TestFlushDelayWaivedPastEagerThreshold: once dirty bytes reach half the
// watermark the queue stops holding values back and flushes until they
// are below it again, so a delay never pushes PUTs of new keys into
// CACHE_FULL.
func TestFlushDelayWaivedPastEagerThreshold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem()
		// 512 KiB of the 1 MiB arena; eager at 256 KiB
		tr := delayedTier(t, m, noFlushForAnHour, func(o *Options) { o.DirtyWatermark = 0.5 })
		defer tr.Close()
		const n = 64 << 10
		cacheAll(t, tr, 100, 3, n)
		synctest.Wait() // every flush worker idle
		if c := m.caches.Load(); c != 0 {
			t.Fatalf("%d backing writes with 192 KiB dirty (under the 256 KiB eager threshold), want 0", c)
		}
		for i := 3; i < 12; i++ { // 768 KiB in all: past the watermark without the waiver
			if err := tr.Put(key(100+i), val(uint64(100+i), n)); err != nil {
				t.Fatalf("Put %d past the eager threshold: %v", i, err)
			}
			synctest.Wait() // the waived flushes ran until the queue holds back again
			if d := tr.RAM().DirtyBytes; d >= tr.eagerBytes {
				t.Fatalf("Put %d: %d dirty bytes, want them back under the %d-byte eager threshold", i, d, tr.eagerBytes)
			}
		}
		if c := m.caches.Load(); c < 9 {
			t.Fatalf("%d backing writes, want at least 9 (dirty stays under 256 KiB)", c)
		}
		if err := tr.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		wantBacking(t, m, 100, 12, n, "after Flush")
	})
}

// TestFlushDelayIgnoredWithDiskAck: with disk acknowledgement every PUT
// waits for its flush, so the delay does not apply.
func TestFlushDelayIgnoredWithDiskAck(t *testing.T) {
	m := newMem()
	tr := delayedTier(t, m, noFlushForAnHour, func(o *Options) { o.AckMode = AckDisk })
	defer tr.Close()
	promptly(t, "a disk-acknowledged PUT", func() error { return tr.Put(key(3), val(3, 5000)) })
	wantBacking(t, m, 3, 1, 5000, "disk-ack Put returned")
	if d := tr.RAM().FlushDelayMS; d != 0 {
		t.Fatalf("RAMStats.FlushDelayMS %d under disk ack, want 0 (the delay in force)", d)
	}
}

// TestCloseFlushesDespiteFlushDelay: graceful shutdown flushes held values
// at once (nothing acknowledged is lost, and Close does not wait an hour).
func TestCloseFlushesDespiteFlushDelay(t *testing.T) {
	m := newMem()
	var logs bytes.Buffer
	tr := delayedTier(t, m, noFlushForAnHour, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	cacheAll(t, tr, 40, 5, 7000)
	promptly(t, "Close", tr.Close)
	wantBacking(t, m, 40, 5, 7000, "after Close")
	// The operator sees why a stop takes time: what is flushed, how long.
	for _, want := range []string{`msg="ram tier: flushing dirty values before close" dirty_bytes=35000`, `msg="ram tier: flushed before close" dirty_bytes=35000 took=`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("Close logged no %q; log:\n%s", want, logs.String())
		}
	}
}

// TestFlushDelayFlushesWhenDue: a held value is flushed on its own once
// its delay has passed (the queue's timer, no Flush call).
func TestFlushDelayFlushesWhenDue(t *testing.T) {
	m := newMem()
	tr := delayedTier(t, m, 20*time.Millisecond, nil)
	defer tr.Close()
	cacheAll(t, tr, 60, 3, 4000)
	eventually(t, "the held values to be flushed by the timer", func() bool { return tr.RAM().Flushed == 3 })
	wantBacking(t, m, 60, 3, 4000, "after the delay")
}

func TestOpenRejectsNegativeFlushDelay(t *testing.T) {
	o := smallOpts(newMem())
	o.FlushDelay = -time.Second
	_, err := Open(o)
	enginetest.WantStatus(t, err, wire.StatusInvalid, "Open with a negative flush delay")
}

// TestFlushDelayQueueHoldsOnlyLiveGenerations: keys rewritten, or written
// and removed, many times within the delay leave no trail of superseded
// generations in their queue (each would hold memory for the whole delay,
// at the PUT rate).
func TestFlushDelayQueueHoldsOnlyLiveGenerations(t *testing.T) {
	tr := delayedTier(t, newMem(), noFlushForAnHour, nil)
	defer tr.Close()
	const rewrites = 20000
	for g := range rewrites {
		if err := tr.Put(key(1), val(uint64(g), 64)); err != nil {
			t.Fatal(err)
		}
		k := key(1000 + g)
		if err := tr.Put(k, val(uint64(g), 64)); err != nil {
			t.Fatal(err)
		}
		if err := tr.Remove(k); err != nil {
			t.Fatal(err)
		}
	}
	s := tr.RAM()
	if s.DirtyObjects != 1 || s.FlushBacklog != 1 || s.FlushSkipped != 2*rewrites-1 {
		t.Fatalf("after %d rewrites and removals: %d dirty, %d queued, %d skipped; want 1, 1, %d", rewrites, s.DirtyObjects, s.FlushBacklog, s.FlushSkipped, 2*rewrites-1)
	}
	q := tr.queues[0]
	q.mu.Lock()
	slots := cap(q.items)
	q.mu.Unlock()
	if slots > 64 {
		t.Fatalf("the queue's slice has %d slots for one live generation: canceled ones are kept", slots)
	}
}

// TestFlushDelayTimerRearms: the queue's timer serves more than its first
// item (a value queued after an earlier one was flushed by the timer).
func TestFlushDelayTimerRearms(t *testing.T) {
	tr := delayedTier(t, newMem(), 20*time.Millisecond, nil)
	defer tr.Close()
	for i := range 3 {
		cacheAll(t, tr, 70+i, 1, 4000)
		eventually(t, "the timer to flush each value in turn", func() bool { return tr.RAM().Flushed == uint64(i+1) })
	}
}

// TestFlushDelayEagerWaivesEveryDisk: crossing the eager threshold with
// values of one disk releases the values held on the others too. Disk 1's
// flushes are held at a gate, so dirty bytes stay past the threshold and
// only the crossing itself can wake disk 0's idle queue.
func TestFlushDelayEagerWaivesEveryDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMem()
		diskOf := func(k wire.BlockKey) int { return int(k.ID[0]) % 2 }
		gate := make(chan struct{})
		tr := delayedTier(t, m, noFlushForAnHour, func(o *Options) {
			o.Backing = &diskGate{StoreEngine: m, gate: gate, gated: func(k wire.BlockKey) bool { return diskOf(k) == 1 }}
			o.DirtyWatermark = 0.5 // eager at 256 KiB
			o.Disks, o.DiskOf = 2, diskOf
		})
		defer tr.Close()
		defer close(gate) // before Close, which flushes disk 1's values
		var held wire.BlockKey
		for i := 0; ; i++ { // one small value on disk 0
			if held = key(200 + i); diskOf(held) == 0 {
				break
			}
		}
		if err := tr.Put(held, val(1, 4000)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // every flush worker idle
		if c := m.cacheCalls(held); c != 0 {
			t.Fatalf("disk 0's value was flushed %d times under the delay, before the threshold", c)
		}
		for i, n := 0, 0; n < 5; i++ { // 320 KiB on disk 1
			k := key(300 + i)
			if diskOf(k) != 1 {
				continue
			}
			if err := tr.Put(k, val(uint64(i), 64<<10)); err != nil {
				t.Fatal(err)
			}
			n++
		}
		synctest.Wait() // disk 0's worker idle again, disk 1's at the gate
		if c := m.cacheCalls(held); c != 1 {
			t.Fatalf("disk 0's held value was flushed %d times past the eager threshold, want once", c)
		}
	})
}

// diskGate holds the flushes of the keys gated selects until gate closes.
type diskGate struct {
	engine.StoreEngine
	gate  chan struct{}
	gated func(wire.BlockKey) bool
}

func (g *diskGate) Put(key wire.BlockKey, value []byte) error {
	if g.gated(key) {
		<-g.gate
	}
	return g.StoreEngine.Put(key, value)
}

// TestFlushDelayBoundsARewrittenKey: a key rewritten faster than the delay
// still reaches the backing within the delay of its first dirty write
// (each new generation takes over the queued one's age), so the disk is
// never more than one delay behind a hot key.
func TestFlushDelayBoundsARewrittenKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay, every = 200 * time.Millisecond, 10 * time.Millisecond
		m := newMem()
		tr := delayedTier(t, m, delay, nil)
		defer tr.Close()
		k := key(5)
		first := time.Now()
		for g := 0; m.cacheCalls(k) == 0; g++ { // a rewrite every 10 ms, never 200 ms apart
			// The bubble's clock: the flush is due at exactly first+delay,
			// and the check after the next rewrite sees it.
			if waited := time.Since(first); waited > delay+every {
				t.Fatalf("a key rewritten every %v was not flushed in %v under a %v delay", every, waited, delay)
			}
			if err := tr.Put(k, val(uint64(g), 4000)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(every)
		}
		if s := tr.RAM(); s.FlushBacklog > 1 {
			t.Fatalf("%d queued flushes for one key", s.FlushBacklog)
		}
	})
}

// lockedBuffer is a bytes.Buffer a logger writes while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCloseLogsFlushProgress: while Close waits for a slow disk, it logs
// how many dirty bytes are left, repeatedly, and then that it is done.
func TestCloseLogsFlushProgress(t *testing.T) {
	defer func(d time.Duration) { closeProgressEvery = d }(closeProgressEvery)
	closeProgressEvery = 5 * time.Millisecond
	m := newMem()
	var logs lockedBuffer
	tr := delayedTier(t, m, noFlushForAnHour, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	cacheAll(t, tr, 50, 4, 3000)
	open := m.gateCache() // the disk stalls
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	eventually(t, "Close to log its progress twice", func() bool {
		return strings.Count(logs.String(), `msg="ram tier: still flushing before close" dirty_bytes=`) >= 2
	})
	open()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wantBacking(t, m, 50, 4, 3000, "after Close")
	if !strings.Contains(logs.String(), `msg="ram tier: flushed before close" dirty_bytes=12000`) {
		t.Errorf("Close logged no end of its flush; log:\n%s", logs.String())
	}
}
