package file

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// logCounter is a slog.Handler that counts records and keeps their messages.
type logCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

func (h *logCounter) count(sub string) (n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openStore opens a Store for a test and checks at cleanup that the index
// and the directory agree, after the test's own Close.
func openStore(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", opts.Dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// latest tracks the newest Store per directory, so the consistency check
// runs only on the store that owns the directory's current state.
var latest sync.Map // dir -> *Store

func conformanceOpener(opts Options) enginetest.Opener {
	return func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
		o := opts
		o.Dir, o.CapacityBytes = dir, capacity
		s := openStore(t, o)
		latest.Store(dir, s)
		t.Cleanup(func() {
			if cur, _ := latest.Load(dir); cur == s {
				checkConsistent(t, s)
			}
		})
		return s
	}
}

// checkConsistent walks the directory and compares it with the index: the
// same keys, each file's size equal to its entry's, the sums equal to
// Stats, and tmp/ and trash/ empty. Call it with no operation in flight.
func checkConsistent(t testing.TB, s *Store) {
	t.Helper()
	onDisk := map[wire.BlockKey]uint64{}
	err := filepath.WalkDir(s.blocks, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		k, perr := wire.ParseFilename(d.Name())
		if perr != nil {
			t.Errorf("stray file %s: %v", p, perr)
			return nil
		}
		if p != s.blockPath(k) {
			t.Errorf("file %s is not at its block path %s", p, s.blockPath(k))
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		onDisk[k] = uint64(fi.Size())
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", s.blocks, err)
	}
	var objects, used uint64
	s.idx.each(func(e *entry) {
		objects++
		used += e.size
		size, ok := onDisk[e.key]
		switch {
		case !ok:
			t.Errorf("index holds %s (%d bytes) but its file is missing", e.key, e.size)
		case size != e.size:
			t.Errorf("index holds %s with %d bytes, its file has %d", e.key, e.size, size)
		}
		delete(onDisk, e.key)
	})
	for k, size := range onDisk {
		t.Errorf("orphan file %s (%d bytes) not in the index", s.blockPath(k), size)
	}
	if st := s.Stats(); st.Objects != objects || st.UsedBytes != used {
		t.Errorf("Stats Objects %d UsedBytes %d, index sums %d and %d", st.Objects, st.UsedBytes, objects, used)
	}
	for _, d := range []string{s.tmp, s.trash} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s holds %d leftover entries, first %s", d, len(ents), ents[0].Name())
		}
	}
}

// TestConformance runs the engine suite on both payload paths, so the range
// contract and the rest hold with O_DIRECT and with buffered I/O, and once
// more on a filesystem that refuses O_DIRECT (the fallback path).
func TestConformance(t *testing.T) {
	t.Run("DirectIO", func(t *testing.T) {
		enginetest.Run(t, conformanceOpener(Options{DirectIO: true}))
	})
	t.Run("Buffered", func(t *testing.T) {
		enginetest.Run(t, conformanceOpener(Options{DirectIO: false}))
	})
	t.Run("DirectRefused", func(t *testing.T) {
		enginetest.Run(t, conformanceOpener(Options{DirectIO: true, FS: refuseDirect()}))
	})
}

// refuseDirect is a filesystem that fails every O_DIRECT open with EINVAL,
// as filesystems without direct I/O do.
func refuseDirect() *vfs.FaultFS {
	return &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpOpen && flag&oDirect != 0 {
			return syscall.EINVAL
		}
		return nil
	}}
}

func key(i int) wire.BlockKey { return enginetest.Key(i) }

func value(i, n int) []byte { return enginetest.Value(uint64(i), n) }

func TestLayout(t *testing.T) {
	s := openStore(t, Options{Dir: t.TempDir(), CapacityBytes: 1 << 20})
	k := wire.BlockKey{Tenant: 0xab00000000000001, ID: [16]byte{0xcd, 1, 2}}
	if err := s.Put(k, []byte("x")); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(s.dir, "blocks", "ab", "cd", k.Filename())
	if s.blockPath(k) != want {
		t.Fatalf("blockPath = %s, want %s", s.blockPath(k), want)
	}
	if b, err := os.ReadFile(want); err != nil || string(b) != "x" {
		t.Fatalf("ReadFile(%s) = %q, %v", want, b, err)
	}
	checkConsistent(t, s)
}

// TestRestartKeepsEveryBlock: a few hundred blocks of assorted sizes written
// with O_DIRECT come back byte-exact after Close and Open, and the rebuilt
// index matches the directory.
func TestRestartKeepsEveryBlock(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, CapacityBytes: 1 << 30, DirectIO: true}
	s := openStore(t, opts)
	sizes := []int{1, 2, 511, 512, 4095, 4096, 4097, 8191, 12288, 65536, 65537, 200003}
	want := map[wire.BlockKey][]byte{}
	for i := range 240 {
		v := value(i, sizes[i%len(sizes)]+i)
		if err := s.Put(key(i), v); err != nil {
			t.Fatal(err)
		}
		want[key(i)] = v
	}
	for i := 0; i < 240; i += 7 {
		if err := s.Remove(key(i)); err != nil {
			t.Fatal(err)
		}
		delete(want, key(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, opts)
	checkConsistent(t, s)
	if st := s.Stats(); st.Objects != uint64(len(want)) {
		t.Fatalf("Objects after restart = %d, want %d", st.Objects, len(want))
	}
	for i := range 240 {
		v, ok := want[key(i)]
		if !ok {
			_, err := s.Exist(key(i))
			enginetest.WantStatus(t, err, wire.StatusNotFound, "removed key after restart")
			continue
		}
		enginetest.MustEqual(t, s, key(i), v)
	}
}

// TestEvictionAtCapacity: with one shard the index is one exact CLOCK, so
// the victims are exactly the never-read values in insertion order; and a
// restart with a smaller capacity evicts down to it.
func TestEvictionAtCapacity(t *testing.T) {
	dir := t.TempDir()
	const size = 1000
	s := openStore(t, Options{Dir: dir, CapacityBytes: 10 * size, Shards: 1})
	for i := range 10 {
		if err := s.Put(key(i), value(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 1, 2, 5} {
		enginetest.Get(t, s, key(i))
	}
	for i := 10; i < 14; i++ {
		if err := s.Put(key(i), value(i, size)); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.UsedBytes > 10*size {
			t.Fatalf("UsedBytes %d over capacity", st.UsedBytes)
		}
	}
	// Victims in ring order, skipping the read ones: 3, 4, 6, 7.
	for i := range 14 {
		_, err := s.Exist(key(i))
		gone := i == 3 || i == 4 || i == 6 || i == 7
		if gone != (wire.StatusOf(err) == wire.StatusNotFound) {
			t.Errorf("key %d: Exist err %v, want evicted=%v", i, err, gone)
		}
	}
	if st := s.Stats(); st.Evictions != 4 || st.Objects != 10 || st.UsedBytes != 10*size {
		t.Fatalf("stats %+v", st)
	}
	checkConsistent(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	logs := &logCounter{}
	s = openStore(t, Options{Dir: dir, CapacityBytes: 4 * size, Logger: slog.New(logs)})
	if st := s.Stats(); st.UsedBytes > 4*size || st.Objects != 4 || st.Evictions != 6 {
		t.Fatalf("after reopen with a smaller capacity: %+v", st)
	}
	if logs.count("more than the configured capacity") != 1 {
		t.Fatalf("startup eviction not logged: %q", logs.msgs)
	}
	checkConsistent(t, s)
}

// TestValueLargerThanCapacity: TOO_LARGE, and nothing is evicted for it.
func TestValueLargerThanCapacity(t *testing.T) {
	s := openStore(t, Options{Dir: t.TempDir(), CapacityBytes: 8192})
	if err := s.Put(key(1), value(1, 8000)); err != nil {
		t.Fatal(err)
	}
	enginetest.WantStatus(t, s.Put(key(2), value(2, 8193)), wire.StatusTooLarge, "oversized value")
	enginetest.MustEqual(t, s, key(1), value(1, 8000))
}

// inTmp reports whether path is in the engine's tmp/ under dir. (Not a
// substring test: t.TempDir itself lives under /tmp.)
func inTmp(dir, path string) bool { return strings.HasPrefix(path, filepath.Join(dir, "tmp")+"/") }

// inBlocks reports whether path is under the engine's blocks/ in dir.
func inBlocks(dir, path string) bool {
	return strings.HasPrefix(path, filepath.Join(dir, "blocks")+"/")
}

// enospc fails the first n writes to a temp file with ENOSPC.
func enospc(dir string, n int) (*vfs.FaultFS, *atomic.Int32) {
	var hits atomic.Int32
	return &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpWrite && inTmp(dir, path) && hits.Add(1) <= int32(n) {
			return syscall.ENOSPC
		}
		return nil
	}}, &hits
}

// TestENOSPCOneRetry: an ENOSPC on the first write triggers one bounded
// force-evict and one retry, which succeeds.
func TestENOSPCOneRetry(t *testing.T) {
	for _, direct := range []bool{true, false} {
		dir := t.TempDir()
		fs, hits := enospc(dir, 0)
		s := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20, FS: fs, DirectIO: direct})
		for i := range 10 {
			if err := s.Put(key(i), value(i, 5000)); err != nil {
				t.Fatal(err)
			}
		}
		hits.Store(-1) // the next write fails, the one after succeeds
		v := value(99, 10000)
		if err := s.Put(key(99), v); err != nil {
			t.Fatalf("direct=%v: Put after one ENOSPC: %v", direct, err)
		}
		if got := hits.Load(); got != 1 {
			t.Fatalf("direct=%v: %d writes, want the failed one and one retry", direct, got+1)
		}
		enginetest.MustEqual(t, s, key(99), v)
		// The bounded evict frees max(2×10000, 1% of 1 MiB) = 20000 bytes:
		// four 5000-byte values, not the whole disk.
		if st := s.Stats(); st.Evictions != 4 || st.Objects != 7 {
			t.Fatalf("direct=%v: Evictions %d Objects %d, want 4 and 7", direct, st.Evictions, st.Objects)
		}
		checkConsistent(t, s)
	}
}

// TestENOSPCTwice: a second ENOSPC after the retry is CACHE_FULL; nothing is
// half-published, an older value of the key survives, and no temp file is
// left.
func TestENOSPCTwice(t *testing.T) {
	dir := t.TempDir()
	fs, hits := enospc(dir, 0)
	s := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20, FS: fs, DirectIO: true})
	old := value(1, 3000)
	if err := s.Put(key(1), old); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < 6; i++ {
		if err := s.Put(key(i), value(i, 3000)); err != nil {
			t.Fatal(err)
		}
	}
	hits.Store(-2)
	err := s.Put(key(1), value(2, 7000))
	enginetest.WantStatus(t, err, wire.StatusCacheFull, "Put after two ENOSPC")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("error %v does not carry the ENOSPC cause", err)
	}
	if got := hits.Load(); got != 0 {
		t.Fatalf("%d failing writes seen, want exactly 2 attempts", got+2)
	}
	// The bounded evict may have taken key(1) itself; if not, it still holds
	// the old value, never the new one.
	if _, err := s.Exist(key(1)); err == nil {
		enginetest.MustEqual(t, s, key(1), old)
	}
	if st := s.Stats(); st.Puts != 5 || st.IOErrors != 0 || !st.DiskFull {
		t.Fatalf("Puts %d IOErrors %d DiskFull %v, want 5, 0 and true", st.Puts, st.IOErrors, st.DiskFull)
	}
	// The next write that succeeds clears the full state.
	if err := s.Put(key(7), value(7, 100)); err != nil {
		t.Fatal(err)
	}
	if s.Stats().DiskFull {
		t.Fatal("DiskFull still set after a successful write")
	}
	checkConsistent(t, s)
}

// TestENOSPCOnRename: ENOSPC at publish (a directory block) takes the same
// one retry.
func TestENOSPCOnRename(t *testing.T) {
	var fail atomic.Int32
	dir := t.TempDir()
	fs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpRename && inTmp(dir, path) && fail.Add(-1) >= 0 {
			return syscall.ENOSPC
		}
		return nil
	}}
	s := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20, FS: fs})
	fail.Store(1)
	if err := s.Put(key(1), value(1, 100)); err != nil {
		t.Fatalf("Put with one ENOSPC rename: %v", err)
	}
	fail.Store(2)
	enginetest.WantStatus(t, s.Put(key(2), value(2, 100)), wire.StatusCacheFull, "two ENOSPC renames")
	checkConsistent(t, s)
}

// TestMalformedAtStartup: anything under blocks/ that the engine did not
// write stops Open with an error naming it, and is left where it is.
func TestMalformedAtStartup(t *testing.T) {
	good := key(1).Filename()
	cases := []struct {
		name string
		path string // relative to blocks/
		dir  bool
	}{
		{"upper-case hex", "ab/cd/" + strings.ToUpper("ab0000000000000acd000000000000000000000000000000"), false},
		{"short name", "ab/cd/ab00cd", false},
		{"suffix", filepath.Join(good[0:2], good[16:18], good+".tmp"), false},
		{"wrong bucket", filepath.Join("00", "00", good), false},
		{"bucket swapped", filepath.Join(good[16:18], good[0:2], good), false},
		{"stray directory", filepath.Join(good[0:2], good[16:18], "sub"), true},
		{"file at bucket level", filepath.Join(good[0:2], "README"), false},
		{"non-hex bucket", "zz", true},
		{"upper-case bucket", "AB", true},
		{"file in blocks", "notes.txt", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "blocks", tc.path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.dir {
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(p, []byte("not ours"), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(Options{Dir: dir, CapacityBytes: 1 << 20, Logger: quietLogger()})
			if err == nil {
				s.Close()
				t.Fatalf("Open accepted %s", p)
			}
			for _, want := range []string{p, "move that entry out", "empty directory"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if _, serr := os.Stat(p); serr != nil {
				t.Fatalf("Open removed %s: %v", p, serr)
			}
		})
	}
}

// TestLeftoversCleared: tmp/ and trash/ are emptied at Open; a zero-byte
// block (which only a crash on a filesystem that reorders can leave) is
// dropped.
func TestLeftoversCleared(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20})
	if err := s.Put(key(1), value(1, 100)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, p := range []string{"tmp/" + key(2).Filename() + ".7", "trash/" + key(3).Filename() + ".9"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	empty := key(4)
	if err := os.MkdirAll(filepath.Dir(s.blockPath(empty)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.blockPath(empty), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20})
	if st := s.Stats(); st.Objects != 1 {
		t.Fatalf("Objects %d, want 1", st.Objects)
	}
	checkConsistent(t, s)
}

// TestDirectFallback: a filesystem that refuses O_DIRECT gets one warning,
// Stats.DirectIO false, and working buffered I/O; no O_DIRECT open is tried
// after the first refusal.
func TestDirectFallback(t *testing.T) {
	var directOpens atomic.Int32
	fs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpOpen && flag&oDirect != 0 {
			directOpens.Add(1)
			return syscall.EINVAL
		}
		return nil
	}}
	logs := &logCounter{}
	dir := t.TempDir()
	s := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20, FS: fs, DirectIO: true, Logger: slog.New(logs)})
	if s.Stats().DirectIO {
		t.Fatal("Stats.DirectIO true on a filesystem that refuses O_DIRECT")
	}
	for i := range 20 {
		if err := s.Put(key(i), value(i, 4097)); err != nil {
			t.Fatal(err)
		}
		enginetest.CheckRange(t, s, key(i), value(i, 4097), 1, 4096)
	}
	if n := logs.count("O_DIRECT refused on " + dir + ", using buffered I/O"); n != 1 {
		t.Fatalf("%d fallback warnings, want 1 (logs %q)", n, logs.msgs)
	}
	if n := directOpens.Load(); n != 1 {
		t.Fatalf("%d O_DIRECT opens, want only the startup probe", n)
	}
}

// TestDirectRefusedLate: a filesystem that accepts O_DIRECT at the probe but
// refuses it on the data path (EINVAL from a write) still stores the value
// and falls back once.
func TestDirectRefusedLate(t *testing.T) {
	var direct atomic.Bool
	direct.Store(true)
	// Writes through a descriptor opened with O_DIRECT fail; the tests are
	// sequential, so "the last open" is the descriptor being written.
	fs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpOpen {
			direct.Store(flag&oDirect != 0)
		}
		if op == vfs.OpWrite && direct.Load() {
			return syscall.EINVAL
		}
		return nil
	}}
	logs := &logCounter{}
	s := openStore(t, Options{Dir: t.TempDir(), CapacityBytes: 1 << 20, FS: fs, DirectIO: true, Logger: slog.New(logs)})
	if !s.Stats().DirectIO {
		t.Fatal("DirectIO off after a successful probe")
	}
	v := value(1, 9000)
	if err := s.Put(key(1), v); err != nil {
		t.Fatal(err)
	}
	enginetest.MustEqual(t, s, key(1), v)
	if s.Stats().DirectIO || logs.count("O_DIRECT refused") != 1 {
		t.Fatalf("DirectIO %v, %d warnings", s.Stats().DirectIO, logs.count("O_DIRECT refused"))
	}
	checkConsistent(t, s)
}

// TestRemoveRenameFails: the rename into trash/ is Remove's commit; when it
// fails the block stays, readable, and counted.
func TestRemoveRenameFails(t *testing.T) {
	var fail atomic.Bool
	dir := t.TempDir()
	fs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if fail.Load() && op == vfs.OpRename && inBlocks(dir, path) {
			return syscall.EIO
		}
		return nil
	}}
	s := openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20, FS: fs})
	v := value(1, 777)
	if err := s.Put(key(1), v); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	enginetest.WantStatus(t, s.Remove(key(1)), wire.StatusIOError, "Remove with a failing rename")
	enginetest.MustEqual(t, s, key(1), v)
	if st := s.Stats(); st.Objects != 1 || st.UsedBytes != 777 || st.Removes != 0 || st.IOErrors != 1 {
		t.Fatalf("stats after failed remove: %+v", st)
	}
	fail.Store(false)
	if err := s.Remove(key(1)); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, s)
}

// TestFileDeletedBehindOurBack: a block deleted by hand is a miss, and the
// index forgets it.
func TestFileDeletedBehindOurBack(t *testing.T) {
	for _, direct := range []bool{true, false} {
		s := openStore(t, Options{Dir: t.TempDir(), CapacityBytes: 1 << 20, DirectIO: direct})
		if err := s.Put(key(1), value(1, 100)); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(s.blockPath(key(1))); err != nil {
			t.Fatal(err)
		}
		_, _, err := s.Get(key(1), 0, 0, enginetest.NewAlloc(nil))
		enginetest.WantStatus(t, err, wire.StatusNotFound, "Get of a deleted file")
		_, err = s.Exist(key(1))
		enginetest.WantStatus(t, err, wire.StatusNotFound, "Exist after the miss")
		if st := s.Stats(); st.Objects != 0 || st.UsedBytes != 0 || st.Misses != 1 {
			t.Fatalf("stats %+v", st)
		}
	}
}

// TestSameKeyConcurrentPut: many writers of one key leave exactly one
// complete value, and the index agrees with the file.
func TestSameKeyConcurrentPut(t *testing.T) {
	s := openStore(t, Options{Dir: t.TempDir(), CapacityBytes: 1 << 30, DirectIO: true})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				if err := s.Put(key(1), value(w*100+i, 1000+w*1111+i)); err != nil {
					t.Error(err)
				}
				if i%3 == 0 {
					_ = s.Remove(key(1))
				}
			}
		})
	}
	wg.Wait()
	checkConsistent(t, s)
	if n, err := s.Exist(key(1)); err == nil {
		got := enginetest.Get(t, s, key(1))
		if uint64(len(got)) != n {
			t.Fatalf("Exist %d, Get %d bytes", n, len(got))
		}
		found := false
		for w := range 8 {
			for i := range 20 {
				if string(got) == string(value(w*100+i, 1000+w*1111+i)) {
					found = true
				}
			}
		}
		if !found {
			t.Fatal("the stored value is none of the values written")
		}
	}
}

// TestEvictionUnderConcurrency: writers past capacity with readers and
// removers; capacity is never exceeded and the index stays exact.
func TestEvictionUnderConcurrency(t *testing.T) {
	const capacity = 64 * 4096
	s := openStore(t, Options{Dir: t.TempDir(), CapacityBytes: capacity, Shards: 4})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			a := enginetest.NewAlloc(nil)
			for i := range 100 {
				k := key((w*7 + i) % 150)
				switch i % 4 {
				case 0, 1:
					if err := s.Put(k, value(i, 1+(i*997)%8000)); err != nil && wire.StatusOf(err) != wire.StatusCacheFull {
						t.Error(err)
					}
				case 2:
					if _, _, err := s.Get(k, 0, 0, a); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
						t.Error(err)
					}
					a.Release()
				case 3:
					_ = s.Remove(k)
				}
				if st := s.Stats(); st.UsedBytes > capacity {
					t.Errorf("UsedBytes %d > capacity", st.UsedBytes)
				}
			}
		})
	}
	wg.Wait()
	checkConsistent(t, s)
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(Options{CapacityBytes: 1}); err == nil {
		t.Error("Open with no Dir succeeded")
	}
	if _, err := Open(Options{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Errorf("Open with no capacity: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: f, CapacityBytes: 1, Logger: quietLogger()}); err == nil || !strings.Contains(err.Error(), f) {
		t.Errorf("Open on a regular file: %v", err)
	}
}

// TestRemoveRacingPut: a Put of the same key that reaches its publish
// while a Remove is between its lookup and its rename must wait for the
// Remove; otherwise the Remove would move the new file to trash and leave
// the index pointing at nothing. The fault hook parks the Remove just
// before its rename and gives the Put half a second to get in.
func TestRemoveRacingPut(t *testing.T) {
	var (
		armed     atomic.Bool
		published = make(chan struct{}, 1)
		done      = make(chan error, 1)
		s         *Store
		dir       = t.TempDir()
	)
	newValue := value(2, 3000)
	fs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op != vfs.OpRename {
			return nil
		}
		if inTmp(dir, path) {
			select {
			case published <- struct{}{}:
			default:
			}
			return nil
		}
		if inBlocks(dir, path) && armed.CompareAndSwap(true, false) {
			go func() { done <- s.Put(key(1), newValue) }()
			select {
			case <-published:
			case <-time.After(500 * time.Millisecond):
			}
		}
		return nil
	}}
	s = openStore(t, Options{Dir: dir, CapacityBytes: 1 << 20, FS: fs})
	if err := s.Put(key(1), value(1, 1000)); err != nil {
		t.Fatal(err)
	}
	<-published
	armed.Store(true)
	if err := s.Remove(key(1)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, s)
	enginetest.MustEqual(t, s, key(1), newValue)
}

// TestMissingDirSaysSo: a disk directory that does not exist is created,
// parents included, with one INFO line naming it (a path that should have
// been a mount shows there); an existing one opens quietly.
func TestMissingDirSaysSo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mnt", "nvme0", "dfkv")
	var logs bytes.Buffer
	opts := Options{Dir: dir, CapacityBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s := openStore(t, opts)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want := `level=INFO msg="file engine: created the disk directory" dir=` + dir
	if n := strings.Count(logs.String(), want); n != 1 {
		t.Fatalf("%d lines about creating %s, want 1; logs:\n%s", n, dir, logs.String())
	}
	s = openStore(t, opts)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "created the disk directory"); n != 1 {
		t.Fatalf("reopening an existing directory said it created it; logs:\n%s", logs.String())
	}
}

// TestOpenRefusesSlabStore: the file engine pointed at a slab store's
// directory refuses it, naming the engine that wrote it, and writes
// nothing there (it used to serve it empty and make blocks/, tmp/ and
// trash/ beside the extents).
func TestOpenRefusesSlabStore(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "slab_meta"), make([]byte, 64), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Options{Dir: dir, CapacityBytes: 1 << 20})
	if wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), "--store-engine=slab") {
		t.Fatalf("Open on a slab store: %v, want INVALID naming the slab engine", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the refused Open left %d entries, want only slab_meta", len(ents))
	}
}
