package slab

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

func newTestAlloc(t *testing.T, extentBytes uint64, extents uint32) *Allocator {
	t.Helper()
	l, err := NewLattice(extentBytes)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAllocator(l, extents)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Check(); err != nil {
			t.Errorf("allocator inconsistent at the end: %v", err)
		}
	})
	return a
}

func put(t *testing.T, a *Allocator, k wire.BlockKey, n uint64) SlotRef {
	t.Helper()
	r, err := a.Reserve(n)
	if err != nil {
		t.Fatalf("Reserve(%d): %v", n, err)
	}
	if old, _, replaced := a.Publish(r, &k); replaced {
		a.Release(old)
	}
	return r
}

func read(a *Allocator, k wire.BlockKey) bool {
	r, _, ok, err := a.Acquire(&k)
	if ok && err == nil {
		a.Release(r)
	}
	return ok
}

// TestRebalancePicksColdExtent: when a class needs an extent and none is
// unbound, the one taken is the coldest (useful bytes × heat), and only
// its values are evicted.
func TestRebalancePicksColdExtent(t *testing.T) {
	a := newTestAlloc(t, 64<<10, 8) // 16 slots of 4 KiB per extent
	for i := range 128 {
		put(t, a, enginetest.Key(i), 4096)
	}
	for range 3 {
		for i := range 64 { // extents 0..3 hot
			if !read(a, enginetest.Key(i)) {
				t.Fatal("missing")
			}
		}
	}
	put(t, a, enginetest.Key(1000), 64<<10) // class 64 KiB has no extent
	e := a.Rebound()
	if e < 4 {
		t.Fatalf("rebalance took hot extent %d", e)
	}
	if len(a.Victims()) != 16 {
		t.Fatalf("%d victims, want the 16 values of one extent", len(a.Victims()))
	}
	for i := range 64 {
		k := enginetest.Key(i)
		if _, _, ok := a.Exist(&k); !ok {
			t.Fatalf("hot value %d was evicted", i)
		}
	}
}

// TestWorkloadShiftMovesExtents: after the value size changes for good,
// the new class takes over most of the pool (not just the one extent it
// was forced to take), so the cache keeps many recent values.
func TestWorkloadShiftMovesExtents(t *testing.T) {
	a := newTestAlloc(t, 64<<10, 8)
	for i := range 128 {
		put(t, a, enginetest.Key(i), 4096)
	}
	for i := range 200 {
		put(t, a, enginetest.Key(10000+i), 60<<10)
	}
	c := a.Lattice().ClassOf(60 << 10)
	if n := len(a.cls[c].extents); n < 6 {
		t.Fatalf("after the shift the 60 KiB class holds %d of 8 extents", n)
	}
}

// TestClockNeverTakesPinned: a pinned slot survives any amount of churn
// in its class; once unpinned it can go.
func TestClockNeverTakesPinned(t *testing.T) {
	a := newTestAlloc(t, 64<<10, 2)
	pk := enginetest.Key(0)
	put(t, a, pk, 4096)
	r, _, ok, _ := a.Acquire(&pk)
	if !ok {
		t.Fatal("missing")
	}
	for i := range 500 {
		put(t, a, enginetest.Key(1+i), 4096)
		if _, _, ok := a.Exist(&pk); !ok {
			t.Fatalf("pinned value evicted after %d puts", i)
		}
	}
	a.Release(r)
	for i := range 100 {
		put(t, a, enginetest.Key(1000+i), 4096)
	}
	if _, _, ok := a.Exist(&pk); ok {
		t.Fatal("unpinned cold value never evicted")
	}
}

// TestReserveFullWhenAllPinned: with every slot reserved, Reserve says
// ErrFull instead of taking one.
func TestReserveFullWhenAllPinned(t *testing.T) {
	a := newTestAlloc(t, 16<<10, 1)
	var rs []SlotRef
	for range 4 {
		r, err := a.Reserve(4096)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if _, err := a.Reserve(4096); err != ErrFull {
		t.Fatalf("Reserve with every slot reserved: %v", err)
	}
	for _, r := range rs {
		a.Abort(r)
		a.Release(r)
	}
}

// TestRestoreOrderIndependent: restoring the same records in any order
// gives the same allocator state.
func TestRestoreOrderIndependent(t *testing.T) {
	type rec struct {
		e, s uint32
		c    int
		k    wire.BlockKey
		n    uint32
	}
	l, _ := NewLattice(256 << 10)
	var recs []rec
	r := rand.New(rand.NewPCG(8, 9))
	used := map[[2]uint32]bool{}
	bound := map[uint32]int{}
	for i := range 300 {
		e := uint32(r.IntN(16))
		c, ok := bound[e]
		if !ok {
			c = r.IntN(12)
			bound[e] = c
		}
		s := uint32(r.IntN(int(l.Slots(c))))
		if used[[2]uint32{e, s}] {
			continue
		}
		used[[2]uint32{e, s}] = true
		recs = append(recs, rec{e, s, c, enginetest.Key(i), uint32(1 + r.IntN(int(l.Size(c))))})
	}
	digest := func(order []int) uint64 {
		a := newTestAlloc(t, 256<<10, 16)
		for _, i := range order {
			x := recs[i]
			if _, err := a.Restore(x.e, x.s, x.c, &x.k, x.n); err != nil {
				t.Fatalf("Restore: %v", err)
			}
		}
		a.FinishRestore()
		return a.Digest()
	}
	fwd := r.Perm(len(recs))
	for i := range fwd {
		fwd[i] = i
	}
	d := digest(fwd)
	for range 3 {
		if d2 := digest(r.Perm(len(recs))); d2 != d {
			t.Fatalf("restore order changed the state: %x vs %x", d, d2)
		}
	}
}

// TestPressureDecays: a class that evicted hard and then went quiet gives
// its extents up to a class that is evicting now.
func TestPressureDecays(t *testing.T) {
	a := newTestAlloc(t, 64<<10, 8)
	for i := range 3000 { // 4 KiB churn: the 4 KiB class builds pressure
		put(t, a, enginetest.Key(i), 4096)
	}
	small := a.Lattice().ClassOf(4096)
	if len(a.cls[small].extents) != 8 {
		t.Fatalf("4 KiB class holds %d extents after its churn", len(a.cls[small].extents))
	}
	for i := range 2000 {
		put(t, a, enginetest.Key(100000+i), 60<<10)
	}
	if n := len(a.cls[a.Lattice().ClassOf(60<<10)].extents); n < 6 {
		t.Fatalf("the 60 KiB class holds %d of 8 extents after the 4 KiB class went quiet", n)
	}
}

// TestMaxPinnedSlotCanBeUnpublished: Acquire refuses (ErrBusy) before the
// pin count is full, so a slot pinned by as many readers as Acquire allows
// can still be removed and replaced; the removed slot frees with its last
// pin (a read held across a socket write, as the RAM tier's Lend does, makes
// many pins on one hot key possible).
func TestMaxPinnedSlotCanBeUnpublished(t *testing.T) {
	lat, err := NewLattice(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAllocator(lat, 4)
	if err != nil {
		t.Fatal(err)
	}
	var k wire.BlockKey
	k.ID[0] = 1
	r, _ := a.Reserve(1000)
	a.Publish(r, &k)
	n := 0
	for {
		if _, _, _, err := a.Acquire(&k); err != nil {
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("Acquire: %v", err)
			}
			break
		}
		n++
	}
	if n != maxReadPins {
		t.Fatalf("Acquire granted %d pins, want %d", n, maxReadPins)
	}
	old, _, ok := a.Remove(&k)
	if !ok || old != r {
		t.Fatal("Remove of the max-pinned slot did not find it")
	}
	a.Release(old) // Remove's pin
	for range n {
		a.Release(r)
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	if a.Objects() != 0 {
		t.Fatalf("%d objects after the remove", a.Objects())
	}
	r2, err := a.Reserve(1000) // the freed slot is reusable
	if err != nil {
		t.Fatal(err)
	}
	a.Publish(r2, &k)
}

// shiftedTo4KiB is a pool of 32 extents of 1,024 slots of 4 KiB filled
// with 1 MiB values and then written 200,000 times with 4 KiB values over
// 60,000 keys (key i%60000 at write i).
func shiftedTo4KiB(t *testing.T) *Allocator {
	t.Helper()
	a := newTestAlloc(t, 4<<20, 32)
	for i := range 128 {
		put(t, a, enginetest.Key(i), 1<<20)
	}
	for i := range 200000 {
		put(t, a, enginetest.Key(1000000+i%60000), 4096)
	}
	return a
}

// TestSmallClassTakesOverAtRealGeometry: a pool full of 1 MiB values whose
// workload turns to 4 KiB values hands nearly every extent to the 4 KiB
// class. The extents here have 1,024 slots of 4 KiB (the default disk
// extent has 16,384): pressure counted in values, decayed per value
// evicted anywhere, never reached a whole extent's worth of 4 KiB
// evictions, and the class stayed at the one extent it was forced to
// take while stale 1 MiB values held the rest.
func TestSmallClassTakesOverAtRealGeometry(t *testing.T) {
	a := shiftedTo4KiB(t)
	small := a.Lattice().ClassOf(4096)
	if n := len(a.cls[small].extents); n < 28 {
		t.Fatalf("after the shift to 4 KiB values the 4 KiB class holds %d of 32 extents", n)
	}
	// And the cache holds the 4 KiB values: about 31,000 of them, the last
	// 5,000 written among them (one extent would hold 1,024).
	if n := a.Objects(); n < 28000 {
		t.Fatalf("the cache holds %d values after the shift", n)
	}
	for i := 200000 - 5000; i < 200000; i++ {
		if k := enginetest.Key(1000000 + i%60000); !read(a, k) {
			t.Fatalf("4 KiB value %d, among the last 5,000 written, is gone", i)
		}
	}
}

// TestBorrowServesAnOddSizeWithOneEviction: in a pool whose extents are all
// bound to 40 KiB slots, one 36 KiB value (a class with no extent) takes one
// 40 KiB slot, evicting one value, not a whole extent of 25; a freed slot is
// taken before anything is evicted; and a size that keeps coming earns an
// extent of its own once it has evicted an extent's worth.
func TestBorrowServesAnOddSizeWithOneEviction(t *testing.T) {
	a := newTestAlloc(t, 1<<20, 4) // 25 slots of 40 KiB per extent
	lat := a.Lattice()
	big, odd := lat.ClassOf(40<<10), lat.ClassOf(36<<10)
	if lat.Size(big) != 40<<10 || lat.Size(odd) != 36<<10 {
		t.Fatalf("lattice changed: classes %d and %d bytes", lat.Size(big), lat.Size(odd))
	}
	for i := range 100 {
		put(t, a, enginetest.Key(i), 40<<10)
	}
	if len(a.unbound) != 0 || len(a.cls[big].extents) != 4 {
		t.Fatalf("setup: %d unbound, %d extents in the 40 KiB class", len(a.unbound), len(a.cls[big].extents))
	}

	r := put(t, a, enginetest.Key(1000), 36<<10)
	if a.Rebound() != -1 || len(a.Victims()) != 1 || a.Class(r) != big {
		t.Fatalf("odd size: rebound %d, %d victims, class %d; want a borrowed 40 KiB slot and one victim",
			a.Rebound(), len(a.Victims()), a.Class(r))
	}

	k := enginetest.Key(5)
	if _, _, ok := a.Exist(&k); !ok {
		k = enginetest.Key(6)
	}
	old, _, ok := a.Remove(&k)
	if !ok {
		t.Fatal("remove of a 40 KiB value failed")
	}
	a.Release(old)
	r = put(t, a, enginetest.Key(1001), 36<<10)
	if len(a.Victims()) != 0 || r != old {
		t.Fatalf("with a free 40 KiB slot: %d victims, slot %d (freed %d)", len(a.Victims()), r, old)
	}

	earned := -1
	for i := range 200 {
		put(t, a, enginetest.Key(2000+i), 36<<10)
		if len(a.cls[odd].extents) > 0 {
			earned = i
			break
		}
	}
	// 1 MiB of 40 KiB evictions is 26; allow for the pressure the 36 KiB
	// class lost to decay.
	if earned < 20 || earned > 60 {
		t.Fatalf("the 36 KiB class earned an extent after %d more values, want after about an extent's worth (26) of borrowed evictions", earned)
	}
}

// TestBorrowStaysWithinTwiceTheSize: a class with no extent never borrows a
// slot more than twice its size; it takes an extent instead.
func TestBorrowStaysWithinTwiceTheSize(t *testing.T) {
	a := newTestAlloc(t, 1<<20, 4)
	for i := range 100 {
		put(t, a, enginetest.Key(i), 40<<10)
	}
	r := put(t, a, enginetest.Key(1000), 16<<10) // 40 KiB is 2.5 × 16 KiB
	if a.Rebound() < 0 || a.Class(r) != a.Lattice().ClassOf(16<<10) {
		t.Fatalf("16 KiB value: rebound %d, class %d; want an extent of its own class", a.Rebound(), a.Class(r))
	}
}

// TestRecentWritesSurvive: under write-only churn, the values written last
// are the ones kept. A value written into a freed slot counts as touched
// once, so CLOCK passes over it on its first round: without that, a value
// written into a slot freed just ahead of the hand (by a rewrite or a
// remove) was the next one evicted, and 40 % of the last 28,000 writes in
// a 31,000-value pool were gone.
func TestRecentWritesSurvive(t *testing.T) {
	a := shiftedTo4KiB(t)
	missing := 0
	for i := 200000 - 28000; i < 200000; i++ {
		k := enginetest.Key(1000000 + i%60000)
		if _, _, ok := a.Exist(&k); !ok {
			missing++
		}
	}
	if missing > 280 {
		t.Fatalf("%d of the last 28,000 values written are gone (the pool holds %d)", missing, a.Objects())
	}
}

// TestClockRunIsBounded: one Reserve walks at most clockBudget slots,
// however much heat the class holds. The RAM tier pins each new value once
// for its flush (Publish, then Acquire and Release), so under its write-only
// churn every slot has heat; an unbounded hand walked the whole class in
// one PUT under the metadata lock, once per pool turnover.
func TestClockRunIsBounded(t *testing.T) {
	a := newTestAlloc(t, 4<<20, 64) // 65,536 slots of 4 KiB
	const n = 64 * 1024
	var worst uint64
	for i := range 4 * n {
		before := a.clockSteps
		k := enginetest.Key(i)
		put(t, a, k, 4096)
		r, _, _, _ := a.Acquire(&k)
		a.Release(r)
		if i >= n {
			worst = max(worst, a.clockSteps-before)
		}
	}
	if worst > clockBudget {
		t.Fatalf("a Reserve walked %d slots; the bound is %d", worst, clockBudget)
	}
}

// TestSteadyMixMovesNoExtents: two classes evicting at the same rate, a
// 50/50 mix of 36 and 40 KiB values that never changes, keep their
// extents. Moving one evicts a whole extent of values for nothing, and
// without hysteresis in the donor test the two classes passed extents
// back and forth hundreds of times.
func TestSteadyMixMovesNoExtents(t *testing.T) {
	a := newTestAlloc(t, 4<<20, 32)
	r := rand.New(rand.NewPCG(3, 4))
	moves := 0
	for i := range 300000 {
		n, k := uint64(36<<10), r.IntN(2000)
		if r.IntN(2) == 0 {
			n, k = 40<<10, 1000000+r.IntN(2000)
		}
		if kk := enginetest.Key(k); i < 100000 || !read(a, kk) {
			put(t, a, kk, n)
			if i >= 100000 && a.Rebound() >= 0 {
				moves++
			}
		}
	}
	if moves > 2 {
		t.Fatalf("%d extents moved between two classes under a steady mix", moves)
	}
}

// TestHotValuesOutlastAScan: values read twice outlive a stream of
// one-time writes of more than the pool's size.
func TestHotValuesOutlastAScan(t *testing.T) {
	a := newTestAlloc(t, 4<<20, 32) // 32,768 slots of 4 KiB
	const hot = 8192
	for i := range 32768 {
		put(t, a, enginetest.Key(i), 4096)
	}
	for range 2 {
		for i := range hot {
			read(a, enginetest.Key(i))
		}
	}
	for i := range 40000 {
		put(t, a, enginetest.Key(1000000+i), 4096)
	}
	alive := 0
	for i := range hot {
		k := enginetest.Key(i)
		if _, _, ok := a.Exist(&k); ok {
			alive++
		}
	}
	if alive < hot*9/10 {
		t.Fatalf("%d of %d values read twice survive 40,000 one-time writes into a 32,768-slot pool", alive, hot)
	}
}

// TestInvariantsUnderRandomOps: random Reserve (mixed and odd sizes, so
// classes borrow), Publish, Abort, Remove, Acquire and Release, with slots
// left reserved and pinned across steps; Check after every step, no slot
// more than twice the size a borrowed value needs, nothing in flight at
// the end.
func TestInvariantsUnderRandomOps(t *testing.T) {
	sizes := []uint64{4096, 8192, 12 << 10, 36 << 10, 40 << 10, 60 << 10, 64 << 10, 100 << 10, 128 << 10, 256 << 10, 3000, 70000}
	for seed := uint64(1); seed <= 10; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		a := newTestAlloc(t, 256<<10, uint32(2+r.IntN(6)))
		lat := a.Lattice()
		var pins, reserved []SlotRef
		for step := range 20000 {
			k := enginetest.Key(r.IntN(400))
			switch x := r.IntN(100); {
			case x < 45:
				n := sizes[r.IntN(len(sizes))]
				if r.IntN(3) == 0 {
					n = uint64(1 + r.IntN(256<<10))
				}
				rr, err := a.Reserve(n)
				if err != nil {
					continue
				}
				if got, own := lat.Size(a.Class(rr)), lat.Size(lat.ClassOf(n)); got < n || (got != own && got > borrowLimit*own) {
					t.Fatalf("seed %d step %d: %d-byte value in a %d-byte slot (its class %d)", seed, step, n, got, own)
				}
				switch r.IntN(20) {
				case 0, 1:
					reserved = append(reserved, rr)
					continue
				case 2:
					a.Abort(rr)
					a.Release(rr)
					continue
				}
				if old, _, rep := a.Publish(rr, &k); rep {
					a.Release(old)
				}
			case x < 55:
				if old, _, ok := a.Remove(&k); ok {
					a.Release(old)
				}
			case x < 85:
				if rr, _, ok, err := a.Acquire(&k); ok && err == nil {
					if r.IntN(4) == 0 {
						pins = append(pins, rr)
					} else {
						a.Release(rr)
					}
				}
			default:
				if len(pins) > 0 && r.IntN(2) == 0 {
					i := r.IntN(len(pins))
					a.Release(pins[i])
					pins = append(pins[:i], pins[i+1:]...)
				}
				if len(reserved) > 0 {
					i := r.IntN(len(reserved))
					rr := reserved[i]
					reserved = append(reserved[:i], reserved[i+1:]...)
					if old, _, rep := a.Publish(rr, &k); rep {
						a.Release(old)
					}
				}
			}
			if err := a.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		for _, p := range pins {
			a.Release(p)
		}
		for _, rr := range reserved {
			a.Abort(rr)
			a.Release(rr)
		}
		if p, rs, d := a.InFlight(); p+rs+d != 0 {
			t.Fatalf("seed %d: %d pinned, %d reserved, %d dead slots left", seed, p, rs, d)
		}
	}
}
