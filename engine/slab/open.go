package slab

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/uring"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// Open opens the slab store in opts.Dir, creating it if the directory is
// empty or missing (a missing one with a warning: it may be an unmounted
// disk). On an existing store it checks the format and geometry (refusing,
// without writing anything, if they differ), then rebuilds the index from
// slots.tbl, after a clean stop or not (it starts cold only when the last
// run failed closed, or slab_meta or slots.tbl is gone), and starts the
// scrub.
// Before preallocating it checks that the filesystem has the space,
// refusing without writing anything if not; if Open fails after all, it
// removes whatever it created. The epoch is marked dirty before Open
// returns.
func Open(opts Options) (*Store, error) {
	s, err := open(opts)
	if err != nil {
		return nil, fmt.Errorf("slab engine: %w", err)
	}
	return s, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, wire.StatusInvalid)...)
}

func open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, invalid("no directory given")
	}
	opts.setDefaults()
	s, err := newStore(&opts)
	if err != nil {
		return nil, err
	}
	fresh, missing, damaged, err := s.checkDir(s.geo)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.closeFiles()
			s.removeMade()
		}
	}()
	if fresh, err = s.claimDir(fresh, missing, damaged); err != nil {
		return nil, err
	}
	prev, clean, failedBefore, err := s.readState(fresh)
	if err != nil {
		return nil, err
	}
	cold := fresh || failedBefore
	if !missing {
		// Checked under the lock, so a store another process is
		// formatting reads as in use, not as short of space.
		if err := s.checkSpace(s.dir, cold); err != nil {
			return nil, err
		}
	}
	// Nothing but a missing Dir has been written yet. From here on the
	// directory is ours; until Open succeeds, whatever it creates is noted
	// (noteNew) and removed again if it fails, so a retry with a smaller
	// capacity finds the directory as it was.
	tableCold, err := s.openFiles(&opts, fresh, cold)
	if err != nil {
		return nil, err
	}
	stats, err := s.startEpoch(prev, tableCold)
	if err != nil {
		return nil, err
	}
	ok = true
	s.noteHolder()
	s.made = nil
	s.chargeRestored()
	if stats.unzeroed != nil {
		// Only now: the epoch has its number and slab_state is open, so
		// the failed mark lands and is not overwritten by the dirty one.
		s.failClosed("the slot table's unreadable part could not be rewritten with zeros, so records this run dropped could come back at a later start", stats.unzeroed)
	}
	s.log.Info("slab engine: opened", "dir", s.dir, "epoch", s.epoch, "cold", tableCold, "after_unclean_stop", !clean && !fresh,
		"objects", s.alloc.Objects(), "used_bytes", s.alloc.Used(), "capacity_bytes", s.usable(), "configured_bytes", s.capacity,
		"extents", s.geo.extents, "extent_bytes", s.geo.extentBytes, "classes", s.geo.classes,
		"direct_io", s.direct, "io_uring", s.ring != nil, "dropped_records", stats.dropped, "unreadable_slots", stats.unreadable,
		"rebuild", stats.took.String())
	s.startScrub(opts.Scrub, !clean && !tableCold)
	s.warnFewExtents()
	return s, nil
}

// setDefaults fills in the zero values Options documents a default for.
func (o *Options) setDefaults() {
	if o.FS == nil {
		o.FS = vfs.OS{}
	}
	if o.Clock == nil {
		o.Clock = engine.SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Accounting == nil {
		o.Accounting = engine.NoAccounting{}
	}
	if o.ExtentBytes == 0 {
		o.ExtentBytes = ExtentFor(o.CapacityBytes)
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
}

// newStore checks the geometry opts asks for and returns the store for
// it, with its allocator; it touches no file.
func newStore(opts *Options) (*Store, error) {
	lat, err := NewLattice(opts.ExtentBytes)
	if err != nil {
		return nil, invalid("%s: %v", opts.Dir, err)
	}
	if opts.MaxValueBytes > maxExtentBytes || opts.MaxValueBytes/opts.ExtentBytes >= pieceFlag {
		return nil, invalid("%s: max value size %d is too large (at most %d bytes)", opts.Dir, opts.MaxValueBytes, maxExtentBytes)
	}
	if opts.CapacityBytes < opts.ExtentBytes {
		return nil, invalid("%s: capacity %d bytes is smaller than one extent (%d bytes); raise the disk capacity or lower the extent size",
			opts.Dir, opts.CapacityBytes, opts.ExtentBytes)
	}
	count := opts.CapacityBytes / opts.ExtentBytes
	if count*uint64(lat.MaxSlots()) >= 1<<32-1 {
		return nil, invalid("%s: %d extents of %d bytes need more than 2^32 slot records; use larger extents", opts.Dir, count, opts.ExtentBytes)
	}
	geo := geometry{
		version:     formatVersion,
		recordSize:  RecordSize,
		capacity:    opts.CapacityBytes,
		extentBytes: opts.ExtentBytes,
		extents:     uint32(count),
		maxSlots:    lat.MaxSlots(),
		minClass:    MinClass,
		growth:      growthShift,
		classes:     uint32(lat.Len()),
	}
	s := &Store{
		dir:      opts.Dir,
		capacity: opts.CapacityBytes,
		// A value larger than the whole pool can never be stored.
		maxValue:  min(opts.MaxValueBytes, count*opts.ExtentBytes),
		geo:       geo,
		fs:        opts.FS,
		clock:     opts.Clock,
		log:       opts.Logger,
		acct:      opts.Accounting,
		pool:      iobuf.NewPool(chunkBytes),
		sums:      make(sumTable, count),
		flights:   map[wire.BlockKey]*flight{},
		sections:  newSectionCache(),
		wipes:     map[uint32]*wipe{},
		evicted:   map[wire.BlockKey]int{},
		spans:     map[wire.BlockKey]span{},
		pieceKeys: map[wire.BlockKey]pieceOf{},
		align:     pageAlign,
	}
	s.evictedGone.L = &s.mu
	if s.alloc, err = NewAllocator(lat, geo.extents); err != nil {
		return nil, invalid("%s: %v", opts.Dir, err)
	}
	return s, nil
}

// claimDir makes Dir ours: it creates a missing Dir (checking the space
// first, against the filesystem it would be made on, so a refusal leaves
// not even the directory behind), takes the directory lock, and removes
// the files of a damaged store, which is then formatted anew (fresh).
func (s *Store) claimDir(fresh, missing bool, damaged string) (bool, error) {
	if missing {
		if err := s.checkSpace(vfs.ExistingAncestor(s.fs, s.dir), true); err != nil {
			return fresh, err
		}
		if err := s.mkdirs(); err != nil {
			return fresh, err
		}
	}
	if err := s.lockStore(); err != nil {
		return fresh, err
	}
	if damaged != "" {
		// The store's own files without a geometry to read them by:
		// nothing in them can be placed, so they go and the disk is
		// formatted anew, cold, rather than the node refusing to start.
		s.log.Error("slab engine: "+damaged+"; the disk starts cold: its extent files, slot table and state were removed and the disk formatted again with the configured geometry",
			"dir", s.dir, "file", filepath.Join(s.dir, metaName))
		if err := s.removeStore(); err != nil {
			return fresh, err
		}
		fresh = true
	}
	return fresh, nil
}

// lockStore opens Dir and flocks it for the life of the store.
func (s *Store) lockStore() error {
	var err error
	if s.lock, err = s.fs.OpenFile(s.dir, os.O_RDONLY, 0); err != nil {
		return err
	}
	if err := vfs.LockDir(s.lock); err != nil {
		_ = s.lock.Close()
		s.lock = nil
		// Another store holds the directory (it may have made it, or be
		// formatting it, since checkDir looked): nothing here is ours to
		// remove.
		s.made = nil
		if errors.Is(err, vfs.ErrLocked) {
			holder := "another slab store"
			if b, rerr := readSmall(s.fs, filepath.Join(s.dir, holderName), 512); rerr == nil && len(b) > 0 {
				holder = strings.TrimSpace(string(b))
			}
			return fmt.Errorf("%s is in use by %s (a disk has one owner: another dfkv server, an embedded store, or a second disk entry naming the same directory); nothing was changed: %w", s.dir, holder, wire.StatusUnavailable)
		}
		return err
	}
	engine.NoteLock(s.lock.Fd(), true) // for a fork without exec (engine.LockNotify)
	return nil
}

// noteHolder says who holds the lock, for whoever is refused it next;
// written once the open succeeded (a failed open leaves the directory as
// it found it). Best effort: the lock, not this file, keeps a second
// owner out.
func (s *Store) noteHolder() {
	exe, _ := os.Executable()
	if f, err := s.fs.OpenFile(filepath.Join(s.dir, holderName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err == nil {
		_, _ = f.WriteAt(fmt.Appendf(nil, "pid %d (%s) since %s\n", os.Getpid(), exe, time.Now().UTC().Format(time.RFC3339)), 0)
		_ = f.Close()
	}
}

// holderName is the file naming the process that holds a disk's lock.
const holderName = "holder"

// openFiles writes slab_meta for a new or upgraded store, opens the
// extents, the io_uring ring (if asked for) and the slot table, and makes
// the names of the files it created durable. tableCold reports that the
// slot table starts empty.
func (s *Store) openFiles(opts *Options, fresh, cold bool) (tableCold bool, err error) {
	if fresh || s.upgrade {
		path := filepath.Join(s.dir, metaName)
		s.noteNew(path)
		if err := writeAtomic(s.fs, path, s.geo.encode()); err != nil {
			return false, err
		}
		if s.upgrade {
			s.log.Info("slab engine: upgraded the on-disk format in place (its records read as they are)", "dir", s.dir, "from", upgradeFrom, "to", formatVersion)
		}
	}
	if err := s.openExtents(opts.DirectIO, cold); err != nil {
		return false, err
	}
	if opts.URing {
		s.openRing()
	}
	if tableCold, err = s.openTable(cold); err != nil {
		return tableCold, err
	}
	// Files may have been created: make their names durable before this
	// epoch can ever be marked clean.
	for _, d := range []string{filepath.Join(s.dir, extentsDir), s.dir} {
		if err := s.fs.SyncDir(d); err != nil {
			return tableCold, err
		}
	}
	return tableCold, nil
}

// startEpoch rebuilds the index from the slot table (unless it starts
// cold) and marks the next epoch, prev+1, dirty in slab_state.
func (s *Store) startEpoch(prev uint64, tableCold bool) (rebuildStats, error) {
	stats := rebuildStats{}
	if !tableCold {
		var err error
		if stats, err = s.rebuild(); err != nil {
			return stats, err
		}
	}
	s.lost = nil
	s.epoch = prev + 1
	s.noteNew(filepath.Join(s.dir, stateName))
	return stats, s.writeState(state{epoch: s.epoch})
}

// chargeRestored reports the bytes rebuild found to the accounting, once
// Open has succeeded (so a failed Open leaves no charge behind).
func (s *Store) chargeRestored() {
	for tenant, n := range s.restored {
		if n != 0 {
			s.acct.Committed(tenant, n)
		}
	}
	s.restored = nil
}

// warnFewExtents warns when the disk has fewer extents than size classes.
// Each size class takes whole extents: with more distinct value sizes in
// use than extents, a write of a size with no extent and no class within
// twice its size evicts a whole extent of another class, though the disk
// is nearly empty.
func (s *Store) warnFewExtents() {
	if s.geo.extents < s.geo.classes {
		s.log.Warn("slab engine: fewer extents than size classes, so mixed value sizes evict early; raise server.disk_capacity_bytes or lower server.slab_extent_bytes",
			"dir", s.dir, "extents", s.geo.extents, "classes", s.geo.classes, "extent_bytes", s.geo.extentBytes)
	}
}

// checkDir decides whether Dir is a fresh directory (fresh; missing too if
// it does not exist yet) or a slab store of this geometry. A store whose
// slab_meta is missing or unreadable while its other files are there is
// damaged (the reason, for the log): Open formats it anew. Anything else
// is refused. It writes nothing.
func (s *Store) checkDir(want geometry) (fresh, missing bool, damaged string, err error) {
	ents, err := s.fs.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true, true, "", nil
	}
	if err != nil {
		return false, false, "", err
	}
	var foreign, ours []string
	hasMeta := false
	for _, e := range ents {
		switch e.Name() {
		case metaName:
			hasMeta = true
		case metaName + ".tmp", stateName + ".tmp":
			// a crash during an atomic write; harmless
		case holderName:
			// who last held the lock; says nothing about the contents
		case "lost+found":
			// the root of a fresh ext4 filesystem used as the disk dir
		case "s3_marks.db":
			// the node's object store tier keeps its pending deletes
			// beside the first disk (objtier.MarksFileName)
		case stateName, tableName, extentsDir:
			ours = append(ours, e.Name())
		default:
			foreign = append(foreign, e.Name())
		}
	}
	if !hasMeta {
		switch {
		case len(foreign) == 0 && len(ours) == 0:
			return true, false, "", nil
		case len(foreign) == 0:
			return false, false, metaName + " is missing though the store's other files (" + strings.Join(ours, ", ") + ") are there", nil
		}
		foreign = append(foreign, ours...)
		if len(foreign) > 5 {
			foreign = append(foreign[:5], "...")
		}
		return false, false, "", invalid("%s is not a slab store (no %s; it holds %s) and is not empty; point the slab engine at an empty directory, or select the engine that wrote it (e.g. --store-engine=file for a blocks/ directory)",
			s.dir, metaName, strings.Join(foreign, ", "))
	}
	metaPath := filepath.Join(s.dir, metaName)
	b, err := readSmall(s.fs, metaPath, metaSize)
	if err != nil && !errors.Is(err, errTooLarge) {
		return false, false, "", fmt.Errorf("read %s: %w", metaPath, err)
	}
	if err != nil {
		return false, false, fmt.Sprintf("%s is damaged (%v)", metaName, err), nil
	}
	have, err := decodeGeometry(b)
	if err != nil {
		return false, false, fmt.Sprintf("%s is damaged (%v)", metaName, err), nil
	}
	if have.version == upgradeFrom {
		// Same records, read as the new format: only slab_meta changes,
		// once Open holds the directory.
		have.version = want.version
		s.upgrade = true
	}
	if have.version != want.version {
		return false, false, "", invalid("%s was written in another on-disk format (format version: on disk %d, this dfkv reads %d; %s); nothing was changed: remove the directory's contents, or point the engine at an empty directory, to start cold, or run the dfkv release that wrote it",
			metaPath, have.version, want.version, formatNote(have.version))
	}
	if d := have.diff(want); len(d) > 0 {
		return false, false, "", invalid("%s was written with another format or geometry (%s); nothing was changed: restore the settings it was created with, or start over with an empty cache by removing the directory (rm -rf %s)",
			metaPath, strings.Join(d, "; "), s.dir)
	}
	return false, false, "", nil
}

// removeStore removes the files of a store whose slab_meta is damaged
// (slab_state, slots.tbl and every extent file), so Open can format the
// directory as new. Only names the store itself makes are removed.
func (s *Store) removeStore() error {
	dir := filepath.Join(s.dir, extentsDir)
	ents, err := s.fs.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	paths := []string{filepath.Join(s.dir, stateName), filepath.Join(s.dir, tableName), filepath.Join(s.dir, metaName)}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".ext") {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	for _, p := range paths {
		if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s of a store with a damaged %s: %w; remove the directory's contents by hand", p, metaName, err)
		}
	}
	return nil
}

// readState reads slab_state. clean is true only if the last run marked
// its epoch clean; anything else (no state, a torn or foreign state file, a
// dirty epoch) means the previous run did not shut down cleanly. That does
// not cost the cache: every record that validates is kept, and each value
// is verified against its payload checksum before it is served.
//
// failed is true when the previous run failed closed: then its slot table
// may not describe the extents, and the cache starts empty.
func (s *Store) readState(fresh bool) (epoch uint64, clean, failed bool, err error) {
	if fresh {
		return 0, false, false, nil
	}
	const kept = "keeping every slot record that validates: each value is verified against its payload checksum when first read, and the scrub verifies the rest"
	path := filepath.Join(s.dir, stateName)
	b, err := readSmall(s.fs, path, stateSize)
	if errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("slab engine: no slab_state (creation was interrupted, or it was removed); "+kept, "dir", s.dir)
		return 0, false, false, nil
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		return 0, false, false, fmt.Errorf("read %s: %w", path, err)
	}
	st, derr := decodeState(b)
	if err != nil || derr != nil {
		s.log.Warn("slab engine: unreadable slab_state; the previous run did not shut down cleanly; "+kept, "dir", s.dir, "err", errors.Join(err, derr))
		return 0, false, false, nil
	}
	if st.failed {
		s.log.Warn("slab engine: the previous run failed closed (its slot table may not describe the extents); the cache starts empty",
			"dir", s.dir, "epoch", st.epoch)
		return st.epoch, false, true, nil
	}
	if !st.clean {
		s.log.Warn("slab engine: the previous run did not shut down cleanly (epoch still dirty); "+kept,
			"dir", s.dir, "epoch", st.epoch)
	}
	return st.epoch, st.clean, false, nil
}

func (s *Store) extentPath(e uint32) string {
	return filepath.Join(s.dir, extentsDir, fmt.Sprintf("%05d.ext", e))
}

// openExtents opens the extent pool, creating and preallocating what is
// missing, and keeps the descriptors for the life of the store. With direct
// it opens them O_DIRECT; if the filesystem refuses a direct open it says
// so once and uses buffered I/O. On a store that is not cold, an extent
// file that is missing or not at its size is made whole again and noted in
// s.lost, so rebuild drops the records of the values it no longer holds
// (the rest of the disk serves); one warning names them.
func (s *Store) openExtents(direct, cold bool) error {
	s.noteNew(filepath.Join(s.dir, extentsDir))
	if err := s.fs.MkdirAll(filepath.Join(s.dir, extentsDir), 0o755); err != nil {
		return err
	}
	direct = s.directAllowed(direct)
	size := int64(s.geo.extentBytes)
	s.extents = make([]vfs.File, 0, s.geo.extents)
	var damaged []string
	for e := range s.geo.extents {
		path := s.extentPath(e)
		flag := os.O_RDWR
		_, serr := s.fs.Stat(path)
		isNew := errors.Is(serr, fs.ErrNotExist)
		if isNew {
			flag |= os.O_CREATE
			s.made = append(s.made, path)
		}
		f, stillDirect, err := s.openExtent(path, flag, direct)
		if err != nil {
			return err
		}
		direct = stillDirect
		s.extents = append(s.extents, f)
		found, err := fitExtent(f, path, size)
		if err != nil {
			return err
		}
		if note := s.extentDamage(e, path, isNew, cold, found, size); note != "" {
			damaged = append(damaged, note)
		}
	}
	s.warnDamagedExtents(damaged, size)
	if direct {
		var err error
		if direct, err = s.probeDirect(); err != nil {
			return err
		}
	}
	s.direct = direct
	return nil
}

// directAllowed reports whether O_DIRECT payload I/O, when asked for, can
// be tried: the platform has it and the filesystem's alignment is at most
// 4 KiB (s.align is then set to it).
func (s *Store) directAllowed(direct bool) bool {
	if !direct || oDirect == 0 {
		return false
	}
	a := dioAlign(filepath.Join(s.dir, metaName))
	if a > pageAlign {
		s.log.Warn("slab engine: the filesystem needs O_DIRECT alignment above 4 KiB; using buffered I/O", "dir", s.dir, "align", a)
		return false
	}
	if a != 0 {
		s.align = uint64(a)
	}
	return true
}

// openExtent opens extent file path, O_DIRECT while direct holds. If the
// filesystem refuses the direct open, it says so and reopens the extents
// opened before this one buffered too (payload I/O follows s.direct, for
// all of them); it reports whether I/O stays direct.
func (s *Store) openExtent(path string, flag int, direct bool) (vfs.File, bool, error) {
	if direct {
		f, err := s.fs.OpenFile(path, flag|oDirect, 0o644)
		if err == nil || !directRefused(err) {
			return f, true, err
		}
		s.log.Warn("slab engine: O_DIRECT open refused; using buffered payload I/O", "dir", s.dir, "extent", path, "err", err)
		s.align = pageAlign
		if err := s.reopenBuffered(); err != nil {
			return nil, false, err
		}
	}
	f, err := s.fs.OpenFile(path, flag, 0o644)
	return f, false, err
}

// fitExtent sets extent file f to size bytes, cutting a longer one and
// preallocating a shorter one, and returns the size it found.
func fitExtent(f vfs.File, path string, size int64) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if fi.Size() > size {
		if err := f.Truncate(size); err != nil {
			return 0, fmt.Errorf("extent %s is %d bytes, want %d; cutting it to size failed: %w", path, fi.Size(), size, err)
		}
	}
	if fi.Size() != size {
		if err := fallocateFn(f, size); err != nil {
			return 0, fmt.Errorf("preallocate extent %s (%d bytes): %w; the slab engine needs a filesystem with fallocate (ext4, xfs) and the space for its capacity", path, size, err)
		}
	}
	return fi.Size(), nil
}

// extentDamage notes in s.lost an extent file of a store that is not cold
// which was missing (isNew) or not at its size (found bytes), and returns
// how the warning names it; "" when it was whole, or the store is cold.
func (s *Store) extentDamage(e uint32, path string, isNew, cold bool, found, size int64) string {
	switch {
	case cold:
		return ""
	case isNew:
		s.loseExtent(e, 0)
		return filepath.Base(path) + " missing"
	case found != size:
		s.loseExtent(e, uint64(min(found, size)))
		return fmt.Sprintf("%s %d bytes", filepath.Base(path), found)
	}
	return ""
}

// warnDamagedExtents says, once, which extent files were made whole again.
func (s *Store) warnDamagedExtents(damaged []string, size int64) {
	if len(damaged) == 0 {
		return
	}
	list := damaged
	if len(list) > 8 {
		list = append(list[:8:8], "...")
	}
	s.log.Warn("slab engine: extent files were missing or cut short and were recreated, their values lost; check what removed or cut them",
		"dir", s.dir, "extents", len(damaged), "extent_bytes", size, "found", strings.Join(list, "; "))
}

// probeDirect reads the first page of the first extent O_DIRECT (tmpfs
// accepts the open; a filesystem that only fails at I/O time is caught
// here). If the read is refused it says so and reopens every extent
// buffered; it reports whether I/O stays direct.
func (s *Store) probeDirect() (bool, error) {
	if len(s.extents) == 0 {
		return true, nil
	}
	buf := iobuf.AlignedSlice(pageAlign)
	if _, err := s.extents[0].ReadAt(buf, 0); err != nil && directRefused(err) {
		s.log.Warn("slab engine: O_DIRECT read refused; using buffered payload I/O", "dir", s.dir, "err", err)
		if err := s.reopenBuffered(); err != nil {
			return true, err
		}
		s.align = pageAlign
		return false, nil
	}
	return true, nil
}

// reopenBuffered opens every extent file opened so far again without
// O_DIRECT. On error the files still open stay in s.extents, so the failed
// Open closes them.
func (s *Store) reopenBuffered() error {
	for i, f := range s.extents {
		_ = f.Close()
		nf, err := s.fs.OpenFile(s.extentPath(uint32(i)), os.O_RDWR, 0o644)
		if err != nil {
			s.extents = append(s.extents[:i], s.extents[i+1:]...)
			return fmt.Errorf("reopen extent %s without O_DIRECT: %w", s.extentPath(uint32(i)), err)
		}
		s.extents[i] = nf
	}
	return nil
}

// tableSize is the size of slots.tbl: one record per possible slot.
func (s *Store) tableSize() int64 {
	return int64(s.geo.extents) * int64(s.geo.maxSlots) * RecordSize
}

// openTable opens slots.tbl. Cold, it empties it (truncate to 0) and
// preallocates it again, then syncs that, so no record of an earlier epoch
// can be read again. A table missing from a formatted store is made the
// same way, with a warning: without it the extents' values cannot be
// found, so the disk starts empty (cold is then true). A table of the
// wrong size keeps the records it still has and is set to its size. The
// table is preallocated like the extents, so a filesystem that fills up
// later cannot fail a record write (which would fail the store closed).
// Its preallocated parts are unwritten extents, which SEEK_DATA skips as
// holes (ext4, xfs, tmpfs), so a restart still reads only the records ever
// written.
func (s *Store) openTable(cold bool) (bool, error) {
	path := filepath.Join(s.dir, tableName)
	flag := os.O_RDWR
	if _, err := s.fs.Stat(path); errors.Is(err, fs.ErrNotExist) {
		flag |= os.O_CREATE
		s.made = append(s.made, path)
		if !cold {
			s.log.Warn("slab engine: the slot table is missing; the values in the extents cannot be found without it, so this disk starts empty (check what removed it)",
				"dir", s.dir, "table", path)
			cold = true
		}
	}
	f, err := s.fs.OpenFile(path, flag, 0o644)
	if err != nil {
		return cold, err
	}
	s.table = f
	if cold {
		if err := f.Truncate(0); err != nil {
			return cold, err
		}
		if err := fallocateFn(f, s.tableSize()); err != nil {
			return cold, fmt.Errorf("preallocate the slot table %s (%d bytes): %w; free space on that filesystem", path, s.tableSize(), err)
		}
		return cold, vfs.Datasync(f)
	}
	fi, err := f.Stat()
	if err != nil {
		return cold, err
	}
	if fi.Size() != s.tableSize() {
		// Cut or grown by something else: the records it still holds
		// at their offsets are as good as ever (each names its slot and
		// carries its CRC), the rest are gone.
		s.log.Warn("slab engine: the slot table is not at its size; keeping the records it still holds (values whose records were cut off are misses)",
			"dir", s.dir, "table", path, "bytes", fi.Size(), "want_bytes", s.tableSize())
		if err := f.Truncate(s.tableSize()); err != nil {
			return cold, fmt.Errorf("set %s to its size (%d bytes): %w", path, s.tableSize(), err)
		}
		if fi, err = f.Stat(); err != nil {
			return cold, err
		}
	}
	if got := allocated(fi); got < uint64(s.tableSize()) {
		// A sparse table (an older store's, or one with holes punched
		// where zeroing was refused): fallocate fills only the holes and
		// keeps every record. Failing that, the store serves with the
		// sparse table and says what it risks.
		if err := fallocateFn(f, s.tableSize()); err != nil {
			s.log.Warn("slab engine: could not preallocate the rest of the slot table, so a full filesystem can fail this disk; free space on it",
				"dir", s.dir, "table", path, "allocated_bytes", got, "table_bytes", s.tableSize(), "err", err)
		}
	}
	return cold, nil
}

// fallocateFn is fallocate, replaceable by tests (a filesystem that
// refuses preallocation cannot be conjured through vfs.FS, which has no
// fallocate).
var fallocateFn = fallocate

func (s *Store) closeFiles() {
	if s.ring != nil {
		_ = s.ring.Close()
		s.ring = nil
	}
	for _, f := range s.extents {
		_ = f.Close()
	}
	if s.table != nil {
		_ = s.table.Close()
	}
	if s.state != nil {
		_ = s.state.Close()
		s.state = nil
	}
	if s.lock != nil {
		engine.NoteLock(s.lock.Fd(), false) // before the number can be reused
		_ = s.lock.Close()
	}
}

// mkdirs creates the missing Dir and its missing parents, noting each, and
// warns: a disk directory that is not there is as often an unmounted disk
// as a new one, and creating it silently would put the cache on whatever
// filesystem holds the mount point (often the root disk).
func (s *Store) mkdirs() error {
	var missing []string
	for d := filepath.Clean(s.dir); ; d = filepath.Dir(d) {
		if _, err := s.fs.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	// One level at a time, noting only what this call created: Stat
	// follows symlinks, so a dangling one (a mount point's link while the
	// disk is not mounted) reads as missing, and Mkdir then fails on it
	// rather than this Open noting, and a failure removing, the link.
	for i := len(missing) - 1; i >= 0; i-- {
		if err := s.fs.Mkdir(missing[i], 0o755); err != nil {
			return fmt.Errorf("create disk directory %s: %w; check the path (a symlink whose target is missing?) and its parent's permissions", missing[i], err)
		}
		s.made = append(s.made, missing[i])
	}
	created := s.dir
	if len(missing) > 0 {
		created = missing[len(missing)-1]
	}
	// INFO: every first start does this. Where the disk should be a mount,
	// the path says so to an operator reading the line.
	s.log.Info("slab engine: created the disk directory", "dir", s.dir, "created_from", created)
	return nil
}

// noteNew notes path as made by this Open if it does not exist yet, so a
// failed Open can remove it again (removeMade). Anything that existed
// before, or whose existence cannot be told, is never noted and so never
// removed: a failed Open must not wipe a disk it did not format.
func (s *Store) noteNew(path string) {
	if _, err := s.fs.Stat(path); errors.Is(err, fs.ErrNotExist) {
		s.made = append(s.made, path)
	}
}

// removeMade undoes a failed Open: it removes, newest first, every file and
// directory this Open created, so a format cut short (ENOSPC while
// preallocating, a failed slab_meta write) leaves no half-formatted store
// that the next Open, with a smaller capacity, would refuse as another
// geometry. The caller has closed the files first.
func (s *Store) removeMade() {
	if len(s.made) == 0 {
		return
	}
	removed, left := 0, 0
	for i := len(s.made) - 1; i >= 0; i-- {
		p := s.made[i]
		switch err := s.fs.Remove(p); {
		case err == nil:
			removed++
		case !errors.Is(err, fs.ErrNotExist): // noted, then never created
			left++
			s.log.Warn("slab engine: cannot remove a file the failed open created; remove it by hand before retrying", "path", p, "err", err)
		}
	}
	s.log.Info("slab engine: open failed; removed what it had created", "dir", s.dir, "removed", removed, "left", left)
	s.made = nil
}

// loseExtent notes that only the first valid bytes of extent e still hold
// what its records describe (see Store.lost).
func (s *Store) loseExtent(e uint32, valid uint64) {
	if s.lost == nil {
		s.lost = map[uint32]uint64{}
	}
	s.lost[e] = valid
}

// ringEntries is the depth of a disk's io_uring submission queue; more
// requests than that wait for a slot.
const ringEntries = 64

// newRing is uring.New, replaceable by tests (a kernel that refuses
// io_uring cannot be conjured here).
var newRing = uring.New

// openRing sets up the disk's io_uring ring and checks that a read
// through it works on the first extent; if either fails it says so once
// and the store uses pread/pwrite.
func (s *Store) openRing() {
	if _, real := s.fs.(vfs.OS); !real {
		return
	}
	r, err := newRing(ringEntries)
	if err == nil && len(s.extents) > 0 {
		probe := iobuf.AlignedSlice(pageAlign)
		if _, perr := r.ReadAt(int(s.extents[0].Fd()), probe, 0); perr != nil {
			_ = r.Close()
			err = fmt.Errorf("a read through the ring failed: %w", perr)
		}
	}
	if err != nil {
		s.log.Warn("slab engine: io_uring is not available; small payload I/O uses pread/pwrite", "dir", s.dir, "err", err)
		return
	}
	s.ring = r
}
