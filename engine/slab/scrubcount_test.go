package slab

import (
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/engine/vfs"
)

// TestScrubDoesNotCountUnreadValuesAsVerified: engine.Stats documents
// ScrubbedBytes as "the slot bytes the background scrub read and
// verified". A value whose read fails with EIO was neither read nor
// verified (it stays, unverified, and counts as an I/O error), yet the
// scrub adds its slot bytes to ScrubbedBytes as if it had checked it.
func TestScrubDoesNotCountUnreadValuesAsVerified(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts(dir)
	const n = 10
	fillForRecovery(t, opts, n, true) // unclean: the next Open scrubs
	badPath, badOff := payloadAt(t, opts, enginetest.Key(3))
	badLen := int64(recoverSize(3))
	synctest.Test(t, func(t *testing.T) {
		opts.FS = &vfs.FaultFS{InjectRange: func(op vfs.Op, path string, off, l int64) error {
			if op == vfs.OpRead && path == badPath && off < badOff+badLen && badOff < off+l {
				return syscall.EIO
			}
			return nil
		}}
		opts.Scrub = ScrubOptions{BytesPerSecond: 1 << 40}
		s := openT(t, opts)
		defer mustClose(t, s)
		synctest.Wait() // the one pass after the unclean stop is over
		st := s.Stats()
		if st.ScrubPasses != 1 || st.IOErrors == 0 {
			t.Fatalf("scrub pass %d, %d I/O errors; want one pass that met the bad sector", st.ScrubPasses, st.IOErrors)
		}
		var verified uint64
		for i := range n {
			if i != 3 {
				verified += alignUp(uint64(recoverSize(i)), pageAlign)
			}
		}
		if st.ScrubbedBytes != verified {
			t.Fatalf("ScrubbedBytes = %d; want %d (every value but the unreadable one); the %d slot bytes it could not read were counted as verified",
				st.ScrubbedBytes, verified, alignUp(uint64(recoverSize(3)), pageAlign))
		}
	})
}
