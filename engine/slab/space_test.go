package slab

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// freeFS is the real filesystem reporting free bytes of its own choosing,
// so a test can play a small filesystem without mounting one.
type freeFS struct {
	vfs.FS
	free   uint64
	usages int
}

func (f *freeFS) Usage(string) (vfs.Usage, error) {
	f.usages++
	return vfs.Usage{Total: f.free, Free: f.free}, nil
}

// names lists every path under dir, relative to it ("" for none).
func names(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

// wantSpaceRefusal checks the refusal an operator sees: INVALID, naming
// the directory, the configured capacity, the free space and the setting
// in all three spellings.
func wantSpaceRefusal(t *testing.T, err error, dir string, capacity, free uint64) {
	t.Helper()
	wantStatus(t, err, wire.StatusInvalid, "Open with a capacity beyond the free space")
	for _, s := range []string{dir, strconv.FormatUint(capacity, 10), strconv.FormatUint(free, 10) + " bytes free",
		"server.disk_capacity_bytes", "--disk-capacity-bytes", "DFKV_SERVER_DISK_CAPACITY_BYTES", "nothing was written"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("refusal does not say %q: %v", s, err)
		}
	}
}

// TestCapacityBeyondFreeSpaceRefused: a fresh disk whose filesystem cannot
// hold the configured capacity is refused before anything is written (not
// even a missing directory is made), with the fix named; the capacity it
// suggests, which leaves each extent its share of the slot table, then
// formats the same directory.
func TestCapacityBeyondFreeSpaceRefused(t *testing.T) {
	for _, sub := range []string{"", "mnt/nvme0"} {
		t.Run("dir="+sub, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, sub)
			ffs := &freeFS{FS: vfs.OS{}, free: 8 << 20}
			opts := smallOpts(dir) // 16 MiB of 1 MiB extents
			opts.FS = ffs
			_, err := Open(opts)
			wantSpaceRefusal(t, err, dir, 16<<20, 8<<20)
			// 8 MiB holds 7 extents of 1 MiB with their 16 KiB of
			// records each, not 8.
			if !strings.Contains(err.Error(), "7340032 bytes would fit") || !strings.Contains(err.Error(), "262144-byte slot table") {
				t.Fatalf("refusal does not say what would fit: %v", err)
			}
			if got := names(t, root); got != "" {
				t.Fatalf("a refused Open wrote %q", got)
			}
			opts.CapacityBytes = 8 << 20
			_, err = Open(opts)
			wantSpaceRefusal(t, err, dir, 8<<20, 8<<20)
			opts.CapacityBytes = 7 << 20
			s := openT(t, opts)
			mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 5000))
			mustClose(t, s)
		})
	}
}

// TestCapacityBeyondRealFilesystemRefused: the same refusal through the
// real statfs. The largest pool the slot numbering allows (16383 extents
// of 1 GiB, just under 16 TiB; 1 EiB is refused earlier, by the 32-bit
// slot limit) is more than a test machine's temp filesystem has free.
func TestCapacityBeyondRealFilesystemRefused(t *testing.T) {
	dir := t.TempDir()
	capacity := uint64(16383) << 30
	u, err := vfs.OS{}.Usage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.Free >= capacity {
		t.Skipf("%s has %d bytes free, enough for %d", dir, u.Free, capacity)
	}
	// NB: if the check ever breaks, the fallocate stub fails Open (and this
	// test) at the first extent instead of filling the disk it runs on.
	old := fallocateFn
	defer func() { fallocateFn = old }()
	fallocateFn = func(f vfs.File, size int64) error {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
	}
	_, err = Open(Options{Dir: dir, CapacityBytes: capacity, ExtentBytes: 1 << 30})
	wantStatus(t, err, wire.StatusInvalid, "Open beyond the real free space")
	for _, s := range []string{dir, strconv.FormatUint(capacity, 10), "bytes free", "server.disk_capacity_bytes"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("refusal does not say %q: %v", s, err)
		}
	}
	if got := names(t, dir); got != "" {
		t.Fatalf("a refused Open wrote %q", got)
	}
}

// extentName is the path of extent e under dir.
func extentName(dir string, e int) string {
	return filepath.Join(dir, extentsDir, strconv.Itoa(100000 + e)[1:]+".ext")
}

// TestFailedFormatRemovesWhatItCreated: a format that fails part-way, at
// any step, removes every file and directory it made (a missing directory
// and its parents included), so a retry with a smaller capacity formats
// instead of meeting a half-made store of the old geometry.
func TestFailedFormatRemovesWhatItCreated(t *testing.T) {
	enospc := func(f vfs.File, size int64) error {
		if filepath.Base(f.Name()) == "00002.ext" {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
		}
		return fallocate(f, size)
	}
	cases := []struct {
		name     string
		fallocFn func(vfs.File, int64) error
		fault    func(op vfs.Op, path string) bool
	}{
		{name: "third extent ENOSPC", fallocFn: enospc},
		{name: "third extent open", fault: func(op vfs.Op, p string) bool {
			return op == vfs.OpOpen && filepath.Base(p) == "00002.ext"
		}},
		{name: "slab_meta dir sync", fault: func(op vfs.Op, p string) bool {
			return op == vfs.OpSyncDir // the first is slab_meta's, after its rename
		}},
		{name: "slots.tbl extend", fault: func(op vfs.Op, p string) bool {
			return op == vfs.OpTruncate && filepath.Base(p) == tableName
		}},
		{name: "slots.tbl preallocate ENOSPC", fallocFn: func(f vfs.File, size int64) error {
			if filepath.Base(f.Name()) == tableName {
				return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
			}
			return fallocate(f, size)
		}},
		{name: "slab_state rename", fault: func(op vfs.Op, p string) bool {
			return op == vfs.OpRename && filepath.Base(p) == stateName+".tmp"
		}},
	}
	for _, tc := range cases {
		for _, sub := range []string{"", "mnt/nvme0"} {
			t.Run(tc.name+"/dir="+sub, func(t *testing.T) {
				if tc.fallocFn != nil {
					old := fallocateFn
					defer func() { fallocateFn = old }()
					fallocateFn = tc.fallocFn
				}
				root := t.TempDir()
				dir := filepath.Join(root, sub)
				faulted := 0
				ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, _ int) error {
					if tc.fault != nil && tc.fault(op, path) {
						faulted++
						return syscall.EIO
					}
					return nil
				}}
				opts := smallOpts(dir)
				opts.FS = ffs
				_, err := Open(opts)
				if err == nil {
					t.Fatal("Open succeeded through the injected failure")
				}
				if tc.fault != nil && faulted == 0 {
					t.Fatalf("the failure was never injected (err %v)", err)
				}
				if got := names(t, root); got != "" {
					t.Fatalf("the failed format (%v) left %q", err, got)
				}
				fallocateFn = fallocate
				ffs.Inject = nil
				opts.CapacityBytes = 2 << 20
				s := openT(t, opts)
				mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 5000))
				mustClose(t, s)
			})
		}
	}
}

// sameFiles is sameSnapshot for the files alone: creating and removing a
// file again leaves its directory as it was but with a new mtime.
func sameFiles(t *testing.T, before, after map[string]fileState) {
	t.Helper()
	for _, m := range []map[string]fileState{before, after} {
		for p, st := range m {
			if st.mode.IsDir() {
				st.mtime = time.Time{}
				m[p] = st
			}
		}
	}
	sameSnapshot(t, before, after)
}

// TestFailedOpenKeepsExistingStore: an Open that fails on a store that
// was already formatted removes nothing that was there before it: not
// after a crash (cold reopen), not after a clean close (rebuild). Only an
// extent it made itself, in place of a missing one, goes again.
func TestFailedOpenKeepsExistingStore(t *testing.T) {
	// formatted makes a store holding one value; crashed leaves its epoch
	// dirty, as a killed process would.
	formatted := func(t *testing.T, crashed bool) Options {
		dir := t.TempDir()
		opts := smallOpts(dir)
		s := openT(t, opts)
		mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 5000))
		if crashed {
			s.closeFiles()
		} else {
			mustClose(t, s)
		}
		return opts
	}
	failing := func(opts Options, op vfs.Op, base string) Options {
		opts.FS = &vfs.FaultFS{Inject: func(o vfs.Op, p string, _ int) error {
			if o == op && filepath.Base(p) == base {
				return syscall.EIO
			}
			return nil
		}}
		return opts
	}

	t.Run("cold", func(t *testing.T) {
		opts := formatted(t, true)
		before := snapshotDir(t, opts.Dir)
		_, err := Open(failing(opts, vfs.OpOpen, "00002.ext"))
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("cold reopen with a failing extent open: %v", err)
		}
		sameSnapshot(t, before, snapshotDir(t, opts.Dir))
		mustClose(t, openT(t, opts))
	})
	t.Run("rebuild", func(t *testing.T) {
		opts := formatted(t, false)
		before := snapshotDir(t, opts.Dir)
		// Not a read: an unreadable part of the table is dropped, and
		// the disk serves the rest. Syncing the table as read is not.
		_, err := Open(failing(opts, vfs.OpSync, tableName))
		if err == nil {
			t.Fatal("rebuild with a failing slots.tbl sync succeeded")
		}
		sameSnapshot(t, before, snapshotDir(t, opts.Dir))
		s := openT(t, opts)
		enginetest.MustEqual(t, s, enginetest.Key(1), enginetest.Value(1, 5000))
		mustClose(t, s)
	})
	t.Run("missing extent", func(t *testing.T) {
		opts := formatted(t, true)
		lost := extentName(opts.Dir, 3)
		if err := os.Remove(lost); err != nil {
			t.Fatal(err)
		}
		before := snapshotDir(t, opts.Dir)
		old := fallocateFn
		defer func() { fallocateFn = old }()
		fallocateFn = func(f vfs.File, size int64) error {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
		}
		if _, err := Open(opts); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("reopen re-creating a lost extent on a full disk: %v", err)
		}
		sameFiles(t, before, snapshotDir(t, opts.Dir))
		fallocateFn = old
		mustClose(t, openT(t, opts))
	})
}

// TestSpaceCheckCountsWhatIsAllocated: the check asks only for what is
// still to preallocate. A formatted store reopens after a crash on a full
// filesystem (its extents already hold their space); one missing an
// extent is refused when even that extent does not fit, saying "more".
func TestSpaceCheckCountsWhatIsAllocated(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	s.closeFiles() // crash
	ffs := &freeFS{FS: vfs.OS{}, free: 0}
	opts.FS = ffs
	s = openT(t, opts)
	s.closeFiles()
	if ffs.usages != 0 {
		t.Fatalf("a fully preallocated store asked for free space %d times", ffs.usages)
	}

	// Extent 4 cut to half (its first half stays allocated), extent 5 lost.
	if err := os.Truncate(extentName(dir, 4), 512<<10); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(extentName(dir, 5)); err != nil {
		t.Fatal(err)
	}
	ffs.free = 1 << 20
	before := snapshotDir(t, dir)
	_, err := Open(opts)
	wantSpaceRefusal(t, err, dir, 16<<20, 1<<20)
	// Not "lower the capacity": a formatted store's geometry is fixed.
	if !strings.Contains(err.Error(), "needs 1572864 more bytes") || !strings.Contains(err.Error(), "free space for them, or restore them") || strings.Contains(err.Error(), "would fit") {
		t.Fatalf("refusal does not count what the extents already hold: %v", err)
	}
	sameSnapshot(t, before, snapshotDir(t, dir))
	ffs.free = 3 << 19
	mustClose(t, openT(t, opts))
}

// TestMissingDirSaysSo: a disk directory that does not exist is created,
// parents included, with one INFO line naming it (every first start does
// this; the line shows a path that should have been a mount); an existing
// one is opened quietly.
func TestMissingDirSaysSo(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "mnt", "nvme0", "dfkv")
	logs := &logBuf{}
	opts := smallOpts(dir)
	opts.Logger = slog.New(logs)
	mustClose(t, openT(t, opts))
	if n := logs.count("INFO slab engine: created the disk directory"); n != 1 {
		t.Fatalf("%d lines about creating %s, want 1 (logs %q)", n, dir, logs.msgs)
	}
	mustClose(t, openT(t, opts))
	if n := logs.count("created the disk directory"); n != 1 {
		t.Fatalf("reopening an existing directory said it created it (%d lines)", n)
	}
	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	opts.Dir = empty
	mustClose(t, openT(t, opts))
	if n := logs.count("created the disk directory"); n != 1 {
		t.Fatalf("an existing empty directory was said to be created (%d lines)", n)
	}
}

// TestFewExtentsWarns: a store with fewer extents than size classes says at
// open that values of many sizes will evict each other early (each class
// takes whole extents); one with enough extents does not.
func TestFewExtentsWarns(t *testing.T) {
	const extent = 1 << 20
	lat, err := NewLattice(extent)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		extents int
		warn    bool
	}{{lat.Len() - 1, true}, {lat.Len(), false}} {
		logs := &logBuf{}
		opts := Options{Dir: t.TempDir(), CapacityBytes: uint64(tc.extents) * extent, ExtentBytes: extent, Logger: slog.New(logs)}
		mustClose(t, openT(t, opts))
		if got := logs.count("WARN slab engine: fewer extents than size classes") == 1; got != tc.warn {
			t.Fatalf("%d extents for %d classes: warned %v, want %v (logs %q)", tc.extents, lat.Len(), got, tc.warn, logs.msgs)
		}
	}
}

// TestCapacityIsWhatExtentsHold: a capacity that is not a multiple of the
// extent size reports the whole extents it got, not the figure asked for.
func TestCapacityIsWhatExtentsHold(t *testing.T) {
	opts := smallOpts(t.TempDir())
	opts.CapacityBytes = 3*opts.ExtentBytes + opts.ExtentBytes/2
	s := openT(t, opts)
	defer mustClose(t, s)
	if got, want := s.Stats().CapacityBytes, 3*opts.ExtentBytes; got != want {
		t.Fatalf("Stats().CapacityBytes = %d, want %d (three whole extents of %d)", got, want, opts.ExtentBytes)
	}
}
