package slab

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/uring"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// Name is the engine name reported in Stats and selected by
// --store-engine=slab.
const Name = "slab"

const (
	// DefaultExtentBytes is the largest extent ExtentFor picks.
	DefaultExtentBytes = 64 << 20
	// minAutoExtent is the smallest extent ExtentFor picks.
	minAutoExtent = 1 << 20
	// autoExtents is how many extents ExtentFor aims a disk at: many
	// more than the size classes a mix of values uses, so each class's
	// partly filled extent wastes little and nothing is evicted while the
	// disk has room.
	autoExtents = 256
	// DefaultMaxValueBytes is the largest value when Options leave it 0
	// (the server's max_block_bytes default).
	DefaultMaxValueBytes = 64 << 20
	// chunkBytes bounds the bounce buffer of an O_DIRECT write; larger
	// unaligned values are written in pieces of it.
	chunkBytes = 4 << 20
	// scanChunk is how much of slots.tbl a restart reads per syscall.
	scanChunk = 1 << 20
	// slowSync is the fdatasync duration past which Close warns.
	slowSync = time.Second
)

// ExtentFor is the extent size a disk of capacity bytes is formatted with
// when none is configured: the largest power of two that gives it at least
// autoExtents extents, between 1 MiB and 64 MiB. Values larger than an
// extent are stored in extent-sized pieces, so the extent size does not
// bound the value size, and a small disk gets as many extents (and so
// room for as many size classes) as a large one.
func ExtentFor(capacity uint64) uint64 {
	e := uint64(DefaultExtentBytes)
	for e > minAutoExtent && capacity/e < autoExtents {
		e /= 2
	}
	return e
}

// usable is the capacity values can use: whole extents only, so a
// configured capacity that is not a multiple of the extent size reports
// what the extents hold, not what was asked for.
func (s *Store) usable() uint64 { return uint64(s.geo.extents) * s.geo.extentBytes }

// Options configures Open.
type Options struct {
	// Dir is the disk directory. It must be empty (or missing: Open creates
	// it and warns) the first time; later it must hold a slab store of the
	// same geometry.
	Dir string
	// CapacityBytes is the size of the extent pool: CapacityBytes /
	// ExtentBytes extents are preallocated. Part of the geometry.
	CapacityBytes uint64
	// ExtentBytes is the extent size, a multiple of 4 KiB (1 MiB multiples
	// are the sane production choice). 0 means ExtentFor(CapacityBytes).
	// Values larger than it are stored in pieces. Part of the geometry.
	ExtentBytes uint64
	// MaxValueBytes is the largest value accepted (larger: TOO_LARGE). 0
	// means DefaultMaxValueBytes.
	MaxValueBytes uint64
	// FS is the file layer; nil means vfs.OS{}. Tests pass a vfs.FaultFS.
	FS vfs.FS
	// Clock times syncs for the slow-sync warning; nil means the system
	// clock.
	Clock engine.Clock
	// Logger receives operator events (startup summary, unclean restart,
	// dropped records, the O_DIRECT fallback, failing closed); nil
	// discards them.
	Logger *slog.Logger
	// DirectIO asks for O_DIRECT payload I/O, falling back to buffered I/O
	// with one notice where the filesystem refuses a direct open.
	DirectIO bool
	// Accounting is told every change of committed bytes per tenant; nil
	// means engine.NoAccounting{}.
	Accounting engine.Accounting
	// Scrub configures the background verification of every value; the
	// zero value turns it off.
	Scrub ScrubOptions
	// URing submits payload reads and writes of up to 256 KiB through one
	// io_uring ring per disk, batching the system calls of concurrent
	// requests; where the kernel refuses io_uring the engine says so once
	// and uses pread/pwrite. Only with the real filesystem (FS nil or
	// vfs.OS): fault-injecting file layers need every call to pass them.
	URing bool
}

// Store is a slab engine on one disk directory. It implements
// engine.StoreEngine and is safe for concurrent use.
type Store struct {
	dir      string
	capacity uint64
	maxValue uint64
	geo      geometry
	fs       vfs.FS
	clock    engine.Clock
	log      *slog.Logger
	acct     engine.Accounting
	pool     *iobuf.Pool

	extents []vfs.File // resident descriptors, O_DIRECT while direct
	table   vfs.File
	lock    vfs.File    // Dir itself, flocked for the life of the store
	state   vfs.File    // slab_state, kept open once made (writeState)
	direct  bool        // fixed at Open
	ring    *uring.Ring // small payload I/O; nil: pread/pwrite
	align   uint64      // O_DIRECT offset alignment for reads (<= 4096)

	// upgrade is set by Open when the directory is in the previous
	// format, which it upgrades in place.
	upgrade bool
	// made lists, oldest first, the files and directories Open has
	// created so far; a failed Open removes them. nil once Open succeeds.
	made []string

	// mu is the metadata lock: the allocator, the in-flight map and the
	// generation counter. No disk I/O happens under it.
	mu      sync.Mutex
	alloc   *Allocator
	sums    sumTable
	flights map[wire.BlockKey]*flight
	// wipes holds the extents whose old records are being wiped after
	// they changed class; a record of such an extent is written only once
	// its wipe is done.
	wipes map[uint32]*wipe
	// evicted counts, per key, the values of it unpublished under the
	// lock whose records are still on disk: evicted ones (the PUT that
	// evicted writes over or wipes them only after the lock is let go)
	// and replaced ones (an overwrite clears the old record after it),
	// and removed or dropped ones (another Remove, a read that dropped a
	// value missing a piece or failing its checksum, clear it after). A
	// Remove of such a key waits for them (evictedGone) before it
	// answers, or a SIGKILL meanwhile would bring that value back after
	// the Remove.
	evicted     map[wire.BlockKey]int
	evictedGone sync.Cond
	// spans holds, for each live value larger than an extent, its
	// head's span (how many pieces, and the nonce that names them).
	spans map[wire.BlockKey]span
	// pieceKeys maps each live piece to its head, so Stats counts values,
	// not the pieces of the large ones, and a piece evicted on its own
	// takes its value with it.
	pieceKeys map[wire.BlockKey]pieceOf
	gen       uint64
	epoch     uint64
	// lost maps an extent whose file Open found missing or cut short to
	// the bytes of it that still hold what they held; rebuild drops the
	// records of values past them. nil once Open is done.
	lost map[uint32]uint64
	// restored sums, per tenant, the bytes rebuild found; they are
	// reported to acct once, when Open succeeds, so a failed Open leaves
	// no charge behind.
	restored map[uint64]int64
	// restHeads and restPieces collect, during rebuild, the heads and
	// pieces of values larger than an extent (reconcileSpans).
	restHeads  map[wire.BlockKey]span
	restPieces map[wire.BlockKey]struct{}

	failed  atomic.Bool
	failure atomic.Pointer[string] // why it failed closed, with the cause; set once, before failed
	closeMu sync.RWMutex
	closed  atomic.Bool

	hits      atomic.Uint64
	misses    atomic.Uint64
	puts      atomic.Uint64
	removes   atomic.Uint64
	evictions atomic.Uint64
	moves     atomic.Uint64 // extents moved to another class
	ioErrors  atomic.Uint64

	checksumFailures atomic.Uint64
	corruptLog       logLimiter

	// sections remembers the section sums of values read by range, so
	// later ranges of them read only their own bytes (sections.go).
	sections      *sectionCache
	sectionBuilds atomic.Uint64 // whole reads that took a value's section sums
	sectionReads  atomic.Uint64 // ranged reads served by their sections alone
	sectionMisses atomic.Uint64 // ranged reads whose sections failed, sent to the whole-value check

	scrubStop   chan struct{} // closed by Close; nil without a scrub
	scrubDone   sync.WaitGroup
	scrubbed    atomic.Uint64 // slot bytes the scrub verified
	scrubPasses atomic.Uint64
}

// flight is a same-key PUT in progress: the leader writes, followers wait
// on done and return err. fenced is set (under mu) by a Remove of the key;
// the leader then does not publish.
type flight struct {
	done    chan struct{}
	err     error
	fenced  bool
	waiters int // followers (for tests and debugging)
}

var _ engine.StoreEngine = (*Store)(nil)

func (s *Store) enter() error {
	s.closeMu.RLock()
	if s.closed.Load() {
		s.closeMu.RUnlock()
		return fmt.Errorf("slab engine: %s is closed: %w", s.dir, wire.StatusUnavailable)
	}
	if s.failed.Load() {
		s.closeMu.RUnlock()
		return s.failedErr()
	}
	return nil
}

func (s *Store) exit() { s.closeMu.RUnlock() }

func (s *Store) failedErr() error {
	why := "metadata I/O failed"
	if p := s.failure.Load(); p != nil {
		why = *p
	}
	return fmt.Errorf("slab engine: %s failed closed (%s); restart the node (the cache will start cold): %w: %w", s.dir, why, engine.ErrFailedClosed, wire.StatusIOError)
}

// fail turns the store unhealthy for good: a slot record that could not be
// written or cleared means slots.tbl no longer describes the extents, so
// every later operation answers IO_ERROR rather than guess, and Close does
// not mark the epoch clean (the next start is cold).
func (s *Store) fail(err error) {
	s.ioErrors.Add(1)
	s.failClosed("metadata I/O failed", err)
}

// failClosed turns the store unhealthy for good and says why, once.
func (s *Store) failClosed(why string, err error) {
	cause := fmt.Sprintf("%s: %v", why, err)
	if s.failure.CompareAndSwap(nil, &cause) {
		s.failed.Store(true)
		// Best effort: slots.tbl may no longer describe the extents (a
		// clear that failed would bring a removed value back), so the
		// next start should be cold. If even this write fails, the next
		// start keeps what validates, as after a crash.
		serr := s.writeState(state{epoch: s.epoch, failed: true})
		s.log.Error("slab engine: "+why+"; failing closed: every operation now returns IO_ERROR until restart, and the next start is cold",
			"dir", s.dir, "err", err, "mark_err", serr)
	}
}

// Put implements engine.StoreEngine.
func (s *Store) Put(key wire.BlockKey, value []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	return s.cache(key, value)
}

// PutBatch implements engine.StoreEngine: each item gets its own result.
// Items with distinct keys are written by up to batchWorkers goroutines at
// once (payload writes overlap: the disk sees a queue, not one write at a
// time); a batch that repeats a key is stored in order, one item after
// another, so the key keeps its last value.
func (s *Store) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	if err := s.enter(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return
	}
	defer s.exit()
	if len(keys) < 2 || wire.HasDuplicate(keys) {
		for i := range keys {
			errs[i] = s.cache(keys[i], values[i])
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(keys), batchWorkers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				errs[i] = s.cache(keys[i], values[i])
			}
		})
	}
	wg.Wait()
}

// batchWorkers bounds the writes one PutBatch has in flight.
const batchWorkers = 8

func (s *Store) cache(key wire.BlockKey, value []byte) error {
	n := uint64(len(value))
	if n == 0 {
		return fmt.Errorf("slab engine: cache %s: zero-byte value: %w", key, wire.StatusInvalid)
	}
	if n > s.maxValue {
		return fmt.Errorf("slab engine: cache %s: %d-byte value exceeds the %d-byte maximum: %w", key, n, s.maxValue, wire.StatusTooLarge)
	}
	if n > s.geo.extentBytes {
		return s.cacheSpanned(key, value)
	}
	_, _, err := s.cacheOne(key, value, span{}, nil)
	return err
}

// wipe is the wiping of a rebound extent's old records: done is closed
// when it ends, with err its outcome.
type wipe struct {
	done chan struct{}
	err  error
}

// wait returns the wipe's outcome once it ended; a nil wipe is none.
func (w *wipe) wait() error {
	if w == nil {
		return nil
	}
	<-w.done
	return w.err
}

// finishWipe wipes the records of rebound extent e, which w stands for in
// s.wipes, and lets the writers waiting for it go on. A failed wipe fails
// the store closed: the table may name slots the extent no longer has.
func (s *Store) finishWipe(e uint32, w *wipe) {
	w.err = s.wipeExtentRecords(e)
	s.mu.Lock()
	delete(s.wipes, e)
	s.mu.Unlock()
	close(w.done)
	if w.err != nil {
		s.fail(w.err)
	}
}

// cacheOne stores a value of at most one extent: an ordinary value, a
// piece of a larger one (head names its head's key), or a head (sp,
// recorded with it; see span). published is false when the value did not
// become key's (an error, a follower of another PUT of the key, or fenced
// by a Remove). A published piece keeps a pin (pinned, for the caller to
// Release) so that nothing evicts it before its head is published.
func (s *Store) cacheOne(key wire.BlockKey, value []byte, sp span, head *wire.BlockKey) (published bool, pinned SlotRef, err error) {
	n := uint64(len(value))
	s.mu.Lock()
	if s.failed.Load() {
		s.mu.Unlock()
		return false, 0, s.failedErr()
	}
	if f := s.flights[key]; f != nil {
		// Follower: the leader's payload+record result is ours too, and
		// our bytes are not written. Keys are content-addressed (the
		// connectors hash the token prefix), so a same-key PUT carries the
		// same bytes; and as the two PUTs overlap in time, ordering ours
		// just before the leader's is a valid linearization either way.
		f.waiters++
		s.mu.Unlock()
		<-f.done
		if f.err == nil {
			s.puts.Add(1)
		}
		return false, 0, f.err
	}
	r, err := s.alloc.Reserve(n)
	if err != nil {
		s.mu.Unlock()
		return false, 0, fmt.Errorf("slab engine: cache %s: %d bytes: %w: %w", key, n, err, wire.StatusCacheFull)
	}
	var victims []Victim
	var orphans []orphan
	if v := s.alloc.Victims(); len(v) > 0 {
		victims = append(victims, v...)
		orphans = s.takeOrphans(victims)
		for _, v := range victims {
			s.evicted[v.Key]++
		}
	}
	// An extent that changed class has its old records wiped (one
	// fallocate, which can take milliseconds on a busy filesystem) after
	// the lock is let go; no record of it is written before the wipe is
	// done (wipes).
	var wiping *wipe
	rebound := s.alloc.Rebound()
	if rebound >= 0 {
		wiping = &wipe{done: make(chan struct{})}
		s.wipes[uint32(rebound)] = wiping
		s.moves.Add(1)
	}
	f := &flight{done: make(chan struct{})}
	s.flights[key] = f
	s.gen++
	rec := record{class: uint8(s.alloc.Class(r)), length: uint32(n), key: key, gen: s.gen, span: sp.pieces, nonce: sp.nonce}
	rec.extent, rec.slot = s.alloc.Split(r)
	off := s.alloc.Offset(r)
	wait := s.wipes[rec.extent]
	s.mu.Unlock()
	if wiping != nil {
		s.finishWipe(uint32(rebound), wiping)
	}
	s.account(victims)
	s.removeOrphans(orphans)

	rec.sum, err = s.writePayload(rec.extent, off, value, sumSeed(&key, rec.extent, rec.slot, rec.length))
	if err != nil {
		s.ioErrors.Add(1)
		err = fmt.Errorf("slab engine: cache %s: write %d bytes at %s offset %d: %w: %w",
			key, n, s.extents[rec.extent].Name(), off, err, wire.StatusIOError)
	} else if werr := wait.wait(); werr != nil {
		err = fmt.Errorf("slab engine: cache %s: %w: %w", key, werr, wire.StatusIOError)
	} else if werr := s.writeRecord(r, &rec); werr != nil {
		s.fail(werr)
		err = fmt.Errorf("slab engine: cache %s: %w: %w", key, werr, wire.StatusIOError)
	}

	s.mu.Lock()
	if s.flights[key] == f {
		delete(s.flights, key)
	}
	if err == nil && !f.fenced && !s.failed.Load() {
		s.sums.set(rec.extent, rec.slot, s.alloc.Lattice().Slots(int(rec.class)), rec.sum)
		s.evictionsCleared(victims) // our record is over the victim's; a wipe is done
		old, oldLen, replaced := s.alloc.Publish(r, &key)
		if replaced {
			// The replaced value's record stays on disk until
			// clearAndRelease below: a Remove of the key meanwhile
			// waits for it (waitEvictedGone), or a SIGKILL right after
			// the Remove would bring that value back.
			s.evicted[key]++
		}
		oldSpan, hadSpan := s.spans[key]
		switch {
		case sp.head():
			s.spans[key] = sp
		case sp.pieces&pieceFlag != 0:
			s.pieceKeys[key] = pieceOf{head: *head, nonce: sp.nonce}
			s.alloc.Pin(r)
			pinned = r
		case hadSpan:
			delete(s.spans, key)
		}
		s.mu.Unlock()
		published = true
		s.acct.Committed(key.Tenant, int64(n))
		if replaced {
			s.acct.Committed(key.Tenant, -int64(oldLen))
			s.clearAndRelease(old)
			s.recordCleared(key)
		}
		if hadSpan {
			s.removePieces(key, oldSpan)
		}
		if s.failed.Load() {
			// Clearing the replaced value's record failed the store
			// closed: the new value cannot be read back or survive a
			// restart, so the PUT is not acknowledged.
			err = s.failedErr()
		} else {
			s.puts.Add(1)
		}
	} else {
		// Failed, or a Remove of this key came in while we wrote: the
		// slot goes back without ever being visible, and its record (ours,
		// or an evicted value's) is cleared first.
		s.alloc.Abort(r)
		s.mu.Unlock()
		s.clearAndRelease(r)
		s.mu.Lock()
		s.evictionsCleared(victims)
		s.mu.Unlock()
		if err == nil && s.failed.Load() {
			err = s.failedErr()
		}
		if err == nil {
			s.puts.Add(1) // fenced: the PUT happened, then the Remove
		}
	}
	f.err = err
	close(f.done)
	return published, pinned, err
}

// evictionsCleared ends the victims' entries in s.evicted once their
// records are gone from the slot table (written over, cleared or wiped)
// and wakes the Removes waiting for them. s.mu must be held.
func (s *Store) evictionsCleared(victims []Victim) {
	if len(victims) == 0 {
		return
	}
	for _, v := range victims {
		s.recordGoneLocked(v.Key)
	}
	s.evictedGone.Broadcast()
}

// recordGoneLocked counts off one record of key in evicted. The caller
// holds s.mu and broadcasts evictedGone.
func (s *Store) recordGoneLocked(key wire.BlockKey) {
	if s.evicted[key]--; s.evicted[key] <= 0 {
		delete(s.evicted, key)
	}
}

// recordCleared ends the wait of a Remove of key for a record of key
// that was unpublished under the lock and cleared after it (evicted).
func (s *Store) recordCleared(key wire.BlockKey) {
	s.mu.Lock()
	s.recordGoneLocked(key)
	s.evictedGone.Broadcast()
	s.mu.Unlock()
}

func (s *Store) account(victims []Victim) {
	for _, v := range victims {
		s.acct.Committed(v.Key.Tenant, -int64(v.Length))
	}
	s.evictions.Add(uint64(len(victims)))
}

// clearAndRelease zeroes the record of dead slot r (pinned by the caller)
// and releases the pin, which frees the slot once no read holds it. A clear
// that fails fails the store closed: the record would resurrect the value.
func (s *Store) clearAndRelease(r SlotRef) {
	if err := s.clearRecord(r); err != nil {
		s.fail(err)
	}
	s.mu.Lock()
	s.alloc.Release(r)
	s.mu.Unlock()
}

// Get implements engine.StoreEngine. No byte leaves it unverified: a
// whole value is checked against its payload checksum, a range against
// the sums of the sections it touches, taken when a first range read the
// whole value and checked it (sections.go); a value that fails is dropped
// and answered as a miss (dropCorrupt), never served.
func (s *Store) Get(key wire.BlockKey, offset, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	if err := s.enter(); err != nil {
		return nil, 0, err
	}
	defer s.exit()
	s.mu.Lock()
	r, stored32, ok, err := s.alloc.Acquire(&key)
	if !ok || err != nil {
		s.mu.Unlock()
		if err != nil {
			return nil, 0, fmt.Errorf("slab engine: range %s: %w: %w", key, err, wire.StatusUnavailable)
		}
		s.misses.Add(1)
		return nil, 0, wire.StatusNotFound
	}
	e, sl := s.alloc.Split(r)
	slotOff := s.alloc.Offset(r)
	want := s.sums.get(e, sl)
	sp, spanned := s.spans[key]
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.alloc.Release(r)
		s.mu.Unlock()
	}()
	if spanned {
		return s.rangeSpanned(key, r, sp, uint64(stored32), offset, length, alloc)
	}

	stored := uint64(stored32)
	n, ok := wire.RangeLen(stored, offset, length)
	if !ok {
		return nil, stored, fmt.Errorf("slab engine: range %s: offset %d past the stored length %d: %w", key, offset, stored, wire.StatusInvalid)
	}
	if n == 0 {
		s.hits.Add(1)
		return nil, stored, nil
	}
	data, ok, err := s.readVerified(r, e, slotOff, stored, offset, n, sumSeed(&key, e, sl, stored32), want, alloc)
	if err == nil && !ok {
		s.misses.Add(1)
		return nil, 0, s.dropCorrupt(key, r, stored, "a read")
	}
	if err != nil {
		if _, ok := errors.AsType[wire.Status](err); ok {
			return nil, stored, err
		}
		s.ioErrors.Add(1)
		return nil, stored, fmt.Errorf("slab engine: range %s: read %d bytes at %s offset %d: %w: %w",
			key, n, s.extents[e].Name(), slotOff+offset, err, wire.StatusIOError)
	}
	s.hits.Add(1)
	return data, stored, nil
}

// Exist implements engine.StoreEngine.
func (s *Store) Exist(key wire.BlockKey) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	s.mu.Lock()
	_, n, ok := s.alloc.Exist(&key)
	sp := s.spans[key]
	s.mu.Unlock()
	if !ok {
		return 0, wire.StatusNotFound
	}
	return uint64(sp.pieces)*s.geo.extentBytes + uint64(n), nil
}

// Remove implements engine.StoreEngine. The key is hidden at once; a PUT
// of the key still in flight is fenced and will not publish; the record is
// cleared before Remove returns, and so are the records of its evicted
// values that a PUT in flight has yet to write over (evicted), so neither
// a graceful restart nor one after a SIGKILL brings the value back.
func (s *Store) Remove(key wire.BlockKey) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	found := s.remove(key)
	s.waitEvictedGone(key)
	if !found {
		return wire.StatusNotFound
	}
	s.removes.Add(1)
	if s.failed.Load() {
		return s.failedErr()
	}
	return nil
}

// remove is Remove inside an operation: it hides key (and the pieces of a
// value larger than an extent), fences a PUT of it in flight and clears
// the record. It reports whether there was anything to remove.
func (s *Store) remove(key wire.BlockKey) bool {
	s.mu.Lock()
	r, n, ok := s.alloc.Remove(&key)
	sp, spanned := s.spans[key]
	delete(s.spans, key)
	delete(s.pieceKeys, key)
	f := s.flights[key]
	if f != nil {
		f.fenced = true
		// Later PUTs of the key lead their own flight instead of
		// following one that will not publish.
		delete(s.flights, key)
	}
	if ok {
		s.evicted[key]++ // another Remove of key waits for the clear below
	}
	s.mu.Unlock()
	if ok {
		s.acct.Committed(key.Tenant, -int64(n))
		s.clearAndRelease(r)
		s.recordCleared(key)
	}
	if spanned {
		s.removePieces(key, sp)
	}
	return ok || f != nil
}

// waitEvictedGone waits until no evicted or replaced value of key has
// its record left on disk (evicted). Only Remove waits: the removals a PUT makes
// itself (the pieces of a value it evicted) must not wait for that PUT.
// A piece's record needs no wait: without its head's record, the next
// Open drops it.
func (s *Store) waitEvictedGone(key wire.BlockKey) {
	s.mu.Lock()
	for s.evicted[key] > 0 {
		s.evictedGone.Wait()
	}
	s.mu.Unlock()
}

// Stats implements engine.StoreEngine.
func (s *Store) Stats() engine.Stats {
	s.checkDirStill()
	s.mu.Lock()
	objects, used := s.alloc.Objects()-uint64(len(s.pieceKeys)), s.alloc.Used()
	s.mu.Unlock()
	return engine.Stats{
		Engine:           Name,
		Path:             s.dir,
		CapacityBytes:    s.usable(),
		UsedBytes:        used,
		Objects:          objects,
		Hits:             s.hits.Load(),
		Misses:           s.misses.Load(),
		Puts:             s.puts.Load(),
		Removes:          s.removes.Load(),
		Evictions:        s.evictions.Load(),
		ExtentMoves:      s.moves.Load(),
		IOErrors:         s.ioErrors.Load(),
		ChecksumFailures: s.checksumFailures.Load(),
		ScrubbedBytes:    s.scrubbed.Load(),
		ScrubPasses:      s.scrubPasses.Load(),
		SectionTables:    s.sectionBuilds.Load(),
		SectionReads:     s.sectionReads.Load(),
		SectionMisses:    s.sectionMisses.Load(),
		DirectIO:         s.direct,
		Healthy:          !s.failed.Load() && !s.closed.Load(),
	}
}

// Close implements engine.StoreEngine: it waits for operations in flight,
// syncs the extents and slots.tbl and only then marks slab_state clean. A
// store that failed closed is left marked failed, so the next start is
// cold.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed.Load() {
		s.closeMu.Unlock()
		return fmt.Errorf("slab engine: %s is closed: %w", s.dir, wire.StatusUnavailable)
	}
	s.closed.Store(true)
	s.closeMu.Unlock()
	s.stopScrub()

	var err error
	if s.failed.Load() {
		err = errors.New("the store failed closed earlier, so its epoch stays dirty")
	} else {
		err = s.syncAll()
		if err == nil {
			err = s.writeState(state{epoch: s.epoch, clean: true})
		}
		if err != nil {
			s.fail(err)
		}
	}
	s.closeFiles()
	if err != nil {
		return fmt.Errorf("slab engine: close %s: %w; the next start is cold: %w", s.dir, err, wire.StatusIOError)
	}
	s.log.Info("slab engine: closed cleanly", "dir", s.dir, "epoch", s.epoch)
	return nil
}

func (s *Store) syncAll() error {
	start := s.clock.Now()
	for _, f := range s.extents {
		if err := vfs.Datasync(f); err != nil {
			return err
		}
	}
	if err := vfs.Datasync(s.table); err != nil {
		return err
	}
	if d := s.clock.Now().Sub(start); d > slowSync {
		s.log.Warn("slab engine: slow sync at shutdown", "dir", s.dir, "took", d.String())
	}
	return nil
}

// checkDirStill fails the store closed when its directory was removed (or
// replaced by another) while it runs: it would go on serving from files no
// longer reachable by name, holding their space out of sight, and a
// restart would find an empty directory or none. Stats runs it, so a
// readiness probe or a metrics scrape notices within its interval; the
// cost is two stats.
func (s *Store) checkDirStill() {
	if s.failed.Load() || s.enter() != nil {
		return
	}
	defer s.exit()
	locked, err := s.lock.Stat()
	if err != nil {
		return
	}
	now, err := s.fs.Stat(s.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil || os.SameFile(locked, now):
		return // there, or not ours to judge (a parent we cannot search)
	}
	s.failClosed("the disk directory was removed or replaced while the node ran, so its blocks are no longer where a restart would find them", err)
}

var _ engine.Pinner = (*Store)(nil)

// Pin implements engine.Pinner: the value's slot is held as a read holds
// it, so CLOCK passes it by and a REMOVE or overwrite frees it only at
// Unpin. A value spanning several extents is not pinned (ok false): its
// pieces are evicted one by one.
func (s *Store) Pin(key wire.BlockKey) (engine.Loan, bool) {
	if err := s.enter(); err != nil {
		return engine.Loan{}, false
	}
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok, err := s.alloc.Acquire(&key)
	if !ok || err != nil {
		return engine.Loan{}, false
	}
	if _, spanned := s.spans[key]; spanned {
		s.alloc.Release(r)
		return engine.Loan{}, false
	}
	return engine.Loan{A: uint64(r)}, true
}

// Unpin implements engine.Pinner.
func (s *Store) Unpin(l engine.Loan) {
	s.mu.Lock()
	s.alloc.Release(SlotRef(l.A))
	s.mu.Unlock()
}
