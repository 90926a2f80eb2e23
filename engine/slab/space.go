package slab

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// capacitySetting names the setting that sizes a disk, in all its
// spellings, for the messages that tell the operator to change it (see
// config/settings.go).
const capacitySetting = "server.disk_capacity_bytes (--disk-capacity-bytes, DFKV_SERVER_DISK_CAPACITY_BYTES)"

// checkSpace refuses, before anything is written, a cold Open whose extent
// and slot-table preallocation the filesystem cannot hold. Without it
// preallocation runs until the filesystem is full (on a shared root disk,
// full for everyone) before it fails.
// statDir is the directory whose filesystem is asked: Dir, or its nearest
// existing ancestor when Dir is still to be made. coldTable says the slot
// table will be emptied and preallocated again.
func (s *Store) checkSpace(statDir string, coldTable bool) error {
	extentNeed, tableNeed, err := s.preallocNeed(coldTable)
	need := extentNeed + tableNeed
	if err != nil || need == 0 {
		return err
	}
	u, err := s.fs.Usage(statDir)
	if err != nil {
		return fmt.Errorf("check free space for %s: %w; the slab engine preallocates its whole capacity", s.dir, err)
	}
	if need <= u.Free {
		return nil
	}
	eb := s.geo.extentBytes
	pool := uint64(s.geo.extents) * eb
	table := uint64(s.tableSize())
	// Each extent brings its share of the slot table. What would fit is
	// what the store's files hold already plus the free space, in whole
	// extents with their share.
	perExtent := eb + uint64(s.geo.maxSlots)*RecordSize
	fit := (pool + table - need + u.Free) / perExtent * eb
	more := ""
	if need < pool+table {
		more = " more" // part of it is already allocated
	}
	lower := fmt.Sprintf("lower %s (%d bytes would fit, filling the filesystem; leave room if it is shared)", capacitySetting, fit)
	switch {
	case extentNeed == 0:
		lower = fmt.Sprintf("its extents are all there, but the slot table needs %d more bytes and the store's capacity (%s) cannot change on a formatted store", tableNeed, capacitySetting)
	case extentNeed < pool:
		// A formatted store missing extents: its geometry is fixed, so a
		// lower capacity would be refused as another geometry.
		lower = fmt.Sprintf("the store's extents are partly missing or cut short, and its capacity (%s) cannot change on a formatted store: free space for them, or restore them", capacitySetting)
	case fit == 0:
		lower = fmt.Sprintf("not even one %d-byte extent with its %d bytes of slot table fits, so lowering %s alone will not do", eb, perExtent-eb, capacitySetting)
	}
	return invalid("%s: configured capacity %d bytes (%d extents of %d bytes, and a %d-byte slot table) needs %d%s bytes preallocated, but its filesystem has only %d bytes free; nothing was written: %s, or free space on that filesystem",
		s.dir, s.capacity, s.geo.extents, eb, table, need, more, u.Free, lower)
}

// preallocNeed is how many bytes Open will still have to allocate. For
// the extents: for every extent missing or not at full size, its size less
// what it already holds on disk (fallocate allocates only the holes); an
// extent already at full size is not preallocated again, so a formatted
// store, even one with punched holes, needs nothing. For the slot table,
// which a cold Open empties and preallocates again: its size less what it
// holds now; a table that is kept (coldTable false) needs nothing unless it
// is missing.
func (s *Store) preallocNeed(coldTable bool) (extentNeed, tableNeed uint64, err error) {
	eb := s.geo.extentBytes
	dir := filepath.Join(s.dir, extentsDir)
	ents, err := s.fs.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, fmt.Errorf("list %s: %w", dir, err)
	}
	have := make(map[string]uint64, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if uint64(fi.Size()) == eb {
			have[e.Name()] = eb
		} else {
			have[e.Name()] = min(allocated(fi), eb)
		}
	}
	for e := range s.geo.extents {
		extentNeed += eb - have[filepath.Base(s.extentPath(e))]
	}
	table := uint64(s.tableSize())
	fi, serr := s.fs.Stat(filepath.Join(s.dir, tableName))
	switch {
	case serr == nil && !coldTable:
	case serr == nil && fi.Mode().IsRegular():
		tableNeed = table - min(allocated(fi), table)
	default:
		tableNeed = table
	}
	return extentNeed, tableNeed, nil
}
