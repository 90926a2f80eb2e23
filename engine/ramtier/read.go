package ramtier

import (
	"fmt"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

// Get implements engine.StoreEngine: RAM first (a transfer-pin keeps the
// slot while the bytes are copied out), then the backing. A miss reads
// the whole value straight into a reserved, hidden arena slot, publishes
// it as DURABLE and copies out what was asked for; with ReadCoalesce,
// concurrent misses of one key share that one backing read, and without
// it they read the backing on their own (one fill per key at a time; the
// others fill nothing). A range miss fills too, so the ranges that follow
// it (a layer-by-layer load asks for every layer of a block) are RAM hits
// and the next load of the block is served from RAM; a range miss that
// cannot have an arena slot (a value larger than an extent, none free)
// reads only its range from the backing and fills nothing.
func (t *Tier) Get(key wire.BlockKey, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	if err := t.enter(); err != nil {
		return nil, 0, err
	}
	defer t.exit()
	s := t.shardOf(&key)
	join := t.coalesce
	for {
		s.mu.Lock()
		if s.removing[key] != nil {
			s.mu.Unlock()
			t.nfMisses.Add(1)
			return nil, 0, wire.StatusNotFound
		}
		if data, stored, err, ok := t.rangeRAM(s, &key, offset, length, alloc); ok {
			return data, stored, err
		}
		t.misses.Add(1)
		if f := s.fills[key]; f != nil {
			if !join {
				s.mu.Unlock()
				return t.rangeBacking(key, offset, length, alloc)
			}
			if (offset != 0 || length != 0) && !f.isDecided {
				s.mu.Unlock()
				<-f.decided
				s.mu.Lock()
			}
			if (offset != 0 || length != 0) && !f.slotted {
				// The fill reads the value into no slot: this range
				// reads its own bytes rather than wait for all of them.
				s.mu.Unlock()
				return t.rangeBacking(key, offset, length, alloc)
			}
			// Joined after the fill was resolved, this read finds no
			// copy and goes round again, as a fenced fill's followers do.
			f.waiters++
			s.mu.Unlock()
			<-f.done
			if f.err != nil {
				if wire.StatusOf(f.err) == wire.StatusNotFound {
					t.nfMisses.Add(1)
				}
				return nil, 0, f.err
			}
			if f.data != nil {
				t.sharedHits.Add(1) // the backing's one read served it too
				return copyOut(f.data, f.stored, offset, length, alloc)
			}
			// Published (read it from RAM) or fenced (read the backing
			// on our own rather than join another fill).
			join = f.published
			continue
		}
		f := newFill()
		s.fills[key] = f
		s.mu.Unlock()
		return t.coldRead(s, key, f, offset, length, alloc)
	}
}

// rangeRAM serves key from RAM if it is there. The caller holds s.mu; it
// is released when ok.
func (t *Tier) rangeRAM(s *shard, key *wire.BlockKey, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error, bool) {
	t.large.mu.Lock()
	if lg := t.large.m[*key]; lg != nil {
		lg.refs++ // transfer-pin
		t.large.mu.Unlock()
		s.mu.Unlock()
		t.hits.Add(1)
		data, stored, err := copyOut(lg.mem[:lg.n], lg.n, offset, length, alloc)
		t.unrefLarge(lg)
		return data, stored, err, true
	}
	t.large.mu.Unlock()
	r, n, ok, err := s.alloc.Acquire(key)
	if !ok {
		return nil, 0, nil, false
	}
	if err != nil {
		s.mu.Unlock()
		return nil, 0, fmt.Errorf("ram tier: get %s: %w: %w", *key, err, wire.StatusUnavailable), true
	}
	src := t.slotBytes(s, r, uint64(n))
	s.mu.Unlock()
	t.hits.Add(1)
	data, stored, err := copyOut(src, uint64(n), offset, length, alloc)
	t.release(s, r)
	return data, stored, err, true
}

// copyOut applies the range contract to a resident value src.
func copyOut(src []byte, stored, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	n, ok := wire.RangeLen(stored, offset, length)
	if !ok {
		return nil, stored, fmt.Errorf("ram tier: range: offset %d past the stored length %d: %w", offset, stored, wire.StatusInvalid)
	}
	if n == 0 {
		return nil, stored, nil
	}
	dst := alloc.Alloc(int(n))
	copy(dst, src[offset:offset+n])
	return dst[:n], stored, nil
}

func (t *Tier) rangeBacking(key wire.BlockKey, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	t.backingReads.Add(1)
	data, stored, err := t.backing.Get(key, offset, length, alloc)
	if err != nil {
		return nil, stored, fmt.Errorf("ram tier: get %s: backing: %w", key, err)
	}
	return data, stored, nil
}

// slotAlloc hands the backing the reserved arena slot when it asks for
// the expected length (or that length rounded up for O_DIRECT, which the
// slot's 4 KiB-multiple capacity holds), and the caller's allocator
// otherwise (the value changed size since Exist).
type slotAlloc struct {
	slot  []byte
	user  engine.Allocator
	inRAM bool
}

func (a *slotAlloc) Alloc(n int) []byte {
	if a.slot != nil && !a.inRAM && n >= len(a.slot) && n <= cap(a.slot) {
		a.inRAM = true
		return a.slot[:n]
	}
	return a.user.Alloc(n)
}

// coldRead is the leader of a miss of key: it reserves a hidden arena slot
// (RESERVED), has the backing read the whole value straight into it (no
// staging copy), and publishes it as DURABLE unless a PUT or REMOVE of the
// key fenced the fill meanwhile. The reply, the range [offset, +length)
// (both 0: the whole value), is copied out of the slot under the
// reservation's pin, which becomes the transfer-pin on publish.
func (t *Tier) coldRead(s *shard, key wire.BlockKey, f *fill, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	ranged := offset != 0 || length != 0
	resolve := func(stored uint64, err error) {
		s.mu.Lock()
		if s.fills[key] == f {
			delete(s.fills, key)
		}
		f.decide(false) // no-op when a slot was decided on
		f.stored, f.err = stored, err
		s.mu.Unlock()
		close(f.done)
	}
	n, err := t.backing.Exist(key)
	if err != nil {
		if wire.StatusOf(err) == wire.StatusNotFound {
			t.nfMisses.Add(1)
		}
		err = fmt.Errorf("ram tier: get %s: backing: %w", key, err)
		resolve(0, err)
		return nil, 0, err
	}
	sa := &slotAlloc{user: alloc}
	var r slab.SlotRef
	reserved := false
	if _, ok := wire.RangeLen(n, offset, length); ranged && !ok {
		// An offset past the value: nothing to fill RAM for (the backing
		// answers INVALID with the stored length).
		resolve(0, nil)
		return t.rangeBacking(key, offset, length, alloc)
	}
	s.mu.Lock()
	if n > 0 && n <= t.extent && !f.fenced {
		if rr, rerr := s.alloc.Reserve(n); rerr == nil {
			r, reserved = rr, true
			t.evictions.Add(uint64(len(s.alloc.Victims())))
			sa.slot = t.slotBytes(s, r, n)
		}
	}
	f.decide(reserved)
	s.mu.Unlock()
	if ranged && !reserved {
		// No slot to fill: the waiting reads go on their own, and this
		// one reads its range alone rather than the whole value.
		resolve(0, nil)
		return t.rangeBacking(key, offset, length, alloc)
	}
	if ranged {
		// Should the value have changed size since Exist, the slot does
		// not take it, and the caller's allocator (sized for the range)
		// must not be asked for the whole value either.
		sa.user = iobuf.Heap{}
	}
	t.backingReads.Add(1)
	data, stored, err := t.backing.Get(key, 0, 0, sa)
	if err != nil {
		err = fmt.Errorf("ram tier: get %s: backing: %w", key, err)
	}
	if !sa.inRAM || err != nil {
		// Nothing of ours holds the value: give the slot back.
		s.mu.Lock()
		if reserved {
			s.alloc.Abort(r)
			s.alloc.Release(r)
		}
		if err == nil && f.waiters > 0 {
			f.data = append([]byte(nil), data...)
		}
		s.mu.Unlock()
		resolve(stored, err)
		if ranged && err == nil {
			return copyOut(data, stored, offset, length, alloc)
		}
		return data, stored, err
	}
	// The value is in the reserved slot.
	whole := stored == n && uint64(len(data)) == n && len(data) > 0 && &data[0] == &sa.slot[0]
	s.mu.Lock()
	pinned := r
	if whole && !f.fenced && !t.ownerLocked(s, &key) {
		if o, _, replaced := s.alloc.Publish(r, &key); replaced {
			s.alloc.Release(o)
		}
		pr, _, _, aerr := s.alloc.Acquire(&key) // transfer-pin
		if aerr != nil {
			panic("BUG: ram tier: transfer-pin of a fresh slot: " + aerr.Error())
		}
		pinned = pr
		f.published = true
	} else {
		s.alloc.Abort(r) // our pin keeps the bytes until the copy below
	}
	s.mu.Unlock()
	out, _, cerr := copyOut(data, stored, offset, length, alloc)
	s.mu.Lock()
	if !f.published && f.waiters > 0 {
		f.data = append([]byte(nil), data...)
	}
	s.alloc.Release(pinned)
	s.mu.Unlock()
	resolve(stored, nil)
	return out, stored, cerr
}

// Exist implements engine.StoreEngine.
func (t *Tier) Exist(key wire.BlockKey) (uint64, error) {
	if err := t.enter(); err != nil {
		return 0, err
	}
	defer t.exit()
	if n, decided, err := t.existRAM(key); decided {
		return n, err
	}
	stored, err := t.backing.Exist(key)
	return backingExist(key, stored, err)
}

// ExistBatch implements engine.BatchExister: RAM answers what it holds,
// and the keys it lacks go to the backing together (engine.ExistBatch).
func (t *Tier) ExistBatch(keys []wire.BlockKey, stored []uint64, errs []error) {
	if err := t.enter(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return
	}
	defer t.exit()
	if _, ok := t.backing.(engine.BatchExister); !ok {
		// Nothing to gain from gathering the misses: answer in place,
		// with no allocation.
		for i, k := range keys {
			var decided bool
			if stored[i], decided, errs[i] = t.existRAM(k); !decided {
				st, err := t.backing.Exist(k)
				stored[i], errs[i] = backingExist(k, st, err)
			}
		}
		return
	}
	var rest []int
	for i, k := range keys {
		var decided bool
		if stored[i], decided, errs[i] = t.existRAM(k); !decided {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		return
	}
	ks := make([]wire.BlockKey, len(rest))
	for j, i := range rest {
		ks[j] = keys[i]
	}
	st, es := make([]uint64, len(rest)), make([]error, len(rest))
	engine.ExistBatch(t.backing, ks, st, es)
	for j, i := range rest {
		stored[i], errs[i] = backingExist(keys[i], st[j], es[j])
	}
}

// existRAM answers EXIST from RAM when it can: decided is false when the
// backing must be asked.
func (t *Tier) existRAM(key wire.BlockKey) (n uint64, decided bool, err error) {
	s := t.shardOf(&key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removing[key] != nil {
		return 0, true, wire.StatusNotFound
	}
	if lg := t.largeOf(&key); lg != nil {
		return lg.n, true, nil
	}
	if _, m, ok := s.alloc.Exist(&key); ok {
		return uint64(m), true, nil
	}
	return 0, false, nil
}

// backingExist maps the backing's EXIST answer to the tier's.
func backingExist(key wire.BlockKey, stored uint64, err error) (uint64, error) {
	switch {
	case err == nil:
		return stored, nil
	case wire.StatusOf(err) == wire.StatusNotFound:
		return 0, wire.StatusNotFound // a miss costs no allocation (engine.StoreEngine)
	}
	return 0, fmt.Errorf("ram tier: lookup %s: backing: %w", key, err)
}

// Remove implements engine.StoreEngine. The key is hidden at once, a
// queued flush is canceled, and an active flush or hidden cold-read
// reservation is fenced: the backing's Remove runs only after the key's
// flush in flight returned, so no later completion brings the key back.
func (t *Tier) Remove(key wire.BlockKey) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.exit()
	s := t.shardOf(&key)
	s.mu.Lock()
	waitRemoval(s, &key)
	// An acknowledged generation this Remove cancels, queued or with its
	// flush under way (a canceled flush may end without writing, between
	// retries say): its bytes are kept pinned until the backing's Remove
	// returns, so a failed Remove can put them back rather than leave the
	// key reading the older value the disk still has. If the flush did
	// land, the write-back rewrites the same bytes.
	var keep []byte
	var unkeep func()
	if p := s.dirty[key]; p != nil {
		keep, unkeep = t.pinBytes(p)
	}
	found := t.unpublish(s, &key)
	if p := s.dirty[key]; p != nil {
		t.cancel(p, nil)
		found = true
	}
	act := s.active[key]
	fence(s, &key)
	rm := &removal{done: make(chan struct{})}
	s.removing[key] = rm
	s.mu.Unlock()

	if act != nil {
		act.done.Wait()
	}
	err := t.backing.Remove(key)
	if keep != nil {
		if err != nil && wire.StatusOf(err) != wire.StatusNotFound {
			// Still under s.removing: no PUT of key can land meanwhile.
			if werr := t.backing.Put(key, keep); werr != nil {
				t.log.Error("ram tier: a Remove failed and the value it canceled could not be written back; the key may read an older value",
					"key", key, "remove_err", err, "write_err", werr)
			}
		}
		s.mu.Lock()
		unkeep()
		s.mu.Unlock()
	}

	s.mu.Lock()
	delete(s.removing, key)
	fence(s, &key)
	found = found || rm.cancelled
	s.mu.Unlock()
	close(rm.done)
	switch {
	case err == nil || (found && wire.StatusOf(err) == wire.StatusNotFound):
		t.removes.Add(1)
		return nil
	case wire.StatusOf(err) == wire.StatusNotFound:
		return wire.StatusNotFound
	default:
		return fmt.Errorf("ram tier: remove %s: backing: %w", key, err)
	}
}

// pinBytes takes an extra pin on pending generation p's bytes, which must
// still be key's RAM owner, and returns them with the func that drops the
// pin (called with p.sh.mu held). It returns nil bytes when p is not the
// owner. The caller holds p.sh.mu.
func (t *Tier) pinBytes(p *entry) ([]byte, func()) {
	s := p.sh
	if p.lg != nil {
		t.large.mu.Lock()
		defer t.large.mu.Unlock()
		if t.large.m[p.key] != p.lg {
			return nil, nil
		}
		p.lg.refs++
		return p.lg.mem[:p.n], func() { t.unrefLarge(p.lg) }
	}
	r, _, ok, err := s.alloc.Acquire(&p.key)
	if !ok || err != nil || r != p.ref {
		if ok && err == nil {
			s.alloc.Release(r)
		}
		return nil, nil
	}
	return t.slotBytes(s, r, p.n), func() { s.alloc.Release(r) }
}
