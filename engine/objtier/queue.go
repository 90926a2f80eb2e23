package objtier

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

// uploadQueue holds the objects waiting for an async upload, one per key:
// a newer PUT of a queued key replaces its object in place, and one that
// arrives while the key's upload is in flight waits for it, so uploads of
// one key never overlap and the newest lands last. Bounded by bytes; a
// full queue refuses (the caller counts the drop).
type uploadQueue struct {
	mu       sync.Mutex
	items    map[wire.BlockKey]*upload
	order    []wire.BlockKey // FIFO of keys with a body to upload
	head     int
	bytes    int64
	maxBytes int64
	drops    uint64
	wake     chan struct{} // a token when order gained a key
	pool     *iobuf.Pool
}

type upload struct {
	body    *iobuf.Buf // the next object to upload; nil when none
	sending *iobuf.Buf // the object in flight, still the newest while body is nil
	// bodyGen and sendingGen are the tier's mark generation when body
	// (and the object in flight) was queued: its landing ends only marks
	// of the key made before that (clearStale).
	bodyGen, sendingGen uint64
	inflight            bool
	// canceled: the object in flight is no longer the key's newest (a
	// REMOVE came, or a newer PUT the full queue refused): it is not
	// retried, served or taken as current when it lands.
	canceled bool
	done     chan struct{} // closed when the upload in flight ends
	tries    int
}

// maxTries is how often a failed upload is tried before it is dropped.
const maxTries = 3

func newUploadQueue(maxBytes int64, pool *iobuf.Pool) *uploadQueue {
	return &uploadQueue{items: make(map[wire.BlockKey]*upload), maxBytes: maxBytes, wake: make(chan struct{}, 1), pool: pool}
}

// add queues body as key's next upload. false: the queue is full and the
// caller still owns body. An older object of the key, queued or in
// flight, is then no longer the key's newest: it is dropped, or (in
// flight) canceled, so it is neither served from the queue nor taken as
// current when it lands (the caller marks the key instead).
func (q *uploadQueue) add(key wire.BlockKey, body *iobuf.Buf, gen uint64) bool {
	n := int64(len(body.B))
	q.mu.Lock()
	u := q.items[key]
	var old *iobuf.Buf
	if u != nil {
		old = u.body
	}
	queued := int64(0)
	if old != nil {
		queued = int64(len(old.B))
	}
	if q.bytes-queued+n > q.maxBytes {
		q.drops++
		if u != nil {
			u.body = nil
			q.bytes -= queued
			if u.inflight {
				u.canceled = true
			} else {
				delete(q.items, key)
			}
		}
		q.mu.Unlock()
		if old != nil {
			q.pool.Put(old)
		}
		return false
	}
	q.bytes += n - queued
	if u == nil {
		u = &upload{}
		q.items[key] = u
	}
	u.body, u.bodyGen, u.tries, u.canceled = body, gen, 0, false
	if old == nil && !u.inflight {
		q.push(key)
	}
	q.mu.Unlock()
	if old != nil {
		q.pool.Put(old)
	}
	return true
}

func (q *uploadQueue) push(key wire.BlockKey) {
	if q.head > 1024 && q.head*2 > len(q.order) {
		q.order = append(q.order[:0], q.order[q.head:]...)
		q.head = 0
	}
	q.order = append(q.order, key)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the next key to upload and its object, marking it in
// flight; ok is false when nothing is queued.
func (q *uploadQueue) take() (key wire.BlockKey, body *iobuf.Buf, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head < len(q.order) {
		key = q.order[q.head]
		q.head++
		u := q.items[key]
		if u == nil || u.body == nil || u.inflight {
			continue
		}
		body, u.body = u.body, nil
		u.sending, u.sendingGen, u.inflight, u.done = body, u.bodyGen, true, make(chan struct{})
		u.tries++
		if q.head < len(q.order) {
			select { // more to do: let another worker in
			case q.wake <- struct{}{}:
			default:
			}
		}
		return key, body, true
	}
	return key, nil, false
}

// finish ends key's upload of body. ok: the upload succeeded. It returns
// whether body was the key's newest object (so a stale mark made before
// gen, body's generation, may end), and whether the upload was dropped
// after its last try.
// tried is false for a call the tier skipped while the bucket was down,
// which does not count as a try.
func (q *uploadQueue) finish(key wire.BlockKey, body *iobuf.Buf, ok, tried bool) (newest, dropped bool, gen uint64) {
	q.mu.Lock()
	u := q.items[key]
	gen = u.sendingGen
	if !tried {
		u.tries--
	}
	u.sending, u.inflight = nil, false
	close(u.done)
	u.done = nil
	switch {
	case u.body != nil: // a newer object arrived meanwhile
		q.bytes -= int64(len(body.B))
		q.pool.Put(body)
		q.push(key)
	case !ok && !u.canceled && u.tries < maxTries:
		u.body, u.bodyGen = body, gen // try again, after the others
		q.push(key)
	default:
		q.bytes -= int64(len(body.B))
		q.pool.Put(body)
		delete(q.items, key)
		newest = ok && !u.canceled
		dropped = !ok && !u.canceled
	}
	q.mu.Unlock()
	return newest, dropped, gen
}

// cancel forgets key's queued object and waits for an upload of it in
// flight to end, so a REMOVE's delete comes after every upload of the
// value it removed.
func (q *uploadQueue) cancel(key wire.BlockKey) {
	q.mu.Lock()
	u := q.items[key]
	if u == nil {
		q.mu.Unlock()
		return
	}
	if u.body != nil {
		q.bytes -= int64(len(u.body.B))
		q.pool.Put(u.body)
		u.body = nil
	}
	if !u.inflight {
		delete(q.items, key)
		q.mu.Unlock()
		return
	}
	u.canceled = true
	done := u.done
	q.mu.Unlock()
	<-done
}

// claim holds key's slot in the queue as if an upload of it were in
// flight, so that a delete or a synchronous upload of key and its async
// uploads reach the bucket one at a time, in the order they took the
// slot: an async upload queued meanwhile waits for unclaim. It waits for
// a write of key in flight to end first. With ifIdle it claims only a key
// with nothing queued or in flight (false otherwise): a delete retry
// leaves a key with an upload to that upload.
func (q *uploadQueue) claim(key wire.BlockKey, ifIdle bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		u := q.items[key]
		switch {
		case u == nil:
			q.items[key] = &upload{inflight: true, done: make(chan struct{})}
			return true
		case ifIdle:
			return false
		case !u.inflight:
			u.inflight, u.done = true, make(chan struct{})
			return true
		}
		done := u.done
		q.mu.Unlock()
		<-done
		q.mu.Lock()
	}
}

// unclaim ends a claim, starting the upload queued meanwhile, if any.
func (q *uploadQueue) unclaim(key wire.BlockKey) {
	q.mu.Lock()
	u := q.items[key]
	u.inflight, u.canceled = false, false
	close(u.done)
	u.done = nil
	if u.body != nil {
		q.push(key)
	} else {
		delete(q.items, key)
	}
	q.mu.Unlock()
}

// copyOf returns a pooled copy of key's newest object waiting for, or in,
// its upload (the newest value of the key, which the bucket may not hold
// yet), or nil.
func (q *uploadQueue) copyOf(key wire.BlockKey, pool *iobuf.Pool) *iobuf.Buf {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.items[key]
	if u == nil {
		return nil
	}
	src := u.body
	if src == nil && !u.canceled {
		src = u.sending // read-only while in flight; returned under mu
	}
	if src == nil {
		return nil
	}
	c := pool.Get(len(src.B))
	copy(c.B, src.B)
	return c
}

// keys lists the keys with an upload queued or in flight.
func (q *uploadQueue) keys() []wire.BlockKey {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := make([]wire.BlockKey, 0, len(q.items))
	for k := range q.items {
		keys = append(keys, k)
	}
	return keys
}

// depth is the number of keys with an upload waiting or in flight, and
// their bytes. A key held only by a claim (a synchronous upload, a
// REMOVE's delete, a delete retry) is no upload and is not counted.
func (q *uploadQueue) depth() (items int, bytes int64, drops uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, u := range q.items {
		if u.body != nil || u.sending != nil {
			items++
		}
	}
	return items, q.bytes, q.drops
}

// uploadWorker uploads queued objects until the tier stops, waiting out
// the bucket's outages rather than failing every queued object at once.
// Once Close began it takes nothing more: what is still queued is Close's
// to drain, under its deadline.
func (t *Tier) uploadWorker() {
	defer t.workers.Done()
	for {
		if d := t.writes.wait(t.clock.Now()); d > 0 {
			select {
			case <-t.stop:
				return
			case <-time.After(d):
			}
		}
		select {
		case <-t.stop:
			return
		default:
		}
		key, body, ok := t.queue.take()
		if !ok {
			select {
			case <-t.stop:
				return
			case <-t.queue.wake:
			}
			continue
		}
		t.uploadOne(t.uploads, key, body)
	}
}

func (t *Tier) uploadOne(ctx context.Context, key wire.BlockKey, body *iobuf.Buf) {
	err := t.callCtx(ctx, OpPut, func(ctx context.Context) error { return t.bucket.Put(ctx, t.name(key), body.B) })
	if err == nil {
		t.bytesOut.Add(uint64(len(body.B)))
		t.uploaded.Add(1)
	}
	tried := !errors.Is(err, errSkipped)
	marked := false
	if gen, last := t.queue.lastTry(key); err != nil && tried && last {
		// Mark the key while its object is still queued: between finish
		// taking the object out and a mark made after, a miss would find
		// neither and read the bucket's older object. The mark takes the
		// dropped value's generation, so a newer value queued meanwhile
		// ends it when its upload lands.
		s := t.stripe(key)
		s.mu.Lock()
		t.markAtLocked(s, key, false, true, gen)
		s.mu.Unlock()
		marked = true
	}
	if err == nil {
		// End the stale marks this value supersedes while the key is still
		// in the queue: a delete retry that claims the key once it leaves
		// then finds no mark, rather than delete this object.
		t.clearStale(key, t.queue.sendingGen(key))
	}
	newest, dropped, gen := t.queue.finish(key, body, err == nil, tried)
	switch {
	case newest:
		t.clearStale(key, gen)
	case dropped:
		t.uploadFails.Add(1)
		if !marked {
			t.markStale(key)
		}
	}
}

// sendingGen is the generation key's upload in flight was queued at.
func (q *uploadQueue) sendingGen(key wire.BlockKey) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if u := q.items[key]; u != nil {
		return u.sendingGen
	}
	return 0
}

// lastTry reports whether key's upload in flight, failing now, would be
// dropped (its last try, with no newer object queued and no REMOVE), and
// the generation its value was queued at.
func (q *uploadQueue) lastTry(key wire.BlockKey) (gen uint64, last bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.items[key]
	if u == nil || u.body != nil || u.canceled || u.tries < maxTries {
		return 0, false
	}
	return u.sendingGen, true
}

// drain uploads what is queued until the queue is empty or ctx ends,
// waiting out the bucket's back-off as the workers do (a skipped upload
// goes back to the queue, and taking it again at once would spin).
func (t *Tier) drain(ctx context.Context) {
	var wg sync.WaitGroup
	for range t.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if d := t.writes.wait(t.clock.Now()); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				key, body, ok := t.queue.take()
				if !ok {
					return
				}
				t.uploadOne(ctx, key, body)
			}
		}()
	}
	wg.Wait()
}
