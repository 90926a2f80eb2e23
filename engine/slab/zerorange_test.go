package slab

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/engine/vfs"
)

// On a filesystem without FALLOC_FL_ZERO_RANGE (tmpfs), vfs.ZeroRange punches
// a hole and allocates it again: the range reads as zeros and keeps its
// space, so a record written there later need not allocate on a full
// filesystem.
func TestZeroRangeKeepsSpaceWherePunching(t *testing.T) {
	f, err := os.CreateTemp("/dev/shm", "dfkv-zero-range-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096) == nil {
		t.Skip("this /dev/shm zeroes ranges itself: the punching path is not taken")
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = 0xAB
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	blocks := func() int64 {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks
	}
	before := blocks()
	if err := vfs.ZeroRange(f, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64<<10)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		if b != 0 {
			t.Fatalf("byte %d of the zeroed range is %#x", i, b)
		}
	}
	if after := blocks(); after < before {
		t.Fatalf("the zeroed range gave back its space: %d blocks, %d before", after, before)
	}
}
