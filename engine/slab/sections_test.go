package slab

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// countingFS counts the bytes read from extent files.
type countingFS struct {
	vfs.FS
	read *atomic.Int64
}

func (c countingFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, string(filepath.Separator)+extentsDir+string(filepath.Separator)) {
		return f, err
	}
	return countingFile{f, c.read}, nil
}

type countingFile struct {
	vfs.File
	read *atomic.Int64
}

func (c countingFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.File.ReadAt(b, off)
	c.read.Add(int64(n))
	return n, err
}

// sectionsStore is a store of 4 MiB extents that counts what it reads.
func sectionsStore(t *testing.T) (*Store, *atomic.Int64) {
	t.Helper()
	var read atomic.Int64
	s := openT(t, Options{Dir: t.TempDir(), CapacityBytes: 64 << 20, ExtentBytes: 4 << 20, DirectIO: true,
		FS: countingFS{vfs.OS{}, &read}})
	t.Cleanup(func() { mustClose(t, s) })
	return s, &read
}

// getRange reads [off, off+n) of key's value and copies it out.
func getRange(t *testing.T, s *Store, key wire.BlockKey, off, n uint64) ([]byte, error) {
	t.Helper()
	a := enginetest.NewAlloc(nil)
	defer a.Release()
	data, _, err := s.Get(key, off, n, a)
	return bytes.Clone(data), err
}

func TestSectionShift(t *testing.T) {
	for _, c := range []struct {
		stored uint64
		shift  uint
	}{
		{0, 0}, {4 << 10, 0}, {32<<10 - 1, 0}, // too small: ranges read them whole
		{32 << 10, 14}, {1 << 20, 14}, {4 << 20, 14}, // 16 KiB sections, at most 256
		{4<<20 + 1, 15}, {16 << 20, 16}, {64 << 20, 18}, {1 << 30, 22},
	} {
		got := sectionShift(c.stored)
		if got != c.shift {
			t.Errorf("sectionShift(%d) = %d, want %d", c.stored, got, c.shift)
		}
		if got != 0 && (c.stored+1<<got-1)>>got > maxSections {
			t.Errorf("sectionShift(%d) = %d makes more than %d sections", c.stored, got, maxSections)
		}
	}
}

// A block loaded layer by layer is read from disk about once, not once per
// layer, and every range is the value's bytes.
func TestLayerRangesReadTheValueAboutOnce(t *testing.T) {
	s, read := sectionsStore(t)
	const size, layers = 1 << 20, 32
	key, value := enginetest.Key(1), enginetest.Value(1, size)
	mustCache(t, s, key, value)
	read.Store(0)
	layer := uint64(size / layers)
	for l := range uint64(layers) {
		got, err := getRange(t, s, key, l*layer, layer)
		if err != nil {
			t.Fatalf("layer %d: %v", l, err)
		}
		if !bytes.Equal(got, value[l*layer:(l+1)*layer]) {
			t.Fatalf("layer %d: wrong bytes", l)
		}
	}
	// One whole read for the first layer, then each layer's own sections.
	if limit := int64(size + (layers-1)*(layer+1<<minSectionShift)); read.Load() > limit {
		t.Fatalf("%d layer reads read %d bytes from disk, want at most %d (a whole read per layer would be %d)",
			layers, read.Load(), limit, layers*size)
	}
	if b, r := s.sectionBuilds.Load(), s.sectionReads.Load(); b != 1 || r != layers-1 {
		t.Fatalf("section tables taken %d, ranges read by sections %d; want 1 and %d", b, r, layers-1)
	}
	t.Logf("%d layer ranges of a %d-byte value read %d bytes from disk", layers, size, read.Load())
}

// Ranges of every shape (unaligned, across sections, to the end, one
// byte) return exactly the value's bytes, first and later reads alike.
func TestRangesBySectionsAreExact(t *testing.T) {
	s, _ := sectionsStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i, size := range []int{32 << 10, 100_000, 1 << 20, 3<<20 + 12345} {
		key, value := enginetest.Key(i), enginetest.Value(uint64(i), size)
		mustCache(t, s, key, value)
		for range 200 {
			off := rng.Uint64N(uint64(size))
			n := 1 + rng.Uint64N(uint64(size)-off)
			switch rng.IntN(4) {
			case 0:
				n = 1
			case 1:
				n = uint64(size) - off // to the end
			}
			got, err := getRange(t, s, key, off, n)
			if err != nil {
				t.Fatalf("%d-byte value, range [%d, %d): %v", size, off, off+n, err)
			}
			if !bytes.Equal(got, value[off:off+n]) {
				t.Fatalf("%d-byte value, range [%d, %d): wrong bytes", size, off, off+n)
			}
		}
	}
	if s.sectionMisses.Load() != 0 || s.checksumFailures.Load() != 0 {
		t.Fatalf("section misses %d, checksum failures %d on intact values", s.sectionMisses.Load(), s.checksumFailures.Load())
	}
}

// payloadPath is the extent file and offset of key's value in open store s.
func payloadPath(t *testing.T, s *Store, key wire.BlockKey) (string, int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _, ok := s.alloc.Exist(&key)
	if !ok {
		t.Fatalf("%s is not stored", key)
	}
	e, _ := s.alloc.Split(r)
	return s.extents[e].Name(), int64(s.alloc.Offset(r))
}

// A byte flipped on disk after a value's sections were taken fails the
// range that reads it: a miss, counted, the value dropped, never served.
func TestCorruptSectionIsAMissAfterTheTableIsTaken(t *testing.T) {
	s, _ := sectionsStore(t)
	key, value := enginetest.Key(7), enginetest.Value(7, 1<<20)
	mustCache(t, s, key, value)
	if _, err := getRange(t, s, key, 0, 4096); err != nil {
		t.Fatal(err)
	}
	path, off := payloadPath(t, s, key)
	flipByte(t, path, off+5<<minSectionShift+100)
	data, err := getRange(t, s, key, 5<<minSectionShift, 4096)
	wantCorruptMiss(t, data, err, "a range over the flipped byte")
	if s.checksumFailures.Load() != 1 {
		t.Fatalf("checksum failures %d, want 1", s.checksumFailures.Load())
	}
	if _, err := get(t, s, key); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("the corrupt value is still served after its failed range: %v", err)
	}
}

// A table that does not match the bytes (as a stale one would not) costs a
// whole-value check, which serves the intact value and takes the table
// afresh; it never fails a good value.
func TestWrongTableFallsBackToTheWholeValue(t *testing.T) {
	s, _ := sectionsStore(t)
	key, value := enginetest.Key(9), enginetest.Value(9, 1<<20)
	mustCache(t, s, key, value)
	if _, err := getRange(t, s, key, 0, 100); err != nil {
		t.Fatal(err)
	}
	s.sections.mu.Lock()
	for _, tb := range s.sections.tables {
		for i := range tb.sums {
			tb.sums[i] ^= 1
		}
	}
	s.sections.mu.Unlock()
	for range 2 {
		got, err := getRange(t, s, key, 200<<10, 1000)
		if err != nil || !bytes.Equal(got, value[200<<10:200<<10+1000]) {
			t.Fatalf("range of an intact value under a wrong table: %v", err)
		}
	}
	if m, b, f := s.sectionMisses.Load(), s.sectionBuilds.Load(), s.checksumFailures.Load(); m != 1 || b != 2 || f != 0 {
		t.Fatalf("section misses %d, tables taken %d, checksum failures %d; want 1, 2, 0", m, b, f)
	}
}

// Values rewritten over and over, their slots reused, are read by range
// exactly: a table never outlives its value.
func TestRangesAcrossRewrites(t *testing.T) {
	s, _ := sectionsStore(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 60 {
		for k := range 3 {
			key := enginetest.Key(k)
			value := enginetest.Value(uint64(round*10+k), 512<<10) // same length each time
			mustCache(t, s, key, value)
			for range 3 {
				off := rng.Uint64N(512 << 10)
				n := 1 + rng.Uint64N(min(64<<10, 512<<10-off))
				got, err := getRange(t, s, key, off, n)
				if err != nil || !bytes.Equal(got, value[off:off+n]) {
					t.Fatalf("round %d key %d range [%d, %d): wrong bytes or %v", round, k, off, off+n, err)
				}
			}
		}
	}
	if s.checksumFailures.Load() != 0 {
		t.Fatalf("%d checksum failures on intact values", s.checksumFailures.Load())
	}
}

// Every layer of a block asked for at once (as a layer-by-layer load
// does) shares one whole read.
func TestConcurrentFirstRangesShareOneWholeRead(t *testing.T) {
	s, _ := sectionsStore(t)
	const size, layers = 1 << 20, 32
	for k := range 4 {
		key, value := enginetest.Key(k), enginetest.Value(uint64(k), size)
		mustCache(t, s, key, value)
		var wg sync.WaitGroup
		layer := uint64(size / layers)
		for l := range uint64(layers) {
			wg.Go(func() {
				a := enginetest.NewAlloc(nil)
				defer a.Release()
				got, _, err := s.Get(key, l*layer, layer, a)
				if err != nil || !bytes.Equal(got, value[l*layer:(l+1)*layer]) {
					t.Errorf("key %d layer %d: wrong bytes or %v", k, l, err)
				}
			})
		}
		wg.Wait()
	}
	if b := s.sectionBuilds.Load(); b != 4 {
		t.Fatalf("4 values read by 32 concurrent ranges each took %d section tables, want 4", b)
	}
}

// The cache keeps at most sectionTables tables, the newest, and a slot put
// again keeps its newer table when its older place comes round.
func TestSectionCacheKeepsTheNewest(t *testing.T) {
	c := newSectionCache()
	table := func() *sectionTable { return &sectionTable{want: 1, stored: 1} }
	for r := range SlotRef(sectionTables + 10) {
		c.put(r, table())
	}
	if len(c.tables) != sectionTables {
		t.Fatalf("%d tables kept, want %d", len(c.tables), sectionTables)
	}
	if c.tables[5] != nil || c.tables[sectionTables+5] == nil {
		t.Fatal("an old table kept or a new one lost")
	}
	c.put(20, table()) // slot 20 again: its older place comes round ten puts later
	for r := range SlotRef(10) {
		c.put(2*sectionTables+r, table())
	}
	if c.tables[20] == nil {
		t.Fatal("a table put again was dropped when its older place came round")
	}
	if len(c.tables) != sectionTables {
		t.Fatalf("%d tables kept, want %d", len(c.tables), sectionTables)
	}
}

// sizeAlloc records the largest buffer a read asks its caller for.
type sizeAlloc struct {
	inner   *enginetest.Alloc
	largest int
}

func (a *sizeAlloc) Alloc(n int) []byte {
	a.largest = max(a.largest, n)
	return a.inner.Alloc(n)
}

// A small range of a value of large sections asks its caller for the range
// and at most sectionSlack more, not for all the sections it reads (two
// here, 128 KiB): the server reserved buffer budget for the range alone.
func TestSmallRangeOfLargeSectionsAsksForTheRange(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), CapacityBytes: 64 << 20, ExtentBytes: 16 << 20, DirectIO: true})
	defer mustClose(t, s)
	const size = 12 << 20 // 64 KiB sections
	if shift := sectionShift(size); shift != 16 {
		t.Fatalf("sectionShift(%d) = %d, the test wants 64 KiB sections", size, shift)
	}
	key, value := enginetest.Key(3), enginetest.Value(3, size)
	mustCache(t, s, key, value)
	for i, off := range []uint64{1 << 20, 64<<10 - 1, 5<<20 + 4095} { // the first read takes the table
		a := &sizeAlloc{inner: enginetest.NewAlloc(nil)}
		got, _, err := s.Get(key, off, 2, a)
		if err != nil || !bytes.Equal(got, value[off:off+2]) {
			t.Fatalf("range [%d, %d): wrong bytes or %v", off, off+2, err)
		}
		a.inner.Release()
		if a.largest > 4096+sectionSlack {
			t.Fatalf("read %d: a 2-byte range asked its caller for %d bytes", i, a.largest)
		}
	}
	if s.sectionReads.Load() != 2 {
		t.Fatalf("%d ranges read by sections, want 2", s.sectionReads.Load())
	}
}

// Sections larger than a pooled buffer (a value over 512 MiB has 4 MiB
// sections): a small range across two of them still asks its caller for
// the range alone, and a byte flipped in the second is caught. tmpfs
// holds the value, so the test writes no 520 MiB to a real disk.
func TestSmallRangeOfSectionsLargerThanAChunk(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "dfkv-sections-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(dir)
	s := openT(t, Options{Dir: dir, CapacityBytes: 1 << 30, ExtentBytes: 1 << 30, MaxValueBytes: 1 << 30})
	defer mustClose(t, s)
	const size = 520 << 20
	if shift := sectionShift(size); 1<<shift <= chunkBytes/2 {
		t.Fatalf("sectionShift(%d) = %d, the test wants two sections to span more than %d bytes", size, shift, chunkBytes)
	}
	key, value := enginetest.Key(5), enginetest.Value(5, size)
	mustCache(t, s, key, value)
	across := uint64(4<<20 - 1)                     // the last byte of section 0, the first of section 1
	for i, off := range []uint64{1 << 20, across} { // the first read takes the table
		a := &sizeAlloc{inner: enginetest.NewAlloc(nil)}
		got, _, err := s.Get(key, off, 2, a)
		if err != nil || !bytes.Equal(got, value[off:off+2]) {
			t.Fatalf("range [%d, %d): wrong bytes or %v", off, off+2, err)
		}
		a.inner.Release()
		if a.largest > 4096+sectionSlack {
			t.Fatalf("read %d: a 2-byte range asked its caller for %d bytes", i, a.largest)
		}
	}
	if s.sectionReads.Load() != 1 {
		t.Fatalf("%d ranges read by sections, want 1", s.sectionReads.Load())
	}
	path, off := payloadPath(t, s, key)
	flipByte(t, path, off+int64(across)+1000)
	data, err := getRange(t, s, key, across, 2)
	wantCorruptMiss(t, data, err, "a range across a section with a flipped byte")
}
