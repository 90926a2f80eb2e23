// Package filestamp tells whether files a node polls (credentials, token,
// certificates) changed since it last read them, by their contents.
//
// A file's size and modification time are not enough: rotating a token
// swaps 64 hex digits for 64 others, so the size stays; a rewrite within
// the filesystem's timestamp granularity of the last read, or by a tool
// that keeps times (cp -p, rsync -a, tar, install -p), keeps the time
// too, and a revoked token would stay in force until a SIGHUP. The files
// are small, so reading them once a second costs next to nothing.
package filestamp

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
)

// Stamp is a digest of some files' contents.
type Stamp [sha256.Size]byte

// Of is the stamp of the files at paths, in order; empty paths are
// skipped. The error names the first file that could not be read.
func Of(paths ...string) (Stamp, error) {
	h := sha256.New()
	for _, p := range paths {
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return Stamp{}, err
		}
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return Stamp{}, fmt.Errorf("read %s: %w", p, err)
		}
		// The length separates the files: a byte moved from the end of
		// one to the start of the next changes the stamp.
		fmt.Fprintf(h, "\x00%d\x00", n)
	}
	var s Stamp
	h.Sum(s[:0])
	return s, nil
}
