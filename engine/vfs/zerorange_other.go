//go:build !linux

package vfs

// ZeroRange makes [off, off+n) of f read as zeros by writing them; a File
// that zeroes ranges itself is asked instead.
func ZeroRange(f File, off, n int64) error {
	if z, ok := f.(interface{ ZeroRange(off, n int64) error }); ok {
		return z.ZeroRange(off, n)
	}
	return writeZeros(f, off, n)
}
