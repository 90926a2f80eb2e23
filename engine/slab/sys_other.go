//go:build !linux

package slab

import (
	"errors"
	"os"
	"syscall"

	"github.com/dfkv/dfkv/engine/vfs"
)

const oDirect = 0

func fallocate(f vfs.File, size int64) error {
	return errors.New("fallocate: not supported on this platform; the slab engine needs Linux")
}

func allocated(os.FileInfo) uint64 { return 0 }

func mediaError(err error) bool { return errors.Is(err, syscall.EIO) }

func seekData(f vfs.File, off, size int64) (int64, int64, bool, error) {
	return 0, 0, false, errNoSeekData
}

func dioAlign(string) uint32 { return 0 }

func directRefused(err error) bool { return false }
