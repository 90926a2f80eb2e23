package slab

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// spanOpts is a store of 1 MiB extents whose values may be 8 MiB: most of
// the values here are larger than an extent.
func spanOpts(dir string) Options {
	return Options{Dir: dir, CapacityBytes: 64 << 20, ExtentBytes: 1 << 20, MaxValueBytes: 8 << 20, DirectIO: true}
}

// spanSizes are value sizes around and across piece boundaries.
var spanSizes = []int{1<<20 + 1, 2 << 20, 2<<20 + 4095, 3<<20 + 512<<10, 5<<20 - 1, 8 << 20}

// checkRanges reads key's value whole and in ranges that start and end in
// and across pieces, and compares each with want.
func checkRanges(t *testing.T, s *Store, key wire.BlockKey, want []byte) {
	t.Helper()
	enginetest.MustEqual(t, s, key, want)
	if n, err := s.Exist(key); err != nil || n != uint64(len(want)) {
		t.Fatalf("Exist %s: %d, %v; want %d", key, n, err, len(want))
	}
	r := rand.New(rand.NewPCG(uint64(len(want)), 1))
	a := enginetest.NewAlloc(nil)
	for range 12 {
		off := uint64(r.IntN(len(want)))
		n := uint64(r.IntN(len(want)-int(off))) + 1
		got, stored, err := s.Get(key, off, n, a)
		if err != nil || stored != uint64(len(want)) || !bytes.Equal(got, want[off:off+n]) {
			t.Fatalf("Get %s [%d, +%d): %d bytes (stored %d), %v", key, off, n, len(got), stored, err)
		}
		a.Release()
	}
}

// TestValuesLargerThanAnExtent: values larger than an extent are stored in
// pieces and read back byte-exact, whole and in any range; Stats counts
// values, not pieces, and the committed bytes match; an overwrite (by a
// larger, a smaller and a small value) and a Remove leave no piece behind;
// all of it survives a clean and an unclean restart.
func TestValuesLargerThanAnExtent(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			opts := spanOpts(t.TempDir())
			opts.DirectIO = direct
			acct := newRecorder()
			opts.Accounting = acct
			s := openT(t, opts)
			want := map[int][]byte{}
			for i, n := range spanSizes {
				want[i] = enginetest.Value(uint64(i), n)
				mustCache(t, s, enginetest.Key(i), want[i])
			}
			check := func(s *Store, what string) {
				t.Helper()
				var used uint64
				for i, v := range want {
					checkRanges(t, s, enginetest.Key(i), v)
					used += uint64(len(v))
				}
				st := s.Stats()
				if st.Objects != uint64(len(want)) || st.UsedBytes != used {
					t.Fatalf("%s: %d objects, %d bytes; want %d values of %d bytes", what, st.Objects, st.UsedBytes, len(want), used)
				}
				if err := s.alloc.Check(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			check(s, "after the PUTs")

			// Overwrites: larger, smaller, small (no pieces), and back.
			for _, n := range []int{7 << 20, 1<<20 + 7, 5000, 3 << 20} {
				want[0] = enginetest.Value(uint64(n), n)
				mustCache(t, s, enginetest.Key(0), want[0])
				check(s, fmt.Sprintf("after overwriting with %d bytes", n))
			}
			if err := s.Remove(enginetest.Key(1)); err != nil {
				t.Fatal(err)
			}
			delete(want, 1)
			_, err := s.Exist(enginetest.Key(1))
			wantStatus(t, err, wire.StatusNotFound, "Exist after Remove")
			check(s, "after a Remove")
			committed := acct.snapshot()
			mustClose(t, s)

			s = openT(t, opts)
			check(s, "after a clean restart")
			s.closeFiles()       // crash
			acct = newRecorder() // what the next Open reports, alone
			opts.Accounting = acct
			s = openT(t, opts)
			defer mustClose(t, s)
			check(s, "after an unclean restart")
			if got := acct.snapshot(); fmt.Sprint(got) != fmt.Sprint(committed) {
				t.Fatalf("committed bytes %v after a restart, want %v", got, committed)
			}
		})
	}
}

// TestLargeValueTornByCrash: what a crash can leave of a value larger than
// an extent is never served: a head whose piece's record is gone, and
// pieces whose head's record is gone (the crash came before the head was
// written), are dropped at restart, with their space; the rest serves.
func TestLargeValueTornByCrash(t *testing.T) {
	dir := t.TempDir()
	opts := spanOpts(dir)
	s := openT(t, opts)
	a, b, c := enginetest.Value(1, 3<<20+5), enginetest.Value(2, 2<<20+9), enginetest.Value(3, 4<<20)
	mustCache(t, s, enginetest.Key(1), a)
	mustCache(t, s, enginetest.Key(2), b)
	mustCache(t, s, enginetest.Key(3), c)
	spA, spB := s.spans[enginetest.Key(1)], s.spans[enginetest.Key(2)]
	s.closeFiles() // crash

	k1, k2 := enginetest.Key(1), enginetest.Key(2)
	zeroRecordOf(t, dir, pieceKey(&k1, spA.nonce, 1)) // a head missing a piece
	zeroRecordOf(t, dir, k2)                          // pieces without their head
	s = openT(t, opts)
	defer mustClose(t, s)
	for _, k := range []wire.BlockKey{k1, k2} {
		_, err := s.Exist(k)
		wantStatus(t, err, wire.StatusNotFound, "Exist of a torn value")
	}
	for i := range spB.pieces {
		if _, err := s.Exist(pieceKey(&k2, spB.nonce, i)); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("piece %d of a value without its head survived: %v", i, err)
		}
	}
	checkRanges(t, s, enginetest.Key(3), c)
	if st := s.Stats(); st.Objects != 1 || st.UsedBytes != uint64(len(c)) {
		t.Fatalf("%d objects, %d bytes; want only value 3 (%d bytes)", st.Objects, st.UsedBytes, len(c))
	}
	if err := s.alloc.Check(); err != nil {
		t.Fatal(err)
	}
}

// zeroRecordOf clears key's record in the closed store in dir.
func zeroRecordOf(t *testing.T, dir string, key wire.BlockKey) {
	t.Helper()
	_, off, ok := scanRecords(t, dir, key)
	if !ok {
		t.Fatalf("no record for %s", key)
	}
	f, err := os.OpenFile(filepath.Join(dir, tableName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(zeroRecord[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestLargeValueLosesAPiece: a piece evicted on its own, or corrupt on
// disk, makes its value a miss (never partial or wrong bytes), and the
// read drops the rest of it.
func TestLargeValueLosesAPiece(t *testing.T) {
	opts := spanOpts(t.TempDir())
	s := openT(t, opts)
	k := enginetest.Key(1)
	mustCache(t, s, k, enginetest.Value(1, 3<<20+100))
	sp := s.spans[k]
	if err := s.remove(pieceKey(&k, sp.nonce, 1)); !err {
		t.Fatal("piece 1 was not there to remove")
	}
	got, err := get(t, s, k)
	wantStatus(t, err, wire.StatusNotFound, "GET of a value missing a piece")
	if len(got) != 0 {
		t.Fatalf("%d bytes served with the miss", len(got))
	}
	if st := s.Stats(); st.Objects != 0 || st.UsedBytes != 0 {
		t.Fatalf("the rest of the value was not dropped: %+v", st)
	}
	mustClose(t, s)

	// Corrupt: one byte of piece 2 flipped on disk.
	s = openT(t, opts)
	v := enginetest.Value(2, 4<<20+1)
	mustCache(t, s, k, v)
	sp = s.spans[k]
	mustClose(t, s)
	path, off := payloadAt(t, opts, pieceKey(&k, sp.nonce, 2))
	flipByte(t, path, off+777)
	s = openT(t, opts)
	defer mustClose(t, s)
	a := enginetest.NewAlloc(nil)
	if got, _, err := s.Get(k, 1<<20, 10, a); err != nil || !bytes.Equal(got, v[1<<20:1<<20+10]) {
		t.Fatalf("a range in an intact piece: %v", err) // piece 2 not read, so not judged
	}
	data, err := get(t, s, k)
	wantCorruptMiss(t, data, err, "GET of a value with a corrupt piece")
	if st := s.Stats(); st.Objects != 0 || st.UsedBytes != 0 || st.ChecksumFailures != 1 {
		t.Fatalf("after the corrupt piece: %+v; want the value dropped, one failure", st)
	}
}

// mixSizes are 16 value sizes from 1 byte to 4 MiB, spaced evenly on a
// log scale.
func mixSizes() []int {
	sizes := make([]int, 16)
	for i := range sizes {
		sizes[i] = max(1, int(math.Round(math.Pow(4<<20, float64(i)/15))))
	}
	return sizes
}

// fillUntilEviction writes values of the mix in a random order until the
// store has evicted one or holds stop of its capacity, and returns the
// fill (used / capacity) at that point and the values it holds.
func fillUntilEviction(t testing.TB, s *Store, stop float64) (float64, map[int]int) {
	sizes := mixSizes()
	r := rand.New(rand.NewPCG(7, 7))
	held := map[int]int{}
	for i := 0; ; i++ {
		n := sizes[r.IntN(len(sizes))]
		if err := s.Put(enginetest.Key(i), enginetest.Value(uint64(i), n)); err != nil {
			t.Fatalf("Put %d (%d bytes): %v", i, n, err)
		}
		held[i] = n
		st := s.Stats()
		fill := float64(st.UsedBytes) / float64(st.CapacityBytes)
		if st.Evictions > 0 || fill >= stop {
			return fill, held
		}
	}
}

// TestSmallDiskNoEvictionBelowHalf: a 256 MiB disk formatted with the
// automatic extent size holds a mix of 16 value sizes from 1 byte to 4 MiB
// up to half its capacity without evicting anything, and every value
// reads back.
func TestSmallDiskNoEvictionBelowHalf(t *testing.T) {
	opts := Options{Dir: t.TempDir(), CapacityBytes: 256 << 20, DirectIO: true}
	s := openT(t, opts)
	defer mustClose(t, s)
	if s.geo.extentBytes != 1<<20 || s.geo.extents != 256 {
		t.Fatalf("a 256 MiB disk got %d extents of %d bytes, want 256 of 1 MiB", s.geo.extents, s.geo.extentBytes)
	}
	fill, held := fillUntilEviction(t, s, 0.5)
	if st := s.Stats(); st.Evictions != 0 {
		t.Fatalf("evicted %d values at %.1f%% fill, below half", st.Evictions, 100*fill)
	}
	for i, n := range held {
		enginetest.MustEqual(t, s, enginetest.Key(i), enginetest.Value(uint64(i), n))
	}
}

// BenchmarkFirstEviction reports the fill at which a disk of the automatic
// geometry first evicts, under the 16-size mix of 1 B to 4 MiB: the
// figure the README gives for 256 MiB and 16 GiB disks. (It writes half of
// the disk, so the 16 GiB case writes 8 GiB.)
func BenchmarkFirstEviction(b *testing.B) {
	for _, capacity := range []uint64{256 << 20, 16 << 30} {
		b.Run(fmt.Sprintf("capacity=%dMiB", capacity>>20), func(b *testing.B) {
			var fill float64
			for b.Loop() {
				s := openT(b, Options{Dir: b.TempDir(), CapacityBytes: capacity, DirectIO: true})
				fill, _ = fillUntilEviction(b, s, 1)
				mustClose(b, s)
			}
			b.ReportMetric(100*fill, "%fill-at-first-eviction")
		})
	}
}

// TestLargeValuesConcurrentChurn: PUT, GET (whole and ranged) and REMOVE
// of values of one to three extents from several goroutines on a store
// small enough to evict constantly. A GET answers a miss or, byte for byte,
// a value once written for that key (every 8-byte word names its key,
// generation and position, so a piece of another value or another key
// shows). Run it with -race.
func TestLargeValuesConcurrentChurn(t *testing.T) {
	opts := Options{Dir: t.TempDir(), CapacityBytes: 8 << 20, ExtentBytes: 256 << 10, MaxValueBytes: 1 << 20, DirectIO: true}
	s := openT(t, opts)
	defer mustClose(t, s)
	const nkeys = 12
	value := func(k int, gen uint64) []byte {
		n := 8 * (1 + int((gen*2654435761+uint64(k)*40503)%(100<<10)))
		b := make([]byte, n)
		for i := 0; i < n/8; i++ {
			binary.LittleEndian.PutUint64(b[8*i:], gen<<40|uint64(k)<<32|uint64(i))
		}
		return b
	}
	var nextGen atomic.Uint64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 5))
			a := enginetest.NewAlloc(nil)
			for range 150 {
				k := r.IntN(nkeys)
				key := enginetest.Key(3000 + k)
				switch x := r.IntN(10); {
				case x < 4:
					if err := s.Put(key, value(k, nextGen.Add(1))); err != nil && wire.StatusOf(err) != wire.StatusCacheFull {
						t.Errorf("Put: %v", err)
						return
					}
				case x < 5:
					if err := s.Remove(key); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
						t.Errorf("Remove: %v", err)
						return
					}
				default:
					off := uint64(8 * r.IntN(64<<10))
					data, stored, err := s.Get(key, off, uint64(8*(1+r.IntN(48<<10))), a)
					if st := wire.StatusOf(err); st == wire.StatusNotFound || st == wire.StatusInvalid && off >= stored {
						continue
					}
					if err != nil {
						t.Errorf("Get: %v", err)
						return
					}
					w0 := binary.LittleEndian.Uint64(data)
					gen := w0 >> 40
					want := value(k, gen)
					if uint64(len(want)) != stored || !bytes.Equal(data, want[off:off+uint64(len(data))]) {
						t.Errorf("key %d gen %d: %d bytes at %d (stored %d) differ from the value written (%d bytes)", k, gen, len(data), off, stored, len(want))
						return
					}
					a.Release()
				}
			}
		})
	}
	wg.Wait()
	if err := s.alloc.Check(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	t.Logf("%+v", st)
	if st.Evictions == 0 {
		t.Fatal("no evictions: the test did not churn")
	}
}

// TestLargePutOnAFullDisk: on a disk that is full, a PUT of a value larger
// than an extent that is acknowledged reads back at once: its pieces are
// pinned until its head is published, so making room for its later pieces
// never evicts its earlier ones. And a piece evicted on its own (to make
// room for another value) takes its whole value with it: Stats never
// counts a value that cannot be read.
func TestLargePutOnAFullDisk(t *testing.T) {
	opts := Options{Dir: t.TempDir(), CapacityBytes: 16 << 20, ExtentBytes: 1 << 20, MaxValueBytes: 8 << 20, DirectIO: true}
	s := openT(t, opts)
	defer mustClose(t, s)
	held := map[int]int{}
	for i := range 40 {
		n := 6<<20 + 5 - i*100000
		v := enginetest.Value(uint64(i), n)
		err := s.Put(enginetest.Key(i), v)
		if wire.StatusOf(err) == wire.StatusCacheFull {
			continue
		}
		if err != nil {
			t.Fatalf("PUT %d: %v", i, err)
		}
		got, err := get(t, s, enginetest.Key(i))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("PUT %d was acknowledged, and the GET right after: %d bytes, %v", i, len(got), err)
		}
		held[i] = n
		// Whatever Stats counts can be read, and nothing else is held.
		var readable, used uint64
		for j, m := range held {
			if _, err := s.Exist(enginetest.Key(j)); err != nil {
				delete(held, j)
				continue
			}
			readable++
			used += uint64(m)
		}
		if st := s.Stats(); st.Objects != readable || st.UsedBytes != used {
			t.Fatalf("after PUT %d: Stats %d objects / %d bytes, but %d values / %d bytes are whole", i, st.Objects, st.UsedBytes, readable, used)
		}
	}
	if st := s.Stats(); st.Evictions == 0 {
		t.Fatal("no evictions: the disk never filled")
	}
	if err := s.alloc.Check(); err != nil {
		t.Fatal(err)
	}
}
