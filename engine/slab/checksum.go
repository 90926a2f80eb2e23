package slab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// ErrPayloadChecksum is wrapped by the error of a read whose value failed
// its payload checksum; the value was dropped and the read is a miss.
var ErrPayloadChecksum = errors.New("payload checksum mismatch")

// verifyPayloads turns payload verification on reads off. Only the
// benchmark that measures what verification costs clears it; a store
// never serves unverified bytes otherwise.
var verifyPayloads = true

// rangeSections turns ranged reads by sections (sections.go) off. Only
// the benchmark that compares them with whole reads clears it.
var rangeSections = true

const (
	// sumPiece is how much of a value the PUT path copies into its
	// O_DIRECT bounce buffer before checksumming that piece, small enough
	// that the checksum reads bytes the copy just left in cache.
	sumPiece = 32 << 10
	// corruptLogEvery bounds checksum warnings to one per interval per
	// disk: swapped or overwritten extent files fail every value they
	// hold, each on its first read, and a line per value would bury
	// everything else. The counter stays exact; the next line says how
	// many were not logged.
	corruptLogEvery = time.Second
)

// sumSeed is the CRC-32C of a value's identity: its key, the slot it was
// written to and its length. Every payload checksum starts from it, so
// bytes that are intact but in the wrong place (extent files swapped or
// copied from another disk, a slot still holding another key's value)
// fail as surely as flipped bits: the same payload under another identity
// has another checksum.
func sumSeed(key *wire.BlockKey, e, slot, length uint32) uint32 {
	var b [36]byte
	binary.LittleEndian.PutUint64(b[0:], key.Tenant)
	copy(b[8:24], key.ID[:])
	binary.LittleEndian.PutUint32(b[24:], e)
	binary.LittleEndian.PutUint32(b[28:], slot)
	binary.LittleEndian.PutUint32(b[32:], length)
	return crc32.Checksum(b[:], castagnoli)
}

// payloadSum is the checksum a record carries for value written under
// key into slot slot of extent e.
func payloadSum(key *wire.BlockKey, e, slot uint32, value []byte) uint32 {
	return crc32.Update(sumSeed(key, e, slot, uint32(len(value))), castagnoli, value)
}

// copySum copies src into dst (as copy does) and extends sum over the
// copied bytes a sumPiece at a time, so checksumming a value the PUT path
// copies anyway costs no second pass over it in memory.
func copySum(dst, src []byte, sum uint32) (int, uint32) {
	n := min(len(dst), len(src))
	for pos := 0; pos < n; {
		c := copy(dst[pos:min(n, pos+sumPiece)], src[pos:])
		sum = crc32.Update(sum, castagnoli, dst[pos:pos+c])
		pos += c
	}
	return n, sum
}

// sumTable holds the payload checksum of every published slot, per extent
// and slot, so a read verifies without reading its record again. It lives
// beside the allocator rather than in its 32-byte slotMeta because the RAM
// tier shares the allocator and has no use for it; the disk store pays 4
// bytes per slot of the extents it has carved. Guarded by Store.mu.
type sumTable [][]uint32

// set records sum for slot slot of extent e, whose class carves it into
// slots slots; an extent's slice grows when it is carved finer.
func (t sumTable) set(e, slot, slots, sum uint32) {
	if uint32(len(t[e])) < slots {
		grown := make([]uint32, slots)
		copy(grown, t[e])
		t[e] = grown
	}
	t[e][slot] = sum
}

func (t sumTable) get(e, slot uint32) uint32 { return t[e][slot] }

// logLimiter lets one log line through per interval and counts the rest.
type logLimiter struct {
	next       atomic.Pointer[time.Time] // lines before it are suppressed; nil: none yet
	suppressed atomic.Uint64
}

// allow reports whether a line may be logged now and, if so, how many
// were suppressed since the last one.
func (l *logLimiter) allow(now time.Time, every time.Duration) (bool, uint64) {
	// Instants carry the monotonic clock, so a step of the wall clock
	// neither silences the log for the step's length nor floods it.
	next := l.next.Load()
	later := now.Add(every)
	if next != nil && now.Before(*next) || !l.next.CompareAndSwap(next, &later) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}

// readVerified reads [off, off+n) of the stored-byte value in slot r (at
// slotOff of extent e) and checks it against want, the checksum seeded
// with seed. ok is false when the bytes do not match; then no byte is
// returned.
//
// A checksum covers the whole value, so the first ranged read of a value
// reads all of it; later ones read only the sections they touch
// (sections.go). A whole-value read goes straight into the caller's
// buffer; a whole read for a range streams the value through a pooled
// buffer and copies out only the bytes asked for.
func (s *Store) readVerified(r SlotRef, e uint32, slotOff, stored, off, n uint64, seed, want uint32, alloc engine.Allocator) ([]byte, bool, error) {
	if !verifyPayloads {
		data, err := s.readPayload(e, slotOff, off, n, alloc)
		return data, err == nil, err
	}
	if off != 0 || n != stored {
		if shift := sectionShift(stored); shift != 0 && rangeSections {
			return s.readRangeBySections(r, e, slotOff, stored, off, n, shift, seed, want, alloc)
		}
		return s.readRangeVerified(e, slotOff, stored, off, n, seed, want, alloc)
	}
	data, err := s.readPayload(e, slotOff, 0, stored, alloc)
	if err != nil {
		return nil, false, err
	}
	if crc32.Update(seed, castagnoli, data) != want {
		return nil, false, nil
	}
	return data, true, nil
}

// readRangeVerified is readVerified for a strict sub-range: it reads the
// whole value (sumValue), checksums every byte and copies the overlap with
// [off, off+n) into a buffer from alloc.
func (s *Store) readRangeVerified(e uint32, slotOff, stored, off, n uint64, seed, want uint32, alloc engine.Allocator) ([]byte, bool, error) {
	dst := alloc.Alloc(int(n))[:n:n]
	sum, err := s.sumValue(e, slotOff, stored, seed, off, dst)
	if err != nil || sum != want {
		return nil, false, err
	}
	return dst, true, nil
}

// sumValue reads the stored-byte value in slot slotOff of extent e
// chunkBytes at a time through a pooled buffer (aligned for O_DIRECT; the
// padding stays inside the slot, whose size is a 4 KiB multiple) and
// returns its checksum extended from seed, copying the bytes from off on
// into dst as they pass (dst may be empty).
func (s *Store) sumValue(e uint32, slotOff, stored uint64, seed uint32, off uint64, dst []byte) (uint32, error) {
	return s.sumValueEach(e, slotOff, stored, seed, off, dst, nil)
}

// sumValueEach is sumValue that also hands each piece it read, with the
// piece's offset in the value, to each (when not nil).
func (s *Store) sumValueEach(e uint32, slotOff, stored uint64, seed uint32, off uint64, dst []byte, each func(pos uint64, b []byte)) (uint32, error) {
	f := s.extents[e]
	buf := s.pool.Get(int(min(alignUp(stored, pageAlign), chunkBytes)))
	defer s.pool.Put(buf)
	n := uint64(len(dst))
	sum := seed
	for pos := uint64(0); pos < stored; {
		c := min(uint64(len(buf.B)), stored-pos)
		w := c
		if s.direct {
			w = alignUp(c, s.align)
		}
		got, err := s.readAt(f, buf.B[:w], int64(slotOff+pos))
		if uint64(got) < c {
			if err == nil {
				err = fmt.Errorf("short read: %d of %d bytes", got, w)
			}
			return 0, err
		}
		sum = crc32.Update(sum, castagnoli, buf.B[:c])
		if each != nil {
			each(pos, buf.B[:c])
		}
		if lo, hi := max(pos, off), min(pos+c, off+n); lo < hi {
			copy(dst[lo-off:], buf.B[lo-pos:hi-pos])
		}
		pos += c
	}
	return sum, nil
}

// dropCorrupt handles a read of key from slot r (pinned by the caller;
// by says who read it, for the log) whose bytes failed their checksum: the
// value is dropped as a Remove would drop it (unpublished, its record
// cleared in slots.tbl, its slot freed once unpinned, its tenant
// credited), counted, and logged (rate-limited); the error is the miss a
// read answers. A PUT that replaced the key meanwhile is left alone: its
// bytes are another value's. The store stays healthy: one bad value says
// nothing about the others, which are verified on their own reads.
func (s *Store) dropCorrupt(key wire.BlockKey, r SlotRef, stored uint64, by string) error {
	s.checksumFailures.Add(1)
	s.mu.Lock()
	cur, _, ok := s.alloc.Exist(&key)
	var n uint32
	var sp span
	spanned := false
	if ok && cur == r {
		_, n, _ = s.alloc.Remove(&key)
		sp, spanned = s.spans[key]
		delete(s.spans, key)
	}
	of, isPiece := s.pieceKeys[key]
	if ok && cur == r {
		delete(s.pieceKeys, key)
		s.evicted[key]++ // a Remove of key waits for the clear below
	}
	s.mu.Unlock()
	if ok && cur == r {
		s.acct.Committed(key.Tenant, -int64(n))
		s.clearAndRelease(r)
		s.recordCleared(key)
	}
	if spanned {
		s.removePieces(key, sp)
	}
	if isPiece && ok && cur == r {
		s.removeSpanned(of.head, of.nonce) // a value missing a piece is gone
	}
	e, sl := s.alloc.Split(r)
	path := s.extents[e].Name()
	if yes, suppressed := s.corruptLog.allow(s.clock.Now(), corruptLogEvery); yes {
		s.log.Warn("slab engine: a value failed its checksum and was dropped, not served; check the device, or what else writes its extent files",
			"dir", s.dir, "key", key.String(), "extent", path, "slot", sl, "bytes", stored, "found_by", by,
			"suppressed_since_last", suppressed)
	}
	return fmt.Errorf("slab engine: range %s: %w in slot %d of %s; the value was dropped: %w",
		key, ErrPayloadChecksum, sl, path, wire.StatusNotFound)
}
