package vfs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestZeroRangeEmptyRangeIsANoOp: zeroing [off, off) changes nothing and
// succeeds, as it does through writeZeros and through a file with its own
// ZeroRange (the bare fallocate would refuse a zero length).
func TestZeroRangeEmptyRangeIsANoOp(t *testing.T) {
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	if err := ZeroRange(f, 4096, 0); err != nil {
		t.Errorf("ZeroRange of an empty range: %v", err)
	}
}
