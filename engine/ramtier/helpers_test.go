package ramtier

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

// These are in-process tests: the backing engine is a real slab store in
// t.TempDir() or an in-memory fake (memBacking), never a separate process.

// slabExtent mirrors the slab tests' extent choice for a capacity.
func slabExtent(capacity uint64) uint64 {
	return max(slab.MinClass, min((capacity/16)&^(slab.MinClass-1), 8<<20))
}

func openSlab(t testing.TB, dir string, capacity uint64) *slab.Store {
	t.Helper()
	s, err := slab.Open(slab.Options{Dir: dir, CapacityBytes: capacity, ExtentBytes: slabExtent(capacity)})
	if err != nil {
		t.Fatalf("slab.Open(%s): %v", dir, err)
	}
	return s
}

func openTier(t testing.TB, opts Options) *Tier {
	t.Helper()
	tr, err := Open(opts)
	if err != nil {
		t.Fatalf("ramtier.Open: %v", err)
	}
	return tr
}

// checkTier verifies the arena allocator's redundant counters once the
// tier is quiescent (bbolt-style consistency check at cleanup).
func checkTier(t testing.TB, tr *Tier) {
	t.Helper()
	for i, sh := range tr.shards {
		sh.mu.Lock()
		err := sh.alloc.Check()
		sh.mu.Unlock()
		if err != nil {
			t.Errorf("arena allocator of shard %d inconsistent: %v", i, err)
		}
	}
}

// checkIdle verifies that nothing is in flight once the tier is quiescent
// and flushed: no slot pinned, reserved or dead in any shard (a leaked pin
// or reservation shows here), no lifecycle state left, and every large
// value held once and clean.
func checkIdle(t testing.TB, tr *Tier) {
	t.Helper()
	for i, sh := range tr.shards {
		sh.mu.Lock()
		p, r, d := sh.alloc.InFlight()
		maps := len(sh.dirty) + len(sh.active) + len(sh.fills) + len(sh.removing)
		sh.mu.Unlock()
		if p+r+d+maps != 0 {
			t.Errorf("shard %d not idle: %d pinned, %d reserved, %d dead slots, %d lifecycle entries", i, p, r, d, maps)
		}
	}
	tr.large.mu.Lock()
	defer tr.large.mu.Unlock()
	for k, lg := range tr.large.m {
		if lg.refs != 1 || lg.dirty {
			t.Errorf("large value %s: %d refs, dirty %v; want 1 and clean", k, lg.refs, lg.dirty)
		}
	}
}

var _ engine.StoreEngine = (*Tier)(nil)

// concurrentGets runs readers whole-value GETs of k at once, waits until
// inFlight reports them all where the test holds them, calls open, and
// checks that every reader got want.
func concurrentGets(t *testing.T, tr *Tier, k wire.BlockKey, want []byte, readers int, what string, inFlight func() bool, open func()) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, readers)
	got := make([][]byte, readers)
	for i := range readers {
		wg.Go(func() { got[i], errs[i] = get(t, tr, k) })
	}
	eventually(t, what, inFlight)
	open()
	wg.Wait()
	for i := range readers {
		if errs[i] != nil || !bytes.Equal(got[i], want) {
			t.Fatalf("reader %d: %v, %d bytes", i, errs[i], len(got[i]))
		}
	}
}

// closeWhile starts tr.Close while the caller still holds a loan or a
// reservation, checks that Close waits for it, and returns Close's
// result channel for after the caller lets go. The caller runs in a
// synctest bubble (and opened tr in it): synctest.Wait returns once Close
// is blocked, or has returned if it does not wait.
func closeWhile(t *testing.T, tr *Tier, holding string) <-chan error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	synctest.Wait()
	if !tr.closed.Load() {
		t.Fatal("Close did not begin")
	}
	select {
	case <-closed:
		t.Fatalf("Close returned while %s", holding)
	default:
	}
	return closed
}

// gatedEngine holds every Put until gate is closed.
type gatedEngine struct {
	engine.StoreEngine
	gate chan struct{}
}

func (g *gatedEngine) Put(key wire.BlockKey, value []byte) error {
	<-g.gate
	return g.StoreEngine.Put(key, value)
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}
