package ramtier

import (
	"bytes"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

// In-process tests (memBacking) of one promise: once a PUT is
// acknowledged, the key never again reads as the value that PUT replaced,
// whatever a concurrent cold read, a failed synchronous write or a failed
// Remove does. The backing starts with an older value v0 of the key in
// each, so a broken tier shows it.

// resident reports whether k has a RAM owner.
func resident(tr *Tier, k wire.BlockKey) bool {
	s := tr.shardOf(&k)
	s.mu.Lock()
	defer s.mu.Unlock()
	return tr.ownerLocked(s, &k)
}

// returnsWithin runs call and returns its error, failing the test when it
// does not return within 10 s (none of these calls may wait out an
// hour-long flush delay).
func returnsWithin(t *testing.T, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10 s (did it wait for the flush delay?)", what)
		return nil
	}
}

// TestColdReadDuringPutNeverPublishesOlderValue: a GET that misses RAM
// while a PUT copies its value in starts a read of the older disk value.
// When that read finishes after the new value was flushed and evicted, it
// must not publish the older value: the key would read v0 from RAM while
// the disk holds v1.
func TestColdReadDuringPutNeverPublishesOlderValue(t *testing.T) {
	m := newMem()
	k, v0, v1 := key(30), val(30, 30000), val(31, 30000)
	m.vals[k] = v0
	tr := openTier(t, smallOpts(m))
	defer tr.Close()

	var open func()
	coldDone := make(chan error, 1)
	tr.beforePublish = func() {
		open = m.gateRange()
		go func() {
			_, _, err := tr.Get(k, 0, 0, iobuf.Heap{})
			coldDone <- err
		}()
		eventually(t, "the cold read at the backing", func() bool { return m.ranges.Load() == 1 })
	}
	if err := tr.Put(k, v1); err != nil {
		t.Fatalf("Put v1: %v", err)
	}
	tr.beforePublish = nil
	if err := tr.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i := 0; resident(tr, k); i++ {
		if i == 200 {
			t.Fatal("v1 is never evicted")
		}
		if err := tr.Put(key(100+i), val(uint64(100+i), 30000)); err != nil {
			t.Fatalf("Put filler %d: %v", i, err)
		}
		if err := tr.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	open()
	if err := <-coldDone; err != nil {
		t.Fatalf("the cold read: %v", err)
	}
	mustGet(t, tr, k, v1)
	if got, _ := m.get(k); !bytes.Equal(got, v1) {
		t.Fatal("the backing lost v1")
	}
}

// TestFailedWriteThroughKeepsAcknowledgedValue: v1 is acknowledged from
// RAM and waits out a flush delay; a PUT of v2 too large for RAM takes the
// synchronous disk path and fails. The key must read v1, not the v0 the
// disk had, and the tier stays healthy: nothing was lost.
func TestFailedWriteThroughKeepsAcknowledgedValue(t *testing.T) {
	m := newMem()
	k, v0, v1, v2 := key(40), val(40, 30000), val(41, 30000), val(42, 100<<10)
	m.vals[k] = v0
	tr := delayedTier(t, m, noFlushForAnHour, nil) // no large reserve: v2 bypasses RAM
	defer tr.Close()
	if err := tr.Put(k, v1); err != nil {
		t.Fatalf("Put v1: %v", err)
	}
	m.failLen.Store(int64(len(v2)))
	err := returnsWithin(t, "the failing write-through", func() error { return tr.Put(k, v2) })
	enginetest.WantStatus(t, err, wire.StatusIOError, "Put v2 with the backing failing it")
	mustGet(t, tr, k, v1)
	if got, _ := m.get(k); !bytes.Equal(got, v1) {
		t.Fatal("the backing does not hold v1 after the failed write-through")
	}
	if s := tr.RAM(); !s.Healthy || s.DirtyObjects != 0 {
		t.Fatalf("after a failed write-through: healthy %v, %d dirty; want healthy, none dirty", s.Healthy, s.DirtyObjects)
	}

	m.failLen.Store(0)
	if err := tr.Put(k, v2); err != nil {
		t.Fatalf("Put v2: %v", err)
	}
	mustGet(t, tr, k, v2)
	checkIdle(t, tr)
}

// TestFailedRemoveKeepsAcknowledgedValue: a Remove cancels the queued
// flush of acknowledged v1, then the backing's Remove fails. The key must
// read v1 (the Remove did not happen), not the v0 the disk still had; a
// Remove that then succeeds leaves nothing. Both a slot value and a
// dedicated (large) one.
func TestFailedRemoveKeepsAcknowledgedValue(t *testing.T) {
	for _, size := range []int{30000, 100 << 10} {
		m := newMem()
		k, v0, v1 := key(50), val(50, size), val(51, size)
		m.vals[k] = v0
		tr := delayedTier(t, m, noFlushForAnHour, func(o *Options) {
			o.Bytes, o.LargeReserveBytes = 2<<20, 1<<20
		})
		if err := tr.Put(k, v1); err != nil {
			t.Fatalf("%d bytes: Put v1: %v", size, err)
		}
		if !resident(tr, k) {
			t.Fatalf("%d bytes: v1 is not in RAM", size)
		}
		m.failRemove.Store(true)
		err := returnsWithin(t, "the failing Remove", func() error { return tr.Remove(k) })
		enginetest.WantStatus(t, err, wire.StatusIOError, "Remove with the backing failing it")
		mustGet(t, tr, k, v1)
		if got, _ := m.get(k); !bytes.Equal(got, v1) {
			t.Fatalf("%d bytes: the backing does not hold v1 after the failed Remove", size)
		}

		m.failRemove.Store(false)
		if err := tr.Remove(k); err != nil {
			t.Fatalf("%d bytes: Remove: %v", size, err)
		}
		wantNotFound(t, tr, k, "after the Remove")
		checkIdle(t, tr)
		if err := tr.Close(); err != nil {
			t.Fatalf("%d bytes: Close: %v", size, err)
		}
	}
}

// TestFailedRemoveDuringFlushRetryKeepsAcknowledgedValue: as above, but
// the Remove comes while v1's flush is under way, between a failed attempt
// and its retry: the canceled flush ends without writing v1, so the failed
// Remove must write it back all the same.
func TestFailedRemoveDuringFlushRetryKeepsAcknowledgedValue(t *testing.T) {
	defer func(a int, b time.Duration) { flushAttempts, flushBackoff = a, b }(flushAttempts, flushBackoff)
	flushAttempts, flushBackoff = 3, 200*time.Millisecond
	m := newMem()
	k, v0, v1 := key(60), val(60, 30000), val(61, 30000)
	m.vals[k] = v0
	tr := openTier(t, smallOpts(m))
	defer tr.Close()
	m.failCache.Store(true)
	if err := tr.Put(k, v1); err != nil {
		t.Fatalf("Put v1: %v", err)
	}
	eventually(t, "the first flush attempt to fail", func() bool { return m.cacheCalls(k) == 1 })
	m.failRemove.Store(true)
	done := make(chan error, 1)
	go func() { done <- tr.Remove(k) }()
	s := tr.shardOf(&k)
	eventually(t, "the Remove to wait for the flush", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.removing[k] != nil
	})
	m.failCache.Store(false)
	enginetest.WantStatus(t, <-done, wire.StatusIOError, "Remove with the backing failing it")
	mustGet(t, tr, k, v1)
	if got, _ := m.get(k); !bytes.Equal(got, v1) {
		t.Fatal("the backing does not hold v1 after the failed Remove")
	}
	if s := tr.RAM(); !s.Healthy {
		t.Fatal("the tier turned unhealthy, but nothing was lost")
	}
	checkIdle(t, tr)
}
