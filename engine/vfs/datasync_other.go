//go:build !linux

package vfs

// Datasync flushes f's data. Off Linux it is a full fsync (Sync); a File
// that implements Datasync() itself is asked instead.
func Datasync(f File) error {
	if d, ok := f.(interface{ Datasync() error }); ok {
		return d.Datasync()
	}
	return f.Sync()
}
