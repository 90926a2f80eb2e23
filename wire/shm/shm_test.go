package shm

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// A file sealed with SealWrites keeps the node's writable mapping, and
// refuses every new writer: a process given the read-only descriptor
// that reopens it for writing through /proc (a memfd's inode allows
// that) can neither map it writable nor write(2) it.
func TestSealWritesKeepsTheNodesMappingOnly(t *testing.T) {
	f, err := MemfdForReaders("dfkv-test", 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := Map(f, 1<<16, true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := SealWrites(f); err != nil {
		t.Skipf("this kernel lacks the seal: %v", err)
	}
	if !WritesSealed(f) {
		t.Fatal("WritesSealed is false after SealWrites")
	}
	mem[100] = 7 // the node's mapping still writes
	ro, err := ReadOnly(f)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	rw, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(ro.Fd())), os.O_RDWR, 0)
	if err != nil {
		t.Skipf("cannot reopen the memfd for writing here: %v", err)
	}
	defer rw.Close()
	if m, err := unix.Mmap(int(rw.Fd()), 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		unix.Munmap(m)
		t.Fatal("a client reopening the descriptor mapped the sealed file writable")
	}
	if _, err := rw.WriteAt([]byte("EVIL"), 100); err == nil {
		t.Fatal("a client reopening the descriptor wrote the sealed file")
	}
	got := make([]byte, 1)
	if _, err := ro.ReadAt(got, 100); err != nil || got[0] != 7 {
		t.Fatalf("the node's write reads back as %v, %v", got, err)
	}
}
