package ramtier

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/wire/shm"
)

// pageBytes is the unit the kernel faults memory in.
const pageBytes = 4096

// arena is the one contiguous RAM region the slab allocator carves into
// extents and slots. It lives outside the Go heap (anonymous mmap), so the
// GC never scans or moves it, its addresses stay stable for the life of the
// tier (a later RDMA registration needs exactly one region), and it is
// returned only by Close. A shared arena (Options.SharedArena) is a
// mapping of a memory file instead, so the node can hand the file to the
// clients on its host, which then read leased values out of it directly.
type arena struct {
	mem  []byte
	file *os.File // the memory file of a shared arena; nil: anonymous
}

// newArena maps size bytes under the memory policy numa. It faults no
// page in: the tier's warmer does that in the background (warm.go). The
// policy is set before any page is faulted in, so population places pages
// by it. applied says what policy took effect (for the startup log).
func newArena(size uint64, numa string, shared bool) (a *arena, applied string, err error) {
	if size == 0 || size%pageBytes != 0 || size > 1<<48 {
		return nil, "", fmt.Errorf("ram tier: cannot map %d bytes: want a positive multiple of %d", size, pageBytes)
	}
	a = &arena{}
	if shared {
		if a.file, err = shm.MemfdForReaders("dfkv-arena", size); err != nil {
			return nil, "", fmt.Errorf("ram tier: shared arena: %w", err)
		}
		if a.mem, err = shm.Map(a.file, size, true); err == nil {
			// Clients read it; only this mapping writes. A kernel
			// without the seal (before 5.1) leaves it unsealed, which
			// the shared-memory transport says when it starts.
			_ = shm.SealWrites(a.file)
		}
	} else {
		a.mem, err = unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	}
	if err != nil {
		a.close()
		return nil, "", fmt.Errorf("ram tier: mmap of %d bytes failed: %w", size, err)
	}
	mem := a.mem
	if applied, err = applyNUMA(mem, numa); err != nil {
		a.close()
		return nil, "", err
	}
	// Transparent huge pages where the kernel offers them (madvise mode
	// is the common default): a GET copies a cold value out of the arena,
	// and with 4 KiB pages a 1 MiB copy walks 256 TLB entries. Refused
	// (THP off): 4 KiB pages, which work, slower.
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	return a, applied, nil
}

// close unmaps the arena and closes its memory file (a client that
// mapped the file keeps its pages until it unmaps them). The caller
// ensures nothing reads or writes the arena any more.
func (a *arena) close() error {
	err := unmap(a.mem)
	a.mem = nil
	if a.file != nil {
		if cerr := a.file.Close(); err == nil {
			err = cerr
		}
		a.file = nil
	}
	return err
}

// mapAnon maps size bytes of private anonymous memory, asking the kernel
// to populate it up front (dedicated allocations of large values).
func mapAnon(size uint64) ([]byte, error) {
	if size == 0 || size%pageBytes != 0 || size > 1<<48 {
		return nil, fmt.Errorf("ram tier: cannot map %d bytes: want a positive multiple of %d", size, pageBytes)
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ram tier: mmap of %d bytes failed: %w", size, err)
	}
	return mem, nil
}

// mincore reports page residency of mem into vec (bit 0 per page).
func mincore(mem, vec []byte) error {
	if len(mem) == 0 {
		return nil
	}
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// unmap returns mem to the kernel. The caller must ensure nothing reads or
// writes mem any more (no pins, the tier closed).
func unmap(mem []byte) error {
	if mem == nil {
		return nil
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("ram tier: munmap of %d bytes failed: %w", len(mem), err)
	}
	return nil
}

// largeBuf is a value larger than one extent: a dedicated mapping charged
// to the tier's large-value budget. refs counts its owners: 1 while it is
// the published value of its key, plus one per flush-pin or transfer-pin.
// It is unmapped when refs drops to 0.
type largeBuf struct {
	mem   []byte // page-rounded mapping; the value is mem[:n]
	n     uint64
	refs  int
	dirty bool // a flush is pending: never capacity-evicted
}

func roundPage(n uint64) uint64 { return (n + pageBytes - 1) &^ (pageBytes - 1) }
