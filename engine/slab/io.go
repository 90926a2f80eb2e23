package slab

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"unsafe"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/uring"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

var (
	errNoSeekData = errors.New("SEEK_DATA not supported")
	errTooLarge   = errors.New("larger than its format allows")
)

const pageAlign = engine.IOAlign

func alignUp(x, a uint64) uint64   { return (x + a - 1) &^ (a - 1) }
func alignDown(x, a uint64) uint64 { return x &^ (a - 1) }

func isAligned(p []byte) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))&(pageAlign-1) == 0
}

// writePayload writes value at byte off of extent e and returns its
// payload checksum, extended from seed, computed before any byte reaches
// the file. Through O_DIRECT the transfer must be aligned in memory,
// offset and length: a value that is already aligned goes straight to the
// kernel, anything else is copied into a pooled aligned buffer (at most
// chunkBytes at a time) whose tail is zero-padded to 4 KiB, and checksummed
// as it is copied. The padding lands inside the slot (classes are 4 KiB
// multiples) and is never part of the value: the length lives in the
// record.
func (s *Store) writePayload(e uint32, off uint64, value []byte, seed uint32) (uint32, error) {
	f := s.extents[e]
	n := uint64(len(value))
	if !s.direct || isAligned(value) && n%pageAlign == 0 {
		sum := crc32.Update(seed, castagnoli, value)
		_, err := s.writeAt(f, value, int64(off))
		return sum, err
	}
	buf := s.pool.Get(int(min(alignUp(n, pageAlign), chunkBytes)))
	defer s.pool.Put(buf)
	sum := seed
	for pos := uint64(0); pos < n; {
		var c int
		c, sum = copySum(buf.B, value[pos:], sum)
		w := alignUp(uint64(c), pageAlign)
		clear(buf.B[c:w])
		if _, err := s.writeAt(f, buf.B[:w], int64(off+pos)); err != nil {
			return 0, err
		}
		pos += uint64(c)
	}
	return sum, nil
}

// readPayload reads [off, off+n) of the value in the slot at slotOff of
// extent e into one buffer from alloc. Through O_DIRECT it reads the
// aligned superset (it stays inside the slot, whose size is a 4 KiB
// multiple) and returns the sub-slice asked for.
func (s *Store) readPayload(e uint32, slotOff, off, n uint64, alloc engine.Allocator) ([]byte, error) {
	f := s.extents[e]
	if !s.direct {
		buf := alloc.Alloc(int(n))
		got, err := s.readAt(f, buf[:n], int64(slotOff+off))
		if uint64(got) == n {
			return buf[:n:n], nil
		}
		if err == nil {
			err = fmt.Errorf("short read: %d of %d bytes", got, n)
		}
		return nil, err
	}
	start, end := alignDown(off, s.align), alignUp(off+n, s.align)
	buf := alloc.Alloc(int(end - start))
	if !isAligned(buf) || uint64(cap(buf))%pageAlign != 0 {
		return nil, fmt.Errorf("allocator returned a buffer not aligned to %d bytes: %w", pageAlign, wire.StatusInternal)
	}
	got, err := s.readAt(f, buf[:end-start], int64(slotOff+start))
	if uint64(got) == end-start {
		return buf[off-start : off-start+n : off-start+n], nil
	}
	if err == nil {
		err = fmt.Errorf("short read: %d of %d bytes", got, end-start)
	}
	return nil, err
}

// uringMaxBytes is the largest payload read or write submitted through
// the io_uring ring (Options.URing); larger ones are single preads and
// pwrites, which move as many bytes per system call as the ring would.
const uringMaxBytes = 256 << 10

// readAt reads payload bytes: through the ring when there is one and b is
// small, else with pread. Like os.File.ReadAt it reads all of b, going on
// after a short transfer, and reports the end of the file as io.EOF. A
// ring that stopped working (ErrClosed before the store closed it) hands
// the call to pread.
func (s *Store) readAt(f vfs.File, b []byte, off int64) (int, error) {
	if s.ring == nil || len(b) > uringMaxBytes {
		return f.ReadAt(b, off)
	}
	got := 0
	for got < len(b) {
		n, err := s.ring.ReadAt(int(f.Fd()), b[got:], off+int64(got))
		if errors.Is(err, uring.ErrClosed) {
			m, err := f.ReadAt(b[got:], off+int64(got))
			return got + m, err
		}
		if err != nil {
			return got, err
		}
		if n == 0 {
			return got, io.EOF
		}
		got += n
	}
	return got, nil
}

// writeAt writes payload bytes: through the ring when there is one and b
// is small, else with pwrite; like os.File.WriteAt it writes all of b.
func (s *Store) writeAt(f vfs.File, b []byte, off int64) (int, error) {
	if s.ring == nil || len(b) > uringMaxBytes {
		return f.WriteAt(b, off)
	}
	put := 0
	for put < len(b) {
		n, err := s.ring.WriteAt(int(f.Fd()), b[put:], off+int64(put))
		if errors.Is(err, uring.ErrClosed) {
			m, err := f.WriteAt(b[put:], off+int64(put))
			return put + m, err
		}
		if err != nil {
			return put, err
		}
		if n == 0 {
			return put, io.ErrShortWrite
		}
		put += n
	}
	return put, nil
}

// recordOff is the fixed slots.tbl offset of r's record.
func recordOff(r SlotRef) int64 { return int64(r) * RecordSize }

// writeRecord writes r's record (buffered, not synced: a SIGKILL leaves it
// in the page cache, a power cut may lose it, which loses its value; a
// graceful stop syncs slots.tbl before marking clean).
func (s *Store) writeRecord(r SlotRef, rec *record) error {
	var b [RecordSize]byte
	rec.encode(b[:])
	if _, err := s.table.WriteAt(b[:], recordOff(r)); err != nil {
		return fmt.Errorf("write slot record at %s offset %d: %w", s.table.Name(), recordOff(r), err)
	}
	return nil
}

var zeroRecord [RecordSize]byte

func (s *Store) clearRecord(r SlotRef) error {
	if _, err := s.table.WriteAt(zeroRecord[:], recordOff(r)); err != nil {
		return fmt.Errorf("clear slot record at %s offset %d: %w", s.table.Name(), recordOff(r), err)
	}
	return nil
}

// wipeExtentRecords drops every record of extent e (it changed class, so
// its old records name slots that no longer exist).
func (s *Store) wipeExtentRecords(e uint32) error {
	off := int64(e) * int64(s.geo.maxSlots) * RecordSize
	n := int64(s.geo.maxSlots) * RecordSize
	if err := vfs.ZeroRange(s.table, off, n); err != nil {
		return fmt.Errorf("wipe records of extent %d at %s offset %d: %w", e, s.table.Name(), off, err)
	}
	return nil
}

// writeState records st in slab_state. A new store's file is written
// atomically (temp file, fsync, rename); from then on it is rewritten in
// place, one 32-byte write into the block the file already owns and an
// fdatasync, so a filesystem that filled up meanwhile (a shared root disk
// full of logs) cannot stop a graceful stop from marking the epoch clean:
// the temp file needs a new block. A torn in-place write fails the CRC and
// reads as a dirty epoch, never a clean one; the dirty mark is durable
// before Open returns.
//
// The file stays open from Open to Close, so the clean mark needs no path
// lookup either: a disk directory whose permissions were changed under the
// running node (or that was renamed) does not make the stop fail.
func (s *Store) writeState(st state) error {
	path := filepath.Join(s.dir, stateName)
	if s.state == nil {
		made := false
		if fi, err := s.fs.Stat(path); err != nil || !fi.Mode().IsRegular() || fi.Size() != stateSize {
			if err := writeAtomic(s.fs, path, st.encode()); err != nil {
				return err
			}
			made = true
		}
		f, err := s.fs.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		s.state = f
		if made {
			return nil
		}
	}
	if _, err := s.state.WriteAt(st.encode(), 0); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := vfs.Datasync(s.state); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeAtomic replaces path with data: temp file, fsync, rename, fsync the
// directory, so a crash leaves either the old file or the new one.
func writeAtomic(fs vfs.FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = fs.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = fs.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readSmall reads a whole small file (slab_meta, slab_state).
func readSmall(fs vfs.FS, path string, limit int) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, limit+1)
	n, err := f.ReadAt(b, 0)
	if n == len(b) {
		return nil, fmt.Errorf("%s: %w (%d bytes)", path, errTooLarge, limit)
	}
	if err != nil && n == 0 {
		if errors.Is(err, io.EOF) {
			return b[:0], nil
		}
		return nil, err
	}
	return b[:n], nil
}
