package slab

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// badSector makes [start, end) of slots.tbl behave like a bad sector under
// a vfs.FaultFS: a read touching it fails with EIO, and so does a write
// (a record is 64 bytes of a page, so the kernel must read the page
// first), until ZeroRange covers the whole of it, which gives the range
// new, unwritten blocks. With failZero set, ZeroRange of it fails too.
type badSector struct {
	start, end int64
	failZero   bool

	mu      sync.Mutex
	mended  bool
	reads   int // reads failed
	zeroing int // ZeroRange calls that touched the range
}

func (b *badSector) fs() *vfs.FaultFS {
	return &vfs.FaultFS{InjectRange: func(op vfs.Op, path string, off, n int64) error {
		if filepath.Base(path) != tableName || off >= b.end || off+n <= b.start {
			return nil
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		switch {
		case b.mended:
			return nil
		case op == vfs.OpZeroRange:
			b.zeroing++
			if b.failZero {
				return syscall.EIO
			}
			b.mended = off <= b.start && off+n >= b.end
			return nil
		case op == vfs.OpRead:
			b.reads++
		}
		return syscall.EIO
	}}
}

// textLog is a log whose lines, with their attributes, tests can search.
type textLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *textLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *textLog) lines(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return out
}

// unreadableValue is value i of the unreadable-table tests: 8 KiB, one
// class, so an extent's records fill its first two pages of the table.
func unreadableValue(i int) []byte { return enginetest.Value(uint64(i), 8192) }

// fillUnreadable stores n values in a new store in opts.Dir, closes it
// cleanly, and returns each value's record offset.
func fillUnreadable(t *testing.T, opts Options, n int) map[int]int64 {
	t.Helper()
	s := openT(t, opts)
	for i := range n {
		mustCache(t, s, enginetest.Key(i), unreadableValue(i))
	}
	mustClose(t, s)
	at := map[int]int64{}
	for i := range n {
		at[i] = findRecord(t, opts.Dir, enginetest.Key(i))
	}
	return at
}

// recordAt is where the open store s keeps key's record, if it holds key.
func recordAt(s *Store, key wire.BlockKey) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.alloc.Exist(&key)
	return recordOff(r), ok
}

// TestUnreadableTableRegionDropsItsSlots: a page of slots.tbl that cannot
// be read at restart (a bad sector) no longer stops the disk: Open
// succeeds, the values recorded in that page are misses, every other
// value serves byte-exact (those in the same 1 MiB read too), one ERROR
// names the file, the byte range and the slots dropped, and the page is
// rewritten with zeros, so a PUT whose record lands there is stored and
// survives a clean restart.
func TestUnreadableTableRegionDropsItsSlots(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	const n = 300
	at := fillUnreadable(t, opts, n)
	// The second page of the records of value 0's extent: its first page,
	// read by the same pread, stays readable.
	base := at[0] &^ (int64(opts.ExtentBytes/MinClass)*RecordSize - 1)
	bad := &badSector{start: base + tablePage, end: base + 2*tablePage}
	lost := map[int]bool{}
	below, above := 0, 0
	for i, off := range at {
		switch {
		case off >= bad.start && off < bad.end:
			lost[i] = true
		case off < bad.start:
			below++
		default:
			above++
		}
	}
	if len(lost) != tablePage/RecordSize || below == 0 || above == 0 {
		t.Fatalf("%d values recorded in the bad page (want %d), %d before it, %d after; the test wants all three",
			len(lost), tablePage/RecordSize, below, above)
	}

	logs := &textLog{}
	opts.FS = bad.fs()
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open with an unreadable page in the slot table: %v", err)
	}
	if bad.reads == 0 || !bad.mended {
		t.Fatalf("%d reads of the bad page failed, mended %v: the fault was not exercised", bad.reads, bad.mended)
	}
	errs := logs.lines("level=ERROR")
	if len(errs) != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	for _, want := range []string{filepath.Join(dir, tableName), fmt.Sprintf("[%d,%d)", bad.start, bad.end),
		fmt.Sprintf("slots_dropped=%d", tablePage/RecordSize)} {
		if !strings.Contains(errs[0], want) {
			t.Fatalf("the ERROR line does not name %q:\n%s", want, errs[0])
		}
	}
	for i := range lost {
		if _, err := s.Exist(enginetest.Key(i)); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("Exist of value %d, recorded in the bad page: %v, want NOT_FOUND", i, err)
		}
	}
	check := func(s *Store) {
		t.Helper()
		for i := range n {
			got, err := get(t, s, enginetest.Key(i))
			switch {
			case lost[i]:
				wantStatus(t, err, wire.StatusNotFound, fmt.Sprintf("GET of value %d, recorded in the bad page", i))
			case err != nil || !bytes.Equal(got, unreadableValue(i)):
				t.Fatalf("value %d: %d bytes, %v; want it served byte-exact", i, len(got), err)
			}
		}
		if st := s.Stats(); !st.Healthy || st.Objects != uint64(n-len(lost)) {
			t.Fatalf("stats %+v; want healthy with %d objects", st, n-len(lost))
		}
	}
	check(s)

	// New values of the class take free slots until one is recorded in
	// the page that was dropped.
	var added []wire.BlockKey
	key, v := wire.BlockKey{}, []byte(nil)
	for j := 0; j < n && key == (wire.BlockKey{}); j++ {
		k := enginetest.Key(n + j)
		mustCache(t, s, k, unreadableValue(n+j))
		added = append(added, k)
		if off, ok := recordAt(s, k); ok && off >= bad.start && off < bad.end {
			key, v = k, unreadableValue(n+j)
		}
	}
	if key == (wire.BlockKey{}) {
		t.Fatalf("none of %d new values was placed in a slot of the dropped page", len(added))
	}
	mustClose(t, s)

	s = openT(t, opts)
	defer mustClose(t, s)
	if got, err := get(t, s, key); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("the value written into the dropped page, after a clean restart: %d bytes, %v", len(got), err)
	}
	for _, k := range added {
		mustRemove(t, s, k)
	}
	check(s)
	if errs := logs.lines("level=ERROR"); len(errs) != 1 {
		t.Fatalf("%d ERROR lines after the restart, want still 1:\n%s", len(errs), strings.Join(errs, "\n"))
	}
}

// TestUnreadableTableRegionNotZeroedFailsClosed: when the unreadable part
// of the table cannot be rewritten with zeros either, its old records
// could come back at a later start (after REMOVEs this run could not
// clear), so the disk fails closed: Open returns a store that answers
// IO_ERROR, and the next start is cold and serves.
func TestUnreadableTableRegionNotZeroedFailsClosed(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	const n = 300
	at := fillUnreadable(t, opts, n)
	start := at[0] &^ (tablePage - 1)
	bad := &badSector{start: start, end: start + tablePage, failZero: true}
	logs := &textLog{}
	opts.FS = bad.fs()
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open with an unreadable, unwritable page in the slot table: %v", err)
	}
	if bad.zeroing == 0 {
		t.Fatal("the bad page was never zeroed through the file layer")
	}
	if c := len(logs.lines("part of the slot table could not be read")); c != 1 {
		t.Fatalf("%d ERROR lines naming the unreadable part, want 1", c)
	}
	if st := s.Stats(); st.Healthy {
		t.Fatalf("stats %+v: want the store failed closed", st)
	}
	_, err = get(t, s, enginetest.Key(n-1))
	wantStatus(t, err, wire.StatusIOError, "GET from a store that failed closed")
	if err := s.Close(); err == nil {
		t.Fatal("Close of a store that failed closed reported no error")
	}

	opts.FS, opts.Logger = nil, nil
	s = openT(t, opts)
	defer mustClose(t, s)
	if st := s.Stats(); !st.Healthy || st.Objects != 0 {
		t.Fatalf("after failing closed: %+v, want a cold, healthy store", st)
	}
	mustCache(t, s, enginetest.Key(0), unreadableValue(0))
}

// TestUnreadableDuplicateDropsBoth: of two records for one key, the one
// read first cannot be read again to compare generations; neither value
// is served (a miss, never possibly the older one), both records are
// cleared, and Open succeeds.
func TestUnreadableDuplicateDropsBoth(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	k := enginetest.Key(1)
	mustCache(t, s, k, enginetest.Value(1, 5000))
	mustCache(t, s, enginetest.Key(2), enginetest.Value(2, 5000))
	mustClose(t, s)
	off := findRecord(t, dir, k)
	tblPath := filepath.Join(dir, tableName)
	tbl, err := os.ReadFile(tblPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := rec.decode(tbl[off : off+RecordSize]); err != nil {
		t.Fatal(err)
	}
	other := rec
	other.slot += 2
	other.gen = rec.gen - 1
	var b [RecordSize]byte
	other.encode(b[:])
	otherOff := off + 2*RecordSize
	if !isZero(tbl[otherOff : otherOff+RecordSize]) {
		t.Fatal("the slot for the duplicate record is taken")
	}
	if err := writeFileAt(tblPath, b[:], otherOff); err != nil {
		t.Fatal(err)
	}
	opts.FS = &vfs.FaultFS{InjectRange: func(op vfs.Op, path string, o, n int64) error {
		if op == vfs.OpRead && filepath.Base(path) == tableName && n == RecordSize {
			return syscall.EIO // the rereading of one record
		}
		return nil
	}}
	s = openT(t, opts)
	_, err = get(t, s, k)
	wantStatus(t, err, wire.StatusNotFound, "GET of a key whose two records could not be compared")
	if got, err := get(t, s, enginetest.Key(2)); err != nil || !bytes.Equal(got, enginetest.Value(2, 5000)) {
		t.Fatalf("the other value: %d bytes, %v", len(got), err)
	}
	mustClose(t, s)
	tbl, err = os.ReadFile(tblPath)
	if err != nil {
		t.Fatal(err)
	}
	if !isZero(tbl[off:off+RecordSize]) || !isZero(tbl[otherOff:otherOff+RecordSize]) {
		t.Fatal("the two records were not cleared")
	}
}

func writeFileAt(path string, b []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func mustRemove(t testing.TB, s *Store, k wire.BlockKey) {
	t.Helper()
	if err := s.Remove(k); err != nil {
		t.Fatalf("Remove(%s): %v", k, err)
	}
}
