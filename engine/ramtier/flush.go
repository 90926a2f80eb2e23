package ramtier

import (
	"fmt"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// flushWorker drains the flush queue until Close asks it to stop and the
// queue is empty. Flushes of one key never overlap: a newer generation
// popped while an older one is in the backing is parked behind it (the
// backing may merge overlapping same-key writes, as slab followers take
// the leader's result, so an overlap could leave the older bytes on disk).
func (t *Tier) flushWorker() {
	t.mu.Lock()
	for {
		for len(t.queue) == 0 && !t.stopping {
			t.cond.Wait()
		}
		if len(t.queue) == 0 {
			t.mu.Unlock()
			return
		}
		e := t.queue[0]
		t.queue[0] = nil
		t.queue = t.queue[1:]
		if e.canceled {
			continue // resolved and unpinned by whoever canceled it
		}
		if a := t.active[e.key]; a != nil {
			a.next = e
			continue
		}
		e.active = true
		t.active[e.key] = e
		buf := t.bytesOf(e)
		t.mu.Unlock()
		t.flush(e, buf)
		t.mu.Lock()
	}
}

// flush writes generation e to the backing, retrying flushAttempts times,
// then settles it: committed (DURABLE: the flush-pin drops and the slot
// becomes evictable), canceled meanwhile (not marked durable; a Remove
// waiting for it issues the backing's Remove next), or failed for good
// (the tier turns unhealthy and the value is dropped from RAM, since it can
// never become durable). buf stays valid under e's flush-pin.
func (t *Tier) flush(e *entry, buf []byte) {
	var err error
	for attempt := range flushAttempts {
		if attempt > 0 {
			time.Sleep(flushBackoff << (attempt - 1))
			t.mu.Lock()
			canceled := e.canceled
			t.mu.Unlock()
			if canceled {
				break
			}
		}
		if err = t.backing.Cache(e.key, buf); err == nil || permanent(err) {
			break
		}
	}

	t.mu.Lock()
	if t.active[e.key] == e {
		delete(t.active, e.key)
	}
	e.active = false
	next := e.next
	e.next = nil
	switch {
	case e.canceled:
		// Superseded or removed: the waiters follow e.super (or see OK:
		// the PUT happened, then the Remove).
	case err == nil:
		t.flushed.Add(1)
		if t.dirty[e.key] == e {
			delete(t.dirty, e.key)
			t.addDirty(e, -1)
		}
	default:
		t.flushDropped.Add(1)
		if t.dirty[e.key] == e {
			delete(t.dirty, e.key)
			t.addDirty(e, -1)
		}
		if t.ownedBy(e) {
			t.unpublish(&e.key)
		}
		if permanent(err) {
			// The backing refuses this value outright (a MaxValueBytes
			// larger than the disks accept): retrying cannot help and the
			// disks are fine, so the tier stays healthy.
			e.err = fmt.Errorf("ram tier: flush of %s refused by the backing, the value is dropped: %w", e.key, err)
			t.log.Error("ram tier: the backing refused a flushed value; set MaxValueBytes to what the disks accept",
				"key", e.key, "bytes", e.n, "err", err)
			break
		}
		e.err = fmt.Errorf("ram tier: flush of %s failed %d times, the value is dropped and the tier is unhealthy: %w: %w",
			e.key, flushAttempts, err, wire.StatusIOError)
		if t.unhealthy.CompareAndSwap(false, true) {
			t.log.Error("ram tier: a flush exhausted its retries; the tier is unhealthy (readiness false) until restart",
				"key", e.key, "bytes", e.n, "err", err)
		}
	}
	t.releaseFlushPin(e)
	if next != nil && !next.canceled {
		t.queue = append(t.queue, nil)
		copy(t.queue[1:], t.queue)
		t.queue[0] = next
		t.cond.Signal()
	}
	t.mu.Unlock()
	close(e.done)
}

// ownedBy reports whether e is still key's visible RAM value. The caller
// holds mu.
func (t *Tier) ownedBy(e *entry) bool {
	if e.lg != nil {
		return t.large[e.key] == e.lg
	}
	r, _, ok := t.alloc.Lookup(&e.key)
	return ok && r == e.ref
}

// permanent reports whether a backing write failed for a reason a retry
// cannot change.
func permanent(err error) bool {
	switch wire.StatusOf(err) {
	case wire.StatusTooLarge, wire.StatusInvalid, wire.StatusQuotaExceeded:
		return true
	}
	return false
}
