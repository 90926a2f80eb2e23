package slab

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
)

// onDisk is how many bytes path holds on disk (st_blocks).
func onDisk(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// makeSparse rewrites the file at path as a sparse copy of itself (the
// slot table an earlier version wrote): only its non-zero 4 KiB pages are
// written.
func makeSparse(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := 0; off < len(data); off += 4096 {
		if p := data[off:min(off+4096, len(data))]; !isZero(p) {
			if _, err := f.WriteAt(p, int64(off)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSlotTableIsPreallocated: a new store owns its whole slot table on
// disk before the first PUT, as it owns its extents, so no record write
// later needs a block a full filesystem could refuse (before, a node given
// the capacity Open itself suggested failed closed with ENOSPC after ~65k
// small PUTs). A restart still reads only the records written.
func TestSlotTableIsPreallocated(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, smallOpts(dir))
	path := filepath.Join(dir, tableName)
	if got := onDisk(t, path); got < s.tableSize() {
		t.Fatalf("a new slot table holds %d bytes on disk, want all %d", got, s.tableSize())
	}
	for i := range 50 {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 5000))
	}
	mustClose(t, s)

	s = openT(t, smallOpts(dir))
	defer mustClose(t, s)
	if got := s.Stats().Objects; got != 50 {
		t.Fatalf("restart restored %d objects, want 50", got)
	}
	var written int64
	for off := int64(0); ; {
		a, b, ok, err := seekData(s.table, off, s.tableSize())
		if err != nil {
			t.Skipf("this filesystem cannot report holes: %v", err)
		}
		if !ok {
			break
		}
		written += b - a
		off = b
	}
	if written == 0 || written >= s.tableSize()/2 {
		t.Fatalf("SEEK_DATA reports %d of %d table bytes as written after 50 records: the preallocated part must read as holes, or restarts read it all", written, s.tableSize())
	}
}

// TestSparseSlotTableFilledOnOpen: a slot table an earlier version left
// sparse gets its holes preallocated at the next clean start, every record
// kept; where that fails the store still opens and serves, with a warning
// that names the risk and the fix.
func TestSparseSlotTableFilledOnOpen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, smallOpts(dir))
	for i := range 20 {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 5000+i))
	}
	mustClose(t, s)
	path := filepath.Join(dir, tableName)
	makeSparse(t, path)
	if got := onDisk(t, path); got >= s.tableSize() {
		t.Skipf("this filesystem did not keep the table sparse (%d bytes on disk)", got)
	}

	t.Run("refused", func(t *testing.T) {
		old := fallocateFn
		defer func() { fallocateFn = old }()
		fallocateFn = func(f vfs.File, size int64) error {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
		}
		logs := &logBuf{}
		opts := smallOpts(dir)
		opts.Logger = slog.New(logs)
		s := openT(t, opts)
		if got := s.Stats().Objects; got != 20 {
			t.Fatalf("opened with %d objects, want 20", got)
		}
		if logs.count("could not preallocate the rest of the slot table") != 1 {
			t.Fatalf("want one warning about the sparse table, log: %v", logs.msgs)
		}
		mustClose(t, s)
	})

	s = openT(t, smallOpts(dir))
	defer mustClose(t, s)
	if got := onDisk(t, path); got < s.tableSize() {
		t.Fatalf("after a clean start the table holds %d bytes on disk, want all %d", got, s.tableSize())
	}
	for i := range 20 {
		got, err := get(t, s, enginetest.Key(i))
		if err != nil || !bytes.Equal(got, enginetest.Value(uint64(i), 5000+i)) {
			t.Fatalf("key %d after filling the table's holes: %d bytes, %v", i, len(got), err)
		}
	}
}

// TestColdOpenChecksSlotTableSpace: a store whose extents are all there
// but whose slot table is gone, so the table must be preallocated anew, is
// refused before anything is written when it does not fit, saying it is
// the table that needs the space; with the space it opens.
func TestColdOpenChecksSlotTableSpace(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 5000))
	s.closeFiles() // crash
	if err := os.Remove(filepath.Join(dir, tableName)); err != nil {
		t.Fatal(err)
	}
	ffs := &freeFS{FS: vfs.OS{}, free: 4096}
	opts.FS = ffs
	before := snapshotDir(t, dir)
	_, err := Open(opts)
	wantSpaceRefusal(t, err, dir, 16<<20, 4096)
	if !strings.Contains(err.Error(), "slot table needs 262144 more bytes") {
		t.Fatalf("refusal does not say the slot table needs the space: %v", err)
	}
	sameSnapshot(t, before, snapshotDir(t, dir))
	ffs.free = 1 << 20
	mustClose(t, openT(t, opts))
}

// TestZeroRangeKeepsSpace: clearing a range of the table (an extent that
// changed class) reads back as zeros and, where the filesystem can zero a
// range in place, keeps its blocks allocated.
func TestZeroRangeKeepsSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := fallocate(f, 1<<20); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xAB}, 1<<20)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	before := onDisk(t, path)
	if err := vfs.ZeroRange(f, 256<<10, 512<<10); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !isZero(got[256<<10:768<<10]) || !bytes.Equal(got[:256<<10], data[:256<<10]) || !bytes.Equal(got[768<<10:], data[768<<10:]) {
		t.Fatal("ZeroRange did not zero exactly [256 KiB, 768 KiB)")
	}
	probe := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096)
	if errors.Is(probe, unix.EOPNOTSUPP) || errors.Is(probe, unix.ENOSYS) {
		t.Skipf("this filesystem cannot zero a range in place (%v); ZeroRange punched instead", probe)
	}
	if after := onDisk(t, path); after < before {
		t.Fatalf("ZeroRange freed space: %d bytes on disk before, %d after", before, after)
	}
}

// TestCloseOnFullFilesystemMarksClean: a filesystem that filled up while
// the store ran (no file can be created, no block allocated) does not keep
// a graceful stop from marking the epoch clean, so the next start is warm:
// slab_state is rewritten in place, the slot table and extents own their
// blocks. Before, the state's temp file failed with ENOSPC and every
// restart after it was cold.
func TestCloseOnFullFilesystemMarksClean(t *testing.T) {
	dir := t.TempDir()
	full := false
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if full && op == vfs.OpOpen && flag&os.O_CREATE != 0 {
			return syscall.ENOSPC
		}
		return nil
	}}
	opts := smallOpts(dir)
	opts.FS = ffs
	s := openT(t, opts)
	mustClose(t, s) // a formatted store, as a node has after its first run
	s = openT(t, opts)
	full = true
	for i := range 30 {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 5000+i))
	}
	mustClose(t, s)

	s = openT(t, opts) // still full: Open marks its epoch dirty in place too
	defer mustClose(t, s)
	if got := s.Stats().Objects; got != 30 {
		t.Fatalf("restart after a stop on a full filesystem: %d objects, want 30 (a cold start)", got)
	}
}

// TestCloseWithoutPathAccess: a disk directory whose permissions change
// under the running store (no file in it can be opened any more) does not
// keep the stop from marking the epoch clean: slab_state stays open from
// Open to Close. Before, the stop failed and the next start was cold.
func TestCloseWithoutPathAccess(t *testing.T) {
	for _, fresh := range []bool{true, false} {
		dir := t.TempDir()
		locked := false
		ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, _ int) error {
			if locked && op == vfs.OpOpen {
				return syscall.EACCES
			}
			return nil
		}}
		opts := smallOpts(dir)
		opts.FS = ffs
		if !fresh {
			mustClose(t, openT(t, opts))
		}
		s := openT(t, opts)
		mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 5000))
		locked = true
		mustClose(t, s)
		locked = false
		s = openT(t, opts)
		if got := s.Stats().Objects; got != 1 {
			t.Fatalf("fresh=%v: restart after a stop without path access: %d objects, want 1", fresh, got)
		}
		mustClose(t, s)
	}
}

// TestDirRemovedFailsClosed: a disk directory removed or replaced under a
// running store is noticed at the next Stats (what /readyz and a metrics
// scrape call): the store fails closed, so readiness says so and the node
// leaves the MDS, instead of serving on from files no name reaches.
func TestDirRemovedFailsClosed(t *testing.T) {
	for _, how := range []string{"renamed away", "replaced"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "d0")
			s := openT(t, smallOpts(dir))
			mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 5000))
			if !s.Stats().Healthy {
				t.Fatal("unhealthy before anything happened")
			}
			if err := os.Rename(dir, filepath.Join(root, "moved")); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if s.Stats().Healthy {
				t.Fatalf("the directory was %s, and the store still reports healthy", how)
			}
			err := s.Put(enginetest.Key(2), enginetest.Value(2, 5000))
			if !errors.Is(err, engine.ErrFailedClosed) {
				t.Fatalf("a PUT after the directory was %s: %v, want the failed-closed error", how, err)
			}
			s.closeFiles()
		})
	}
}
