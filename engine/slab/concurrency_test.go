package slab

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/wire"
)

// gate blocks payload writes (writes to extents/) while armed: each blocked
// write signals entered and waits for release.
type gate struct {
	armed   atomic.Bool
	writes  atomic.Int64 // payload writes seen
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// open disarms the gate and lets every blocked write go; safe to call more
// than once (tests defer it, so a failing test does not hang in Close).
func (g *gate) open() {
	g.once.Do(func() {
		g.armed.Store(false)
		close(g.release)
	})
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gate) fs() *vfs.FaultFS {
	return &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpWrite && strings.Contains(path, string(filepath.Separator)+extentsDir+string(filepath.Separator)) {
			g.writes.Add(1)
			if g.armed.Load() {
				g.entered <- struct{}{}
				<-g.release
			}
		}
		return nil
	}}
}

// waitFor polls cond (a state change in another goroutine that has no
// channel to announce it) for up to 10 s. The 1 ms sleep is only the poll
// interval: the wait ends as soon as cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func (s *Store) waiters(k wire.BlockKey) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.flights[k]; f != nil {
		return f.waiters
	}
	return -1
}

// TestSameKeyLeaderFollower: N concurrent PUTs of one key write the payload
// once; every caller gets the leader's result.
func TestSameKeyLeaderFollower(t *testing.T) {
	g := newGate()
	opts := smallOpts(t.TempDir())
	opts.FS = g.fs()
	s := openT(t, opts)
	defer mustClose(t, s)
	defer g.open()
	k := enginetest.Key(1)
	v := enginetest.Value(1, 70000)
	g.armed.Store(true)
	const n = 8
	errs := make(chan error, n)
	go func() { errs <- s.Put(k, v) }()
	<-g.entered // the leader is writing
	for range n - 1 {
		go func() { errs <- s.Put(k, v) }()
	}
	waitFor(t, "followers to join the leader", func() bool { return s.waiters(k) == n-1 })
	g.open()
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	if w := g.writes.Load(); w != 1 {
		t.Fatalf("%d payload writes for %d same-key PUTs, want 1", w, n)
	}
	enginetest.MustEqual(t, s, k, v)
	if st := s.Stats(); st.Puts != n || st.Objects != 1 {
		t.Fatalf("Puts %d Objects %d", st.Puts, st.Objects)
	}
}

// TestSameKeyLeaderFailureShared: followers get the leader's failure.
func TestSameKeyLeaderFailureShared(t *testing.T) {
	var armed atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpWrite && armed.Load() && strings.Contains(path, extentsDir) {
			entered <- struct{}{}
			<-release
			return errIO
		}
		return nil
	}}
	opts := smallOpts(t.TempDir())
	opts.FS = ffs
	s := openT(t, opts)
	defer mustClose(t, s)
	k := enginetest.Key(1)
	armed.Store(true)
	errs := make(chan error, 3)
	go func() { errs <- s.Put(k, enginetest.Value(1, 100)) }()
	<-entered
	armed.Store(false)
	go func() { errs <- s.Put(k, enginetest.Value(1, 100)) }()
	go func() { errs <- s.Put(k, enginetest.Value(1, 100)) }()
	waitFor(t, "followers", func() bool { return s.waiters(k) == 2 })
	close(release)
	for range 3 {
		wantStatus(t, <-errs, wire.StatusIOError, "same-key PUT whose leader failed")
	}
	_, err := s.Exist(k)
	wantStatus(t, err, wire.StatusNotFound, "Exist after a failed PUT")
	if !s.Stats().Healthy {
		t.Fatal("a payload write error failed the store closed; only metadata errors should")
	}
}

var errIO = syscall.EIO

// TestRemoveFencesInflightWrite: a REMOVE that returns while a PUT of the
// key is still writing wins: the PUT does not publish, not now and not
// after a graceful restart. Both with and without an older value.
func TestRemoveFencesInflightWrite(t *testing.T) {
	for _, withOld := range []bool{false, true} {
		g := newGate()
		defer g.open()
		dir := t.TempDir()
		opts := smallOpts(dir)
		opts.FS = g.fs()
		acct := newRecorder()
		opts.Accounting = acct
		s := openT(t, opts)
		k := enginetest.Key(7)
		if withOld {
			mustCache(t, s, k, enginetest.Value(70, 9000))
		}
		g.armed.Store(true)
		done := make(chan error, 1)
		go func() { done <- s.Put(k, enginetest.Value(71, 12345)) }()
		<-g.entered
		if err := s.Remove(k); err != nil {
			t.Fatalf("Remove during the write: %v", err)
		}
		_, err := s.Exist(k)
		wantStatus(t, err, wire.StatusNotFound, "Exist right after Remove")
		// A PUT of the key after the Remove is a new leader, not a follower
		// of the fenced write.
		g.open()
		if err := <-done; err != nil {
			t.Fatalf("fenced Put: %v", err)
		}
		_, err = s.Exist(k)
		wantStatus(t, err, wire.StatusNotFound, "Exist after the fenced write finished")
		if len(acct.snapshot()) != 0 {
			t.Fatalf("accounting after remove: %v", acct.snapshot())
		}
		mustClose(t, s)
		s = openT(t, Options{Dir: dir, CapacityBytes: opts.CapacityBytes, ExtentBytes: opts.ExtentBytes})
		_, err = s.Exist(k)
		wantStatus(t, err, wire.StatusNotFound, "Exist after a graceful restart")
		if s.Stats().Objects != 0 {
			t.Fatalf("%d objects after restart", s.Stats().Objects)
		}
		mustClose(t, s)
	}
}

// blockingAlloc is an engine.Allocator whose Alloc waits for release, so a
// Get can be held in flight with its slot pinned.
type blockingAlloc struct {
	inner   *enginetest.Alloc
	entered chan struct{}
	release chan struct{}
}

func (b *blockingAlloc) Alloc(n int) []byte {
	b.entered <- struct{}{}
	<-b.release
	return b.inner.Alloc(n)
}

// TestEvictionSkipsPinned: a value whose read is in flight is never
// evicted, however hard the class is churned meanwhile; its bytes come back
// exact.
func TestEvictionSkipsPinned(t *testing.T) {
	opts := Options{Dir: t.TempDir(), CapacityBytes: 64 << 10, ExtentBytes: 16 << 10, DirectIO: true}
	s := openT(t, opts)
	defer mustClose(t, s)
	pk, pv := enginetest.Key(1), enginetest.Value(1, 4096)
	mustCache(t, s, pk, pv)
	ba := &blockingAlloc{inner: enginetest.NewAlloc(nil), entered: make(chan struct{}, 1), release: make(chan struct{})}
	type res struct {
		data []byte
		err  error
	}
	done := make(chan res, 1)
	go func() {
		data, _, err := s.Get(pk, 0, 0, ba)
		done <- res{bytes.Clone(data), err}
	}()
	<-ba.entered
	for i := range 200 {
		mustCache(t, s, enginetest.Key(100+i), enginetest.Value(uint64(100+i), 4096))
	}
	if ev := s.Stats().Evictions; ev < 150 {
		t.Fatalf("only %d evictions: the class was not churned", ev)
	}
	if _, err := s.Exist(pk); err != nil {
		t.Fatalf("the pinned value was evicted: %v", err)
	}
	close(ba.release)
	r := <-done
	if r.err != nil || !bytes.Equal(r.data, pv) {
		t.Fatalf("pinned read: err %v, %d bytes", r.err, len(r.data))
	}
	ba.inner.Release()
}

// TestConcurrentChurn runs PUT/GET/REMOVE from several goroutines over a
// small store that evicts constantly, with values of many classes. Every
// GET must return, byte for byte, one value ever written for that key.
// Run it with -race.
func TestConcurrentChurn(t *testing.T) {
	opts := Options{Dir: t.TempDir(), CapacityBytes: 4 << 20, ExtentBytes: 256 << 10, DirectIO: true,
		// A scrub running pass after pass through all of it: it pins what
		// it verifies, so it must never see a value being rewritten.
		Scrub: ScrubOptions{BytesPerSecond: 1 << 40, Interval: time.Microsecond}}
	s := openT(t, opts)
	defer mustClose(t, s)
	const nkeys = 64
	keys := make([]wire.BlockKey, nkeys)
	for i := range keys {
		keys[i] = enginetest.Key(2000 + i)
	}
	// value(k, gen): every 8-byte word names (gen, k, word index).
	value := func(k int, gen uint64) []byte {
		n := 8 + int((gen*2654435761+uint64(k)*40503)%60000)
		b := make([]byte, n&^7)
		for i := 0; i < len(b)/8; i++ {
			binary.LittleEndian.PutUint64(b[8*i:], gen<<32|uint64(k)<<24|uint64(i))
		}
		return b
	}
	var nextGen atomic.Uint64
	ops := 400
	if testing.Short() {
		ops = 100
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 99))
			a := enginetest.NewAlloc(nil)
			for range ops {
				k := r.IntN(nkeys)
				switch x := r.IntN(10); {
				case x < 4:
					if err := s.Put(keys[k], value(k, nextGen.Add(1))); err != nil && wire.StatusOf(err) != wire.StatusCacheFull {
						t.Errorf("Put: %v", err)
						return
					}
				case x < 5:
					if err := s.Remove(keys[k]); err != nil && wire.StatusOf(err) != wire.StatusNotFound {
						t.Errorf("Remove: %v", err)
						return
					}
				default:
					data, stored, err := s.Get(keys[k], 0, 0, a)
					if wire.StatusOf(err) == wire.StatusNotFound {
						continue
					}
					if err != nil {
						t.Errorf("Get: %v", err)
						return
					}
					w0 := binary.LittleEndian.Uint64(data)
					gen, kk := w0>>32, int(w0>>24&0xff)
					if kk != k&0xff {
						t.Errorf("key %d: read a value of key %d", k, kk)
						return
					}
					if want := value(k, gen); uint64(len(want)) != stored || !bytes.Equal(data, want) {
						t.Errorf("key %d gen %d: %d bytes (stored %d) differ from the value written (%d bytes)", k, gen, len(data), stored, len(want))
						return
					}
					a.Release()
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	if st.Evictions == 0 {
		t.Fatal("no evictions: the test did not churn")
	}
	if st.ScrubbedBytes == 0 || st.ChecksumFailures != 0 {
		t.Fatalf("scrub beside the churn: %d bytes verified, %d checksum failures; want some, none", st.ScrubbedBytes, st.ChecksumFailures)
	}
	var objects, used uint64
	for _, k := range keys {
		if n, err := s.Exist(k); err == nil {
			objects++
			used += n
		}
	}
	if st.Objects != objects || st.UsedBytes != used {
		t.Fatalf("Stats %d objects %d bytes, Exist finds %d and %d", st.Objects, st.UsedBytes, objects, used)
	}
	t.Logf("%+v", st)
}

// TestPutBatchConcurrent: a batch of distinct keys is written with
// several payload writes in flight at once (the first write waits for a
// second one to start; written one after another, it would wait in vain),
// every item gets its own result (a bad item fails alone), and everything
// stored reads back exact.
func TestPutBatchConcurrent(t *testing.T) {
	var writes atomic.Int64
	var overlapped atomic.Bool
	second := make(chan struct{})
	ffs := &vfs.FaultFS{Inject: func(op vfs.Op, path string, flag int) error {
		if op == vfs.OpWrite && strings.Contains(path, extentsDir) {
			switch writes.Add(1) {
			case 1:
				select {
				case <-second:
					overlapped.Store(true)
				case <-time.After(5 * time.Second):
				}
			case 2:
				close(second)
			}
		}
		return nil
	}}
	opts := smallOpts(t.TempDir())
	opts.FS = ffs
	s := openT(t, opts)
	defer mustClose(t, s)
	const n = 40
	keys := make([]wire.BlockKey, n)
	values := make([][]byte, n)
	for i := range keys {
		keys[i] = enginetest.Key(3000 + i)
		values[i] = enginetest.Value(uint64(i), 1000+i*300)
	}
	values[7] = nil // INVALID, alone
	errs := make([]error, n)
	s.PutBatch(keys, values, errs)
	for i := range keys {
		if i == 7 {
			wantStatus(t, errs[i], wire.StatusInvalid, "zero-byte batch item")
			continue
		}
		if errs[i] != nil {
			t.Fatalf("item %d: %v", i, errs[i])
		}
		enginetest.MustEqual(t, s, keys[i], values[i])
	}
	if !overlapped.Load() {
		t.Fatalf("no two payload writes of a %d-item batch were in flight at once", n)
	}
}
