package slab

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// recoverSize is the size of value i in the restart-fault tests: spread
// over a few classes, so values land in several extents.
func recoverSize(i int) int { return 3000 + i*1511%60000 }

// fillForRecovery writes n values to a new store in opts.Dir and closes it
// (clean or, with crash, not) and returns each key's extent.
func fillForRecovery(t *testing.T, opts Options, n int, crash bool) map[int]uint32 {
	t.Helper()
	s := openT(t, opts)
	for i := range n {
		mustCache(t, s, enginetest.Key(i), enginetest.Value(uint64(i), recoverSize(i)))
	}
	if crash {
		s.closeFiles()
	} else {
		mustClose(t, s)
	}
	where := map[int]uint32{}
	for i := range n {
		rec, ok := recordOf(t, opts.Dir, enginetest.Key(i))
		if !ok {
			t.Fatalf("no record for value %d", i)
		}
		where[i] = rec.extent
	}
	return where
}

// checkRecovered checks that value i serves byte-exact unless lost(i), and
// is a miss (never other bytes) if it is.
func checkRecovered(t *testing.T, s *Store, n int, lost func(i int) bool) (served int) {
	t.Helper()
	for i := range n {
		got, err := get(t, s, enginetest.Key(i))
		want := enginetest.Value(uint64(i), recoverSize(i))
		switch {
		case lost(i):
			if err == nil {
				t.Fatalf("value %d should be lost, but %d bytes were served", i, len(got))
			}
			wantStatus(t, err, wire.StatusNotFound, fmt.Sprintf("GET of lost value %d", i))
		case err != nil || !bytes.Equal(got, want):
			t.Fatalf("value %d: %d bytes, %v; want it served byte-exact", i, len(got), err)
		default:
			served++
		}
	}
	return served
}

// TestMissingOrCutExtentServesTheRest: after a clean stop or a crash, an
// extent file that was removed or cut short no longer stops the node: it is
// made whole again, the values it no longer holds are misses (dropped at
// rebuild, not even Exist finds them), the rest serve, one warning names
// the files, and the store stays healthy and writable.
func TestMissingOrCutExtentServesTheRest(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			opts := smallOpts(dir)
			const n = 200
			where := fillForRecovery(t, opts, n, crash)
			gone, cut := where[0], where[0]
			for i := range n {
				if where[i] != gone {
					cut = where[i]
					break
				}
			}
			if gone == cut {
				t.Fatalf("every value is in extent %d; the test needs two", gone)
			}
			if err := os.Remove(extentName(dir, int(gone))); err != nil {
				t.Fatal(err)
			}
			const keep = 256 << 10
			if err := os.Truncate(extentName(dir, int(cut)), keep); err != nil {
				t.Fatal(err)
			}
			lat, _ := NewLattice(opts.ExtentBytes)
			lost := func(i int) bool {
				rec, _ := recordOf(t, dir, enginetest.Key(i))
				end := uint64(rec.slot)*lat.Size(int(rec.class)) + uint64(rec.length)
				return rec.extent == gone || rec.extent == cut && end > keep
			}
			lostSet := map[int]bool{}
			for i := range n {
				lostSet[i] = lost(i)
			}
			logs := &logBuf{}
			opts.Logger = slog.New(logs)
			s := openT(t, opts)
			defer mustClose(t, s)
			if c := logs.count("extent files were missing or cut short"); c != 1 {
				t.Fatalf("%d warnings naming the damaged extents, want 1: %v", c, logs.msgs)
			}
			for _, p := range []string{extentName(dir, int(gone)), extentName(dir, int(cut))} {
				if fi, err := os.Stat(p); err != nil || fi.Size() != int64(opts.ExtentBytes) {
					t.Fatalf("%s not made whole again: %v", p, err)
				}
			}
			nLost := 0
			for i := range n {
				if lostSet[i] {
					nLost++
					if _, err := s.Exist(enginetest.Key(i)); wire.StatusOf(err) != wire.StatusNotFound {
						t.Fatalf("Exist of lost value %d: %v, want NOT_FOUND", i, err)
					}
				}
			}
			if nLost == 0 || nLost == n {
				t.Fatalf("%d of %d values lost; the test wants some lost and some kept", nLost, n)
			}
			served := checkRecovered(t, s, n, func(i int) bool { return lostSet[i] })
			if st := s.Stats(); served != n-nLost || st.ChecksumFailures != 0 || !st.Healthy {
				t.Fatalf("served %d of %d kept values; stats %+v", served, n-nLost, st)
			}
			v := enginetest.Value(99, 50000)
			mustCache(t, s, enginetest.Key(5000), v)
			if got, err := get(t, s, enginetest.Key(5000)); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("write after recovery: %v", err)
			}
		})
	}
}

// TestMissingTableStartsEmpty: a store whose slots.tbl was removed opens
// (the values cannot be found without it: the disk starts empty, with one
// warning) and serves.
func TestMissingTableStartsEmpty(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	fillForRecovery(t, opts, 20, false)
	if err := os.Remove(filepath.Join(dir, tableName)); err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	opts.Logger = slog.New(logs)
	s := openT(t, opts)
	defer mustClose(t, s)
	if c := logs.count("slot table is missing"); c != 1 {
		t.Fatalf("%d warnings about the missing table, want 1: %v", c, logs.msgs)
	}
	if st := s.Stats(); st.Objects != 0 || !st.Healthy {
		t.Fatalf("%+v, want an empty healthy store", st)
	}
	checkRecovered(t, s, 20, func(int) bool { return true })
	mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 100))
}

// TestCutTableKeepsItsRecords: a slots.tbl cut short keeps the records it
// still holds; values whose records were cut off are misses.
func TestCutTableKeepsItsRecords(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	const n = 200
	fillForRecovery(t, opts, n, false)
	path := filepath.Join(dir, tableName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	keep := fi.Size() / 2
	lost := map[int]bool{}
	for i := range n {
		_, off, _ := scanRecords(t, dir, enginetest.Key(i))
		lost[i] = off >= keep
	}
	if err := os.Truncate(path, keep); err != nil {
		t.Fatal(err)
	}
	s := openT(t, opts)
	defer mustClose(t, s)
	checkRecovered(t, s, n, func(i int) bool { return lost[i] })
	if fi, err := os.Stat(path); err != nil || fi.Size() != s.tableSize() {
		t.Fatalf("the table was not set back to its size: %v", err)
	}
}

// TestDamagedMetaStartsCold: a slab_meta that is garbage, cut short or
// missing (while the store's other files are there) no longer stops the
// node: the disk is formatted again, cold, with one ERROR naming the file.
func TestDamagedMetaStartsCold(t *testing.T) {
	for _, damage := range []string{"garbage", "short", "missing", "oversize"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			opts := smallOpts(dir)
			fillForRecovery(t, opts, 20, false)
			path := filepath.Join(dir, metaName)
			var err error
			switch damage {
			case "garbage":
				err = os.WriteFile(path, bytes.Repeat([]byte{0x5a}, metaSize), 0o644)
			case "short":
				err = os.Truncate(path, 10)
			case "missing":
				err = os.Remove(path)
			case "oversize":
				err = os.WriteFile(path, make([]byte, 4096), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			logs := &logBuf{}
			opts.Logger = slog.New(logs)
			s := openT(t, opts)
			if c := logs.count("ERROR slab engine: " + metaName); c != 1 {
				t.Fatalf("%d ERROR lines naming %s, want 1: %v", c, metaName, logs.msgs)
			}
			if st := s.Stats(); st.Objects != 0 || !st.Healthy {
				t.Fatalf("%+v, want an empty healthy store", st)
			}
			checkRecovered(t, s, 20, func(int) bool { return true })
			mustCache(t, s, enginetest.Key(1), enginetest.Value(1, 100))
			mustClose(t, s)
			s = openT(t, smallOpts(dir))
			defer mustClose(t, s)
			if got, err := get(t, s, enginetest.Key(1)); err != nil || !bytes.Equal(got, enginetest.Value(1, 100)) {
				t.Fatalf("after formatting again and a clean restart: %v", err)
			}
		})
	}
}

// TestScrubDropsCorruptValues: after an unclean stop the scrub verifies
// every value in the background, drops (and counts) the ones that fail and
// leaves the rest; it reports its pass, and Close stops it.
func TestScrubDropsCorruptValues(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	const n = 60
	fillForRecovery(t, opts, n, true)
	bad := map[int]bool{7: true, 31: true, 59: true}
	for i := range bad {
		path, off := payloadAt(t, opts, enginetest.Key(i))
		flipByte(t, path, off+int64(recoverSize(i))-1)
	}
	// In a synctest bubble the scrub's one pass (it has no interval) is
	// over, and its goroutine gone, once synctest.Wait returns.
	synctest.Test(t, func(t *testing.T) {
		logs := &logBuf{}
		opts.Logger = slog.New(logs)
		opts.Scrub = ScrubOptions{BytesPerSecond: 1 << 40}
		s := openT(t, opts)
		defer mustClose(t, s)
		synctest.Wait()
		st := s.Stats()
		if st.ScrubPasses != 1 {
			t.Fatalf("%d scrub passes after an unclean stop, want 1", st.ScrubPasses)
		}
		if st.ChecksumFailures != uint64(len(bad)) || st.Objects != n-uint64(len(bad)) || st.Misses != 0 || !st.Healthy {
			t.Fatalf("after the scrub: %+v; want %d checksum failures, %d objects, no misses", st, len(bad), n-len(bad))
		}
		var slotBytes uint64
		for i := range n {
			slotBytes += alignUp(uint64(recoverSize(i)), pageAlign)
		}
		if st.ScrubbedBytes != slotBytes {
			t.Fatalf("scrubbed %d bytes, want %d (every value once)", st.ScrubbedBytes, slotBytes)
		}
		for i := range bad {
			if _, err := s.Exist(enginetest.Key(i)); wire.StatusOf(err) != wire.StatusNotFound {
				t.Fatalf("Exist of value %d the scrub dropped: %v", i, err)
			}
		}
		if logs.count("scrub started") != 1 || logs.count("WARN slab engine: scrub finished") != 1 {
			t.Fatalf("want one scrub start and one WARN finish line: %v", logs.msgs)
		}
		checkRecovered(t, s, n, func(i int) bool { return bad[i] })
	})
}

// TestScrubRateAndStop: the scrub holds to its rate (here a few KiB a
// second, so a pass over the disk would take minutes) and Close stops it
// promptly without waiting for the pass; a clean start with no interval
// runs no scrub at all. It runs in a synctest bubble, so the scrub's
// timers and the test's clock are the same fake clock: a second passes at
// once, and a Close that waited for the scrub would take some of it.
func TestScrubRateAndStop(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	fillForRecovery(t, opts, 40, true)
	synctest.Test(t, func(t *testing.T) {
		const rate = 8 << 10
		opts.Scrub = ScrubOptions{BytesPerSecond: rate}
		start := time.Now()
		s := openT(t, opts)
		time.Sleep(time.Second) // of the bubble's clock: passes at once
		st := s.Stats()
		// What the rate allows in the time that passed, plus the one value
		// (at most 64 KiB here) it verifies before it waits.
		allowed := uint64(time.Since(start).Seconds()*rate) + 64<<10
		if st.ScrubbedBytes == 0 || st.ScrubPasses != 0 || st.ScrubbedBytes > allowed {
			t.Fatalf("the scrub did not run at its rate: %d bytes (%d allowed), %d passes", st.ScrubbedBytes, allowed, st.ScrubPasses)
		}
		closing := time.Now()
		mustClose(t, s) // returns: the scrub stops while it waits
		if d := time.Since(closing); d != 0 {
			// No timer need fire for a Close that stops the scrub.
			t.Fatalf("Close waited %v of the scrub's time instead of stopping it", d)
		}

		opts.Scrub = ScrubOptions{BytesPerSecond: 1 << 40} // no interval
		s = openT(t, opts)
		defer mustClose(t, s)
		synctest.Wait() // a scrub, had one started, would have made its pass
		if st := s.Stats(); st.ScrubbedBytes != 0 {
			t.Fatalf("a clean start without a scrub interval scrubbed %d bytes", st.ScrubbedBytes)
		}
	})
}
