package slab

import (
	"fmt"
	"math/bits"
	"sort"
)

// Lattice parameters. They are part of the on-disk geometry (slab_meta
// stores them), so changing them makes existing stores refuse to open.
const (
	// MinClass is the smallest slot size and the alignment of every class:
	// one O_DIRECT-friendly page, so every slot starts on an aligned offset.
	MinClass = 4096
	// growthShift sets the geometric step of the lattice: a class is
	// followed by the next multiple of MinClass at most class>>growthShift
	// (12.5%) larger, or by class+MinClass where 12.5% is less than one page.
	growthShift = 3
	// maxClasses is what the record's one-byte class index can name.
	maxClasses = 255
)

// Lattice is the deterministic, aligned, geometric list of slot sizes an
// extent can be carved into: from 4 KiB, each class the previous one plus
// max(4 KiB, 12.5% rounded down to 4 KiB), cut short at every power of two
// (so 2^k-byte blocks fill their slot exactly) and at the extent size. It
// depends only on the extent size (and the constants above), so two stores
// with the same geometry have the same lattice and a class index in a
// slots.tbl record means the same size on every start.
//
// Waste bound: a value of v bytes goes to the smallest class C >= v. For the
// first class (4 KiB) the waste C-v is below 4 KiB. Otherwise the class
// before, P, is < v, and C-P <= max(MinClass, P/8) by construction, so
//
//	waste(v) = C - v < C - P <= max(4096, P/8) < max(4096, v/8)
//
// i.e. below 12.5% of the value for v >= 32 KiB, and below one 4 KiB page
// for smaller values. Extent tails (ExtentBytes mod C) are not part of this
// per-value bound; they are below C, so below 1/slots of the extent.
type Lattice struct {
	extent  uint64
	classes []uint32
}

// NewLattice builds the lattice for extents of extentBytes (a multiple of
// MinClass). The last class is the whole extent: one value per extent.
func NewLattice(extentBytes uint64) (*Lattice, error) {
	if extentBytes < MinClass || extentBytes%MinClass != 0 || extentBytes > maxExtentBytes {
		return nil, fmt.Errorf("extent size %d: must be a multiple of %d between %d and %d", extentBytes, MinClass, MinClass, uint64(maxExtentBytes))
	}
	l := &Lattice{extent: extentBytes}
	for c := uint64(MinClass); ; {
		l.classes = append(l.classes, uint32(c))
		if c >= extentBytes {
			break
		}
		step := max(MinClass, (c>>growthShift)&^(MinClass-1))
		// Every power of two is a class: KV blocks are usually 2^k
		// bytes, and then they fill their slot exactly and start at
		// 2^k-aligned offsets.
		c = min(c+step, uint64(1)<<bits.Len64(c), extentBytes)
	}
	if len(l.classes) > maxClasses {
		return nil, fmt.Errorf("extent size %d gives %d size classes, more than %d", extentBytes, len(l.classes), maxClasses)
	}
	return l, nil
}

// Len is the number of classes.
func (l *Lattice) Len() int { return len(l.classes) }

// Size is the slot size of class c.
func (l *Lattice) Size(c int) uint64 { return uint64(l.classes[c]) }

// Slots is how many slots an extent bound to class c is carved into.
func (l *Lattice) Slots(c int) uint32 { return uint32(l.extent / uint64(l.classes[c])) }

// MaxSlots bounds Slots over all classes: the slots of the smallest class.
func (l *Lattice) MaxSlots() uint32 { return uint32(l.extent / MinClass) }

// ClassOf returns the smallest class that holds n bytes (0 < n <= extent).
func (l *Lattice) ClassOf(n uint64) int {
	return sort.Search(len(l.classes), func(i int) bool { return uint64(l.classes[i]) >= n })
}

// Classes returns a copy of the class sizes.
func (l *Lattice) Classes() []uint32 { return append([]uint32(nil), l.classes...) }
