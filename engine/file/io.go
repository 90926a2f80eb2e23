package file

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

const align = engine.IOAlign

func alignDown(x uint64) uint64 { return x &^ (align - 1) }
func alignUp(x uint64) uint64   { return (x + align - 1) &^ (align - 1) }

func isAligned(p []byte) bool {
	return len(p) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))&(align-1) == 0
}

// writeTemp writes value to a new file at path and fdatasyncs it. If
// O_DIRECT is refused (EINVAL from the open or the first write) it switches
// the store to buffered I/O and writes once more. On failure the file is
// removed.
func (s *Store) writeTemp(path string, value []byte) error {
	direct := s.direct.Load()
	err := s.writeFile(path, value, direct)
	if err != nil && direct && errors.Is(err, syscall.EINVAL) {
		s.disableDirect(err)
		err = s.writeFile(path, value, false)
	}
	if err != nil {
		// A refused O_CREAT|O_DIRECT open may still have created the
		// file, so remove it even when the open failed.
		_ = s.fs.Remove(path)
	}
	return err
}

func (s *Store) writeFile(path string, value []byte, direct bool) error {
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if direct {
		flag |= oDirect
	}
	f, err := s.fs.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	if direct {
		err = s.writeDirect(f, value)
	} else {
		_, err = f.WriteAt(value, 0)
	}
	if err == nil {
		err = s.datasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeDirect writes value through an O_DIRECT descriptor, whose transfers
// must start at aligned memory and file offsets and have aligned lengths. A
// value that already is aligned in both address and length goes straight to
// the kernel; anything else is copied through a pooled aligned bounce buffer
// of at most chunkBytes, its tail zero-padded to IOAlign, and the file is
// then truncated to the exact length so that no padding is ever part of the
// value.
func (s *Store) writeDirect(f vfs.File, value []byte) error {
	n := uint64(len(value))
	if isAligned(value) && n%align == 0 {
		_, err := f.WriteAt(value, 0)
		return err
	}
	buf := s.pool.Get(int(min(alignUp(n), chunkBytes)))
	defer s.pool.Put(buf)
	for off := uint64(0); off < n; {
		c := uint64(copy(buf.B, value[off:]))
		w := alignUp(c)
		clear(buf.B[c:w])
		if _, err := f.WriteAt(buf.B[:w], int64(off)); err != nil {
			return err
		}
		off += c
	}
	if n%align != 0 {
		return f.Truncate(int64(n))
	}
	return nil
}

// openRead opens path for a Get, with O_DIRECT while the store uses it.
func (s *Store) openRead(path string) (vfs.File, bool, error) {
	direct := s.direct.Load()
	if direct {
		f, err := s.fs.OpenFile(path, os.O_RDONLY|oDirect, 0)
		if err == nil || !errors.Is(err, syscall.EINVAL) {
			return f, true, err
		}
		s.disableDirect(err)
	}
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	return f, false, err
}

// readDirect reads [off, off+n) through an O_DIRECT descriptor: it reads the
// aligned superset [alignDown(off), alignUp(off+n)) into one buffer from
// alloc and returns the sub-slice the caller asked for.
func readDirect(f vfs.File, off, n uint64, alloc engine.Allocator) ([]byte, error) {
	start, end := alignDown(off), alignUp(off+n)
	buf := alloc.Alloc(int(end - start))
	if !isAligned(buf) || uint64(cap(buf))%align != 0 {
		return nil, fmt.Errorf("allocator returned a buffer not aligned to %d bytes: %w", align, wire.StatusInternal)
	}
	got, err := f.ReadAt(buf, int64(start))
	// At the end of the file the read comes up short; what matters is that
	// it covered the window. (ReadAt's retry of the tail may even fail with
	// EINVAL, an unaligned offset, which is fine too.)
	need := off + n - start
	if uint64(got) >= need {
		return buf[off-start : need : need], nil
	}
	if err == nil {
		err = fmt.Errorf("short read of %s: %d of %d bytes", f.Name(), got, need)
	}
	return nil, err
}

// directFlag is oDirect while the store uses direct I/O, else 0.
func (s *Store) directFlag() int {
	if s.direct.Load() {
		return oDirect
	}
	return 0
}

// disableDirect switches the store to buffered I/O for good, logging once.
func (s *Store) disableDirect(cause error) {
	if s.direct.CompareAndSwap(true, false) {
		s.log.Warn("file engine: O_DIRECT refused on "+s.dir+", using buffered I/O", "err", cause)
	}
}

// datasync fdatasyncs f and warns (at most every warnEvery) when that takes
// longer than slowSync, the usual first sign of a failing disk.
func (s *Store) datasync(f vfs.File) error {
	start := s.clock.Now()
	err := vfs.Datasync(f)
	if d := s.clock.Now().Sub(start); d > slowSync {
		now := s.clock.Now()
		last := s.lastSlowWarn.Load()
		if (last == nil || now.Sub(*last) >= warnEvery) && s.lastSlowWarn.CompareAndSwap(last, &now) {
			s.log.Warn("file engine: slow fdatasync", "dir", s.dir, "took", d.String())
		}
	}
	return err
}
