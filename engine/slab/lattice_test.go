package slab

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLatticeDeterministic: the same extent size gives the same lattice, a
// different one a different lattice (slab_meta relies on both).
func TestLatticeDeterministic(t *testing.T) {
	a, err := NewLattice(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLattice(64 << 20)
	if !slices.Equal(a.Classes(), b.Classes()) {
		t.Fatal("two lattices from the same parameters differ")
	}
	c, _ := NewLattice(32 << 20)
	if slices.Equal(a.Classes(), c.Classes()) {
		t.Fatal("lattices of 64 MiB and 32 MiB extents are equal")
	}
	t.Logf("64 MiB extents: %d classes: %v", a.Len(), a.Classes())
	for _, bad := range []uint64{0, 4095, 4097, 1<<30 + 4096} {
		if _, err := NewLattice(bad); err == nil {
			t.Errorf("NewLattice(%d) accepted", bad)
		}
	}
}

// TestLatticeShape: every class is a 4 KiB multiple, classes grow, a step
// is at most max(4 KiB, 12.5% of the class before), and the last class is
// the extent.
func TestLatticeShape(t *testing.T) {
	for _, ext := range []uint64{4096, 16 << 10, 256 << 10, 1 << 20, 8 << 20, 64 << 20, 1 << 30} {
		l, err := NewLattice(ext)
		if err != nil {
			t.Fatal(err)
		}
		cl := l.Classes()
		if cl[0] != MinClass || uint64(cl[len(cl)-1]) != ext {
			t.Fatalf("extent %d: classes run %d..%d", ext, cl[0], cl[len(cl)-1])
		}
		for i := 1; i < len(cl); i++ {
			if cl[i]%MinClass != 0 || cl[i] <= cl[i-1] {
				t.Fatalf("extent %d: class %d = %d after %d", ext, i, cl[i], cl[i-1])
			}
			if step := cl[i] - cl[i-1]; step > max(MinClass, cl[i-1]/8) {
				t.Fatalf("extent %d: step %d after class %d is above max(4096, 12.5%%)", ext, step, cl[i-1])
			}
		}
	}
}

// TestWasteBound checks the stated bound, waste(v) < max(4096, v/8), for
// every size 1..ExtentBytes of a 64 MiB extent (4 MiB under -race; a linear walk, with
// ClassOf spot-checked against it).
func TestWasteBound(t *testing.T) {
	ext := uint64(64 << 20)
	if raceEnabled {
		ext = 4 << 20
	}
	l, _ := NewLattice(ext)
	r := rand.New(rand.NewPCG(1, 2))
	c := 0
	for v := uint64(1); v <= ext; v++ {
		for l.Size(c) < v {
			c++
		}
		waste := l.Size(c) - v
		if waste >= max(MinClass, v/8) {
			t.Fatalf("size %d: class %d wastes %d bytes, bound max(4096, %d)", v, l.Size(c), waste, v/8)
		}
		if r.IntN(4096) == 0 {
			if got := l.ClassOf(v); got != c {
				t.Fatalf("ClassOf(%d) = %d, linear walk says %d", v, got, c)
			}
		}
	}
}

// TestWasteMixed: a mixed 16 KiB–4 MiB workload (log-uniform sizes, as
// mixed model layouts give) wastes under 15% of the stored bytes,
// including extent tails when all its extents are full.
func TestWasteMixed(t *testing.T) {
	const ext = 64 << 20
	l, _ := NewLattice(ext)
	r := rand.New(rand.NewPCG(3, 4))
	var stored, slotBytes, tailBytes float64
	for range 200000 {
		// log-uniform in [16 KiB, 4 MiB]
		v := uint64(16384 * math.Exp2(r.Float64()*8))
		c := l.ClassOf(v)
		stored += float64(v)
		slotBytes += float64(l.Size(c))
		// share of the extent tail this slot carries
		tailBytes += float64(ext-uint64(l.Slots(c))*l.Size(c)) / float64(l.Slots(c))
	}
	waste := (slotBytes - stored) / stored
	withTails := (slotBytes + tailBytes - stored) / stored
	t.Logf("internal waste %.2f%% of stored bytes; with extent tails %.2f%%", 100*waste, 100*withTails)
	if waste >= 0.15 || withTails >= 0.15 {
		t.Fatalf("waste %.2f%% (with tails %.2f%%), want < 15%%", 100*waste, 100*withTails)
	}
}
