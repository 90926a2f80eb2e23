package slab

import (
	"errors"
	"fmt"
	"io"
	"strings"
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
	// unreadable counts the slots whose records could not be read, and
	// unzeroed says why their part of the table could not be rewritten
	// with zeros (nil if it was, or there was none): the caller fails
	// the store closed then (see Store.dropUnreadable).
	unreadable int64
	unzeroed   error
}

// tablePage is the unit a part of slots.tbl that fails to read is
// narrowed down to: a page, what the page cache reads and fails as one,
// and a 4Kn device's sector; 64 records.
const tablePage = 4096

// maxFailedPageReads bounds the page reads that may fail while rebuild
// narrows unreadable parts of the table down. Each may cost the device
// seconds of retries; a table failing more pages than this is on a dying
// disk, and the chunks that still fail after it are dropped whole, so
// Open ends in bounded time whatever the disk does.
const maxFailedPageReads = 256

// unreadable collects the parts of slots.tbl rebuild could not read.
type unreadable struct {
	ranges [][2]int64 // [start, end), ascending, adjacent ones merged
	bytes  int64
	first  error // the first read error, for the log
	failed int   // page reads that failed (maxFailedPageReads)
}

func (u *unreadable) add(start, end int64, err error) {
	if u.first == nil {
		u.first = err
	}
	u.bytes += end - start
	if n := len(u.ranges); n > 0 && u.ranges[n-1][1] == start {
		u.ranges[n-1][1] = end
		return
	}
	u.ranges = append(u.ranges, [2]int64{start, end})
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
	var lost unreadable

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
				if !mediaError(err) {
					return st, fmt.Errorf("read %s at offset %d: %w", s.table.Name(), off, err)
				}
				// Some part of the chunk is unreadable (a bad sector):
				// read it again a page at a time, keeping what reads.
				k, err := s.rereadPages(buf[:n], off, &rec, &bad, &lost, err)
				st.records += k
				if err != nil {
					return st, err
				}
				off += n
				continue
			}
			got &^= RecordSize - 1
			k, err := s.restoreRecords(buf[:got], off, &rec, &bad)
			st.records += k
			if err != nil {
				return st, err
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
	st.unreadable, st.unzeroed = s.dropUnreadable(&lost)
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

// restoreRecords restores the records in b, read at table offset off
// (empty slots skipped, invalid ones appended to bad), and returns how
// many it found.
func (s *Store) restoreRecords(b []byte, off int64, rec *record, bad *[]int64) (int, error) {
	n := 0
	for p := 0; p+RecordSize <= len(b); p += RecordSize {
		r := b[p : p+RecordSize]
		if isZero(r) {
			continue
		}
		if err := s.restoreOne(r, off+int64(p), rec, bad); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// rereadPages reads the chunk b of the table at off, whose read failed
// with the media error cause, again one tablePage at a time, restores the
// records of the pages that read and notes the others in lost: a bad
// sector costs the slots recorded in it, not those of the whole chunk.
// Past maxFailedPageReads the rest of the chunk is noted unread.
func (s *Store) rereadPages(b []byte, off int64, rec *record, bad *[]int64, lost *unreadable, cause error) (int, error) {
	end := off + int64(len(b))
	n := 0
	for p := off; p < end; {
		if lost.failed >= maxFailedPageReads {
			lost.add(p, end, cause)
			break
		}
		q := min((p+tablePage)&^(tablePage-1), end)
		page := b[p-off : q-off]
		got, err := s.table.ReadAt(page, p)
		if err != nil && !errors.Is(err, io.EOF) {
			if !mediaError(err) {
				return n, fmt.Errorf("read %s at offset %d: %w", s.table.Name(), p, err)
			}
			lost.failed++
			lost.add(p, q, err)
			p = q
			continue
		}
		k, err := s.restoreRecords(page[:got], p, rec, bad)
		n += k
		if err != nil {
			return n, err
		}
		p = q
	}
	return n, nil
}

// dropUnreadable deals with the parts of the table rebuild could not
// read: their slots stay empty (no record was restored from them, so
// their values are misses and the allocator hands the slots out again),
// and each part is rewritten with zeros, so a record written there later
// need not read the bad page first (a 64-byte pwrite into an unreadable
// page fails) and the old records cannot come back at a later start. One
// ERROR names the file, the byte ranges and the slots dropped. It returns
// the slots dropped and why the zeroing failed, if it did.
//
// A part that cannot be zeroed still holds records this run treats as
// gone: a REMOVE of their keys finds nothing to clear, so a later start
// that reads the part again (a transient error, or a sector the drive
// recovers) would bring removed values back, and a PUT into those slots
// fails its record write anyway. The caller then fails the store closed,
// which marks the state failed so the next start is cold (the table is
// truncated and preallocated again, bad pages and all): a disk that can
// neither read nor rewrite its slot table is not trusted to serve.
func (s *Store) dropUnreadable(lost *unreadable) (int64, error) {
	if len(lost.ranges) == 0 {
		return 0, nil
	}
	var zerr error
	for _, r := range lost.ranges {
		if err := vfs.ZeroRange(s.table, r[0], r[1]-r[0]); err != nil {
			zerr = fmt.Errorf("zero %s bytes [%d,%d): %w", s.table.Name(), r[0], r[1], err)
			break
		}
	}
	slots := lost.bytes / RecordSize
	list := make([]string, 0, min(len(lost.ranges), 9))
	for i, r := range lost.ranges {
		if i == 8 {
			list = append(list, fmt.Sprintf("... (%d ranges)", len(lost.ranges)))
			break
		}
		list = append(list, fmt.Sprintf("[%d,%d)", r[0], r[1]))
	}
	msg := "slab engine: part of the slot table could not be read; the slots recorded there are dropped as empty (their values are lost, never served), those bytes were rewritten with zeros, and the rest of the disk serves; check the device (kernel log, SMART)"
	if zerr != nil {
		msg = "slab engine: part of the slot table could not be read, and rewriting it with zeros failed too; the slots recorded there are dropped and the disk fails closed (the next start is cold); check the device (kernel log, SMART)"
	}
	args := []any{"dir", s.dir, "table", s.table.Name(), "byte_ranges", strings.Join(list, ", "),
		"bytes", lost.bytes, "slots_dropped", slots, "err", lost.first}
	if zerr != nil {
		args = append(args, "zero_err", zerr)
	}
	s.log.Error(msg, args...)
	return slots, zerr
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
		_, rerr := s.table.ReadAt(ob[:], recordOff(old))
		if rerr != nil && !mediaError(rerr) {
			return fmt.Errorf("read %s at offset %d: %w", s.table.Name(), recordOff(old), rerr)
		}
		if rerr == nil && orec.decode(ob[:]) == nil && orec.gen >= rec.gen {
			*bad = append(*bad, pos)
			return nil
		}
		_, oldLen, _ := s.alloc.Exist(&rec.key)
		s.alloc.Unrestore(old)
		s.restored[rec.key.Tenant] -= int64(oldLen)
		*bad = append(*bad, recordOff(old))
		if rerr != nil {
			// The other record read a moment ago but not now, so which
			// of the two is newer cannot be told: neither is kept (a
			// miss, never the older value).
			delete(s.restHeads, rec.key)
			delete(s.restPieces, rec.key)
			*bad = append(*bad, pos)
			return nil
		}
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
