package slab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// A value larger than one extent is stored as pieces: its bytes in
// extent-sized pieces, each an ordinary value of the top size class (one
// slot filling one extent) under a key derived from the value's key, a
// nonce and the piece's index, and its last bytes (at most one extent) as
// the head, under the value's own key, whose record names the number of
// pieces and the nonce. Pieces need not be contiguous, so a value of any
// size up to the maximum fits wherever whole extents are free, and the
// extent size can follow the disk's capacity instead of the largest value
// (see ExtentFor).
//
// The pieces are written first and the head last, so a head on disk
// vouches for pieces that were written before it; every piece carries its
// own payload checksum. A new PUT of the key takes a new nonce, so its
// pieces never mix with the old value's, which are removed once the new
// head is published. A piece evicted or lost on its own makes the value a
// miss on its next read, which drops what is left of it; a restart drops
// heads missing a piece and pieces no head names.

// span is a value's piece count and nonce, as its head's record holds
// them; the zero span is an ordinary value.
type span struct{ pieces, nonce uint32 }

// pieceOf names the value a piece belongs to: its head's key and nonce.
type pieceOf struct {
	head  wire.BlockKey
	nonce uint32
}

// head reports a span that makes its value a head (not a piece, not an
// ordinary value).
func (sp span) head() bool { return sp.pieces != 0 && sp.pieces&pieceFlag == 0 }

// orphan is a value that lost part of itself to an eviction under the
// lock: its head (sp is then its span, to remove its pieces) or one of
// its pieces (then piece is set, and the head is removed if its nonce is
// still sp.nonce, with its other pieces).
type orphan struct {
	key   wire.BlockKey
	sp    span
	piece bool
}

// pieceKey derives the key of piece i of key's value with nonce: the same
// tenant (its bytes are the tenant's), an ID no client key will meet.
func pieceKey(key *wire.BlockKey, nonce, i uint32) wire.BlockKey {
	h := fnv.New128a()
	var b [8 + 16 + 8]byte
	copy(b[:8], "dfkvpart")
	copy(b[8:24], key.ID[:])
	binary.LittleEndian.PutUint32(b[24:], nonce)
	binary.LittleEndian.PutUint32(b[28:], i)
	_, _ = h.Write(b[:])
	pk := wire.BlockKey{Tenant: key.Tenant}
	h.Sum(pk.ID[:0])
	return pk
}

// cacheSpanned stores a value larger than an extent: its pieces, then its
// head. Each piece stays pinned until the head is published (or the PUT
// gave up), so no piece of it is evicted to make room for the next: a
// value that does not fit is CACHE_FULL, never acknowledged and already
// gone. A failure, or a head that did not become the key's value (another
// PUT of the key led, or a Remove fenced it), removes the pieces again.
func (s *Store) cacheSpanned(key wire.BlockKey, value []byte) error {
	ext := s.geo.extentBytes
	n := uint64(len(value))
	pieces := uint32((n - 1) / ext) // the head holds the last 1..ext bytes
	s.mu.Lock()
	s.gen++
	nonce := uint32(s.gen)
	if old, ok := s.spans[key]; ok && old.nonce == nonce {
		nonce++ // never the nonce of the value it replaces
	}
	s.mu.Unlock()
	sp := span{pieces: pieces, nonce: nonce}
	pins := make([]SlotRef, 0, pieces)
	defer func() {
		s.mu.Lock()
		for _, r := range pins {
			s.alloc.Release(r)
		}
		s.mu.Unlock()
	}()
	var err error
	i := uint32(0)
	for ; i < pieces && err == nil; i++ {
		var published bool
		var pin SlotRef
		published, pin, err = s.cacheOne(pieceKey(&key, nonce, i), value[uint64(i)*ext:uint64(i+1)*ext], span{pieces: pieceFlag | i, nonce: nonce}, &key)
		if published {
			pins = append(pins, pin)
		}
	}
	if err != nil {
		s.removePieces(key, span{pieces: i, nonce: nonce})
		return err
	}
	published, _, err := s.cacheOne(key, value[uint64(pieces)*ext:], sp, nil)
	if !published {
		s.removePieces(key, sp)
	}
	return err
}

// removePieces removes pieces 0..sp.pieces-1 of key's value with sp's
// nonce (those not there are skipped).
func (s *Store) removePieces(key wire.BlockKey, sp span) {
	for i := range sp.pieces {
		s.remove(pieceKey(&key, sp.nonce, i))
	}
}

// takeOrphans finds, among victims, the heads and pieces of values larger
// than an extent, forgets them and returns what is left of their values
// to remove; the caller holds mu and, after releasing it, calls
// removeOrphans. Without it an evicted piece would leave its head and
// siblings counted and holding space until a read found the gap.
func (s *Store) takeOrphans(victims []Victim) []orphan {
	var out []orphan
	for _, v := range victims {
		if of, ok := s.pieceKeys[v.Key]; ok {
			delete(s.pieceKeys, v.Key)
			out = append(out, orphan{key: of.head, sp: span{nonce: of.nonce}, piece: true})
			continue
		}
		if sp, ok := s.spans[v.Key]; ok {
			delete(s.spans, v.Key)
			out = append(out, orphan{key: v.Key, sp: sp})
		}
	}
	return out
}

func (s *Store) removeOrphans(orphans []orphan) {
	for _, o := range orphans {
		if o.piece {
			s.removeSpanned(o.key, o.sp.nonce)
		} else {
			s.removePieces(o.key, o.sp)
		}
	}
}

// removeSpanned removes key's value, head and pieces, if it is still the
// one with nonce (a newer PUT of the key is left alone).
func (s *Store) removeSpanned(key wire.BlockKey, nonce uint32) {
	s.mu.Lock()
	sp, ok := s.spans[key]
	if !ok || sp.nonce != nonce {
		s.mu.Unlock()
		return
	}
	r, n, live := s.alloc.Remove(&key)
	delete(s.spans, key)
	if live {
		s.evicted[key]++ // a Remove of key waits for the clear below
	}
	s.mu.Unlock()
	if live {
		s.acct.Committed(key.Tenant, -int64(n))
		s.clearAndRelease(r)
		s.recordCleared(key)
	}
	s.removePieces(key, sp)
}

// errPieceMissing is the miss of a value one of whose pieces is gone.
var errPieceMissing = errors.New("a piece of the value is gone (evicted or lost)")

// rangeSpanned is Get of key's value with span sp, whose head (slot r,
// pinned by the caller) holds its last tail bytes. It pins the pieces the
// range needs, reads each part the range touches through sumValue, which
// verifies the whole part, and copies out only the bytes asked for. A
// piece that is gone or fails its checksum drops the whole value: a miss.
func (s *Store) rangeSpanned(key wire.BlockKey, r SlotRef, sp span, tail, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	ext := s.geo.extentBytes
	total := uint64(sp.pieces)*ext + tail
	n, ok := wire.RangeLen(total, offset, length)
	if !ok {
		return nil, total, fmt.Errorf("slab engine: range %s: offset %d past the stored length %d: %w", key, offset, total, wire.StatusInvalid)
	}
	if n == 0 {
		s.hits.Add(1)
		return nil, total, nil
	}
	first, last := uint32(offset/ext), uint32((offset+n-1)/ext) // parts touched; part sp.pieces is the head
	type part struct {
		key     wire.BlockKey
		ref     SlotRef
		e, sl   uint32
		slotOff uint64
		want    uint32
	}
	parts := make([]part, 0, last-first+1)
	s.mu.Lock()
	missing, busy := false, false
	for i := first; i <= last && i < sp.pieces; i++ {
		pk := pieceKey(&key, sp.nonce, i)
		pr, plen, ok, err := s.alloc.Acquire(&pk)
		if err != nil {
			busy = true // too many reads of it at once: not now, but not gone
			break
		}
		if !ok || uint64(plen) != ext {
			if ok {
				s.alloc.Release(pr)
			}
			missing = true
			break
		}
		e, sl := s.alloc.Split(pr)
		parts = append(parts, part{pk, pr, e, sl, s.alloc.Offset(pr), s.sums.get(e, sl)})
	}
	if !missing && last == sp.pieces {
		e, sl := s.alloc.Split(r)
		parts = append(parts, part{key, r, e, sl, s.alloc.Offset(r), s.sums.get(e, sl)})
	}
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		for _, p := range parts {
			if p.ref != r {
				s.alloc.Release(p.ref)
			}
		}
		s.mu.Unlock()
	}
	if busy {
		release()
		return nil, total, fmt.Errorf("slab engine: range %s: %w: %w", key, ErrBusy, wire.StatusUnavailable)
	}
	if missing {
		release()
		s.misses.Add(1)
		s.dropValue(key, r)
		return nil, 0, fmt.Errorf("slab engine: range %s: %w; the value was dropped: %w", key, errPieceMissing, wire.StatusNotFound)
	}
	dst := alloc.Alloc(int(n))[:n:n]
	for j, p := range parts {
		i := first + uint32(j)
		start, size := uint64(i)*ext, ext
		if i == sp.pieces {
			size = tail
		}
		lo, hi := max(offset, start), min(offset+n, start+size)
		sum, err := s.sumValue(p.e, p.slotOff, size, sumSeed(&p.key, p.e, p.sl, uint32(size)), lo-start, dst[lo-offset:hi-offset])
		if err != nil {
			release()
			s.ioErrors.Add(1)
			return nil, total, fmt.Errorf("slab engine: range %s: read %d bytes at %s offset %d: %w: %w", key, size, s.extents[p.e].Name(), p.slotOff, err, wire.StatusIOError)
		}
		if sum != p.want {
			release()
			s.misses.Add(1)
			err := s.dropCorrupt(p.key, p.ref, size, "a read")
			s.dropValue(key, r)
			return nil, 0, err
		}
	}
	release()
	s.hits.Add(1)
	return dst, total, nil
}

// dropValue drops key's value if its head is still slot r (pinned by the
// caller), with its pieces: the head is unpublished and its record
// cleared, the pieces removed.
func (s *Store) dropValue(key wire.BlockKey, r SlotRef) {
	s.mu.Lock()
	cur, _, ok := s.alloc.Exist(&key)
	if !ok || cur != r {
		s.mu.Unlock()
		return
	}
	_, n, _ := s.alloc.Remove(&key)
	sp, spanned := s.spans[key]
	delete(s.spans, key)
	s.evicted[key]++ // a Remove of key waits for the clear below
	s.mu.Unlock()
	s.acct.Committed(key.Tenant, -int64(n))
	s.clearAndRelease(r)
	s.recordCleared(key)
	if spanned {
		s.removePieces(key, sp)
	}
}
