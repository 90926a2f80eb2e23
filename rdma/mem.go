package rdma

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mapMem maps n bytes (rounded up to pages) of anonymous memory for a
// region the NIC will address: outside the Go heap, so its address is
// stable and no Go pointer is handed to the library.
func mapMem(n uint64) ([]byte, error) {
	size := (n + 4095) &^ 4095
	if size == 0 || size > 1<<40 {
		return nil, fmt.Errorf("rdma: cannot map %d bytes", n)
	}
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("rdma: mapping %d bytes: %w", size, err)
	}
	return b[:n], nil // cap is the mapping, for unmapMem
}

// unmapMem unmaps what mapMem mapped (nil: nothing).
func unmapMem(b []byte) {
	if cap(b) > 0 {
		_ = unix.Munmap(b[:cap(b)])
	}
}
