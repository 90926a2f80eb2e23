package file

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// load prepares the directory and rebuilds the index: it creates the three
// subdirectories, empties tmp/ and trash/ (writes and removes a crash cut
// short), probes O_DIRECT, walks blocks/ and evicts down to capacity.
func (s *Store) load() error {
	_, err := s.fs.Stat(s.dir)
	missing := errors.Is(err, fs.ErrNotExist)
	for _, d := range []string{s.blocks, s.tmp, s.trash} {
		if err := s.fs.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("file engine: cannot create %s: %w; check the disk directory's permissions", d, err)
		}
	}
	if missing {
		// A missing disk directory is as often an unmounted disk as a new
		// one; created silently, the cache would land on whatever
		// filesystem holds the mount point (often the root disk).
		s.log.Info("file engine: created the disk directory", "dir", s.dir)
	}
	// One owner per directory, before anything in it is touched: a second
	// store would empty tmp/ under the first and write the same temp
	// names.
	if err := s.lockDir(); err != nil {
		return err
	}
	for _, d := range []string{s.tmp, s.trash} {
		if err := s.empty(d); err != nil {
			return err
		}
	}
	if err := s.probe(); err != nil {
		return err
	}
	if err := s.walk(); err != nil {
		return err
	}
	if used := s.used.Load(); used > s.capacity {
		before := s.objects.Load()
		for s.used.Load() > s.capacity {
			if _, ok := s.evictOne(); !ok {
				break
			}
		}
		s.log.Warn("file engine: directory holds more than the configured capacity; evicted down to it",
			"dir", s.dir, "capacity_bytes", s.capacity, "found_bytes", used,
			"evicted", before-s.objects.Load(), "used_bytes", s.used.Load())
	}
	return nil
}

// lockDir opens Dir and flocks it for the life of the store.
func (s *Store) lockDir() error {
	d, err := s.fs.OpenFile(s.dir, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("file engine: open %s: %w", s.dir, err)
	}
	if err := vfs.LockDir(d); err != nil {
		_ = d.Close()
		if errors.Is(err, vfs.ErrLocked) {
			return fmt.Errorf("file engine: %s is in use by another store (a disk has one owner: another dfkv server, an embedded store, or a second disk entry naming the same directory); nothing was changed: %w", s.dir, wire.StatusUnavailable)
		}
		return fmt.Errorf("file engine: %w", err)
	}
	engine.NoteLock(d.Fd(), true) // for a fork without exec (engine.LockNotify)
	s.lock = d
	return nil
}

// unlock lets Dir go (Close, or an Open that failed).
func (s *Store) unlock() {
	if s.lock != nil {
		engine.NoteLock(s.lock.Fd(), false)
		_ = s.lock.Close()
		s.lock = nil
	}
}

// empty removes the entries of dir (tmp/ or trash/) the engine made: a
// write or a remove a crash cut short, named <48 hex digits>.<number>
// (and tmp/'s probe). Anything else may not be ours: the start is
// refused, naming it, as for a stray entry under blocks/. So is a dir
// that is not a plain directory (a symlink to /tmp would be emptied).
func (s *Store) empty(dir string) error {
	if !s.plainDir(dir) {
		return fmt.Errorf("file engine: %s is not a plain directory (a symlink?); it must be a directory of its own, holding only the engine's in-progress files: %w", dir, wire.StatusInvalid)
	}
	ents, err := s.fs.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("file engine: cannot list %s: %w", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if !s.madeHere(dir, e) {
			return fmt.Errorf("file engine: %s is not a file the engine writes (in-progress files are <48 hex digits>.<number>); it may not be ours, so the start stops: move it away: %w", p, wire.StatusInvalid)
		}
		if err := s.fs.Remove(p); err != nil {
			return fmt.Errorf("file engine: cannot clear leftover %s: %w; remove it by hand (%s holds only in-progress files)", p, err, dir)
		}
	}
	return nil
}

// plainDir reports whether dir, a child of Dir, is a directory itself
// and not a symlink to one (its entry in Dir says, as lstat would).
func (s *Store) plainDir(dir string) bool {
	ents, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Name() == filepath.Base(dir) {
			return e.IsDir()
		}
	}
	return false
}

// madeHere reports whether e, an entry of tmp/ or trash/, is a name the
// engine makes there.
func (s *Store) madeHere(dir string, e fs.DirEntry) bool {
	if !e.Type().IsRegular() {
		return false
	}
	name := e.Name()
	if dir == s.tmp && name == "probe" {
		return true
	}
	base, seq, ok := strings.Cut(name, ".")
	if _, err := wire.ParseFilename(base); !ok || err != nil || seq == "" {
		return false
	}
	for _, c := range seq {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// probe creates a scratch file in tmp/ the way Put will, so that a
// directory the engine cannot write fails Open, and a filesystem that
// refuses O_DIRECT is reported at startup rather than on the first write.
func (s *Store) probe() error {
	p := filepath.Join(s.tmp, "probe")
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	f, err := s.fs.OpenFile(p, flag|s.directFlag(), 0o644)
	if err != nil && s.direct.Load() && errors.Is(err, syscall.EINVAL) {
		s.disableDirect(err)
		f, err = s.fs.OpenFile(p, flag, 0o644)
	}
	if err == nil {
		err = f.Close()
	}
	if rerr := s.fs.Remove(p); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("file engine: cannot create files in %s: %w; check the disk directory's permissions and free space", s.tmp, err)
	}
	return nil
}

// walk rebuilds the index from blocks/tt/oo/<filename>, using the names and
// the sizes from the directory listing; no block file is opened.
func (s *Store) walk() error {
	l1, err := s.fs.ReadDir(s.blocks)
	if err != nil {
		return fmt.Errorf("file engine: cannot list %s: %w", s.blocks, err)
	}
	for _, d1 := range l1 {
		p1 := filepath.Join(s.blocks, d1.Name())
		if !d1.IsDir() || !isHexByte(d1.Name()) {
			return s.malformed(p1, "not a bucket directory (two lower-case hex digits)")
		}
		l2, err := s.fs.ReadDir(p1)
		if err != nil {
			return fmt.Errorf("file engine: cannot list %s: %w", p1, err)
		}
		for _, d2 := range l2 {
			p2 := filepath.Join(p1, d2.Name())
			if !d2.IsDir() || !isHexByte(d2.Name()) {
				return s.malformed(p2, "not a bucket directory (two lower-case hex digits)")
			}
			files, err := s.fs.ReadDir(p2)
			if err != nil {
				return fmt.Errorf("file engine: cannot list %s: %w", p2, err)
			}
			for _, fe := range files {
				if err := s.loadFile(p2, d1.Name(), d2.Name(), fe); err != nil {
					return err
				}
			}
			if len(files) > 0 {
				s.buckets[hexByte(d1.Name())<<8|hexByte(d2.Name())].Store(bucketExists)
			}
		}
	}
	return nil
}

func (s *Store) loadFile(dir, tt, oo string, fe os.DirEntry) error {
	name := fe.Name()
	p := filepath.Join(dir, name)
	if !fe.Type().IsRegular() {
		return s.malformed(p, "not a regular file")
	}
	key, err := wire.ParseFilename(name)
	if err != nil {
		return s.malformed(p, err.Error())
	}
	if name[0:2] != tt || name[16:18] != oo {
		return s.malformed(p, fmt.Sprintf("in the wrong bucket directory; this engine keeps it in %s",
			filepath.Join(s.blocks, name[0:2], name[16:18])))
	}
	info, err := fe.Info()
	if err != nil {
		return fmt.Errorf("file engine: cannot stat %s: %w", p, err)
	}
	if info.Size() == 0 {
		// Cannot be a block we wrote (values are non-empty and fdatasynced
		// before the rename); a filesystem that reorders a crash can leave
		// one. It is cache: drop it.
		s.log.Warn("file engine: removing empty block file", "path", p)
		if err := s.fs.Remove(p); err != nil {
			return fmt.Errorf("file engine: cannot remove empty block file %s: %w", p, err)
		}
		return nil
	}
	size := uint64(info.Size())
	if old := s.idx.put(&entry{key: key, size: size}); old != nil {
		// Two directory entries of one name cannot happen; keep the sums
		// right regardless.
		s.used.Add(-old.size)
		s.objects.Add(^uint64(0))
		s.acct.Committed(key.Tenant, -int64(old.size))
	}
	s.used.Add(size)
	s.objects.Add(1)
	s.acct.Committed(key.Tenant, int64(size))
	return nil
}

func (s *Store) malformed(path, why string) error {
	return fmt.Errorf("file engine: unexpected entry %s: %s; the file engine owns %s and refuses to start rather than guess: "+
		"move that entry out of the directory, or point dfkv at an empty directory: %w",
		path, why, s.blocks, wire.StatusInvalid)
}

func isHexByte(name string) bool {
	return len(name) == 2 && isLowerHex(name[0]) && isLowerHex(name[1])
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func hexByte(name string) int {
	v := func(c byte) int {
		if c <= '9' {
			return int(c - '0')
		}
		return int(c-'a') + 10
	}
	return v(name[0])<<4 | v(name[1])
}
