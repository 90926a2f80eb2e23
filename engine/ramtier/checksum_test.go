package ramtier

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/slab"
	"github.com/dfkv/dfkv/wire"
)

// corruptOnDisk flips one byte in the middle of v where it lies in one of
// the closed slab store's extent files (found by its bytes: a test value's
// first 256 bytes are unique).
func corruptOnDisk(t *testing.T, dir string, v []byte) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "extents", "*.ext"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, v[:256]); i >= 0 {
			b[i+len(v)/2] ^= 0x01
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("value not found in any extent file")
}

// TestCorruptDiskValueNotPromoted: a cold read through the RAM tier of a
// value whose bytes on disk fail their checksum is a miss, leaves nothing
// resident (no lendable bytes, no later RAM hit), and is counted once.
func TestCorruptDiskValueNotPromoted(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		dir := t.TempDir()
		const capacity = 64 << 20
		s := openSlab(t, dir, capacity)
		k, v := key(900), val(900, 50000)
		if err := s.Put(k, v); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		corruptOnDisk(t, dir, v)

		s = openSlab(t, dir, capacity)
		tr := openTier(t, Options{Backing: s, Bytes: 4 << 20, ExtentBytes: 64 << 10, LargeReserveBytes: NoLargeReserve, ReadCoalesce: coalesce})
		for i := range 2 {
			data, _, err := tr.Get(k, 0, 0, iobuf.Heap{})
			enginetest.WantStatus(t, err, wire.StatusNotFound, "cold read of a corrupted value")
			if len(data) != 0 {
				t.Fatalf("read %d served %d bytes", i, len(data))
			}
			if i == 0 && !errors.Is(err, slab.ErrPayloadChecksum) {
				t.Fatalf("the first read's miss does not say why: %v", err)
			}
			if _, _, _, ok, _ := tr.Lend(k, 0, 0); ok {
				t.Fatal("the corrupted value is resident in RAM")
			}
		}
		if st := tr.Stats(); st.ChecksumFailures != 1 {
			t.Fatalf("%d checksum failures, want 1", st.ChecksumFailures)
		}
		if r := tr.RAM(); r.Objects != 0 {
			t.Fatalf("%d values resident after the failed promotion, want 0", r.Objects)
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
