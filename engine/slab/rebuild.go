package slab

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// seekDataFn is seekData, replaceable by tests to take the path of a
// filesystem without SEEK_DATA.
var seekDataFn = seekData

// maxIndexHint bounds the index size rebuild reserves up front (16 Mi
// entries, 64 MiB of buckets).
const maxIndexHint = 1 << 24

type rebuildStats struct {
	records int
	dropped int
	took    time.Duration
}

// rebuild restores the allocator from slots.tbl, after a clean shutdown or
// not (an unclean one may leave records whose payloads were never written
// or were overwritten since; their checksums catch them when read), and
// syncs the table as it read it. It
// visits only the allocated ranges of the sparse table (SEEK_DATA /
// SEEK_HOLE; the whole table in scanChunk pieces where the filesystem
// cannot say), reads them scanChunk bytes per syscall, and validates every
// record: magic, checksum, version, that it names the slot its offset is
// for, that its class fits the extent's binding and its length its class.
// Invalid records are dropped and zeroed, then the table is synced, so they
// are gone for good. Of two valid records for one key the higher
// generation wins. No file is opened per value and no syscall is made per
// record.
func (s *Store) rebuild() (rebuildStats, error) {
	start := s.clock.Now()
	var st rebuildStats
	s.restored = map[uint64]int64{}
	s.restHeads, s.restPieces = map[wire.BlockKey]span{}, map[wire.BlockKey]struct{}{}
	size := s.tableSize()
	buf := make([]byte, scanChunk)
	var bad []int64
	var rec record

	type span struct{ start, end int64 }
	var spans []span
	var allocated int64
	for off := int64(0); off < size; {
		a, b, ok, err := seekDataFn(s.table, off, size)
		if errors.Is(err, errNoSeekData) {
			spans = []span{{0, size}}
			allocated = size
			break
		}
		if err != nil {
			return st, err
		}
		if !ok {
			break
		}
		a = a &^ (RecordSize - 1)
		spans = append(spans, span{a, b})
		allocated += b - a
		off = b
	}
	// A hint, capped: on a filesystem that reported the table's
	// preallocated (unwritten) space as data it would otherwise size the
	// index for every possible slot of the disk. Beyond it the index grows.
	s.alloc.ReserveIndex(int(min(allocated/RecordSize, int64(s.geo.extents)*int64(s.geo.maxSlots), maxIndexHint)))

	for _, sp := range spans {
		for off := sp.start; off < sp.end; {
			n := min(int64(len(buf)), sp.end-off)
			n = (n + RecordSize - 1) &^ (RecordSize - 1)
			got, err := s.table.ReadAt(buf[:n], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return st, fmt.Errorf("read %s at offset %d: %w", s.table.Name(), off, err)
			}
			got &^= RecordSize - 1
			for p := 0; p < got; p += RecordSize {
				b := buf[p : p+RecordSize]
				if isZero(b) {
					continue
				}
				pos := off + int64(p)
				if err := s.restoreOne(b, pos, &rec, &bad); err != nil {
					return st, err
				}
				st.records++
			}
			if got == 0 {
				break
			}
			off += int64(got)
		}
	}
	s.alloc.FinishRestore()
	s.reconcileSpans(&bad)

	for _, off := range bad {
		if _, err := s.table.WriteAt(zeroRecord[:], off); err != nil {
			return st, fmt.Errorf("clear invalid slot record at %s offset %d: %w", s.table.Name(), off, err)
		}
	}
	// The table as read is made durable before any new record goes in:
	// after a SIGKILL the page cache may hold clears not yet on disk, and
	// the generations issued from here on (above the highest read) must
	// not fall at or below a record a power cut could bring back. After a
	// clean stop nothing is dirty and this costs one system call.
	if err := vfs.Datasync(s.table); err != nil {
		return st, err
	}
	if len(bad) > 0 {
		s.log.Warn("slab engine: dropped invalid or duplicate slot records and cleared them",
			"dir", s.dir, "table", s.table.Name(), "count", len(bad), "first_offset", bad[0])
	}
	st.dropped = len(bad)
	st.records -= len(bad)
	st.took = s.clock.Now().Sub(start)
	return st, nil
}

// restoreOne validates the record b found at table offset pos and restores
// it, or appends pos to bad.
func (s *Store) restoreOne(b []byte, pos int64, rec *record, bad *[]int64) error {
	if err := rec.decode(b); err != nil {
		s.log.Debug("slab engine: invalid slot record", "table", s.table.Name(), "offset", pos, "err", err)
		*bad = append(*bad, pos)
		return nil
	}
	ref := SlotRef(pos / RecordSize)
	e, sl := s.alloc.Split(ref)
	if rec.extent != e || rec.slot != sl {
		s.log.Debug("slab engine: invalid slot record", "table", s.table.Name(), "offset", pos, "err", ErrRecordPlace)
		*bad = append(*bad, pos)
		return nil
	}
	if valid, lost := s.lost[e]; lost {
		// The extent file was missing or cut short: a value whose bytes
		// lay past what is left of it is gone.
		lat := s.alloc.Lattice()
		if int(rec.class) >= lat.Len() || uint64(sl)*lat.Size(int(rec.class))+uint64(rec.length) > valid {
			*bad = append(*bad, pos)
			return nil
		}
	}
	old, err := s.alloc.Restore(e, sl, int(rec.class), &rec.key, rec.length)
	switch {
	case err == nil:
	case errors.Is(err, ErrDuplicate):
		// Two valid records for one key: keep the newer. Rare (a crash
		// between publish and clearing the old record is a cold start), so
		// one read of the other record is fine.
		var ob [RecordSize]byte
		var orec record
		if _, rerr := s.table.ReadAt(ob[:], recordOff(old)); rerr != nil {
			return fmt.Errorf("read %s at offset %d: %w", s.table.Name(), recordOff(old), rerr)
		}
		if orec.decode(ob[:]) == nil && orec.gen >= rec.gen {
			*bad = append(*bad, pos)
			return nil
		}
		_, oldLen, _ := s.alloc.Exist(&rec.key)
		s.alloc.Unrestore(old)
		s.restored[rec.key.Tenant] -= int64(oldLen)
		*bad = append(*bad, recordOff(old))
		if _, err := s.alloc.Restore(e, sl, int(rec.class), &rec.key, rec.length); err != nil {
			*bad = append(*bad, pos)
			return nil
		}
	default:
		*bad = append(*bad, pos)
		return nil
	}
	s.sums.set(e, sl, s.alloc.Lattice().Slots(int(rec.class)), rec.sum)
	s.gen = max(s.gen, rec.gen)
	s.restored[rec.key.Tenant] += int64(rec.length)
	switch sp := (span{rec.span, rec.nonce}); {
	case sp.head():
		s.restHeads[rec.key] = sp
	case sp.pieces&pieceFlag != 0:
		s.restPieces[rec.key] = struct{}{}
	default:
		delete(s.restHeads, rec.key) // it replaced an older head
	}
	return nil
}

// reconcileSpans keeps each restored head of a value larger than an extent
// whose pieces are all there (s.spans) and drops, appending their record
// offsets to bad, the heads missing a piece and the pieces no kept head
// names: what a crash in the middle of such a PUT, or a piece evicted on
// its own, leaves behind. Runs after FinishRestore.
func (s *Store) reconcileSpans(bad *[]int64) {
	ext := uint32(s.geo.extentBytes)
	for key, sp := range s.restHeads {
		whole := true
		for i := range sp.pieces {
			pk := pieceKey(&key, sp.nonce, i)
			_, n, ok := s.alloc.Exist(&pk)
			if _, isPiece := s.restPieces[pk]; !ok || !isPiece || n != ext {
				whole = false
				break
			}
		}
		if !whole {
			s.dropRestored(key, bad)
			continue
		}
		s.spans[key] = sp
		for i := range sp.pieces {
			pk := pieceKey(&key, sp.nonce, i)
			delete(s.restPieces, pk)
			s.pieceKeys[pk] = pieceOf{head: key, nonce: sp.nonce}
		}
	}
	for pk := range s.restPieces {
		s.dropRestored(pk, bad)
	}
	s.restHeads, s.restPieces = nil, nil
}

// dropRestored drops a restored value before Open returns: unpublished,
// freed, uncharged, its record offset appended to bad for clearing.
func (s *Store) dropRestored(key wire.BlockKey, bad *[]int64) {
	r, n, ok := s.alloc.Remove(&key)
	if !ok {
		return
	}
	s.restored[key.Tenant] -= int64(n)
	*bad = append(*bad, recordOff(r))
	s.alloc.Release(r)
}
