package ramtier

import (
	"bytes"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// In-process tests of Options.FlushDelay over memBacking. The delays are an
// hour, so "nothing flushed yet" cannot be a race the test happens to win;
// the short sleeps before those checks give a broken delay (one that
// flushes at once) time to show.

const noFlushForAnHour = time.Hour

// quiet is how long a test waits for a flush that must not happen.
const quiet = 50 * time.Millisecond

// TestFlushDelayWritesARewrittenKeyOnce: three generations of one key and
// a key removed within the delay reach the backing as one write of the
// last generation and no write at all.
func TestFlushDelayWritesARewrittenKeyOnce(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.FlushDelay = noFlushForAnHour
	tr := openTier(t, o)
	defer tr.Close()
	k, gone := key(1), key(2)
	for g := range 3 {
		if err := tr.Cache(k, val(uint64(10+g), 20000)); err != nil {
			t.Fatalf("Cache generation %d: %v", g, err)
		}
	}
	if err := tr.Cache(gone, val(2, 3000)); err != nil {
		t.Fatalf("Cache: %v", err)
	}
	if err := tr.Remove(gone); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	time.Sleep(quiet)
	if n := m.caches.Load(); n != 0 {
		t.Fatalf("%d backing writes within the flush delay, want 0", n)
	}
	mustGet(t, tr, k, val(12, 20000))
	if s := tr.RAM(); s.DirtyObjects != 1 || s.FlushBacklog == 0 {
		t.Fatalf("before Flush: %d dirty objects, backlog %d; want 1 and the held items", s.DirtyObjects, s.FlushBacklog)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Flush() }() // waives the delay
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Flush: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Flush waited for the flush delay")
	}
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
}

// TestFlushDelayWaivedPastEagerThreshold: once dirty bytes reach half the
// watermark the queue stops holding values back and flushes until they
// are below it again, so a delay never pushes PUTs of new keys into
// CACHE_FULL.
func TestFlushDelayWaivedPastEagerThreshold(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.DirtyWatermark = 0.5 // 512 KiB of the 1 MiB arena; eager at 256 KiB
	o.FlushDelay = noFlushForAnHour
	tr := openTier(t, o)
	defer tr.Close()
	const n = 64 << 10
	for i := range 3 {
		if err := tr.Cache(key(100+i), val(uint64(100+i), n)); err != nil {
			t.Fatalf("Cache %d: %v", i, err)
		}
	}
	time.Sleep(quiet)
	if c := m.caches.Load(); c != 0 {
		t.Fatalf("%d backing writes with 192 KiB dirty (under the 256 KiB eager threshold), want 0", c)
	}
	for i := 3; i < 12; i++ { // 768 KiB in all: past the watermark without the waiver
		if err := tr.Cache(key(100+i), val(uint64(100+i), n)); err != nil {
			t.Fatalf("Cache %d past the eager threshold: %v", i, err)
		}
		eventually(t, "dirty bytes back under the eager threshold", func() bool { return tr.RAM().DirtyBytes < tr.eagerBytes })
	}
	if c := m.caches.Load(); c < 9 {
		t.Fatalf("%d backing writes, want at least 9 (dirty stays under 256 KiB)", c)
	}
	if err := tr.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i := range 12 {
		if got, _ := m.get(key(100 + i)); !bytes.Equal(got, val(uint64(100+i), n)) {
			t.Fatalf("backing lacks value %d", i)
		}
	}
}

// TestFlushDelayIgnoredWithDiskAck: with disk acknowledgement every PUT
// waits for its flush, so the delay does not apply.
func TestFlushDelayIgnoredWithDiskAck(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.AckMode = AckDisk
	o.FlushDelay = noFlushForAnHour
	tr := openTier(t, o)
	defer tr.Close()
	done := make(chan error, 1)
	go func() { done <- tr.Cache(key(3), val(3, 5000)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Cache: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a disk-acknowledged PUT waited for the flush delay")
	}
	if got, ok := m.get(key(3)); !ok || !bytes.Equal(got, val(3, 5000)) {
		t.Fatal("disk-ack Cache returned but the backing lacks the value")
	}
	if d := tr.RAM().FlushDelayMS; d != 0 {
		t.Fatalf("RAMStats.FlushDelayMS %d under disk ack, want 0 (the delay in force)", d)
	}
}

// TestCloseFlushesDespiteFlushDelay: graceful shutdown flushes held values
// at once (nothing acknowledged is lost, and Close does not wait an hour).
func TestCloseFlushesDespiteFlushDelay(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.FlushDelay = noFlushForAnHour
	tr := openTier(t, o)
	for i := range 5 {
		if err := tr.Cache(key(40+i), val(uint64(40+i), 7000)); err != nil {
			t.Fatalf("Cache %d: %v", i, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- tr.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the flush delay")
	}
	for i := range 5 {
		if got, _ := m.get(key(40 + i)); !bytes.Equal(got, val(uint64(40+i), 7000)) {
			t.Fatalf("value %d not flushed by Close", i)
		}
	}
}

// TestFlushDelayFlushesWhenDue: a held value is flushed on its own once
// its delay has passed (the queue's timer, no Flush call).
func TestFlushDelayFlushesWhenDue(t *testing.T) {
	m := newMem()
	o := smallOpts(m)
	o.FlushDelay = 20 * time.Millisecond
	tr := openTier(t, o)
	defer tr.Close()
	for i := range 3 {
		if err := tr.Cache(key(60+i), val(uint64(60+i), 4000)); err != nil {
			t.Fatalf("Cache %d: %v", i, err)
		}
	}
	eventually(t, "the held values to be flushed by the timer", func() bool { return tr.RAM().Flushed == 3 })
	for i := range 3 {
		if got, _ := m.get(key(60 + i)); !bytes.Equal(got, val(uint64(60+i), 4000)) {
			t.Fatalf("backing lacks value %d", i)
		}
	}
}

func TestOpenRejectsNegativeFlushDelay(t *testing.T) {
	o := smallOpts(newMem())
	o.FlushDelay = -time.Second
	_, err := Open(o)
	enginetest.WantStatus(t, err, wire.StatusInvalid, "Open with a negative flush delay")
}
