package ramtier

import (
	"bytes"
	"fmt"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

// Put implements engine.StoreEngine.
func (t *Tier) Put(key wire.BlockKey, value []byte) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.exit()
	return t.answer(t.cache(key, value, nil))
}

// PutBatch implements engine.StoreEngine: items are admitted in order
// (so a repeated key ends with its last value); with disk acknowledgement
// the flushes of all items are then waited for together.
func (t *Tier) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	if err := t.enter(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return
	}
	defer t.exit()
	t.admitBatch(errs[:len(keys)], func(i int) (*entry, error) { return t.cache(keys[i], values[i], nil) })
}

// answer is a PUT's result: its admission error or, with disk
// acknowledgement, the commit result of the generation it admitted.
func (t *Tier) answer(e *entry, err error) error {
	if e != nil && t.diskAck {
		return t.acked(t.wait(e))
	}
	return err
}

// acked counts a disk-acknowledged PUT whose generation committed (err
// nil) and returns err: with disk acknowledgement a PUT counts when it is
// answered OK, not when RAM admits it (countAdmitted), so one whose flush
// failed for good is not among the acknowledged.
func (t *Tier) acked(err error) error {
	if err == nil {
		t.puts.Add(1)
	}
	return err
}

// countAdmitted counts a PUT that RAM admitted, unless disk
// acknowledgement counts it at its commit (acked).
func (t *Tier) countAdmitted() {
	if !t.diskAck {
		t.puts.Add(1)
	}
}

// admitBatch admits items 0..len(errs)-1 in order with admit, then, with
// disk acknowledgement, waits for all their flushes together (so a batch
// costs one flush wait, not one per item).
func (t *Tier) admitBatch(errs []error, admit func(i int) (*entry, error)) {
	var pend []*entry
	if t.diskAck {
		pend = make([]*entry, len(errs))
	}
	for i := range errs {
		e, err := admit(i)
		errs[i] = err
		if pend != nil {
			pend[i] = e
		}
	}
	for i, e := range pend {
		if e != nil {
			errs[i] = t.acked(t.wait(e))
		}
	}
}

// wait returns the commit result of e, following supersession: a
// generation replaced before it reached the backing reports the result of
// the one that replaced it.
func (t *Tier) wait(e *entry) error {
	for {
		e.done.Wait()
		if e.super == nil {
			return e.err
		}
		e = e.super
	}
}

// cache admits one PUT. It returns the pending generation when the value
// went to RAM (nil when it went to the backing synchronously, or when a
// concurrent Remove made it moot). pre, when not nil, is a slot of key's
// shard that Receive reserved and value is its filled bytes: it becomes
// the new generation without a copy, or is given back.
//
// A write-back admission runs in three steps: reserve (under s.mu: settle
// a pending generation, then take room), copy the value in (no lock), and
// publish (under s.mu again), so no payload copy happens under the lock.
func (t *Tier) cache(key wire.BlockKey, value []byte, pre *slab.SlotRef) (e *entry, err error) {
	st, s := t.locate(&key)
	if pre != nil {
		defer func() {
			if e == nil || e.ref != *pre || e.lg != nil {
				// Not admitted as pre (joined, unchanged, refused, written
				// through, or a Remove won): nothing else pins it.
				t.abortSlot(s, *pre)
			}
		}()
	}
	n := uint64(len(value))
	if err := t.refusal(&key, n); err != nil {
		return nil, err
	}
	st.take(key)
	defer st.give(key)
	if !t.writeBack {
		return nil, t.writeThrough(s, key, value, false)
	}
	if t.bypassesRAM(&key, n) {
		if t.noDisk {
			return nil, t.noRoom(key, n)
		}
		return nil, t.writeThrough(s, key, value, true)
	}
	shadow, had := t.backingLen(key)
	s.mu.Lock()
	p, shadow, had := t.joinPending(s, &key, value, shadow, had)
	if p != nil {
		s.mu.Unlock()
		t.putsJoined.Add(1)
		t.countAdmitted()
		return p, nil
	}
	if had && shadow == n && t.sameResident(s, &key, value) {
		// A re-PUT of the bytes RAM already holds durably (the disk holds
		// a value of this length, and RAM mirrors it): nothing to admit
		// or flush. Keys are content-addressed, so engines re-PUT blocks
		// they lost track of often, and this saves a disk write each.
		s.mu.Unlock()
		t.puts.Add(1)
		t.putsUnchanged.Add(1)
		return nil, nil
	}
	if err := t.pastWatermark(s, &key, n); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	e = &entry{key: key, sh: s, q: t.queueOf(&key), n: n, had: had, shadow: shadow}
	e.done.Add(1)
	dst, ok := t.reserveRoom(s, e, pre)
	s.mu.Unlock()
	if !ok || !t.copyIn(e, dst, value, pre) {
		// No room in RAM: the one synchronous disk path.
		if t.noDisk {
			return nil, fmt.Errorf("ram tier: cache %s: no disk, and every slot RAM could give it is pinned by reads in flight; retry: %w", key, wire.StatusCacheFull)
		}
		return nil, t.writeThrough(s, key, value, true)
	}
	if t.beforePublish != nil {
		t.beforePublish()
	}
	if !t.publish(e, pre) {
		t.puts.Add(1) // acknowledged; a Remove that began meanwhile removed it
		return nil, nil
	}
	t.countAdmitted()
	return e, nil
}

// refusal is why a PUT of n bytes of key is refused before anything is
// admitted, or nil.
func (t *Tier) refusal(key *wire.BlockKey, n uint64) error {
	if n == 0 {
		return fmt.Errorf("ram tier: cache %s: zero-byte value: %w", *key, wire.StatusInvalid)
	}
	if n > t.maxValue {
		return fmt.Errorf("ram tier: cache %s: %d-byte value exceeds the %d-byte maximum: %w", *key, n, t.maxValue, wire.StatusTooLarge)
	}
	if t.writeBack && t.queueOf(key).failedClosed.Load() {
		return fmt.Errorf("ram tier: cache %s: the disk it belongs to failed closed, so it could never be made durable; restart the node once the disk is fixed: %w: %w",
			*key, engine.ErrFailedClosed, wire.StatusIOError)
	}
	return nil
}

// noRoom is the refusal, without a disk, of a PUT that bypassesRAM.
func (t *Tier) noRoom(key wire.BlockKey, n uint64) error {
	if t.limited != nil && t.limited(key.Tenant) {
		return fmt.Errorf("ram tier: cache %s: tenant quotas are enforced on a disk, and this store has none: give it a disk (server.disks) or drop the tenant's quota: %w", key, wire.StatusUnsupported)
	}
	return fmt.Errorf("ram tier: cache %s: the %d-byte value is larger than RAM holds one value (%d-byte extents, a %d-byte large-value reserve) and there is no disk: raise server.ram_tier_large_reserve_bytes: %w",
		key, n, t.extent, t.large.budget, wire.StatusTooLarge)
}

// bypassesRAM reports whether a write-back PUT of n bytes of key goes to
// the backing synchronously: no RAM budget can hold it, or its tenant has
// a quota (a PUT acknowledged from RAM would meet the quota only at flush
// time, where a refusal would drop an acknowledged value).
func (t *Tier) bypassesRAM(key *wire.BlockKey, n uint64) bool {
	return (n > t.extent && n > t.large.budget) || (t.limited != nil && t.limited(key.Tenant))
}

// backingLen is the backing's current length of key and whether it holds
// key, for Stats (a dirty value of a key the backing lacks is one more
// object).
func (t *Tier) backingLen(key wire.BlockKey) (shadow uint64, had bool) {
	shadow, err := t.backing.Exist(key)
	return shadow, err == nil
}

// joinPending settles a same-key generation still pending: identical
// bytes join its commit result (keys are content-addressed, so this is the
// normal case) and it is returned; different bytes will supersede it (the
// engine contract replaces) and nil is returned. A Remove of key in
// progress is waited for, and the backing's length (shadow, had) looked
// up again, so Stats counts this generation as a new object. The caller
// holds s.mu; it is dropped and taken again.
func (t *Tier) joinPending(s *shard, key *wire.BlockKey, value []byte, shadow uint64, had bool) (*entry, uint64, bool) {
	for {
		if waitRemoval(s, key) {
			s.mu.Unlock()
			shadow, had = t.backingLen(*key)
			s.mu.Lock()
			continue
		}
		p := s.dirty[*key]
		if p == nil || p.n != uint64(len(value)) {
			return nil, shadow, had
		}
		if t.sameBytes(p, value) {
			return p, shadow, had
		}
		// sameBytes dropped mu while it compared: look again unless p is
		// still the pending generation and no Remove started.
		if s.dirty[*key] == p && s.removing[*key] == nil {
			return nil, shadow, had
		}
	}
}

// pastWatermark refuses a PUT of n bytes of a key with no RAM owner when
// it would take dirty bytes past the watermark while flushes catch up.
// The caller holds s.mu.
func (t *Tier) pastWatermark(s *shard, key *wire.BlockKey, n uint64) error {
	owned := t.ownerLocked(s, key)
	if dirty := t.dirtyBytes.Load(); !owned && t.dirtyLimit > 0 && dirty+n > t.dirtyLimit {
		return fmt.Errorf("ram tier: cache %s: %d dirty bytes + %d would pass the %d-byte watermark while flushes catch up: %w",
			*key, dirty, n, t.dirtyLimit, wire.StatusCacheFull)
	}
	return nil
}

// reserveRoom takes RAM for new generation e: pre as it is (Receive
// filled it), an arena slot for a value up to one extent (dst is its
// bytes), or a charge to the large-value budget (mapped by copyIn, outside
// the lock). ok is false when there is no room: every slot pinned, or the
// budget held by dirty values. The caller holds s.mu.
func (t *Tier) reserveRoom(s *shard, e *entry, pre *slab.SlotRef) (dst []byte, ok bool) {
	switch {
	case pre != nil:
		e.ref = *pre // filled by the caller already
		return nil, true
	case e.n <= t.extent:
		r, err := s.alloc.Reserve(e.n)
		if err != nil {
			return nil, false
		}
		t.evictions.Add(uint64(len(s.alloc.Victims())))
		e.ref = r
		return t.slotBytes(s, r, e.n), true
	}
	t.large.mu.Lock()
	evicted, ok := t.large.charge(roundPage(e.n))
	t.large.mu.Unlock()
	t.evictions.Add(uint64(evicted))
	return nil, ok
}

// copyIn copies value into e's room dst, first mapping the dedicated
// allocation of a large value (dst nil). With pre the value is there
// already. It reports false, with the large charge given back, when the
// mapping fails.
func (t *Tier) copyIn(e *entry, dst, value []byte, pre *slab.SlotRef) bool {
	if pre != nil {
		return true
	}
	if dst == nil {
		mem, err := mapAnon(roundPage(e.n))
		if err != nil {
			t.large.mu.Lock()
			t.large.used -= roundPage(e.n)
			t.large.mu.Unlock()
			t.log.Warn("ram tier: dedicated allocation failed; writing to disk", "key", e.key, "bytes", e.n, "err", err)
			return false
		}
		e.lg = &largeBuf{mem: mem, n: e.n, refs: 1}
		dst = mem[:e.n]
	}
	copy(dst, value)
	return true
}

// publish makes e its key's visible value and queues its flush. When a
// Remove of the key started while the value was copied in (the PUT
// happened, then the Remove), nothing becomes visible: e's room is given
// back and publish reports false.
func (t *Tier) publish(e *entry, pre *slab.SlotRef) bool {
	s := e.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	// Fence cold reads of key here, in the section that publishes, not
	// before the copy: a GET that missed RAM during the copy started a
	// read of the older disk value, and were it not fenced it could
	// publish that value once this generation is flushed and evicted.
	fence(s, &e.key)
	if rm := s.removing[e.key]; rm != nil {
		rm.cancelled = true
		if e.lg != nil {
			t.unrefLarge(e.lg)
		} else if pre == nil {
			s.alloc.Abort(e.ref)
			s.alloc.Release(e.ref)
		}
		return false
	}
	old := s.dirty[e.key]
	t.swapLarge(e)
	t.swapSlot(e)
	t.enqueue(e, old)
	return true
}

// swapLarge replaces key's dedicated-allocation owner, if any, by e's
// (when e has one), flush-pinned. The caller holds e.sh.mu.
func (t *Tier) swapLarge(e *entry) {
	t.large.mu.Lock()
	var err error
	if lg := t.large.m[e.key]; lg != nil {
		// Replaced by this generation: a slot owner is replaced by
		// swapSlot, a dedicated one here.
		delete(t.large.m, e.key)
		err = t.large.unref(lg)
	}
	if e.lg != nil {
		e.lg.refs++ // flush-pin; the first ref is the published value
		e.lg.dirty = true
		t.large.m[e.key] = e.lg
	}
	t.large.mu.Unlock()
	if err != nil {
		t.log.Error("ram tier: releasing a large value", "err", err)
	}
}

// swapSlot publishes e's slot as key's owner, flush-pinned, replacing an
// older slot owner; a large e only drops the older slot owner (of another
// size). The caller holds e.sh.mu.
func (t *Tier) swapSlot(e *entry) {
	s := e.sh
	if e.lg != nil {
		if r, _, ok := s.alloc.Remove(&e.key); ok {
			s.alloc.Release(r)
		}
		return
	}
	if o, _, replaced := s.alloc.Publish(e.ref, &e.key); replaced {
		s.alloc.Release(o)
	}
	if _, _, _, err := s.alloc.Acquire(&e.key); err != nil { // flush-pin
		panic("BUG: ram tier: flush-pin of a fresh slot: " + err.Error())
	}
}

// enqueue makes e its key's pending generation in place of old (nil if
// none) and queues its flush. A generation still queued hands its place
// (and its age) to the new one, so a key rewritten faster than the flush
// delay is still flushed within the delay of its first dirty write. The
// caller holds e.sh.mu.
func (t *Tier) enqueue(e, old *entry) {
	tookOver := old != nil && e.q.takeOver(old, e)
	if old != nil {
		t.cancel(old, e)
	}
	e.sh.dirty[e.key] = e
	t.addDirty(e, 1)
	if !tookOver {
		e.q.push(e)
	}
}

// sameBytes reports whether pending generation p holds value, comparing
// outside p.sh.mu under an extra pin (a concurrent Remove may release p's
// flush-pin meanwhile). The caller holds p.sh.mu; it is dropped and taken
// again.
func (t *Tier) sameBytes(p *entry, value []byte) bool {
	s := p.sh
	if p.n != uint64(len(value)) {
		return false
	}
	mem, unpin := t.pinBytes(p)
	if mem == nil {
		return false
	}
	s.mu.Unlock()
	same := bytes.Equal(mem, value)
	s.mu.Lock()
	unpin()
	return same && s.dirty[p.key] == p
}

// sameResident reports whether key's visible RAM value is durable (no
// flush pending) and equal to value, comparing outside s.mu under a
// transfer-pin. The caller holds s.mu and key's stripe (so no other PUT
// of key runs); s.mu is dropped and taken again.
func (t *Tier) sameResident(s *shard, key *wire.BlockKey, value []byte) bool {
	if s.dirty[*key] != nil || s.active[*key] != nil {
		return false
	}
	var mem []byte
	t.large.mu.Lock()
	lg := t.large.m[*key]
	if lg != nil {
		lg.refs++
		mem = lg.mem[:lg.n]
	}
	t.large.mu.Unlock()
	var r slab.SlotRef
	if lg == nil {
		ref, n, ok, err := s.alloc.Acquire(key)
		if !ok || err != nil {
			return false
		}
		r = ref
		mem = t.slotBytes(s, r, uint64(n))
	}
	s.mu.Unlock()
	same := bytes.Equal(mem, value)
	s.mu.Lock()
	if lg != nil {
		t.unrefLarge(lg)
		return same && t.largeOf(key) == lg && s.dirty[*key] == nil
	}
	s.alloc.Release(r)
	cur, _, ok := s.alloc.Exist(key)
	return same && ok && cur == r && s.dirty[*key] == nil
}

// addDirty adds (sign 1) or takes away (sign -1) e's dirty accounting.
// The caller holds e.sh.mu.
func (t *Tier) addDirty(e *entry, sign int64) {
	if sign > 0 {
		if after := t.dirtyBytes.Add(e.n); t.flushDelay > 0 && after >= t.eagerBytes && after-e.n < t.eagerBytes {
			// Past the eager threshold: the queues of every disk stop
			// holding their items back, not only the one e joins.
			for _, q := range t.queues {
				q.nudge()
			}
		}
	} else {
		t.dirtyBytes.Add(-e.n)
	}
	if !e.had {
		t.dirtyNew.Add(sign)
		t.dirtyDelta.Add(sign * int64(e.n))
	} else {
		t.dirtyDelta.Add(sign * (int64(e.n) - int64(e.shadow)))
	}
}

// cancel withdraws pending generation p (removed, or superseded by super
// when non-nil). A queued p is resolved here and its flush-pin released;
// an active p is resolved by its flush worker, which then does not mark it
// durable. The caller holds p.sh.mu.
func (t *Tier) cancel(p *entry, super *entry) {
	if p.canceled {
		return
	}
	p.canceled = true
	p.super = super
	if p.sh.dirty[p.key] == p {
		delete(p.sh.dirty, p.key)
		t.addDirty(p, -1)
	}
	if !p.active {
		p.q.withdraw(p)
		t.flushSkipped.Add(1)
		t.releaseFlushPin(p)
		p.done.Done()
	}
}

// releaseFlushPin drops p's flush-pin. The caller holds p.sh.mu.
func (t *Tier) releaseFlushPin(p *entry) {
	if p.lg != nil {
		t.large.mu.Lock()
		p.lg.dirty = false
		err := t.large.unref(p.lg)
		t.large.mu.Unlock()
		if err != nil {
			t.log.Error("ram tier: releasing a large value", "err", err)
		}
	} else {
		p.sh.alloc.Release(p.ref)
	}
}

// writeThrough is the synchronous disk path: write-around mode, values no
// RAM budget can hold, quota-limited tenants, and arena exhaustion by
// pinned slots (bypass). A generation of key still pending in RAM was
// acknowledged, so it is made durable first (flushed here if it is still
// queued, waited for if a worker has it): our write may fail, and the key
// must then read as that generation, not as an older value on the disk.
// The key's RAM owner stays visible until the backing has the new value.
// The caller holds the key's stripe (no other PUT of key runs); s is the
// key's shard.
func (t *Tier) writeThrough(s *shard, key wire.BlockKey, value []byte, bypass bool) error {
	s.mu.Lock()
	for {
		waitRemoval(s, &key)
		if a := s.active[key]; a != nil {
			// A concurrent same-key write may be merged by the
			// backing (slab followers take the leader's result), so ours
			// starts only after the key's flush in flight returned.
			s.mu.Unlock()
			a.done.Wait()
			s.mu.Lock()
			continue
		}
		p := s.dirty[key]
		if p == nil {
			break
		}
		if !p.q.withdraw(p) {
			// A worker popped it, or it is parked behind a flush: it is
			// on its way to the backing.
			s.mu.Unlock()
			p.done.Wait()
			s.mu.Lock()
			continue
		}
		p.active = true
		s.active[key] = p
		buf := t.bytesOf(p)
		s.mu.Unlock()
		t.flush(p, buf) // settles p: durable, or dropped with the tier unhealthy
		s.mu.Lock()
	}
	fence(s, &key)
	s.mu.Unlock()
	err := t.backing.Put(key, value)
	s.mu.Lock()
	t.unpublish(s, &key)
	fence(s, &key)
	s.mu.Unlock()
	if bypass {
		t.putBypass.Add(1)
	}
	if err == nil {
		t.puts.Add(1)
		return nil
	}
	return fmt.Errorf("ram tier: cache %s: backing write: %w", key, err)
}
