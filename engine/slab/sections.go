package slab

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
)

// Ranged reads by sections.
//
// A payload checksum covers the whole value, so a range of a value can be
// vouched for only by reading all of it. An engine that loads a block
// layer by layer (vLLM's synchronous and hybrid loads ask for each layer's
// bytes of every block separately) would then read each block from disk
// once per layer: 32 layers, 32 times the block's bytes.
//
// So the first ranged read of a value reads and verifies all of it, as
// before, and on the way takes the CRC-32C of each of its sections (runs
// of 2^shift bytes, at least minSectionShift, at most maxSections of them)
// into a sectionTable, remembered per slot in a bounded cache. A later
// ranged read of the value reads only the sections its range touches and
// checks each against its remembered sum. Concurrent first reads of one
// value (a layer-by-layer load asks for every layer at once) share the
// leader's whole read: the others wait for it and copy their ranges from
// its checked bytes.
//
// A table is a hint, never the authority. It is used only while the slot
// holds a value of the same length and payload checksum as the one it was
// taken from; a section that fails its sum sends the read to the
// whole-value check, which decides as it always has: the value is served
// (and the table taken afresh) or dropped. So a stale table can cost a
// read, never serve a byte that is not the value's, and nothing needs to
// forget a slot's table when the slot is reused. A range whose sections
// pass is served even if another section of the value rotted since it was
// checked: the read that touches that section, or the scrub, drops it.

const (
	// minSectionShift is the smallest section, 16 KiB: a multiple of
	// the 4 KiB O_DIRECT alignment, and fine enough that a layer's slice
	// of a 1 MiB block (32 KiB for 32 layers) reads about its own size.
	minSectionShift = 14
	// maxSections bounds a table to 1 KiB of sums; larger values get
	// larger sections.
	maxSections = 256
	// sectionTables is how many tables a store remembers; the oldest go
	// first. A table of a 1 MiB value is 64 sums, so the cache holds
	// about 4 MiB of sums per disk (16 MiB at most, all of 256 sections),
	// enough for every block of the loads in flight.
	sectionTables = 16 << 10
)

// sectionShift is the section size, as a shift, for a value of stored
// bytes; 0 means the value is too small to be worth sections (a ranged
// read of it reads it whole).
func sectionShift(stored uint64) uint {
	if stored < 2<<minSectionShift {
		return 0
	}
	shift := uint(minSectionShift)
	if per := (stored + maxSections - 1) / maxSections; per > 1<<shift {
		shift = uint(bits.Len64(per - 1))
	}
	return shift
}

// sectionTable holds the sums of one value's sections, each the CRC-32C of
// the section's bytes extended from the value's checksum seed.
type sectionTable struct {
	want   uint32 // the value's payload checksum the sections were verified under
	stored uint64 // the value's length
	shift  uint
	sums   []uint32
	pos    int // its place in the cache's ring
}

// sectionCache remembers sectionTables per slot, the newest sectionTables
// of them, and runs one whole read per value at a time to make one.
type sectionCache struct {
	mu      sync.Mutex
	tables  map[SlotRef]*sectionTable
	ring    []SlotRef // the slots tables were put for, oldest at next
	next    int
	flights map[SlotRef]*sectionFlight
}

// sectionFlight is a whole read taking a value's table. The ranged reads
// of the value that arrive meanwhile wait for it and, when the value fit
// one buffer, copy their bytes out of the leader's verified copy instead
// of reading the disk again.
type sectionFlight struct {
	done chan struct{}
	want uint32 // the payload checksum the leader verifies against
	// Set by the leader before done closes.
	value   []byte // the whole verified value, in buf; nil: not shared
	corrupt bool   // the value failed its payload checksum
	buf     *iobuf.Buf
	// refs counts the holders of buf: the leader until it lands and each
	// waiting read until it has copied; the last one pools buf.
	refs atomic.Int32
}

// unref lets go of f's buffer; the last holder returns it to pool.
func (f *sectionFlight) unref(pool *iobuf.Pool) {
	if f.refs.Add(-1) == 0 && f.buf != nil {
		pool.Put(f.buf)
	}
}

func newSectionCache() *sectionCache {
	return &sectionCache{
		tables:  make(map[SlotRef]*sectionTable),
		flights: make(map[SlotRef]*sectionFlight),
	}
}

// lookup returns r's table if it was taken from a value of stored bytes
// and checksum want. Otherwise, if another read is taking one and join is
// set, it returns that read's flight, holding a reference the caller must
// unref once done with it; if none is, the caller leads and must call land
// with the returned flight.
func (c *sectionCache) lookup(r SlotRef, want uint32, stored uint64, join bool) (t *sectionTable, f *sectionFlight, lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.tables[r]; t != nil && t.want == want && t.stored == stored {
		return t, nil, false
	}
	if f := c.flights[r]; f != nil {
		if !join {
			return nil, nil, false
		}
		f.refs.Add(1)
		return nil, f, false
	}
	return nil, c.begin(r, want), true
}

// retake starts a flight for r to take its table afresh, unless one is
// under way (then it returns nil); the caller leads and must call land.
func (c *sectionCache) retake(r SlotRef, want uint32) *sectionFlight {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flights[r] != nil {
		return nil
	}
	return c.begin(r, want)
}

// begin starts a flight for r's value of checksum want (c.mu held); the
// leader holds a reference.
func (c *sectionCache) begin(r SlotRef, want uint32) *sectionFlight {
	f := &sectionFlight{done: make(chan struct{}), want: want}
	f.refs.Store(1)
	c.flights[r] = f
	return f
}

// land ends the leader's flight f for r, remembering t when it is not nil
// and forgetting r's table when the value was corrupt; f's waiting reads
// go on. The leader then lets go of its reference.
func (c *sectionCache) land(r SlotRef, f *sectionFlight, t *sectionTable) {
	c.mu.Lock()
	if t != nil {
		c.put(r, t)
	}
	if f.corrupt {
		delete(c.tables, r)
	}
	if c.flights[r] == f {
		delete(c.flights, r)
	}
	c.mu.Unlock()
	close(f.done)
}

// put remembers t for r (c.mu held), forgetting the oldest table when the
// ring is full.
func (c *sectionCache) put(r SlotRef, t *sectionTable) {
	if len(c.ring) < sectionTables {
		t.pos = len(c.ring)
		c.ring = append(c.ring, r)
	} else {
		// The ring's oldest entry may name a slot whose table was
		// replaced since; only the table put at this place goes.
		if old := c.tables[c.ring[c.next]]; old != nil && old.pos == c.next {
			delete(c.tables, c.ring[c.next])
		}
		t.pos = c.next
		c.ring[c.next] = r
		c.next = (c.next + 1) % sectionTables
	}
	if old := c.tables[r]; old != nil && old.pos != t.pos && c.ring[old.pos] == r {
		// The older place now names nothing; the ring moves past it.
		c.ring[old.pos] = ^SlotRef(0)
	}
	c.tables[r] = t
}

// readRangeBySections is readVerified for a strict sub-range of a value of
// at least two sections (see the comment at the top of this file). ok is
// false when the value failed its payload checksum; then no byte is
// returned.
func (s *Store) readRangeBySections(r SlotRef, e uint32, slotOff, stored, off, n uint64, shift uint, seed, want uint32, alloc engine.Allocator) ([]byte, bool, error) {
	t, f, lead := s.sections.lookup(r, want, stored, true)
	if f != nil && !lead {
		<-f.done
		// A pinned slot's value does not change, and the leader and this
		// read both pin the slot, so the leader's value is this read's;
		// the checks are belt and braces.
		value, corrupt := f.value, f.corrupt && f.want == want
		if value != nil && f.want == want && uint64(len(value)) == stored {
			dst := alloc.Alloc(int(n))[:n:n]
			copy(dst, value[off:off+n])
			f.unref(s.pool)
			return dst, true, nil
		}
		f.unref(s.pool)
		if corrupt {
			return nil, false, nil
		}
		// The leader failed or its value was too large to share: look
		// again, but wait for no second flight.
		t, f, lead = s.sections.lookup(r, want, stored, false)
		if t == nil && !lead {
			return s.readRangeVerified(e, slotOff, stored, off, n, seed, want, alloc)
		}
	}
	if t != nil {
		data, ok, err := s.readSections(t, e, slotOff, off, n, seed, alloc)
		if ok || err != nil {
			return data, ok, err
		}
		// A section failed its sum: the whole value decides, and a
		// value that passes gets a fresh table.
		s.sectionMisses.Add(1)
		if f = s.sections.retake(r, want); f == nil {
			// Another read is taking the table afresh meanwhile.
			return s.readRangeVerified(e, slotOff, stored, off, n, seed, want, alloc)
		}
	}
	return s.leadSections(r, f, e, slotOff, stored, off, n, shift, seed, want, alloc)
}

// leadSections runs flight f: the whole read that takes r's table. The
// flight lands however takeSections ends, so no read waits on it forever.
func (s *Store) leadSections(r SlotRef, f *sectionFlight, e uint32, slotOff, stored, off, n uint64, shift uint, seed, want uint32, alloc engine.Allocator) (dst []byte, ok bool, err error) {
	t := &sectionTable{want: want, stored: stored, shift: shift, sums: make([]uint32, (stored+1<<shift-1)>>shift)}
	defer func() {
		if !ok || err != nil {
			t = nil
		} else {
			s.sectionBuilds.Add(1)
		}
		s.sections.land(r, f, t)
		f.unref(s.pool)
	}()
	return s.takeSections(f, t, e, slotOff, stored, off, n, seed, want, alloc)
}

// takeSections is the leader's whole read: it verifies the value against
// want, fills t.sums, returns the range [off, off+n) in a buffer from
// alloc, and leaves in f what the reads waiting on it need. A value of at
// most chunkBytes is read in one piece into a pooled buffer that f shares
// with them; a larger one streams through sumValue's pieces, and they read
// for themselves.
func (s *Store) takeSections(f *sectionFlight, t *sectionTable, e uint32, slotOff, stored, off, n uint64, seed, want uint32, alloc engine.Allocator) ([]byte, bool, error) {
	dst := alloc.Alloc(int(n))[:n:n]
	if stored > chunkBytes {
		sum, err := s.sumValueSections(e, slotOff, stored, seed, off, dst, t)
		f.corrupt = err == nil && sum != want
		return dst, err == nil && sum == want, err
	}
	w := stored
	if s.direct {
		w = alignUp(stored, s.align)
	}
	buf := s.pool.Get(int(alignUp(stored, pageAlign)))
	got, err := s.readAt(s.extents[e], buf.B[:w], int64(slotOff))
	if uint64(got) < stored {
		s.pool.Put(buf)
		if err == nil {
			err = fmt.Errorf("short read: %d of %d bytes", got, w)
		}
		return nil, false, err
	}
	value := buf.B[:stored]
	sum := s.sumSections(t, value, seed)
	if sum != want {
		s.pool.Put(buf)
		f.corrupt = true
		return nil, false, nil
	}
	copy(dst, value[off:off+n])
	f.buf, f.value = buf, value
	return dst, true, nil
}

// sumSections fills t.sums from value (all of it) and returns the payload
// checksum of the whole value, both extended from seed.
func (s *Store) sumSections(t *sectionTable, value []byte, seed uint32) uint32 {
	size := uint64(1) << t.shift
	for i := range t.sums {
		lo := uint64(i) * size
		t.sums[i] = crc32.Update(seed, castagnoli, value[lo:min(uint64(len(value)), lo+size)])
	}
	return crc32.Update(seed, castagnoli, value)
}

// sectionSlack is how many bytes more than a range its sections may span
// for them to be read straight into the caller's buffer; a range whose
// sections span more (large sections, a small range) reads them into a
// pooled buffer and copies the range out, so the caller is never asked for
// much more than it reserved for the range.
const sectionSlack = 64 << 10

// readSections reads the sections of t's value that [off, off+n) touches
// and checks each against its sum. ok is false when one fails.
func (s *Store) readSections(t *sectionTable, e uint32, slotOff, off, n uint64, seed uint32, alloc engine.Allocator) ([]byte, bool, error) {
	first, last := off>>t.shift, (off+n-1)>>t.shift
	start, end := first<<t.shift, min(t.stored, (last+1)<<t.shift)
	into := alloc
	var staged *poolAlloc
	if span := alignUp(end-start, pageAlign); span > n+sectionSlack {
		if span > chunkBytes {
			return s.readEachSection(t, e, slotOff, off, n, seed, alloc)
		}
		staged = &poolAlloc{pool: s.pool}
		into = staged
		defer staged.release()
	}
	data, err := s.readPayload(e, slotOff, start, end-start, into)
	if err != nil {
		return nil, false, err
	}
	for i := first; i <= last; i++ {
		lo, hi := i<<t.shift-start, min(end, (i+1)<<t.shift)-start
		if crc32.Update(seed, castagnoli, data[lo:hi]) != t.sums[i] {
			return nil, false, nil
		}
	}
	s.sectionReads.Add(1)
	data = data[off-start : off-start+n : off-start+n]
	if staged != nil {
		dst := alloc.Alloc(int(n))[:n:n]
		copy(dst, data)
		data = dst
	}
	return data, true, nil
}

// readEachSection is readSections for a range whose sections together
// are larger than a pooled buffer (a small range across two sections of a
// value of more than 512 MiB, whose sections are 4 MiB): it reads one
// touched section at a time into a pooled buffer, checks it and copies
// its overlap with the range out, so the caller is asked only for the
// range.
func (s *Store) readEachSection(t *sectionTable, e uint32, slotOff, off, n uint64, seed uint32, alloc engine.Allocator) ([]byte, bool, error) {
	staged := &poolAlloc{pool: s.pool}
	defer staged.release()
	var dst []byte
	for i := off >> t.shift; i <= (off+n-1)>>t.shift; i++ {
		lo, hi := i<<t.shift, min(t.stored, (i+1)<<t.shift)
		data, err := s.readPayload(e, slotOff, lo, hi-lo, staged)
		if err != nil {
			return nil, false, err
		}
		if crc32.Update(seed, castagnoli, data) != t.sums[i] {
			return nil, false, nil
		}
		if dst == nil {
			dst = alloc.Alloc(int(n))[:n:n]
		}
		a, b := max(off, lo), min(off+n, hi)
		copy(dst[a-off:], data[a-lo:b-lo])
	}
	s.sectionReads.Add(1)
	return dst, true, nil
}

// poolAlloc is an engine.Allocator of one buffer from a pool, given back
// by release.
type poolAlloc struct {
	pool *iobuf.Pool
	buf  *iobuf.Buf
}

func (p *poolAlloc) Alloc(n int) []byte {
	p.release()
	p.buf = p.pool.Get(n)
	return p.buf.B
}

func (p *poolAlloc) release() {
	if p.buf != nil {
		p.pool.Put(p.buf)
		p.buf = nil
	}
}

// sumValueSections is sumValue that also fills t.sums with the sum of each
// of the value's sections as they pass.
func (s *Store) sumValueSections(e uint32, slotOff, stored uint64, seed uint32, off uint64, dst []byte, t *sectionTable) (uint32, error) {
	sum := seed // of the section being read
	return s.sumValueEach(e, slotOff, stored, seed, off, dst, func(pos uint64, b []byte) {
		for len(b) > 0 {
			i := pos >> t.shift
			end := min(stored, (i+1)<<t.shift)
			c := min(uint64(len(b)), end-pos)
			sum = crc32.Update(sum, castagnoli, b[:c])
			pos += c
			b = b[c:]
			if pos == end {
				t.sums[i], sum = sum, seed
			}
		}
	})
}
