//go:build linux

package uring

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNegativeOffsetFailsAsPreadDoes: ReadAt and WriteAt refuse a negative
// offset with EINVAL, as pread and pwrite do; to the ring an offset of -1
// would mean "the file's current position".
func TestNegativeOffsetFailsAsPreadDoes(t *testing.T) {
	r := newRing(t)
	defer r.Close()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if _, err := unix.Pread(fd, make([]byte, 4), -1); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("pread at -1: %v (the contract this test holds the ring to)", err)
	}
	buf := make([]byte, 4)
	if n, err := r.ReadAt(fd, buf, -1); !errors.Is(err, unix.EINVAL) {
		t.Errorf("ring ReadAt at offset -1: %d bytes %q, err %v; want EINVAL as pread", n, buf[:n], err)
	}
	if n, err := r.WriteAt(fd, []byte("XX"), -1); !errors.Is(err, unix.EINVAL) {
		got, _ := os.ReadFile(path)
		t.Errorf("ring WriteAt at offset -1: %d bytes, err %v; want EINVAL as pwrite (file now %q)", n, err, got)
	}
}
