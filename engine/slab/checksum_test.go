package slab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// fixedClock is a clock that never moves, so a rate limit keyed on it
// lets exactly one line through.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// recordOf returns key's record in the closed store in dir, and whether
// there is one.
func recordOf(t *testing.T, dir string, key wire.BlockKey) (record, bool) {
	t.Helper()
	rec, _, ok := scanRecords(t, dir, key)
	return rec, ok
}

// payloadAt is the extent file and byte offset of key's value in the
// closed store opened with opts, computed from its record and the lattice,
// as the engine places it.
func payloadAt(t *testing.T, opts Options, key wire.BlockKey) (string, int64) {
	t.Helper()
	rec, ok := recordOf(t, opts.Dir, key)
	if !ok {
		t.Fatalf("no record for %s", key)
	}
	lat, err := NewLattice(opts.ExtentBytes)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(opts.Dir, extentsDir, fmt.Sprintf("%05d.ext", rec.extent))
	return path, int64(uint64(rec.slot) * lat.Size(int(rec.class)))
}

// flipByte inverts one byte of the file at off, as dd conv=notrunc would.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// wantCorruptMiss checks that err is the miss of a checksum failure.
func wantCorruptMiss(t *testing.T, data []byte, err error, what string) {
	t.Helper()
	wantStatus(t, err, wire.StatusNotFound, what)
	if !errors.Is(err, ErrPayloadChecksum) {
		t.Fatalf("%s: %v does not wrap ErrPayloadChecksum", what, err)
	}
	if len(data) != 0 {
		t.Fatalf("%s: %d bytes served with the miss", what, len(data))
	}
}

// TestFlippedPayloadByteIsAMiss: one byte flipped in an extent file at a
// value's position makes that value a miss (never the wrong bytes), counts
// one checksum failure, logs one warning, credits the tenant and clears the
// record for good; every other value still serves byte-exact.
func TestFlippedPayloadByteIsAMiss(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			dir := t.TempDir()
			opts := smallOpts(dir)
			opts.DirectIO = direct
			s := openT(t, opts)
			size := func(i int) int { return 3000*(i+1) + 17*i }
			for i := range 10 {
				mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), size(i)))
			}
			mustClose(t, s)

			bad := enginetest.Key(4)
			path, off := payloadAt(t, opts, bad)
			flipByte(t, path, off+int64(size(4))/2)

			logs := &logBuf{}
			acct := newRecorder()
			opts.Logger = slog.New(logs)
			opts.Accounting = acct
			s = openT(t, opts)
			if st := s.Stats(); st.Objects != 10 || st.ChecksumFailures != 0 {
				t.Fatalf("after reopen: %d objects, %d checksum failures; want 10, 0", st.Objects, st.ChecksumFailures)
			}
			data, err := get(t, s, bad)
			wantCorruptMiss(t, data, err, "GET of the corrupted value")
			st := s.Stats()
			if st.ChecksumFailures != 1 || st.Objects != 9 || !st.Healthy {
				t.Fatalf("after the failure: %d checksum failures, %d objects, healthy %v; want 1, 9, true", st.ChecksumFailures, st.Objects, st.Healthy)
			}
			if n := logs.count("failed its checksum and was dropped"); n != 1 {
				t.Fatalf("%d checksum warnings, want 1: %v", n, logs.msgs)
			}
			_, err = get(t, s, bad)
			wantStatus(t, err, wire.StatusNotFound, "second GET of the dropped value")
			if st := s.Stats(); st.ChecksumFailures != 1 {
				t.Fatalf("the dropped value was verified again: %d failures", st.ChecksumFailures)
			}
			want := map[uint64]int64{}
			for i := range 10 {
				if i != 4 {
					want[enginetest.Key(i).Tenant] += int64(size(i))
				}
			}
			if got := acct.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("committed bytes %v, want %v (the dropped value credited)", got, want)
			}
			checkOthers := func(s *Store) {
				t.Helper()
				for i := range 10 {
					if i == 4 {
						continue
					}
					got, err := get(t, s, enginetest.Key(i))
					if err != nil || !bytes.Equal(got, enginetest.Value(uint64(i), size(i))) {
						t.Fatalf("value %d: %d bytes, err %v", i, len(got), err)
					}
				}
			}
			checkOthers(s)
			mustClose(t, s)
			if _, ok := recordOf(t, dir, bad); ok {
				t.Fatal("the corrupted value's record is still in slots.tbl after a clean close")
			}
			s = openT(t, opts)
			if st := s.Stats(); st.Objects != 9 {
				t.Fatalf("after another reopen: %d objects, want 9", st.Objects)
			}
			_, err = get(t, s, bad)
			wantStatus(t, err, wire.StatusNotFound, "GET after another reopen")
			checkOthers(s)
			mustClose(t, s)
		})
	}
}

// TestSwappedExtentsNeverServeAnotherKey: two extent files swapped (each
// intact, in the other's place) make every value they held a miss, never
// another key's bytes; an extent left in place still serves; the warnings
// are rate-limited while the counter stays exact.
func TestSwappedExtentsNeverServeAnotherKey(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	const n = 30
	size := func(i int) int {
		if i%3 == 2 {
			return 20000 // another class: another extent, not swapped
		}
		return 100000 + i
	}
	for i := range n {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), size(i)))
	}
	mustClose(t, s)

	ext := func(e uint32) string { return filepath.Join(dir, extentsDir, fmt.Sprintf("%05d.ext", e)) }
	in := map[uint32][]int{}
	for i := range n {
		rec, ok := recordOf(t, dir, enginetest.Key(i))
		if !ok {
			t.Fatalf("no record for value %d", i)
		}
		in[rec.extent] = append(in[rec.extent], i)
	}
	a, b := uint32(0), uint32(1)
	if len(in[a]) == 0 || len(in[b]) == 0 {
		t.Fatalf("values by extent %v: want values in extents 0 and 1", in)
	}
	tmp := ext(a) + ".swap"
	for _, mv := range [][2]string{{ext(a), tmp}, {ext(b), ext(a)}, {tmp, ext(b)}} {
		if err := os.Rename(mv[0], mv[1]); err != nil {
			t.Fatal(err)
		}
	}

	logs := &logBuf{}
	opts.Logger = slog.New(logs)
	opts.Clock = fixedClock{time.Unix(1_800_000_000, 0)}
	s = openT(t, opts)
	defer func() { mustClose(t, s) }()
	for _, i := range append(append([]int(nil), in[a]...), in[b]...) {
		data, err := get(t, s, enginetest.Key(i))
		wantCorruptMiss(t, data, err, fmt.Sprintf("value %d in a swapped extent", i))
	}
	failed := uint64(len(in[a]) + len(in[b]))
	if st := s.Stats(); st.ChecksumFailures != failed {
		t.Fatalf("%d checksum failures, want %d", st.ChecksumFailures, failed)
	}
	if n := logs.count("failed its checksum and was dropped"); n != 1 {
		t.Fatalf("%d checksum warnings with a stopped clock, want 1 (rate-limited)", n)
	}
	for e, vals := range in {
		if e == a || e == b {
			continue
		}
		for _, i := range vals {
			got, err := get(t, s, enginetest.Key(i))
			if err != nil || !bytes.Equal(got, enginetest.Value(uint64(i), size(i))) {
				t.Fatalf("value %d in extent %d, not swapped: %d bytes, err %v", i, e, len(got), err)
			}
		}
	}
}

// TestGetOfCorruptValueNotServed: a range that does not cover the
// flipped byte is refused too (the whole value is verified), and ranges
// of intact values, across the pooled buffer's chunk boundaries, are
// byte-exact.
func TestGetOfCorruptValueNotServed(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, CapacityBytes: 48 << 20, ExtentBytes: 16 << 20, DirectIO: direct}
			s := openT(t, opts)
			const big = 2*chunkBytes + 12345
			good, bad := enginetest.Key(1), enginetest.Key(2)
			mustCache(t, s, good, enginetest.Value(1, big))
			mustCache(t, s, bad, enginetest.Value(2, big))
			mustClose(t, s)
			path, off := payloadAt(t, opts, bad)
			flipByte(t, path, off+big-3)

			s = openT(t, opts)
			defer func() { mustClose(t, s) }()
			want := enginetest.Value(1, big)
			for _, r := range [][2]uint64{{0, 4096}, {1, 10}, {chunkBytes - 5, 10}, {chunkBytes, 1}, {2*chunkBytes - 1, 4097}, {big - 7, 0}, {12345, 3 * chunkBytes}} {
				a := enginetest.NewAlloc(nil)
				data, stored, err := s.Get(good, r[0], r[1], a)
				end := min(uint64(big), r[0]+r[1])
				if r[1] == 0 {
					end = big
				}
				if err != nil || stored != big || !bytes.Equal(data, want[r[0]:end]) {
					t.Fatalf("range %v of the intact value: %d bytes (stored %d), err %v", r, len(data), stored, err)
				}
				a.Release()
			}
			a := enginetest.NewAlloc(nil)
			data, _, err := s.Get(bad, 0, 4096, a)
			a.Release()
			wantCorruptMiss(t, data, err, "a range before the flipped byte")
			if st := s.Stats(); st.ChecksumFailures != 1 || st.Objects != 1 {
				t.Fatalf("%d checksum failures, %d objects; want 1, 1", st.ChecksumFailures, st.Objects)
			}
		})
	}
}

// TestChecksumCoversIdentity: the same bytes under another key, or in
// another slot, have another payload checksum, so a misplaced payload
// cannot pass for the value a record names.
func TestChecksumCoversIdentity(t *testing.T) {
	v := enginetest.Value(1, 5000)
	k1, k2 := enginetest.Key(1), enginetest.Key(2)
	base := payloadSum(&k1, 3, 7, v)
	for name, sum := range map[string]uint32{
		"another key":    payloadSum(&k2, 3, 7, v),
		"another extent": payloadSum(&k1, 4, 7, v),
		"another slot":   payloadSum(&k1, 3, 8, v),
		"a shorter copy": payloadSum(&k1, 3, 7, v[:4999]),
	} {
		if sum == base {
			t.Errorf("%s: same checksum %#x", name, sum)
		}
	}
	buf := make([]byte, len(v))
	seed := sumSeed(&k1, 3, 7, uint32(len(v)))
	if n, sum := copySum(buf, v, seed); n != len(v) || sum != base || !bytes.Equal(buf, v) {
		t.Fatalf("copySum: %d bytes, sum %#x; want %d, %#x", n, sum, len(v), base)
	}
}

// TestOldFormatRefused: a store in format 3 (records without payload
// checksums) is refused at Open, naming the format difference and the fix,
// and nothing in it is changed.
func TestOldFormatRefused(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 9000))
	mustClose(t, s)
	metaPath := filepath.Join(dir, metaName)
	meta, err := os.ReadFile(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(meta[8:], 3)
	binary.LittleEndian.PutUint32(meta[60:], crc32.Checksum(meta[:60], castagnoli))
	if err := os.WriteFile(metaPath, meta, 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, dir)
	_, err = Open(opts)
	wantStatus(t, err, wire.StatusInvalid, "Open of a format 3 store")
	for _, w := range []string{metaPath, "format version: on disk 3, this dfkv reads 5", "no payload checksum", "remove the directory's contents", "start cold", "nothing was changed"} {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not mention %q", err, w)
		}
	}
	sameSnapshot(t, before, snapshotDir(t, dir))
}

// TestCorruptValueRacingReadsAndPut: readers that all meet a corrupted
// value while a PUT of the same key is in flight drop only the corrupted
// slot, never the new value, and leave the allocator consistent.
func TestCorruptValueRacingReadsAndPut(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	s := openT(t, opts)
	k := enginetest.Key(7)
	mustCache(t, s, k, enginetest.Value(7, 70000))
	mustCache(t, s, enginetest.Key(8), enginetest.Value(8, 70000))
	mustClose(t, s)
	path, off := payloadAt(t, opts, k)
	flipByte(t, path, off+100)

	s = openT(t, opts)
	fresh := enginetest.Value(77, 65000)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			<-start
			for range 20 {
				data, err := get(t, s, k)
				if err == nil && !bytes.Equal(data, fresh) {
					t.Errorf("served %d bytes that are not the new value", len(data))
					return
				}
				if err != nil && wire.StatusOf(err) != wire.StatusNotFound {
					t.Errorf("read: %v", err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		<-start
		if err := s.Put(k, fresh); err != nil {
			t.Errorf("PUT over the corrupted value: %v", err)
		}
	})
	close(start)
	wg.Wait()
	got, err := get(t, s, k)
	if err != nil || !bytes.Equal(got, fresh) {
		t.Fatalf("after the race: %d bytes, err %v; want the new value", len(got), err)
	}
	if st := s.Stats(); st.Objects != 2 {
		t.Fatalf("%d objects, want 2", st.Objects)
	}
	mustClose(t, s)
	s = openT(t, opts)
	defer func() { mustClose(t, s) }()
	got, err = get(t, s, k)
	if err != nil || !bytes.Equal(got, fresh) {
		t.Fatalf("after a restart: %d bytes, err %v; want the new value", len(got), err)
	}
}
