// Package shm is the shared-memory transport of the lease protocol: the
// memory files a node shares with the clients on its host (its RAM
// arena and lease words read-only, a staging region per connection
// writable) and the Unix-socket bootstrap that passes them as file
// descriptors (SCM_RIGHTS) along with the node's welcome.
//
// Every file is a memfd sealed against growing and shrinking, so a
// client cannot truncate memory the node has mapped (which would fault
// the node with SIGBUS on its next access). The read-only ones are
// sealed against writes too once the node has mapped them
// (F_SEAL_FUTURE_WRITE: the node's mapping stays writable, no new
// writable mapping or write(2) is allowed), and passed as descriptors
// opened read-only. The descriptor alone would not do: a memfd's inode
// lets anyone holding it reopen /proc/self/fd/N for writing.
package shm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/wire"
)

// Memfd creates an anonymous memory file of size bytes named name, sealed
// against resizing. size 0 makes an empty file (nothing to map).
func Memfd(name string, size uint64) (*os.File, error) {
	return memfd(name, size, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
}

func memfd(name string, size uint64, seals int) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing memfd %s to %d bytes: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealing memfd %s: %w", name, err)
	}
	return f, nil
}

// MemfdForReaders is Memfd for a file that clients are to read only: it
// is left open to one more seal, which SealWrites adds once the node has
// mapped it writable.
func MemfdForReaders(name string, size uint64) (*os.File, error) {
	return memfd(name, size, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
}

// SealWrites forbids new writable mappings of f and writes to it, from
// any process, keeping the mappings that exist (the node's), and seals f
// for good. It fails on kernels before Linux 5.1, which lack the seal.
func SealWrites(f *os.File) error {
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("sealing %s against writes (F_SEAL_FUTURE_WRITE, Linux 5.1): %w", f.Name(), err)
	}
	return nil
}

// WritesSealed reports whether f is sealed against new writes.
func WritesSealed(f *os.File) bool {
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	return err == nil && seals&unix.F_SEAL_FUTURE_WRITE != 0
}

// ReadOnly opens f again for reading only: a process given the new
// descriptor cannot map the file writable.
func ReadOnly(f *os.File) (*os.File, error) {
	ro, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reopening %s read-only: %w", f.Name(), err)
	}
	return ro, nil
}

// Map maps the first size bytes of f shared, writable or read-only. A
// size of 0 maps nothing and returns nil.
func Map(f *os.File, size uint64, writable bool) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	if size > 1<<48 {
		return nil, fmt.Errorf("mapping %s: %d bytes is not a size", f.Name(), size)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	if uint64(st.Size) < size {
		return nil, fmt.Errorf("mapping %s: the file holds %d bytes, %d were announced", f.Name(), st.Size, size)
	}
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of %s: %w", size, f.Name(), err)
	}
	// Huge pages where the kernel allows them for shared memory
	// (/sys/kernel/mm/transparent_hugepage/shmem_enabled = advise): a
	// 1 MiB copy then walks one TLB entry instead of 256. Refused (the
	// common default, never): 4 KiB pages, which work, slower.
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	return mem, nil
}

// Unmap undoes Map (nil is a no-op).
func Unmap(mem []byte) error {
	if mem == nil {
		return nil
	}
	return unix.Munmap(mem)
}

// Files are the node's memory files as one connection's client gets
// them, in the order they are passed.
const (
	FileArena = iota
	FileWords
	FileStaging
	nFiles
)

// SendWelcome writes the node's welcome on c and, when it is OK, passes
// files (arena, words, staging) with it in one message.
func SendWelcome(c *net.UnixConn, w wire.LeaseWelcome, files [nFiles]*os.File) error {
	b := wire.AppendLeaseWelcome(nil, w)
	var oob []byte
	if w.Status == wire.StatusOK {
		fds := make([]int, nFiles)
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(b, oob, nil)
	if err == nil && (n != len(b) || oobn != len(oob)) {
		err = io.ErrShortWrite
	}
	return err
}

// SendRefusal writes a non-OK welcome carrying status and msg; the
// caller closes the connection afterwards.
func SendRefusal(c net.Conn, status wire.Status, msg string) error {
	if len(msg) > wire.MaxErrorMessage {
		msg = msg[:wire.MaxErrorMessage]
	}
	b := wire.AppendLeaseWelcome(nil, wire.LeaseWelcome{Status: status})
	b = append(b, byte(len(msg)), byte(len(msg)>>8))
	_, err := c.Write(append(b, msg...))
	return err
}

// ReceiveWelcome reads the node's welcome from c and the files passed
// with it. A refusal is returned as an error wrapping its status, with
// the node's message.
func ReceiveWelcome(c *net.UnixConn) (wire.LeaseWelcome, [nFiles]*os.File, error) {
	var files [nFiles]*os.File
	b := make([]byte, wire.LeaseWelcomeLen)
	oob := make([]byte, unix.CmsgSpace(nFiles*4))
	n, oobn, _, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return wire.LeaseWelcome{}, files, fmt.Errorf("reading the node's lease welcome: %w", err)
	}
	fds, ferr := parseRights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n < len(b) { // a stream socket may split the welcome; the rights came with its first byte
		if _, err := io.ReadFull(c, b[n:]); err != nil {
			closeAll()
			return wire.LeaseWelcome{}, files, fmt.Errorf("reading the node's lease welcome: %w", err)
		}
	}
	w, err := wire.DecodeLeaseWelcome(b)
	if err != nil {
		closeAll()
		return w, files, err
	}
	if w.Status != wire.StatusOK {
		closeAll()
		var ml [2]byte
		msg := ""
		if _, err := io.ReadFull(c, ml[:]); err == nil {
			m := make([]byte, min(int(ml[0])|int(ml[1])<<8, wire.MaxErrorMessage))
			if k, _ := io.ReadFull(c, m); k > 0 {
				msg = string(m[:k])
			}
		}
		return w, files, fmt.Errorf("the node refused the lease bootstrap: %s: %w", msg, w.Status)
	}
	if ferr != nil || len(fds) != nFiles {
		closeAll()
		return w, files, fmt.Errorf("the node's lease welcome came with %d memory files, want %d: %w", len(fds), nFiles, errors.Join(ferr, wire.StatusInvalid))
	}
	for i, fd := range fds {
		unix.CloseOnExec(fd)
		files[i] = os.NewFile(uintptr(fd), []string{"dfkv-arena", "dfkv-lease-words", "dfkv-staging"}[i])
	}
	return w, files, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}
