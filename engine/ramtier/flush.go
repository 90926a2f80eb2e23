package ramtier

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// flushQueue is the FIFO of write-back generations waiting for one disk
// (or for the backing, with one queue). Each disk has its own queue and
// workers, so a slow or failing disk backs up only its own flushes while
// the others keep draining: flush workers group flushes by disk.
//
// With a flush delay, a generation stays queued until its key has been
// dirty that long, so a key rewritten or removed meanwhile is written to
// the disk once or not at all. The queue is in order of each key's first
// dirty write (a rewrite takes over the queued generation's slot), so only
// its head's age matters: one timer wakes a worker when it comes of age. The
// delay is waived while the tier is past its eager threshold of dirty
// bytes, while a Flush waits, and once the queue is stopping.
type flushQueue struct {
	// failedClosed is set once a flush to this queue's disk met
	// engine.ErrFailedClosed: its values can never become durable, so new
	// write-back PUTs for it are refused (not acknowledged and dropped a
	// moment later) and its flushes are not retried.
	failedClosed atomic.Bool

	mu       sync.Mutex
	cond     *sync.Cond // an item is ready, or stopping
	items    []*entry   // items[head:] are queued, oldest first
	head     int        // popped slots before it are reused, so a steady queue allocates nothing
	stopping bool
	draining int // Flush calls waiting: the delay is waived
	dead     int // items canceled while queued (queued false): dropped at the head or by compaction

	delay  time.Duration // 0: every item is ready at once
	eager  func() bool   // dirty bytes past the eager threshold
	timer  *time.Timer   // wakes the workers when the head comes of age
	timeAt time.Time     // when timer fires; zero while it is not armed
}

func newFlushQueue(delay time.Duration, eager func() bool) *flushQueue {
	q := &flushQueue{delay: delay, eager: eager}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// queueOf is the flush queue of key's disk.
func (t *Tier) queueOf(key *wire.BlockKey) *flushQueue {
	if t.diskOf == nil {
		return t.queues[0]
	}
	return t.queues[t.diskOf(*key)%len(t.queues)]
}

// push appends e. The caller holds e.sh.mu. With a delay a worker is woken
// only when there is something it could do now: the eager threshold is
// passed, or the queue was empty (a worker arms the timer for e); else the
// armed timer covers e, and a PUT costs no wake-up.
func (q *flushQueue) push(e *entry) {
	q.mu.Lock()
	if q.delay > 0 {
		e.at = time.Now()
	}
	if len(q.items) == cap(q.items) && (q.head > 0 || 2*q.dead >= len(q.items)) {
		// Full: reuse the popped slots and drop canceled items (a key
		// rewritten under a delay leaves one per PUT) before growing.
		n := 0
		for _, x := range q.items[q.head:] {
			if x.queued {
				q.items[n], x.qi = x, n
				n++
			}
		}
		clear(q.items[n:])
		q.items, q.head, q.dead = q.items[:n], 0, 0
	}
	e.queued, e.qi = true, len(q.items)
	q.items = append(q.items, e)
	if q.delay == 0 || len(q.items)-q.head == 1 || q.eager() {
		q.cond.Signal()
	}
	q.mu.Unlock()
}

// pushFront puts e at the head: a generation parked behind its key's
// previous flush goes next, ahead of keys admitted after it, and without
// a further delay (its key's flush is already under way). The caller holds
// e.sh.mu.
func (q *flushQueue) pushFront(e *entry) {
	q.mu.Lock()
	e.at = time.Time{}
	e.queued = true
	if q.head > 0 {
		q.head--
		q.items[q.head], e.qi = e, q.head
	} else {
		q.items = append(q.items, nil)
		copy(q.items[1:], q.items)
		q.items[0], e.qi = e, 0
		for i, x := range q.items[1:] {
			if x != nil {
				x.qi = i + 1
			}
		}
	}
	q.cond.Signal()
	q.mu.Unlock()
}

// pop waits for a ready item; ok is false once the queue is stopping and
// empty.
func (q *flushQueue) pop() (e *entry, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if len(q.items) == q.head {
			if q.stopping {
				return nil, false
			}
			q.cond.Wait()
			continue
		}
		if !q.items[q.head].queued {
			// Canceled while queued: drop it now, whatever its age.
			q.items[q.head] = nil
			q.head++
			q.dead--
			if q.head == len(q.items) {
				q.items, q.head = q.items[:0], 0
			}
			continue
		}
		if wait := q.holdFor(q.items[q.head]); wait > 0 {
			q.wakeIn(wait)
			q.cond.Wait()
			continue
		}
		e = q.items[q.head]
		e.queued = false
		q.items[q.head] = nil
		q.head++
		if q.head == len(q.items) {
			q.items, q.head = q.items[:0], 0
		} else {
			// Let another worker look at the next one: a Signal from
			// push may have been spent on this item.
			q.cond.Signal()
		}
		return e, true
	}
}

// holdFor is how much longer e must stay queued. The caller holds q.mu.
func (q *flushQueue) holdFor(e *entry) time.Duration {
	if q.delay == 0 || e.at.IsZero() || q.stopping || q.draining > 0 {
		return 0
	}
	wait := time.Until(e.at.Add(q.delay))
	if wait > 0 && q.eager() {
		return 0
	}
	return wait
}

// wakeIn arms the timer to wake the workers after d, unless it is armed to
// fire sooner. The caller holds q.mu.
func (q *flushQueue) wakeIn(d time.Duration) {
	at := time.Now().Add(d)
	if !q.timeAt.IsZero() && !q.timeAt.After(at) {
		return
	}
	q.timeAt = at
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.timeUp)
		return
	}
	q.timer.Reset(d)
}

func (q *flushQueue) timeUp() {
	q.mu.Lock()
	q.timeAt = time.Time{}
	q.cond.Broadcast()
	q.mu.Unlock()
}

// hurry waives the delay for a Flush until the returned func is called.
func (q *flushQueue) hurry() (done func()) {
	q.mu.Lock()
	q.draining++
	q.cond.Broadcast()
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		q.draining--
		q.mu.Unlock()
	}
}

// nudge wakes a worker when the eager threshold has been passed, so the
// queue stops holding items back. Called by the PUT that crossed it.
func (q *flushQueue) nudge() {
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *flushQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head - q.dead
}

// takeOver puts e in old's place in the queue with old's age, when old
// (a generation of the same key, being superseded by e) is still queued;
// it reports whether it did. The caller holds e.sh.mu.
func (q *flushQueue) takeOver(old, e *entry) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !old.queued {
		return false
	}
	q.items[old.qi] = e
	e.queued, e.qi, e.at = true, old.qi, old.at
	old.queued = false
	return true
}

// withdraw takes e out of the queue's count (e is canceled, or its
// caller flushes it itself) and reports whether e was still queued; its
// slot is freed at the head or by the next compaction, so withdrawn
// generations never wait out a flush delay in the queue. The caller holds
// e.sh.mu.
func (q *flushQueue) withdraw(e *entry) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !e.queued {
		return false
	}
	e.queued = false
	q.dead++
	return true
}

func (q *flushQueue) stop() {
	q.mu.Lock()
	q.stopping = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.cond.Broadcast()
	q.mu.Unlock()
}

// flushWorker drains q until Close stops it and q is empty. Flushes of
// one key never overlap: a newer generation popped while an older one is
// in the backing is parked behind it (the backing may merge overlapping
// same-key writes, as slab followers take the leader's result, so an
// overlap could leave the older bytes on disk). A key's generations all go
// to the same queue, so the parked one is re-queued where its worker
// still drains.
func (t *Tier) flushWorker(q *flushQueue) {
	for {
		e, ok := q.pop()
		if !ok {
			return
		}
		s := e.sh
		s.mu.Lock()
		if e.canceled {
			s.mu.Unlock()
			continue // resolved and unpinned by whoever canceled it
		}
		if a := s.active[e.key]; a != nil {
			a.next = e
			s.mu.Unlock()
			continue
		}
		e.active = true
		s.active[e.key] = e
		buf := t.bytesOf(e)
		s.mu.Unlock()
		t.flush(e, buf)
	}
}

// flush writes generation e to the backing, retrying flushAttempts times,
// then settles it: committed (DURABLE: the flush-pin drops and the slot
// becomes evictable), canceled meanwhile (not marked durable; a Remove
// waiting for it issues the backing's Remove next), or failed for good
// (the value is dropped from RAM, since it can never become durable, and
// the key's older disk value with it; the tier turns unhealthy unless the
// backing refused the value outright, which says nothing about the disk).
// buf stays valid under e's flush-pin.
func (t *Tier) flush(e *entry, buf []byte) {
	s := e.sh
	var err error
	for attempt := range flushAttempts {
		if attempt > 0 {
			time.Sleep(flushBackoff << (attempt - 1))
			s.mu.Lock()
			canceled := e.canceled
			s.mu.Unlock()
			if canceled {
				break
			}
		}
		if err = t.backing.Put(e.key, buf); err == nil || permanent(err) {
			break
		}
		if errors.Is(err, engine.ErrFailedClosed) {
			t.queueOf(&e.key).failedClosed.Store(true)
			break // it answers so until a restart: retrying only delays the drop
		}
	}
	if err != nil && !errors.Is(err, engine.ErrFailedClosed) {
		t.dropOlder(e)
	}

	s.mu.Lock()
	if s.active[e.key] == e {
		delete(s.active, e.key)
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
		if s.dirty[e.key] == e {
			delete(s.dirty, e.key)
			t.addDirty(e, -1)
		}
	default:
		t.flushDropped.Add(1)
		if s.dirty[e.key] == e {
			delete(s.dirty, e.key)
			t.addDirty(e, -1)
		}
		if t.ownedBy(e) {
			t.unpublish(s, &e.key)
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
		next.q.pushFront(next)
	}
	s.mu.Unlock()
	e.done.Done()
}

// dropOlder removes from the backing the older value of e's key that e,
// failed for good and about to be dropped, was acknowledged to replace:
// the key then reads as a miss, never as the value an acknowledged PUT
// replaced. e is still active, so no other flush or Remove of the key
// overlaps. A disk that failed closed is skipped: it answers no read.
func (t *Tier) dropOlder(e *entry) {
	s := e.sh
	s.mu.Lock()
	canceled := e.canceled
	s.mu.Unlock()
	if canceled {
		return // superseded or removed: not dropped
	}
	if err := t.backing.Remove(e.key); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
		t.log.Error("ram tier: a dropped value's older version could not be removed from the disk; the key may read it",
			"key", e.key, "err", err)
	}
}

// ownedBy reports whether e is still key's visible RAM value. The caller
// holds e.sh.mu.
func (t *Tier) ownedBy(e *entry) bool {
	if e.lg != nil {
		return t.largeOf(&e.key) == e.lg
	}
	r, _, ok := e.sh.alloc.Exist(&e.key)
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

// Flush waits until every value dirty when it is called has been flushed
// to the backing (or canceled by a newer PUT or a Remove) and returns the
// first flush error. Close flushes on its own; Flush is for callers that
// want a durability point without closing (and for tests).
func (t *Tier) Flush() error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.exit()
	for _, q := range t.queues {
		defer q.hurry()()
	}
	var pend []*entry
	for _, s := range t.shards {
		s.mu.Lock()
		for _, e := range s.dirty {
			pend = append(pend, e)
		}
		s.mu.Unlock()
	}
	var first error
	for _, e := range pend {
		if err := t.wait(e); err != nil && first == nil {
			first = err
		}
	}
	return first
}
