package slab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dfkv/dfkv/engine/vfs"
)

// Existing reports the geometry a directory already holds: ok is false
// when dir has no slab_meta (a new disk). A node started without an
// explicit capacity adopts what the disk was formatted with, so automatic
// sizing never changes a store's geometry across restarts (which Open
// would refuse). A damaged slab_meta counts as none: Open formats such a
// disk anew.
func Existing(fs vfs.FS, dir string) (capacity, extentBytes uint64, ok bool, err error) {
	if fs == nil {
		fs = vfs.OS{}
	}
	f, err := fs.OpenFile(filepath.Join(dir, metaName), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	defer f.Close()
	b := make([]byte, metaSize+1)
	n, err := f.ReadAt(b, 0)
	if n == 0 && err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, false, fmt.Errorf("read %s: %w", filepath.Join(dir, metaName), err)
	}
	g, err := decodeGeometry(b[:n])
	if err != nil {
		return 0, 0, false, nil
	}
	return g.capacity, g.extentBytes, true, nil
}
