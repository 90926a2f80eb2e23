package slab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/dfkv/dfkv/wire"
)

// SlotRef names one slot: extent*MaxSlots + slot. It is dense (an integer
// index, not a pointer), so the key→slot map holds 4 bytes per value and
// the same numbering addresses the slot's fixed record in slots.tbl.
type SlotRef uint32

// Slot states. A slot moves free → reserved (a writer owns it) → live
// (published in the index) → dead (unpublished; its record is being
// cleared) → free once its last pin drops.
const (
	stFree uint8 = iota
	stReserved
	stLive
	stDead
)

const (
	// maxHeat caps a slot's read heat; CLOCK halves it on every pass, so a
	// slot read constantly survives at most log2(maxHeat)+1 passes idle.
	maxHeat = 63
	maxPins = 1<<16 - 1
	// maxReadPins is where Acquire stops: one pin below maxPins stays
	// free for the one unpublish (Publish of a replacement, or Remove)
	// that adds a pin for its caller, so a slot read by 65,534 lenders at
	// once can still be replaced or removed without the count wrapping.
	maxReadPins = maxPins - 1
	// maxLeasePins is where AcquireLease stops. A lease pins a slot for up
	// to its TTL, not for one send, so leases alone must never take the
	// last pins: the rest stay for reads, and a client that leases one
	// key over and over without releasing cannot make it unreadable.
	maxLeasePins = maxReadPins - 4096
)

// slotMeta is the whole in-memory state of one slot: 32 bytes, no
// pointers. The key is the one owned copy of a live value's key (the index
// refers to the slot, see index). While the slot is free, length links the
// extent's free list (next free slot + 1, 0 = end).
type slotMeta struct {
	key    wire.BlockKey
	length uint32
	pins   uint16
	heat   uint8
	state  uint8
}

// extentMeta is one extent of the pool: unbound (class < 0) or bound to a
// class and carved into that class's uniform slots.
type extentMeta struct {
	slots     []slotMeta
	useful    uint64 // bytes of live values
	score     uint64 // Σ live length × (1 + heat): useful bytes weighted by heat
	freeHead  uint32 // free slot + 1; 0 = none
	nfree     uint32
	live      uint32
	busy      uint32 // slots reserved, dead or pinned: the extent cannot move
	class     int16
	inPartial bool
}

// classState is one size class: the extents bound to it, a stack of those
// that may have a free slot, and its CLOCK hand.
type classState struct {
	extents  []uint32
	partial  []uint32
	handExt  int
	handSlot uint32
	// pressure is the class's eviction pressure: the slot bytes it evicted
	// to make room (in its own extents, or in a larger class's it borrowed
	// from) since it last gained an extent, halved for every window bytes
	// evicted anywhere in the pool. Once it reaches a whole extent's worth,
	// the class takes the coldest idle extent of a class under a quarter
	// of its pressure (rebalance). Bytes, not a count of values: a 4 KiB
	// class evicts 256 values for every one a 1 MiB class does, and both
	// the threshold and the comparison with a donor must mean the same for
	// both.
	pressure uint64
	tick     uint64 // the pool's evicted bytes when pressure was last decayed
}

// Victim is a value the allocator evicted to make room; the caller owes it
// accounting (Committed -Length) and stats.
type Victim struct {
	Key    wire.BlockKey
	Length uint32
}

// ErrFull is returned by Reserve when every candidate slot is pinned or
// reserved by I/O in flight: "not now", CACHE_FULL.
var ErrFull = errors.New("no free or evictable slot: every slot of the class is pinned by I/O in flight")

// ErrBusy is returned by Acquire when a slot already has the maximum
// number of pins.
var ErrBusy = errors.New("slot has too many reads in flight")

// Allocator is the media-agnostic slab allocator: it binds extents (by
// index) to lattice classes, carves them into slots, keeps the key→slot
// map, pins, read heat, CLOCK eviction and rebalancing. It owns no files
// and does no I/O, so the disk store and the RAM tier (over an arena)
// share it; the caller maps (extent, slot) to bytes.
//
// It is not safe for concurrent use: the caller holds one metadata lock
// around every call and does its payload I/O outside it, holding a pin.
type Allocator struct {
	lat      *Lattice
	maxSlots uint32
	ext      []extentMeta
	cls      []classState
	unbound  []uint32 // stack; the lowest extent index is on top
	idx      *index

	objects uint64
	used    uint64

	victims []Victim
	rebound int // extent rebound by the last Reserve, -1 if none

	tick   uint64 // slot bytes evicted in the whole pool
	window uint64 // pressure halves every window bytes of tick

	clockSteps uint64 // slots the CLOCK hands have visited, for tests
}

// NewAllocator returns an allocator over extents extents of the lattice's
// extent size, all unbound.
func NewAllocator(lat *Lattice, extents uint32) (*Allocator, error) {
	if extents == 0 {
		return nil, fmt.Errorf("allocator: no extents")
	}
	if uint64(extents)*uint64(lat.MaxSlots()) >= 1<<32-1 {
		return nil, fmt.Errorf("allocator: %d extents of %d slots overflow 32-bit slot numbers; use larger extents", extents, lat.MaxSlots())
	}
	a := &Allocator{
		lat:      lat,
		maxSlots: lat.MaxSlots(),
		ext:      make([]extentMeta, extents),
		cls:      make([]classState, lat.Len()),
		unbound:  make([]uint32, 0, extents),
		rebound:  -1,
		// Two turnovers of the pool (64 extents' worth for a small one):
		// pressure remembers recent demand, not demand from long ago.
		window: max(64, 2*uint64(extents)) * lat.extent,
	}
	a.idx = newIndex(a.keyOf)
	for i := range a.ext {
		a.ext[i].class = -1
	}
	for e := int(extents) - 1; e >= 0; e-- {
		a.unbound = append(a.unbound, uint32(e))
	}
	return a, nil
}

// Lattice returns the allocator's lattice.
func (a *Allocator) Lattice() *Lattice { return a.lat }

// Ref returns the SlotRef of slot s of extent e.
func (a *Allocator) Ref(e, s uint32) SlotRef { return SlotRef(e*a.maxSlots + s) }

// Split returns the extent and slot of r.
func (a *Allocator) Split(r SlotRef) (e, s uint32) {
	return uint32(r) / a.maxSlots, uint32(r) % a.maxSlots
}

// Offset is r's byte offset inside its extent.
func (a *Allocator) Offset(r SlotRef) uint64 {
	e, s := a.Split(r)
	return uint64(s) * a.lat.Size(int(a.ext[e].class))
}

// Class returns the class r's extent is bound to.
func (a *Allocator) Class(r SlotRef) int {
	e, _ := a.Split(r)
	return int(a.ext[e].class)
}

func (a *Allocator) slot(r SlotRef) *slotMeta {
	e, s := a.Split(r)
	return &a.ext[e].slots[s]
}

func (a *Allocator) keyOf(id uint32) *wire.BlockKey { return &a.slot(SlotRef(id)).key }

// Objects and Used are the live values and their bytes.
func (a *Allocator) Objects() uint64 { return a.objects }
func (a *Allocator) Used() uint64    { return a.used }

// Exist returns the slot and length of key's live value.
func (a *Allocator) Exist(key *wire.BlockKey) (SlotRef, uint32, bool) {
	id, ok := a.idx.get(key)
	if !ok {
		return 0, 0, false
	}
	return SlotRef(id), a.slot(SlotRef(id)).length, true
}

// Acquire looks key up for a read: it pins the slot (so it is not reused
// while the read is in flight) and warms its heat. Release must follow.
func (a *Allocator) Acquire(key *wire.BlockKey) (SlotRef, uint32, bool, error) {
	return a.acquire(key, maxReadPins)
}

// AcquireLease is Acquire for a pin that a lease will hold: it finds the
// slot busy once only 4,096 pins are left below Acquire's limit, keeping them for
// reads.
func (a *Allocator) AcquireLease(key *wire.BlockKey) (SlotRef, uint32, bool, error) {
	return a.acquire(key, maxLeasePins)
}

func (a *Allocator) acquire(key *wire.BlockKey, maxPinned uint16) (SlotRef, uint32, bool, error) {
	id, ok := a.idx.get(key)
	if !ok {
		return 0, 0, false, nil
	}
	r := SlotRef(id)
	e, s := a.Split(r)
	em := &a.ext[e]
	sm := &em.slots[s]
	if sm.pins >= maxPinned {
		return 0, 0, true, ErrBusy
	}
	if sm.pins == 0 {
		em.busy++
	}
	sm.pins++
	if sm.heat < maxHeat {
		sm.heat++
		em.score += uint64(sm.length)
	}
	return r, sm.length, true, nil
}

// AcquireNext pins the first live value in a slot at or after from,
// looking at most budget slots (unbound extents count as one), without
// warming it: the scrub walks the disk with it, and its reads say nothing
// about what the cache should keep. When none is found, next is where to
// go on from.
func (a *Allocator) AcquireNext(from SlotRef, budget int) (r SlotRef, key wire.BlockKey, length uint32, next SlotRef, ok bool) {
	e, s := a.Split(from)
	for ; budget > 0 && int(e) < len(a.ext); budget-- {
		em := &a.ext[e]
		if em.class < 0 || s >= uint32(len(em.slots)) {
			e, s = e+1, 0
			continue
		}
		sm := &em.slots[s]
		if sm.state == stLive && sm.pins < maxReadPins {
			if sm.pins == 0 {
				em.busy++
			}
			sm.pins++
			return a.Ref(e, s), sm.key, sm.length, 0, true
		}
		s++
	}
	return 0, key, 0, a.Ref(e, s), false
}

// Pin adds a pin to slot r, which the caller knows to be live, without
// warming it (a writer holding on to what it just published).
func (a *Allocator) Pin(r SlotRef) {
	e, s := a.Split(r)
	em := &a.ext[e]
	sm := &em.slots[s]
	if sm.pins == 0 {
		em.busy++
	}
	sm.pins++
}

// Release drops one pin. A dead slot whose last pin drops becomes free.
func (a *Allocator) Release(r SlotRef) {
	e, s := a.Split(r)
	em := &a.ext[e]
	sm := &em.slots[s]
	if sm.pins == 0 {
		panic(fmt.Sprintf("BUG: slab allocator: release of unpinned slot %d/%d", e, s))
	}
	sm.pins--
	if sm.pins == 0 {
		em.busy--
		if sm.state == stDead {
			a.free(e, s)
		}
	}
}

func (a *Allocator) free(e, s uint32) {
	em := &a.ext[e]
	sm := &em.slots[s]
	// heat 1 marks a freed slot (see takeFree); the field is unused while
	// the slot is free, and slots never used (bind) or restored free stay 0.
	*sm = slotMeta{state: stFree, length: em.freeHead, heat: 1}
	em.freeHead = s + 1
	em.nfree++
	if !em.inPartial {
		em.inPartial = true
		c := &a.cls[em.class]
		c.partial = append(c.partial, e)
	}
}

// Reserve finds a slot for an n-byte value (0 < n <= extent size): a free
// slot of its class, else a fresh extent, else (for a class without
// extents) a borrowed slot of a slightly larger class, else (after
// rebalancing, when it is due) a CLOCK victim of the class. The slot comes
// back reserved with one pin, the writer's. Values evicted on the way are
// in Victims() until the next call; Rebound() names an extent that changed
// class (its slot records must be wiped before any new record is written
// into it).
func (a *Allocator) Reserve(n uint64) (SlotRef, error) {
	a.victims = a.victims[:0]
	a.rebound = -1
	if n == 0 || n > a.lat.extent {
		return 0, fmt.Errorf("allocator: %d-byte value does not fit a %d-byte extent", n, a.lat.extent)
	}
	c := a.lat.ClassOf(n)
	if r, ok := a.takeFree(c, n); ok {
		return r, nil
	}
	if len(a.unbound) > 0 {
		e := a.unbound[len(a.unbound)-1]
		a.unbound = a.unbound[:len(a.unbound)-1]
		a.bind(e, c)
		r, _ := a.takeFree(c, n)
		return r, nil
	}
	cl := &a.cls[c]
	if len(cl.extents) == 0 && a.pressure(c) < a.lat.extent {
		// A size the pool holds no extent for: until the class has shown
		// an extent's worth of demand, a slot of a slightly larger class
		// serves, instead of evicting a whole extent for one value.
		if r, ok := a.borrow(c, n); ok {
			return r, nil
		}
	}
	if len(cl.extents) == 0 || a.pressure(c) >= a.lat.extent {
		if a.rebalance(c, len(cl.extents) == 0) {
			r, _ := a.takeFree(c, n)
			return r, nil
		}
		// No donor now; look again after half as much eviction, not on
		// every PUT (the search walks every extent).
		cl.pressure /= 2
	}
	if r, ok := a.clock(c, n); ok {
		a.charge(c, a.lat.Size(c))
		return r, nil
	}
	if a.rebalance(c, true) {
		r, _ := a.takeFree(c, n)
		return r, nil
	}
	return 0, ErrFull
}

// Victims are the values the last Reserve evicted.
func (a *Allocator) Victims() []Victim { return a.victims }

// Rebound is the extent the last Reserve moved to another class, or -1.
func (a *Allocator) Rebound() int { return a.rebound }

func (a *Allocator) takeFree(c int, n uint64) (SlotRef, bool) {
	cl := &a.cls[c]
	for len(cl.partial) > 0 {
		e := cl.partial[len(cl.partial)-1]
		em := &a.ext[e]
		if int(em.class) != c || em.nfree == 0 {
			cl.partial = cl.partial[:len(cl.partial)-1]
			if int(em.class) == c {
				em.inPartial = false
			}
			continue
		}
		s := em.freeHead - 1
		sm := &em.slots[s]
		em.freeHead = sm.length
		em.nfree--
		em.busy++
		// A freed slot (heat 1 while free) may lie just ahead of the
		// CLOCK hand: its new value counts as touched once, so the hand
		// passes over it on its next round instead of evicting the newest
		// value first. A slot never used fills in order ahead of the hand
		// (first in, first out already), and one the hand hands out is
		// behind it, the youngest position: both start at zero.
		*sm = slotMeta{state: stReserved, pins: 1, length: uint32(n), heat: sm.heat}
		return a.Ref(e, s), true
	}
	return 0, false
}

// borrowLimit bounds the slots a class without extents may borrow: up to
// twice its own size, so a borrowed slot wastes at most half of itself.
const borrowLimit = 2

// borrow reserves, for an n-byte value of class c (which has no extent), a
// free slot of the smallest larger class up to borrowLimit × c's size that
// has one, else a CLOCK victim of the nearest such class that has extents.
// An eviction counts toward c's pressure (c caused it), so a size that
// keeps coming earns an extent of its own.
func (a *Allocator) borrow(c int, n uint64) (SlotRef, bool) {
	limit := borrowLimit * a.lat.Size(c)
	for b := c + 1; b < a.lat.Len() && a.lat.Size(b) <= limit; b++ {
		if r, ok := a.takeFree(b, n); ok {
			return r, true
		}
	}
	for b := c + 1; b < a.lat.Len() && a.lat.Size(b) <= limit; b++ {
		if len(a.cls[b].extents) == 0 {
			continue
		}
		if r, ok := a.clock(b, n); ok {
			a.charge(c, a.lat.Size(b))
			return r, true
		}
	}
	return 0, false
}

// charge adds an eviction of a slot of size bytes to class c's pressure
// and to the pool's evicted bytes.
func (a *Allocator) charge(c int, size uint64) {
	a.pressure(c)
	a.cls[c].pressure += size
	a.tick += size
}

func (a *Allocator) bind(e uint32, c int) {
	em := &a.ext[e]
	n := a.lat.Slots(c)
	*em = extentMeta{class: int16(c), slots: make([]slotMeta, n)}
	for s := n; s > 0; s-- {
		em.slots[s-1].length = em.freeHead
		em.freeHead = s
	}
	em.nfree = n
	em.inPartial = true
	cl := &a.cls[c]
	cl.extents = append(cl.extents, e)
	cl.partial = append(cl.partial, e)
}

// pressure returns class c's eviction pressure, first decaying it by one
// halving per window bytes evicted in the pool since it was last looked
// at, so a class that evicted hard long ago does not hoard extents forever.
func (a *Allocator) pressure(c int) uint64 {
	cl := &a.cls[c]
	if d := (a.tick - cl.tick) / a.window; d > 0 {
		cl.pressure >>= min(d, 63)
		cl.tick += d * a.window
	}
	return cl.pressure
}

// clockBudget bounds one CLOCK run: past it, the coolest idle slot the
// hand has passed is evicted instead of walking on. Without a bound, a
// class whose every slot has heat (a pool just filled, each value
// counting as touched once) is walked end to end in one PUT under the
// metadata lock, which takes most of a second on a class of tens of
// millions of slots.
const clockBudget = 4096

// clock runs class c's CLOCK hand: live unpinned slots with heat are
// halved and passed over, the first one at zero heat is evicted and handed
// to the caller reserved; after clockBudget steps, the coolest one passed
// is. Pinned, reserved and dead slots are never taken.
func (a *Allocator) clock(c int, n uint64) (SlotRef, bool) {
	cl := &a.cls[c]
	if len(cl.extents) == 0 {
		return 0, false
	}
	total := uint64(len(cl.extents)) * uint64(a.lat.Slots(c)+1)
	coolExt, coolSlot, coolHeat := uint32(0), uint32(0), -1
	// Every pass halves every heat, so maxHeat needs 7 passes to reach 0.
	for step := uint64(0); step < 8*total+8; step++ {
		if step == clockBudget {
			if coolHeat >= 0 {
				a.clockSteps += step
				return a.takeVictim(coolExt, coolSlot, n), true
			}
			if !a.anyIdle(c) {
				a.clockSteps += step
				return 0, false // every slot is pinned, reserved or dead
			}
		}
		if cl.handExt >= len(cl.extents) {
			cl.handExt, cl.handSlot = 0, 0
		}
		e := cl.extents[cl.handExt]
		em := &a.ext[e]
		if cl.handSlot >= uint32(len(em.slots)) {
			cl.handExt++
			cl.handSlot = 0
			continue
		}
		s := cl.handSlot
		cl.handSlot++
		sm := &em.slots[s]
		if sm.state != stLive || sm.pins != 0 {
			continue
		}
		if sm.heat > 0 {
			d := sm.heat - sm.heat/2
			sm.heat /= 2
			em.score -= uint64(d) * uint64(sm.length)
			if coolHeat < 0 || int(sm.heat) < coolHeat {
				coolExt, coolSlot, coolHeat = e, s, int(sm.heat)
			}
			continue
		}
		a.clockSteps += step + 1
		return a.takeVictim(e, s, n), true
	}
	a.clockSteps += 8*total + 8
	return 0, false
}

// takeVictim evicts live idle slot (e, s) and hands it to the caller
// reserved for an n-byte value.
func (a *Allocator) takeVictim(e, s uint32, n uint64) SlotRef {
	a.evict(e, s)
	a.ext[e].busy++
	a.ext[e].slots[s] = slotMeta{state: stReserved, pins: 1, length: uint32(n)}
	return a.Ref(e, s)
}

// anyIdle reports whether class c has a slot that is not pinned, reserved
// or dead. It walks the class's extents, so clock asks only when a run
// found nothing to take within its budget.
func (a *Allocator) anyIdle(c int) bool {
	for _, e := range a.cls[c].extents {
		if em := &a.ext[e]; em.busy < uint32(len(em.slots)) {
			return true
		}
	}
	return false
}

// evict unpublishes live slot (e, s) and records it as a victim; the caller
// reuses or frees the slot.
func (a *Allocator) evict(e, s uint32) {
	sm := &a.ext[e].slots[s]
	a.idx.del(&sm.key)
	a.victims = append(a.victims, Victim{Key: sm.key, Length: sm.length})
	a.unlive(e, s)
}

func (a *Allocator) unlive(e, s uint32) {
	em := &a.ext[e]
	sm := &em.slots[s]
	em.live--
	em.useful -= uint64(sm.length)
	em.score -= uint64(sm.length) * (1 + uint64(sm.heat))
	a.objects--
	a.used -= uint64(sm.length)
	sm.heat = 0
}

// rebalance moves one extent from another class to class c: the extent
// with the lowest score (useful bytes weighted by read heat) whose slots
// are all idle (free, or live and unpinned). Unless force, it only takes
// from a class under a quarter of c's eviction pressure (bytes evicted
// lately; memcached's slab automover uses the same signal) and never a
// class's last extent. The moved extent's live values are evicted.
func (a *Allocator) rebalance(c int, force bool) bool {
	pressure := a.pressure(c)
	best, bestScore := -1, uint64(0)
	for e := range a.ext {
		em := &a.ext[e]
		if em.class < 0 || int(em.class) == c {
			continue
		}
		if best >= 0 && em.score >= bestScore {
			continue
		}
		// Hysteresis: a donor under a quarter of c's pressure, one that
		// has all but stopped evicting. A looser test (below c's, or half
		// of it) lets two classes under a steady mix pass extents back
		// and forth (each takes one the moment its pressure reaches an
		// extent's worth, when the other's is just below it), evicting a
		// whole extent every time.
		if !force && (len(a.cls[em.class].extents) < 2 || a.pressure(int(em.class)) >= pressure/4) {
			continue
		}
		if !a.idle(uint32(e)) {
			continue
		}
		best, bestScore = e, em.score
	}
	if best < 0 {
		return false
	}
	e := uint32(best)
	em := &a.ext[e]
	for s := range em.slots {
		if em.slots[s].state == stLive {
			a.evict(e, uint32(s))
		}
	}
	old := &a.cls[em.class]
	for i, x := range old.extents {
		if x == e {
			old.extents = append(old.extents[:i], old.extents[i+1:]...)
			if old.handExt > i {
				old.handExt--
			}
			break
		}
	}
	em.inPartial = false // bind resets it; stale partial entries are skipped
	a.bind(e, c)
	a.rebound = int(e)
	// The class spent an extent's worth of its pressure; what is left over
	// keeps counting, so a class that keeps evicting hard takes its next
	// extent soon, not after starting from nothing every time.
	cl := &a.cls[c]
	cl.pressure -= min(cl.pressure, a.lat.extent)
	return true
}

func (a *Allocator) idle(e uint32) bool { return a.ext[e].busy == 0 }

// Publish makes reserved slot r the live value of key and drops the
// writer's pin. If key had a value, that slot turns dead with one pin for
// the caller, who clears its record and then calls Release(old).
func (a *Allocator) Publish(r SlotRef, key *wire.BlockKey) (old SlotRef, oldLen uint32, replaced bool) {
	e, s := a.Split(r)
	em := &a.ext[e]
	sm := &em.slots[s]
	if sm.state != stReserved {
		panic(fmt.Sprintf("BUG: slab allocator: publish of slot %d/%d in state %d", e, s, sm.state))
	}
	sm.key = *key
	sm.state = stLive
	sm.pins--
	if sm.pins == 0 {
		em.busy--
	}
	em.live++
	em.useful += uint64(sm.length)
	em.score += uint64(sm.length) * (1 + uint64(sm.heat)) // heat from takeFree
	a.objects++
	a.used += uint64(sm.length)
	id, had := a.idx.put(key, uint32(r))
	if !had {
		return 0, 0, false
	}
	old = SlotRef(id)
	oe, os := a.Split(old)
	osm := &a.ext[oe].slots[os]
	oldLen = osm.length
	a.unlive(oe, os)
	osm.state = stDead
	if osm.pins == 0 {
		a.ext[oe].busy++
	}
	osm.pins++
	return old, oldLen, true
}

// Abort gives up reserved slot r (its write failed or was fenced): it turns
// dead, still holding the writer's pin, so the caller can clear whatever
// record it wrote and then Release it.
func (a *Allocator) Abort(r SlotRef) {
	sm := a.slot(r)
	if sm.state != stReserved {
		panic(fmt.Sprintf("BUG: slab allocator: abort of slot %d in state %d", r, sm.state))
	}
	sm.state = stDead
}

// Remove unpublishes key. Its slot turns dead with one pin for the caller,
// who clears the record and then calls Release.
func (a *Allocator) Remove(key *wire.BlockKey) (SlotRef, uint32, bool) {
	id, ok := a.idx.del(key)
	if !ok {
		return 0, 0, false
	}
	r := SlotRef(id)
	e, s := a.Split(r)
	sm := &a.ext[e].slots[s]
	n := sm.length
	a.unlive(e, s)
	sm.state = stDead
	if sm.pins == 0 {
		a.ext[e].busy++
	}
	sm.pins++
	return r, n, true
}

// ErrConflict is returned by Restore for a record that disagrees with the
// extent's binding or geometry.
var ErrConflict = errors.New("record conflicts with the extent's class binding")

// ErrDuplicate is returned by Restore when the key is already restored; the
// caller keeps the newer of the two (by generation).
var ErrDuplicate = errors.New("duplicate key")

// Restore rebuilds one live value from a persisted record: slot s of
// extent e, bound to class c, holding length bytes of key. Restore calls
// run in any order, then FinishRestore builds the free lists; the result
// depends only on the set of records, never on request or scan order.
// A duplicate key returns ErrDuplicate and the slot already holding it.
func (a *Allocator) Restore(e, s uint32, c int, key *wire.BlockKey, length uint32) (SlotRef, error) {
	if int(e) >= len(a.ext) || c < 0 || c >= a.lat.Len() || s >= a.lat.Slots(c) ||
		length == 0 || uint64(length) > a.lat.Size(c) {
		return 0, ErrConflict
	}
	em := &a.ext[e]
	if em.class < 0 {
		em.class = int16(c)
		em.slots = make([]slotMeta, a.lat.Slots(c))
	} else if int(em.class) != c {
		return 0, ErrConflict
	}
	sm := &em.slots[s]
	if sm.state != stFree {
		return 0, ErrConflict
	}
	if id, ok := a.idx.get(key); ok {
		return SlotRef(id), ErrDuplicate
	}
	*sm = slotMeta{key: *key, length: length, state: stLive}
	a.idx.put(key, uint32(a.Ref(e, s)))
	em.live++
	em.useful += uint64(length)
	em.score += uint64(length)
	a.objects++
	a.used += uint64(length)
	return a.Ref(e, s), nil
}

// Unrestore drops a value restored earlier (the older of two duplicates).
func (a *Allocator) Unrestore(r SlotRef) {
	e, s := a.Split(r)
	sm := &a.ext[e].slots[s]
	a.idx.del(&sm.key)
	a.unlive(e, s)
	*sm = slotMeta{}
}

// ReserveIndex sizes the key map for n values before a bulk restore.
func (a *Allocator) ReserveIndex(n int) { a.idx.reserve(n) }

// FinishRestore builds every free list, class extent list and the unbound
// stack from the restored slots, in ascending extent and slot order.
func (a *Allocator) FinishRestore() {
	for c := range a.cls {
		a.cls[c] = classState{}
	}
	a.unbound = a.unbound[:0]
	for e := len(a.ext) - 1; e >= 0; e-- {
		if a.ext[e].class < 0 {
			a.unbound = append(a.unbound, uint32(e))
		}
	}
	for e := range a.ext {
		em := &a.ext[e]
		if em.class < 0 {
			continue
		}
		em.freeHead, em.nfree = 0, 0
		for s := len(em.slots); s > 0; s-- {
			sm := &em.slots[s-1]
			if sm.state == stFree {
				sm.length = em.freeHead
				em.freeHead = uint32(s)
				em.nfree++
			}
		}
		cl := &a.cls[em.class]
		cl.extents = append(cl.extents, uint32(e))
		em.inPartial = em.nfree > 0
	}
	for c := range a.cls {
		cl := &a.cls[c]
		for i := len(cl.extents) - 1; i >= 0; i-- {
			if a.ext[cl.extents[i]].inPartial {
				cl.partial = append(cl.partial, cl.extents[i])
			}
		}
	}
}

// Digest is a hash of the allocator's placement state (bindings, slot
// states, keys, lengths, free lists, unbound extents), for tests that check
// rebuild determinism.
func (a *Allocator) Digest() uint64 {
	h := fnv.New64a()
	var b [8]byte
	w := func(x uint64) { binary.LittleEndian.PutUint64(b[:], x); h.Write(b[:]) }
	for e := range a.ext {
		em := &a.ext[e]
		w(uint64(int64(em.class)))
		w(uint64(em.freeHead)<<32 | uint64(em.nfree))
		for _, sm := range em.slots {
			h.Write(sm.key.ID[:])
			w(sm.key.Tenant)
			w(uint64(sm.length)<<32 | uint64(sm.pins)<<16 | uint64(sm.heat)<<8 | uint64(sm.state))
		}
	}
	// Not the key map's bucket layout, which depends on insertion
	// order; the map's content is the live slots' keys (Check proves it).
	w(uint64(a.idx.n))
	for _, u := range a.unbound {
		w(uint64(u))
	}
	return h.Sum64()
}

// InFlight counts slots that are pinned, reserved or dead (unpublished,
// waiting for their last pin). All three are zero once nothing is in
// flight, which users of the allocator check in tests to find pin leaks.
// It walks every slot, so it is not for the serving path.
func (a *Allocator) InFlight() (pinned, reserved, dead int) {
	for e := range a.ext {
		for _, sm := range a.ext[e].slots {
			if sm.pins > 0 {
				pinned++
			}
			switch sm.state {
			case stReserved:
				reserved++
			case stDead:
				dead++
			}
		}
	}
	return pinned, reserved, dead
}

// Check verifies the allocator's redundant counters against its slots: per
// extent the free list, live count, useful bytes, score and busy count; the
// totals; and that the key map holds exactly the live slots. It walks
// everything, so it is for tests (bbolt's consistency check after every
// test), not for the serving path.
func (a *Allocator) Check() error {
	var objects, used uint64
	for e := range a.ext {
		live, useful, err := a.checkExtent(e)
		if err != nil {
			return err
		}
		objects += uint64(live)
		used += useful
	}
	if objects != a.objects || used != a.used || uint64(a.idx.n) != objects {
		return fmt.Errorf("totals: %d objects %d bytes counted, %d and %d recorded, %d in the key map", objects, used, a.objects, a.used, a.idx.n)
	}
	return nil
}

// checkExtent verifies extent e's counters against its slots and free
// list, and returns its live slots and their useful bytes.
func (a *Allocator) checkExtent(e int) (live uint32, useful uint64, err error) {
	em := &a.ext[e]
	if em.class < 0 {
		if len(em.slots) != 0 && em.live != 0 {
			return 0, 0, fmt.Errorf("unbound extent %d has live slots", e)
		}
		return 0, 0, nil
	}
	var busy uint32
	var score uint64
	for s := range em.slots {
		sm := &em.slots[s]
		if sm.pins > 0 || sm.state == stReserved || sm.state == stDead {
			busy++
		}
		switch sm.state {
		case stLive:
			live++
			useful += uint64(sm.length)
			score += uint64(sm.length) * (1 + uint64(sm.heat))
			if id, ok := a.idx.get(&sm.key); !ok || id != uint32(a.Ref(uint32(e), uint32(s))) {
				return 0, 0, fmt.Errorf("live slot %d/%d (key %s) is not what the key map names", e, s, sm.key)
			}
		case stFree:
			if sm.pins != 0 {
				return 0, 0, fmt.Errorf("free slot %d/%d has %d pins", e, s, sm.pins)
			}
		}
	}
	nfree, err := em.countFree(e)
	if err != nil {
		return 0, 0, err
	}
	if live != em.live || busy != em.busy || nfree != em.nfree || useful != em.useful || score != em.score {
		return 0, 0, fmt.Errorf("extent %d: counted live %d busy %d free %d useful %d score %d; recorded %d %d %d %d %d",
			e, live, busy, nfree, useful, score, em.live, em.busy, em.nfree, em.useful, em.score)
	}
	return live, useful, nil
}

// countFree walks the free list of extent e (em), checking that it holds
// only free slots and ends.
func (em *extentMeta) countFree(e int) (uint32, error) {
	var nfree uint32
	for f := em.freeHead; f != 0; f = em.slots[f-1].length {
		if em.slots[f-1].state != stFree || nfree > uint32(len(em.slots)) {
			return 0, fmt.Errorf("extent %d: free list reaches slot %d in state %d", e, f-1, em.slots[f-1].state)
		}
		nfree++
	}
	return nfree, nil
}
