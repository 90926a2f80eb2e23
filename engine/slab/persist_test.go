package slab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// TestGracefulRestartByteExact: nothing acknowledged as stored is lost
// across a graceful restart, for many sizes over many classes, twice in a
// row.
func TestGracefulRestartByteExact(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, CapacityBytes: 512 << 20, ExtentBytes: 4 << 20, DirectIO: true}
	s := openT(t, opts)
	r := rand.New(rand.NewPCG(11, 12))
	want := map[wire.BlockKey][]byte{}
	for i := range 300 {
		n := 1 + r.IntN(300<<10)
		if i%10 == 0 {
			n = (1 + r.IntN(64)) * 4096 // exactly aligned sizes too
		}
		k := enginetest.Key(i)
		want[k] = enginetest.Value(uint64(i), n)
		mustCache(t, s, k, want[k])
	}
	before := s.Stats()
	if before.Evictions != 0 || before.Objects != uint64(len(want)) {
		t.Fatalf("setup evicted: %+v", before)
	}
	mustClose(t, s)
	for round := range 2 {
		s = openT(t, opts)
		st := s.Stats()
		if st.Objects != before.Objects || st.UsedBytes != before.UsedBytes {
			t.Fatalf("round %d: %d objects %d bytes, want %d and %d", round, st.Objects, st.UsedBytes, before.Objects, before.UsedBytes)
		}
		for k, v := range want {
			got, err := get(t, s, k)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("round %d: %s: %d bytes, err %v; want %d bytes", round, k, len(got), err, len(v))
			}
		}
		mustClose(t, s)
	}
}

// TestPlacementIndependentOfOrder: the same set of PUTs in two orders gives
// the same stored bytes after a restart, and rebuilding the same directory
// twice gives identical allocator state (bindings, slots, free lists, key
// map).
func TestPlacementIndependentOfOrder(t *testing.T) {
	type kv struct {
		k wire.BlockKey
		v []byte
	}
	var items []kv
	for i := range 120 {
		items = append(items, kv{enginetest.Key(i), enginetest.Value(uint64(i), 1+(i*7919)%200000)})
	}
	run := func(order []int) (string, map[wire.BlockKey][]byte, uint64) {
		dir := t.TempDir()
		opts := Options{Dir: dir, CapacityBytes: 64 << 20, ExtentBytes: 2 << 20, DirectIO: true}
		s := openT(t, opts)
		for _, i := range order {
			mustCache(t, s, items[i].k, items[i].v)
		}
		mustClose(t, s)
		s = openT(t, opts)
		d1 := s.alloc.Digest()
		got := map[wire.BlockKey][]byte{}
		for _, it := range items {
			v, err := get(t, s, it.k)
			if err != nil {
				t.Fatalf("%s: %v", it.k, err)
			}
			got[it.k] = v
		}
		mustClose(t, s)
		s = openT(t, opts)
		if d2 := s.alloc.Digest(); d2 != d1 {
			t.Fatalf("two rebuilds of one directory differ: %x vs %x", d1, d2)
		}
		mustClose(t, s)
		return dir, got, d1
	}
	fwd := make([]int, len(items))
	for i := range fwd {
		fwd[i] = i
	}
	rev := make([]int, len(items))
	for i := range rev {
		rev[i] = len(items) - 1 - i
	}
	_, a, _ := run(fwd)
	_, b, _ := run(rev)
	for _, it := range items {
		if !bytes.Equal(a[it.k], it.v) || !bytes.Equal(b[it.k], it.v) {
			t.Fatalf("%s differs between orders after restart", it.k)
		}
	}
}

// TestUncleanRestartKeepsValues: a run that never called Close (a crash)
// leaves the epoch dirty; the next Open says so once and keeps every value
// whose record validates, each served byte-exact (and verified) on read.
func TestUncleanRestartKeepsValues(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	for i := range 20 {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 5000+i))
	}
	mustClose(t, s)
	s = openT(t, opts)
	mustCache(t, s, enginetest.Key(100), enginetest.Value(100, 777))
	mustCache(t, s, enginetest.Key(3), enginetest.Value(333, 3333)) // replaced
	if err := s.Remove(enginetest.Key(4)); err != nil {
		t.Fatal(err)
	}
	// Crash: abandon s without Close. The process would die; its
	// directory lock dies with it.
	s.closeFiles()
	logs := &logBuf{}
	opts.Logger = slog.New(logs)
	s2 := openT(t, opts)
	defer mustClose(t, s2)
	if logs.count("did not shut down cleanly") != 1 {
		t.Fatalf("want one warning about the unclean shutdown, log: %v", logs.msgs)
	}
	if st := s2.Stats(); st.Objects != 20 || !st.Healthy {
		t.Fatalf("after a crash: %+v, want the 20 values that were there", st)
	}
	for i := range 20 {
		want := enginetest.Value(uint64(i), 5000+i)
		switch i {
		case 3:
			want = enginetest.Value(333, 3333)
		case 4:
			_, err := s2.Exist(enginetest.Key(i))
			wantStatus(t, err, wire.StatusNotFound, "Exist of the removed key after a crash")
			continue
		}
		if got, err := get(t, s2, enginetest.Key(i)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("key %d after a crash: %d bytes, %v", i, len(got), err)
		}
	}
	if got, err := get(t, s2, enginetest.Key(100)); err != nil || !bytes.Equal(got, enginetest.Value(100, 777)) {
		t.Fatalf("the value written in the crashed epoch: %d bytes, %v", len(got), err)
	}
}

// TestFailedClosedRestartIsCold: a store that failed closed marks its
// state so; the next start is cold (its slot table may not describe the
// extents), says why once, and serves.
func TestFailedClosedRestartIsCold(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	for i := range 5 {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 5000))
	}
	s.fail(errors.New("injected"))
	s.closeFiles()
	logs := &logBuf{}
	opts.Logger = slog.New(logs)
	s = openT(t, opts)
	defer mustClose(t, s)
	if st := s.Stats(); st.Objects != 0 || !st.Healthy {
		t.Fatalf("after failing closed: %+v, want an empty healthy store", st)
	}
	if logs.count("failed closed") != 1 {
		t.Fatalf("want one line saying the last run failed closed: %v", logs.msgs)
	}
	if tbl, err := os.ReadFile(filepath.Join(dir, tableName)); err != nil || !isZero(tbl) {
		t.Fatalf("slots.tbl is not all zeros after the cold start (err %v)", err)
	}
	mustCache(t, s, enginetest.Key(1), enginetest.Value(9, 100))
}

// findRecord returns the slots.tbl offset of key's record.
func findRecord(t *testing.T, dir string, key wire.BlockKey) int64 {
	t.Helper()
	_, off, ok := scanRecords(t, dir, key)
	if !ok {
		t.Fatalf("no record for %s", key)
	}
	return off
}

// scanRecords finds key's valid record in the slots.tbl of the closed
// store in dir: the record, its offset, and whether there is one.
func scanRecords(t *testing.T, dir string, key wire.BlockKey) (record, int64, bool) {
	t.Helper()
	tbl, err := os.ReadFile(filepath.Join(dir, tableName))
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	for off := 0; off+RecordSize <= len(tbl); off += RecordSize {
		if !isZero(tbl[off:off+RecordSize]) && rec.decode(tbl[off:off+RecordSize]) == nil && rec.key == key {
			return rec, int64(off), true
		}
	}
	return record{}, 0, false
}

// TestFlippedByteDropsOneRecord: a flipped byte in slots.tbl drops exactly
// that record (the others come back byte-exact), and the bad record is
// zeroed on disk.
func TestFlippedByteDropsOneRecord(t *testing.T) {
	for _, byteOff := range []int{0, 2, 3, 5, 13, 20, 30, 45, 55, 61} {
		dir := t.TempDir()
		opts := smallOpts(dir)
		s := openT(t, opts)
		for i := range 10 {
			mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 3000*(i+1)))
		}
		mustClose(t, s)
		victim := enginetest.Key(4)
		off := findRecord(t, dir, victim)
		f, err := os.OpenFile(filepath.Join(dir, tableName), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		f.ReadAt(b, off+int64(byteOff))
		b[0] ^= 0x40
		f.WriteAt(b, off+int64(byteOff))
		f.Close()

		logs := &logBuf{}
		opts.Logger = slog.New(logs)
		s = openT(t, opts)
		_, err = s.Exist(victim)
		wantStatus(t, err, wire.StatusNotFound, "Exist of the corrupted record's key")
		for i := range 10 {
			if i == 4 {
				continue
			}
			got, err := get(t, s, enginetest.Key(i))
			if err != nil || !bytes.Equal(got, enginetest.Value(uint64(i), 3000*(i+1))) {
				t.Fatalf("byte %d: key %d after the flip: err %v", byteOff, i, err)
			}
		}
		if s.Stats().Objects != 9 || logs.count("dropped invalid") != 1 {
			t.Fatalf("byte %d: %d objects, log %v", byteOff, s.Stats().Objects, logs.msgs)
		}
		mustClose(t, s)
		tbl, _ := os.ReadFile(filepath.Join(dir, tableName))
		if !isZero(tbl[off : off+RecordSize]) {
			t.Fatalf("byte %d: the corrupted record was not cleared on disk", byteOff)
		}
	}
}

// TestDuplicateKeyKeepsNewer: two valid records for one key (a clear that
// never reached the table) resolve to the higher generation, and the other
// is cleared.
func TestDuplicateKeyKeepsNewer(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	k := enginetest.Key(1)
	mustCache(t, s, k, enginetest.Value(1, 5000))
	mustClose(t, s)
	off := findRecord(t, dir, k)
	tblPath := filepath.Join(dir, tableName)
	tbl, _ := os.ReadFile(tblPath)
	var rec record
	rec.decode(tbl[off : off+RecordSize])
	// An older record of the same key in another slot of the same class.
	old := rec
	old.slot++
	old.gen = rec.gen - 1
	old.length = 4000
	var b [RecordSize]byte
	old.encode(b[:])
	f, _ := os.OpenFile(tblPath, os.O_RDWR, 0)
	f.WriteAt(b[:], off+RecordSize)
	f.Close()
	s = openT(t, opts)
	got, err := get(t, s, k)
	if err != nil || !bytes.Equal(got, enginetest.Value(1, 5000)) {
		t.Fatalf("duplicate resolved to %d bytes, err %v; want the newer 5000-byte value", len(got), err)
	}
	mustClose(t, s)
	tbl, _ = os.ReadFile(tblPath)
	if !isZero(tbl[off+RecordSize : off+2*RecordSize]) {
		t.Fatal("the older duplicate was not cleared")
	}
}

// TestMismatchRefusesAndWritesNothing: another geometry, another format
// version, or a directory that is not a slab store at all is refused with
// a message that names the difference and the fix; every file is left
// byte-identical with its mtime.
func TestMismatchRefusesAndWritesNothing(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 9000))
	mustClose(t, s)
	before := snapshotDir(t, dir)

	refuse := func(o Options, wantIn ...string) {
		t.Helper()
		_, err := Open(o)
		if err == nil {
			t.Fatalf("Open with %+v succeeded", o)
		}
		for _, w := range wantIn {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q does not mention %q", err, w)
			}
		}
		sameSnapshot(t, before, snapshotDir(t, dir))
	}
	o := opts
	o.ExtentBytes = 2 << 20
	refuse(o, "extent bytes (server.slab_extent_bytes; 0 follows the capacity): on disk 1048576, configured 2097152", "start over")
	o = opts
	o.CapacityBytes = 32 << 20
	refuse(o, "capacity bytes (server.disk_capacity_bytes; 0 keeps a formatted disk's): on disk 16777216, configured 33554432", "restore the settings")

	// An older format version with a valid checksum.
	metaPath := filepath.Join(dir, metaName)
	meta, _ := os.ReadFile(metaPath)
	mt := before[metaPath].mtime
	old := bytes.Clone(meta)
	binary.LittleEndian.PutUint32(old[8:], 2)
	binary.LittleEndian.PutUint32(old[60:], crc32.Checksum(old[:60], castagnoli))
	os.WriteFile(metaPath, old, 0o644)
	os.Chtimes(metaPath, mt, mt)
	before = snapshotDir(t, dir)
	refuse(opts, "format version: on disk 2, this dfkv reads 5", "start cold")
	os.WriteFile(metaPath, meta, 0o644)
	os.Chtimes(metaPath, mt, mt)

	// A file engine directory.
	fdir := t.TempDir()
	os.MkdirAll(filepath.Join(fdir, "blocks", "01", "02"), 0o755)
	os.WriteFile(filepath.Join(fdir, "blocks", "01", "02", strings.Repeat("a", 48)), []byte("x"), 0o644)
	dir = fdir
	before = snapshotDir(t, fdir)
	o = opts
	o.Dir = fdir
	refuse(o, "not a slab store", "blocks")
}

// TestCapacityBelowOneExtent names both numbers.
func TestCapacityBelowOneExtent(t *testing.T) {
	_, err := Open(Options{Dir: t.TempDir(), CapacityBytes: 1 << 20, ExtentBytes: 2 << 20})
	if err == nil || !strings.Contains(err.Error(), "1048576") || !strings.Contains(err.Error(), "2097152") {
		t.Fatalf("err = %v", err)
	}
	wantStatus(t, err, wire.StatusInvalid, "Open below one extent")
}

// TestAccountingMatchesStoredBytes: the Accounting sums per tenant equal the
// stored bytes per tenant after PUT, overwrite, REMOVE and eviction, and a
// restart's rebuild reports the same sums.
func TestAccountingMatchesStoredBytes(t *testing.T) {
	dir := t.TempDir()
	acct := newRecorder()
	opts := Options{Dir: dir, CapacityBytes: 4 << 20, ExtentBytes: 256 << 10, DirectIO: true, Accounting: acct}
	s := openT(t, opts)
	r := rand.New(rand.NewPCG(5, 6))
	const nkeys = 400
	for range 3000 {
		i := r.IntN(nkeys)
		k := enginetest.Key(i)
		if r.IntN(5) == 0 {
			_ = s.Remove(k)
			continue
		}
		mustCache(t, s, k, enginetest.Value(uint64(r.Uint32()), 1+r.IntN(40000)))
	}
	if s.Stats().Evictions == 0 {
		t.Fatal("the workload never evicted; make it bigger")
	}
	stored := func(s *Store) map[uint64]int64 {
		m := map[uint64]int64{}
		for i := range nkeys {
			if n, err := s.Exist(enginetest.Key(i)); err == nil {
				m[enginetest.Key(i).Tenant] += int64(n)
			}
		}
		return m
	}
	same := func(what string, a, b map[uint64]int64) {
		t.Helper()
		if len(a) != len(b) {
			t.Fatalf("%s: accounting %v, stored %v", what, a, b)
		}
		for k, v := range a {
			if b[k] != v {
				t.Fatalf("%s: accounting %v, stored %v", what, a, b)
			}
		}
	}
	same("live", acct.snapshot(), stored(s))
	want := stored(s)
	mustClose(t, s)
	acct2 := newRecorder()
	opts.Accounting = acct2
	s = openT(t, opts)
	defer mustClose(t, s)
	same("after restart", acct2.snapshot(), want)
	same("after restart (stored)", stored(s), want)
}

// TestMetadataFailureFailsClosed: a slot record that cannot be written
// turns the store unhealthy: that PUT and every later operation answer
// IO_ERROR, and the next start is cold.
func TestMetadataFailureFailsClosed(t *testing.T) {
	dir := t.TempDir()
	var failTable bool
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if failTable && op == vfs.OpWrite && filepath.Base(path) == tableName {
			return syscall.EIO
		}
		return nil
	}}
	opts := smallOpts(dir)
	opts.FS = ffs
	logs := &logBuf{}
	opts.Logger = slog.New(logs)
	s := openT(t, opts)
	k := enginetest.Key(1)
	mustCache(t, s, k, enginetest.Value(1, 100))
	failTable = true
	wantStatus(t, s.Put(enginetest.Key(2), enginetest.Value(2, 100)), wire.StatusIOError, "Put with a failing record write")
	failTable = false
	if s.Stats().Healthy {
		t.Fatal("Healthy after a metadata write failure")
	}
	wantStatus(t, s.Put(enginetest.Key(3), enginetest.Value(3, 100)), wire.StatusIOError, "Put after failing closed")
	_, err := s.Exist(k)
	wantStatus(t, err, wire.StatusIOError, "Exist after failing closed")
	_, _, err = s.Get(k, 0, 0, enginetest.NewAlloc(nil))
	wantStatus(t, err, wire.StatusIOError, "Get after failing closed")
	wantStatus(t, s.Remove(k), wire.StatusIOError, "Remove after failing closed")
	if n := logs.count("failing closed"); n != 1 {
		t.Fatalf("%d fail-closed log lines, want 1", n)
	}
	wantStatus(t, s.Close(), wire.StatusIOError, "Close of a store that failed closed")
	s = openT(t, opts)
	defer mustClose(t, s)
	if s.Stats().Objects != 0 {
		t.Fatal("a store that failed closed came back warm")
	}
}

// TestDirectOpenRefusedFallsBack: where the O_DIRECT open fails the store
// says so once and serves through buffered I/O.
func TestDirectOpenRefusedFallsBack(t *testing.T) {
	var directOpens int
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpOpen && flag&oDirect != 0 {
			directOpens++
			return syscall.EINVAL
		}
		return nil
	}}
	logs := &logBuf{}
	opts := smallOpts(t.TempDir())
	opts.ExtentBytes = 2 << 20
	opts.FS = ffs
	opts.Logger = slog.New(logs)
	s := openT(t, opts)
	if s.Stats().DirectIO {
		t.Fatal("DirectIO still on after the direct open was refused")
	}
	if directOpens != 1 || logs.count("O_DIRECT") != 1 {
		t.Fatalf("%d direct opens, %d notices; want 1 and 1", directOpens, logs.count("O_DIRECT"))
	}
	for i, n := range enginetest.Sizes {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(n), n))
	}
	for i, n := range enginetest.Sizes {
		enginetest.MustEqual(t, s, enginetest.Key(i), enginetest.Value(uint64(n), n))
		enginetest.CheckRange(t, s, enginetest.Key(i), enginetest.Value(uint64(n), n), 1, 4096)
	}
	mustClose(t, s)
}

// TestFallocateRefusedIsAStartupError: a filesystem that cannot preallocate
// fails Open with a message naming the extent and what is needed.
func TestFallocateRefusedIsAStartupError(t *testing.T) {
	old := fallocateFn
	defer func() { fallocateFn = old }()
	fallocateFn = func(f vfs.File, size int64) error {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.EOPNOTSUPP}
	}
	_, err := Open(smallOpts(t.TempDir()))
	if err == nil || !strings.Contains(err.Error(), "00000.ext") || !strings.Contains(err.Error(), "fallocate") {
		t.Fatalf("Open on a filesystem without fallocate: %v", err)
	}
}

// TestRebuildWithoutSeekData: where the filesystem cannot report holes the
// rebuild scans the whole table in chunks and finds the same values.
func TestRebuildWithoutSeekData(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, CapacityBytes: 512 << 20, ExtentBytes: 4 << 20, DirectIO: true}
	s := openT(t, opts)
	for i := range 200 {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 1+i*977))
	}
	if ev := s.Stats().Evictions; ev != 0 {
		t.Fatalf("setup evicted %d values", ev)
	}
	mustClose(t, s)
	s = openT(t, opts)
	want := s.alloc.Digest()
	mustClose(t, s)

	old := seekDataFn
	defer func() { seekDataFn = old }()
	calls := 0
	seekDataFn = func(vfs.File, int64, int64) (int64, int64, bool, error) {
		calls++
		return 0, 0, false, errNoSeekData
	}
	s = openT(t, opts)
	defer mustClose(t, s)
	if calls == 0 || s.alloc.Digest() != want {
		t.Fatalf("chunked rebuild (%d probes) differs from the SEEK_DATA rebuild", calls)
	}
	for i := range 200 {
		got, err := get(t, s, enginetest.Key(i))
		if err != nil || !bytes.Equal(got, enginetest.Value(uint64(i), 1+i*977)) {
			t.Fatalf("key %d: %v", i, err)
		}
	}
}

// TestSecondOpenRefused: one directory, one store: a second Open while the
// first runs is refused and changes nothing; after Close it opens.
func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, smallOpts(dir))
	mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 100))
	before := snapshotDir(t, dir)
	_, err := Open(smallOpts(dir))
	wantStatus(t, err, wire.StatusUnavailable, "second Open of a directory in use")
	if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("err = %v", err)
	}
	sameSnapshot(t, before, snapshotDir(t, dir))
	mustClose(t, s)
	s = openT(t, smallOpts(dir))
	enginetest.MustEqual(t, s, enginetest.Key(1), enginetest.Value(1, 100))
	mustClose(t, s)
}

// TestLargeAndAlignedValues: values past the 4 MiB bounce buffer are
// written in pieces, caller buffers that are already aligned go to the
// kernel directly, both come back byte-exact (also after a restart), and a
// value larger than the maximum is TOO_LARGE.
func TestLargeAndAlignedValues(t *testing.T) {
	for _, direct := range []bool{true, false} {
		dir := t.TempDir()
		opts := Options{Dir: dir, CapacityBytes: 64 << 20, ExtentBytes: 16 << 20, DirectIO: direct}
		s := openT(t, opts)
		big := enginetest.Value(1, 9<<20+5)
		aligned := iobuf.AlignedSlice(3 << 20)
		copy(aligned, enginetest.Value(2, len(aligned)))
		mustCache(t, s, enginetest.Key(1), big)
		mustCache(t, s, enginetest.Key(2), aligned)
		wantStatus(t, s.Put(enginetest.Key(3), make([]byte, 64<<20+1)), wire.StatusTooLarge, "value larger than the maximum")
		check := func() {
			enginetest.MustEqual(t, s, enginetest.Key(1), big)
			enginetest.MustEqual(t, s, enginetest.Key(2), enginetest.Value(2, len(aligned)))
			enginetest.CheckRange(t, s, enginetest.Key(1), big, 4<<20-3, 4<<20+100)
			enginetest.CheckRange(t, s, enginetest.Key(1), big, 9<<20, 0)
		}
		check()
		mustClose(t, s)
		s = openT(t, opts)
		check()
		mustClose(t, s)
	}
}

// TestRebindThenRestart: extents that changed class (rebalancing) lose
// their old records, so a restart restores exactly the live values, byte
// for byte, and never an evicted value over bytes that were overwritten.
func TestRebindThenRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, CapacityBytes: 2 << 20, ExtentBytes: 256 << 10, DirectIO: true}
	s := openT(t, opts)
	vals := map[wire.BlockKey][]byte{}
	put := func(i, n int) {
		k := enginetest.Key(i)
		vals[k] = enginetest.Value(uint64(i)*31+uint64(n), n)
		mustCache(t, s, k, vals[k])
	}
	for i := range 600 { // small values fill every extent
		put(i, 3000+i%1000)
	}
	for i := range 60 { // then large ones take extents over
		put(10000+i, 100<<10+i)
	}
	if s.Stats().Evictions == 0 {
		t.Fatal("no evictions; the test did not rebalance")
	}
	// Emptied again, the rebound extents hold no record of their new
	// class; only the wipe at rebind keeps the old class's records from
	// binding them back to it at the restart.
	for i := range 60 {
		k := enginetest.Key(10000 + i)
		if err := s.Remove(k); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatal(err)
		}
		delete(vals, k)
	}
	present := map[wire.BlockKey]bool{}
	for k := range vals {
		if _, err := s.Exist(k); err == nil {
			present[k] = true
		}
	}
	mustClose(t, s)
	s = openT(t, opts)
	defer mustClose(t, s)
	if got := s.Stats().Objects; got != uint64(len(present)) {
		t.Fatalf("restart restored %d values, %d were live", got, len(present))
	}
	for k, v := range vals {
		got, err := get(t, s, k)
		if present[k] {
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("%s: live before the restart, now %d bytes, err %v", k, len(got), err)
			}
		} else if err == nil {
			t.Fatalf("%s: evicted before the restart, back after it", k)
		}
	}
}

// TestBorrowedSlotSurvivesRestart: a value stored in a larger class's slot
// (its own class had no extent) reads back byte-exact, before and after a
// graceful restart, and a restart keeps it where it was.
func TestBorrowedSlotSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, CapacityBytes: 4 << 20, ExtentBytes: 1 << 20, DirectIO: true}
	s := openT(t, opts)
	for i := range 100 { // four extents of 25 slots of 40 KiB: the disk is full
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 40<<10))
	}
	odd := enginetest.Key(1000)
	want := enginetest.Value(1000, 36<<10-100)
	mustCache(t, s, odd, want)
	if st := s.Stats(); st.Evictions != 1 || st.Objects != 100 {
		t.Fatalf("storing one 36 KiB value in a full disk of 40 KiB slots: %d evictions, %d objects; want one eviction (a borrowed slot), 100 objects",
			st.Evictions, st.Objects)
	}
	for round := range 2 {
		if got, err := get(t, s, odd); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("round %d: borrowed value: %d bytes, err %v; want %d bytes", round, len(got), err, len(want))
		}
		mustClose(t, s)
		s = openT(t, opts)
		if st := s.Stats(); st.Objects != 100 {
			t.Fatalf("round %d: %d objects after the restart, want 100", round, st.Objects)
		}
	}
	mustClose(t, s)
}

// TestExtentMovesCounted: Stats.ExtentMoves counts extents that changed
// size class, and only those.
func TestExtentMovesCounted(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), CapacityBytes: 4 << 20, ExtentBytes: 1 << 20, DirectIO: true})
	defer mustClose(t, s)
	for i := range 100 { // four extents of 40 KiB slots: full, no move
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), 40<<10))
	}
	if m := s.Stats().ExtentMoves; m != 0 {
		t.Fatalf("%d extent moves while the disk filled", m)
	}
	mustCache(t, s, enginetest.Key(1000), enginetest.Value(1000, 8<<10)) // no class within 2×: takes an extent
	st := s.Stats()
	if st.ExtentMoves != 1 || st.Evictions != 25 {
		t.Fatalf("an 8 KiB value in a disk of 40 KiB slots: %d extent moves, %d evictions; want 1 and the extent's 25", st.ExtentMoves, st.Evictions)
	}
}

// TestObjectStoreMarksBesideTheStore: the node keeps the object store
// tier's marks file in its first disk's directory. The file neither makes
// an empty directory foreign nor goes with a damaged store's files.
func TestObjectStoreMarksBesideTheStore(t *testing.T) {
	dir := t.TempDir()
	marks := filepath.Join(dir, "s3_marks.db")
	if err := os.WriteFile(marks, []byte("marks"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := openT(t, smallOpts(dir)) // a directory holding only the marks is new
	mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 9000))
	mustClose(t, s)
	if err := os.Remove(filepath.Join(dir, metaName)); err != nil {
		t.Fatal(err)
	}
	s = openT(t, smallOpts(dir)) // damaged: formatted anew
	defer mustClose(t, s)
	if b, err := os.ReadFile(marks); err != nil || string(b) != "marks" {
		t.Fatalf("the marks file did not survive the damaged store's removal: %q, %v", b, err)
	}
}
