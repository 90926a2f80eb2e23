//go:build !linux

package slab

import (
	"errors"
	"os"

	"github.com/dfkv/dfkv/engine/vfs"
)

const oDirect = 0

func fallocate(f vfs.File, size int64) error {
	return errors.New("fallocate: not supported on this platform; the slab engine needs Linux")
}

func allocated(os.FileInfo) uint64 { return 0 }

func punchHole(f vfs.File, off, n int64) error {
	zero := make([]byte, min(n, 1<<20))
	for n > 0 {
		c := min(n, int64(len(zero)))
		if _, err := f.WriteAt(zero[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

func seekData(f vfs.File, off, size int64) (int64, int64, bool, error) {
	return 0, 0, false, errNoSeekData
}

func dioAlign(string) uint32 { return 0 }

func directRefused(err error) bool { return false }

func lockDir(d vfs.File) error { return nil }
