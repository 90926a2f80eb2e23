package file

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// Name is the engine name reported in Stats and selected by
// --store-engine=file.
const Name = "file"

// Options configures Open.
type Options struct {
	// Dir is the disk directory; Open creates blocks/, tmp/ and trash/ in it.
	Dir string
	// CapacityBytes bounds the payload bytes kept on this disk; eviction
	// keeps the total at or below it. Required.
	CapacityBytes uint64
	// FS is the file layer; nil means vfs.OS{}. Tests pass a vfs.FaultFS.
	FS vfs.FS
	// Clock times fdatasync for the slow-sync warning; nil means the system
	// clock.
	Clock engine.Clock
	// Logger receives operator-relevant events (startup summary, the
	// O_DIRECT fallback, startup eviction, slow syncs); nil means
	// a discarding logger.
	Logger *slog.Logger
	// DirectIO asks for O_DIRECT payload I/O, falling back to buffered I/O
	// (with one warning) where the filesystem refuses it. The zero value is
	// buffered; DefaultOptions and the server turn it on.
	DirectIO bool
	// Shards is the number of index shards; 0 means 64.
	Shards int
	// Accounting is told every change of committed bytes per tenant
	// (publish, overwrite, eviction, removal, and what Open finds); quotas
	// and tenant metrics hang off it. nil means engine.NoAccounting{}.
	Accounting engine.Accounting
}

// DefaultOptions returns the options the server uses for one disk: O_DIRECT
// on, 64 shards, the real filesystem and clock.
func DefaultOptions(dir string, capacity uint64) Options {
	return Options{Dir: dir, CapacityBytes: capacity, DirectIO: true, Shards: 64}
}

const (
	defaultShards = 64
	// stripes is the number of per-key mutexes serialising publish, remove
	// and eviction of one key. A power of two.
	stripes = 1024
	// chunkBytes is the largest bounce buffer an O_DIRECT write of an
	// unaligned value uses; bigger values are written in chunks of it.
	chunkBytes = 1 << 20
	// slowSync is the fdatasync duration past which the engine warns (etcd
	// warns at the same 1 s); warnEvery rate-limits that warning.
	slowSync  = time.Second
	warnEvery = 10 * time.Second
)

// Store is a file engine on one disk directory. It implements
// engine.StoreEngine and is safe for concurrent use.
type Store struct {
	dir      string
	lock     vfs.File // Dir, open and flocked for the store's life
	blocks   string
	tmp      string
	trash    string
	capacity uint64
	fs       vfs.FS
	clock    engine.Clock
	log      *slog.Logger
	pool     *iobuf.Pool
	acct     engine.Accounting
	// full is set while the filesystem refuses writes even after the
	// evict-and-retry (it is shared with other data); readiness reports it.
	full atomic.Bool

	idx     *index
	stripes [stripes]sync.Mutex
	// buckets holds per bucket directory (blocks/tt/oo, numbered tt<<8|oo)
	// the flags bucketExists and bucketDirty.
	buckets []atomic.Uint32

	direct atomic.Bool
	seq    atomic.Uint64 // temp and trash name suffix

	// closeMu is held shared by every operation; Close sets closed and then
	// takes it exclusively, which waits for the operations in flight.
	closeMu sync.RWMutex
	closed  atomic.Bool

	used      atomic.Uint64 // published bytes plus reservations in flight
	objects   atomic.Uint64
	hits      atomic.Uint64
	misses    atomic.Uint64
	puts      atomic.Uint64
	removes   atomic.Uint64
	evictions atomic.Uint64
	ioErrors  atomic.Uint64

	lastSlowWarn atomic.Pointer[time.Time] // the last slow-sync warning; nil: none yet
}

const (
	bucketExists = 1 << iota
	bucketDirty  // a name in it changed since the last directory sync
	bucketNew    // created since startup: its parents need a sync too
)

var _ engine.StoreEngine = (*Store)(nil)

// Open opens (creating if needed) the file engine in opts.Dir, empties tmp/
// and trash/, and rebuilds the index from blocks/. It refuses to start on a
// malformed entry under blocks/ and evicts down to CapacityBytes if the
// directory holds more. A missing Dir is created with a warning (it may be
// an unmounted disk). Unlike the slab engine it reserves no space, so a
// CapacityBytes above the free space is not refused: it is a bound, and a
// full filesystem is met by the ENOSPC evict-and-retry.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("file engine: no directory given: %w", wire.StatusInvalid)
	}
	if opts.CapacityBytes == 0 {
		return nil, fmt.Errorf("file engine: %s: capacity is 0; set the disk capacity in bytes: %w", opts.Dir, wire.StatusInvalid)
	}
	if opts.FS == nil {
		opts.FS = vfs.OS{}
	}
	if opts.Clock == nil {
		opts.Clock = engine.SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Shards <= 0 {
		opts.Shards = defaultShards
	}
	if opts.Accounting == nil {
		opts.Accounting = engine.NoAccounting{}
	}
	// A slab store's directory (the slab engine refuses a file engine's
	// the same way): serving it empty would hide its blocks, and the file
	// engine would make its own directories beside the extents.
	if _, err := opts.FS.Stat(filepath.Join(opts.Dir, "slab_meta")); err == nil {
		return nil, fmt.Errorf("file engine: %s holds a slab store (slab_meta): select the engine that wrote it (--store-engine=slab), or point the file engine at another directory: %w", opts.Dir, wire.StatusInvalid)
	}
	s := &Store{
		dir:      opts.Dir,
		blocks:   filepath.Join(opts.Dir, "blocks"),
		tmp:      filepath.Join(opts.Dir, "tmp"),
		trash:    filepath.Join(opts.Dir, "trash"),
		capacity: opts.CapacityBytes,
		fs:       opts.FS,
		clock:    opts.Clock,
		log:      opts.Logger,
		acct:     opts.Accounting,
		pool:     iobuf.NewPool(chunkBytes),
		idx:      newIndex(opts.Shards),
		buckets:  make([]atomic.Uint32, 1<<16),
	}
	s.direct.Store(opts.DirectIO && oDirect != 0)
	if err := s.load(); err != nil {
		s.unlock()
		return nil, err
	}
	s.log.Info("file engine: opened", "dir", s.dir, "objects", s.objects.Load(),
		"used_bytes", s.used.Load(), "capacity_bytes", s.capacity, "direct_io", s.direct.Load())
	return s, nil
}

// enter admits an operation unless the store is closed; exit must follow.
func (s *Store) enter() error {
	s.closeMu.RLock()
	if s.closed.Load() {
		s.closeMu.RUnlock()
		return fmt.Errorf("file engine: %s is closed: %w", s.dir, wire.StatusUnavailable)
	}
	return nil
}

func (s *Store) exit() { s.closeMu.RUnlock() }

func (s *Store) stripe(k wire.BlockKey) *sync.Mutex {
	return &s.stripes[mix64(keyHash(k))&(stripes-1)]
}

// Put implements engine.StoreEngine.
func (s *Store) Put(key wire.BlockKey, value []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	return s.cache(key, value)
}

// PutBatch implements engine.StoreEngine: the items are stored in order,
// each with its own result.
func (s *Store) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	if err := s.enter(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return
	}
	defer s.exit()
	for i := range keys {
		errs[i] = s.cache(keys[i], values[i])
	}
}

func (s *Store) cache(key wire.BlockKey, value []byte) error {
	n := uint64(len(value))
	if n == 0 {
		return fmt.Errorf("file engine: cache %s: zero-byte value: %w", key, wire.StatusInvalid)
	}
	if n > s.capacity {
		return fmt.Errorf("file engine: cache %s: %d-byte value exceeds the disk capacity of %d bytes: %w",
			key, n, s.capacity, wire.StatusTooLarge)
	}
	err := s.put(key, value)
	if err != nil && isNoSpace(err) {
		// Exactly one bounded force-evict and retry, never a loop. The
		// filesystem is fuller than our accounting says (other tenants of
		// the disk, metadata, a failed unlink); free a little more than
		// this value needs and try once more.
		s.forceEvict(max(2*n, s.capacity/100))
		err = s.put(key, value)
		if err != nil && isNoSpace(err) {
			if !s.full.Swap(true) {
				s.log.Warn("file engine: filesystem full even after evicting; writes fail with CACHE_FULL until space frees up", "dir", s.dir)
			}
			return fmt.Errorf("file engine: cache %s: disk full after one evict-and-retry: %w: %w", key, err, wire.StatusCacheFull)
		}
	}
	if err == nil && s.full.Load() {
		s.full.Store(false)
		s.log.Info("file engine: writes succeed again after a full filesystem", "dir", s.dir)
	}
	if err != nil {
		if _, ok := errors.AsType[wire.Status](err); ok {
			return err
		}
		s.ioErrors.Add(1)
		return fmt.Errorf("file engine: cache %s: %w: %w", key, err, wire.StatusIOError)
	}
	s.puts.Add(1)
	return nil
}

// put reserves room, writes value to a temp file and publishes it. On any
// failure nothing is published, the reservation is returned and the temp
// file is gone.
func (s *Store) put(key wire.BlockKey, value []byte) error {
	n := uint64(len(value))
	if err := s.reserve(n); err != nil {
		return fmt.Errorf("file engine: cache %s: %w", key, err)
	}
	tmp := s.tmpPath(key)
	if err := s.writeTemp(tmp, value); err != nil {
		s.used.Add(-n)
		return err
	}
	if err := s.publish(key, tmp, n); err != nil {
		s.used.Add(-n)
		_ = s.fs.Remove(tmp)
		return err
	}
	return nil
}

// reserve counts n bytes against the capacity, evicting until they fit.
func (s *Store) reserve(n uint64) error {
	for {
		cur := s.used.Load()
		if cur+n <= s.capacity {
			if s.used.CompareAndSwap(cur, cur+n) {
				return nil
			}
			continue
		}
		if _, ok := s.evictOne(); !ok {
			return fmt.Errorf("no evictable block left for %d bytes (%d of %d bytes in use or in flight): %w",
				n, cur, s.capacity, wire.StatusCacheFull)
		}
	}
}

// forceEvict evicts, in CLOCK order, until at least target bytes are freed
// or nothing is left.
func (s *Store) forceEvict(target uint64) {
	for freed := uint64(0); freed < target; {
		n, ok := s.evictOne()
		if !ok {
			return
		}
		freed += n
	}
}

// evictOne evicts the next CLOCK victim and returns its size; false means
// the index is empty.
func (s *Store) evictOne() (uint64, bool) {
	for {
		e := s.idx.victim()
		if e == nil {
			return 0, false
		}
		if s.evict(e) {
			return e.size, true
		}
		// Replaced or removed since it was picked; pick again.
	}
}

// evict unlinks e's file if e is still the published entry of its key.
// As Remove does, it renames the file into trash/ under the key's stripe
// (so a publish of the key that follows cannot have its file unlinked)
// and unlinks it after: unlinking a large file frees its blocks through
// the journal, which the stripe's other keys should not wait for.
func (s *Store) evict(e *entry) bool {
	mu := s.stripe(e.key)
	mu.Lock()
	if !s.idx.remove(e) {
		mu.Unlock()
		return false
	}
	trash, err := s.toTrash(e.key)
	if err != nil {
		err = s.fs.Remove(s.blockPath(e.key))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			// The entry is gone from the index either way, or eviction
			// could not make progress; the file is found again at the
			// next Open.
			s.ioErrors.Add(1)
		}
	}
	s.used.Add(-e.size)
	s.objects.Add(^uint64(0))
	s.acct.Committed(e.key.Tenant, -int64(e.size))
	s.evictions.Add(1)
	s.markBucket(e.key, bucketDirty)
	mu.Unlock()
	if trash != "" {
		if err := s.fs.Remove(trash); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.ioErrors.Add(1) // emptied at the next Open
		}
	}
	return true
}

// publish renames the temp file onto the block's name and updates the index,
// both under the key's stripe mutex so that they agree.
func (s *Store) publish(key wire.BlockKey, tmp string, n uint64) error {
	final := s.blockPath(key)
	mu := s.stripe(key)
	mu.Lock()
	defer mu.Unlock()
	if err := s.ensureBucket(key); err != nil {
		return err
	}
	err := s.fs.Rename(tmp, final)
	if err != nil && errors.Is(err, os.ErrNotExist) {
		if _, serr := s.fs.Stat(tmp); serr == nil {
			// The bucket directory vanished under us (an operator's rm);
			// recreate it once.
			s.buckets[bucketOf(key)].Store(0)
			if err = s.ensureBucket(key); err == nil {
				err = s.fs.Rename(tmp, final)
			}
		}
	}
	if err != nil {
		return err
	}
	delta := int64(n)
	if old := s.idx.put(&entry{key: key, size: n}); old != nil {
		s.used.Add(-old.size)
		delta -= int64(old.size)
	} else {
		s.objects.Add(1)
	}
	s.acct.Committed(key.Tenant, delta)
	s.markBucket(key, bucketDirty)
	return nil
}

// ensureBucket creates the key's bucket directory unless it is known to
// exist.
func (s *Store) ensureBucket(key wire.BlockKey) error {
	b := bucketOf(key)
	if s.buckets[b].Load()&bucketExists != 0 {
		return nil
	}
	if err := s.fs.MkdirAll(s.bucketPath(b), 0o755); err != nil {
		return err
	}
	s.buckets[b].Or(bucketExists | bucketNew | bucketDirty)
	return nil
}

func (s *Store) markBucket(key wire.BlockKey, flag uint32) {
	b := &s.buckets[bucketOf(key)]
	if b.Load()&flag == 0 {
		b.Or(flag)
	}
}

// Get implements engine.StoreEngine. The stored length comes from fstat of
// the file actually opened, so it always matches the bytes returned even
// when a concurrent Put replaces the value between lookup and open.
func (s *Store) Get(key wire.BlockKey, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	if err := s.enter(); err != nil {
		return nil, 0, err
	}
	defer s.exit()
	e := s.idx.get(key)
	if e == nil {
		s.misses.Add(1)
		return nil, 0, wire.StatusNotFound
	}
	if !e.ref.Load() {
		e.ref.Store(true)
	}
	path := s.blockPath(key)
	f, direct, err := s.openRead(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			s.dropMissing(e)
			s.misses.Add(1)
			return nil, 0, wire.StatusNotFound
		}
		s.ioErrors.Add(1)
		return nil, 0, fmt.Errorf("file engine: range %s: %w: %w", key, err, wire.StatusIOError)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.ioErrors.Add(1)
		return nil, 0, fmt.Errorf("file engine: range %s: %w: %w", key, err, wire.StatusIOError)
	}
	stored := uint64(fi.Size())
	n, ok := wire.RangeLen(stored, offset, length)
	if !ok {
		return nil, stored, fmt.Errorf("file engine: range %s: offset %d is past the stored length %d: %w",
			key, offset, stored, wire.StatusInvalid)
	}
	if n == 0 {
		s.hits.Add(1)
		return []byte{}, stored, nil
	}
	var data []byte
	if direct {
		data, err = readDirect(f, offset, n, alloc)
	} else {
		data = alloc.Alloc(int(n))
		var got int
		got, err = f.ReadAt(data, int64(offset))
		if got == len(data) {
			err = nil
		} else if err == nil {
			err = fmt.Errorf("short read of %s: %d of %d bytes", path, got, n)
		}
	}
	if err != nil {
		if _, ok := errors.AsType[wire.Status](err); ok {
			return nil, stored, fmt.Errorf("file engine: range %s: %w", key, err)
		}
		s.ioErrors.Add(1)
		return nil, stored, fmt.Errorf("file engine: range %s: %w: %w", key, err, wire.StatusIOError)
	}
	s.hits.Add(1)
	return data, stored, nil
}

// dropMissing removes e from the index if its file is really gone (deleted
// behind our back). It checks under the stripe mutex, where no publish or
// remove of the key can be half done.
func (s *Store) dropMissing(e *entry) {
	mu := s.stripe(e.key)
	mu.Lock()
	defer mu.Unlock()
	if s.idx.get(e.key) != e {
		return
	}
	if _, err := s.fs.Stat(s.blockPath(e.key)); !errors.Is(err, os.ErrNotExist) {
		return
	}
	if s.idx.remove(e) {
		s.used.Add(-e.size)
		s.objects.Add(^uint64(0))
		s.acct.Committed(e.key.Tenant, -int64(e.size))
	}
}

// Exist implements engine.StoreEngine from the index alone.
func (s *Store) Exist(key wire.BlockKey) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	if e := s.idx.get(key); e != nil {
		return e.size, nil
	}
	return 0, wire.StatusNotFound
}

// Remove implements engine.StoreEngine: rename into trash/ (the logical
// commit), drop from the index, then unlink outside the lock.
func (s *Store) Remove(key wire.BlockKey) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	mu := s.stripe(key)
	mu.Lock()
	e := s.idx.get(key)
	if e == nil {
		mu.Unlock()
		return wire.StatusNotFound
	}
	trash, err := s.toTrash(key)
	if err != nil {
		mu.Unlock()
		s.ioErrors.Add(1)
		return fmt.Errorf("file engine: remove %s: %w: %w", key, err, wire.StatusIOError)
	}
	if s.idx.remove(e) {
		s.used.Add(-e.size)
		s.objects.Add(^uint64(0))
		s.acct.Committed(e.key.Tenant, -int64(e.size))
	}
	s.markBucket(key, bucketDirty)
	mu.Unlock()
	s.removes.Add(1)
	if trash != "" {
		if err := s.fs.Remove(trash); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.ioErrors.Add(1) // emptied at the next Open
		}
	}
	return nil
}

// toTrash takes key's block out of blocks/ and returns where it went, to
// be unlinked outside the stripe lock: renamed into trash/, or "" when it
// was unlinked in place or was not there. A rename that finds no such
// file may have missed trash/ rather than the block (an operator removed
// trash/): the block is then unlinked where it is, not left behind to
// come back at the next Open.
func (s *Store) toTrash(key wire.BlockKey) (string, error) {
	trash := s.trashPath(key)
	err := s.fs.Rename(s.blockPath(key), trash)
	if err == nil {
		return trash, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := s.fs.Remove(s.blockPath(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	return "", nil
}

// Stats implements engine.StoreEngine. UsedBytes includes the reservations
// of writes in flight.
func (s *Store) Stats() engine.Stats {
	healthy := !s.closed.Load()
	return engine.Stats{
		Engine:        Name,
		Path:          s.dir,
		CapacityBytes: s.capacity,
		UsedBytes:     s.used.Load(),
		Objects:       s.objects.Load(),
		Hits:          s.hits.Load(),
		Misses:        s.misses.Load(),
		Puts:          s.puts.Load(),
		Removes:       s.removes.Load(),
		Evictions:     s.evictions.Load(),
		IOErrors:      s.ioErrors.Load(),
		DirectIO:      s.direct.Load(),
		Healthy:       healthy,
		DiskFull:      s.full.Load(),
	}
}

// Close waits for operations in flight, then fsyncs every directory whose
// entries changed, so every acknowledged Put and Remove survives a power
// loss after a graceful shutdown (the data itself was fdatasynced before
// its rename). Later calls return StatusUnavailable.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return fmt.Errorf("file engine: %s is already closed: %w", s.dir, wire.StatusUnavailable)
	}
	s.closeMu.Lock() // wait for operations in flight
	//lint:ignore SA2001 taking the lock is the wait; nothing is guarded here
	s.closeMu.Unlock()

	var errs []error
	parents := map[string]bool{}
	for b := range s.buckets {
		f := s.buckets[b].Load()
		if f&bucketDirty != 0 {
			if err := s.fs.SyncDir(s.bucketPath(b)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if f&bucketNew != 0 {
			parents[filepath.Dir(s.bucketPath(b))] = true
		}
	}
	for p := range parents {
		if err := s.fs.SyncDir(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(parents) > 0 {
		if err := s.fs.SyncDir(s.blocks); err != nil {
			errs = append(errs, err)
		}
	}
	s.unlock() // after the syncs: the next owner finds the directory settled
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("file engine: %s: syncing directories at close: %w: %w", s.dir, err, wire.StatusIOError)
	}
	return nil
}

// Dir is the disk directory.
func (s *Store) Dir() string { return s.dir }

// bucketOf numbers the bucket directory of k: tenant byte 0 << 8 | object
// id byte 0.
func bucketOf(k wire.BlockKey) int { return int(k.Tenant>>56)<<8 | int(k.ID[0]) }

const hexDigits = "0123456789abcdef"

func (s *Store) bucketPath(b int) string {
	buf := make([]byte, 0, len(s.blocks)+6)
	buf = append(buf, s.blocks...)
	buf = append(buf, '/', hexDigits[b>>12&15], hexDigits[b>>8&15], '/', hexDigits[b>>4&15], hexDigits[b&15])
	return string(buf)
}

// blockPath is <Dir>/blocks/tt/oo/<filename>.
func (s *Store) blockPath(k wire.BlockKey) string {
	b := bucketOf(k)
	buf := make([]byte, 0, len(s.blocks)+7+wire.FilenameLen)
	buf = append(buf, s.blocks...)
	buf = append(buf, '/', hexDigits[b>>12&15], hexDigits[b>>8&15], '/', hexDigits[b>>4&15], hexDigits[b&15], '/')
	buf = k.AppendFilename(buf)
	return string(buf)
}

// uniquePath is dir/<filename>.<seq>; seq is unique for the Store's life and
// both directories are emptied at Open.
func (s *Store) uniquePath(dir string, k wire.BlockKey) string {
	buf := make([]byte, 0, len(dir)+2+wire.FilenameLen+20)
	buf = append(buf, dir...)
	buf = append(buf, '/')
	buf = k.AppendFilename(buf)
	buf = append(buf, '.')
	buf = strconv.AppendUint(buf, s.seq.Add(1), 10)
	return string(buf)
}

func (s *Store) tmpPath(k wire.BlockKey) string   { return s.uniquePath(s.tmp, k) }
func (s *Store) trashPath(k wire.BlockKey) string { return s.uniquePath(s.trash, k) }

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
