//go:build linux

// Package uring submits positioned reads and writes through one io_uring
// instance, so many goroutines' small disk I/Os reach the kernel in one
// system call instead of one each.
//
// Each caller of ReadAt or WriteAt puts its request in the submission
// queue and submits it at once (one short system call that does not wait
// for the I/O), then blocks; one reaper goroutine waits in the kernel for
// completions and hands each back to its caller. So the disk sees as many
// requests in flight as there are callers (up to the ring's size), while
// no thread blocks per I/O as it does in pread: the goroutines waiting
// cost no threads, and the reaper collects many completions per wait.
//
// Only what dfkv needs is here: IORING_OP_READ and IORING_OP_WRITE on
// file descriptors, no registered buffers or files, no SQ polling. New
// fails where the kernel or a seccomp filter refuses io_uring (ENOSYS,
// EPERM); callers then use pread and pwrite.
package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel ABI (include/uapi/linux/io_uring.h).
const (
	opRead  = 22 // IORING_OP_READ, Linux 5.6
	opWrite = 23 // IORING_OP_WRITE, Linux 5.6

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	enterGetEvents = 1 // IORING_ENTER_GETEVENTS

	featSingleMmap = 1 // IORING_FEAT_SINGLE_MMAP
)

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	rwFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	pad2        uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// ErrClosed is returned by ReadAt and WriteAt after Close.
var ErrClosed = errors.New("uring: ring closed")

// opNop is IORING_OP_NOP: Close submits one to wake the reaper.
const opNop = 0

// closeSlot is the user_data of Close's NOP.
const closeSlot = ^uint64(0)

// request is one caller's I/O, from ReadAt or WriteAt to its completion.
// Requests are pooled, so a call allocates nothing.
type request struct {
	buf  []byte
	res  int32
	done chan struct{}
}

var requests = sync.Pool{New: func() any { return &request{done: make(chan struct{}, 1)} }}

// Ring is an io_uring instance and its reaper. It is safe for concurrent
// use.
type Ring struct {
	fd      int
	entries uint32
	mem     [][]byte

	sqHead, sqTail, sqMask, sqArray *uint32 // shared with the kernel
	sqes                            []sqe
	cqHead, cqTail, cqMask          *uint32
	cqes                            []cqe

	// mu guards the SQ, the slots and closed; room is signalled when a
	// slot frees.
	mu       sync.Mutex
	room     *sync.Cond
	inflight []*request // by slot, the user_data of its SQE
	free     []uint64   // free slots
	closed   bool
	failed   bool // the reaper stopped on an error; Close still releases the ring
	stopped  chan struct{}

	// Submits counts io_uring_enter calls that submitted, Ops the
	// requests completed.
	Submits, Ops atomic.Uint64
}

// New sets up a ring of at least entries submission slots and starts its
// reaper.
func New(entries uint32) (*Ring, error) {
	var p params
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, os.NewSyscallError("io_uring_setup", errno)
	}
	r := &Ring{fd: int(fd), entries: p.sqEntries, stopped: make(chan struct{})}
	r.room = sync.NewCond(&r.mu)
	if err := r.mapRings(&p); err != nil {
		r.unmap()
		_ = unix.Close(r.fd)
		return nil, err
	}
	// At most as many in flight as the SQ holds, so neither ring can
	// overflow (the CQ is at least as large).
	n := p.sqEntries
	r.inflight = make([]*request, n)
	r.free = make([]uint64, 0, n)
	for i := n; i > 0; i-- {
		r.free = append(r.free, uint64(i-1))
	}
	go r.reap()
	return r, nil
}
func (r *Ring) mapRings(p *params) error {
	sqSize := uintptr(p.sqOff.array) + uintptr(p.sqEntries)*4
	cqSize := uintptr(p.cqOff.cqes) + uintptr(p.cqEntries)*unsafe.Sizeof(cqe{})
	if p.features&featSingleMmap != 0 {
		sqSize = max(sqSize, cqSize)
		cqSize = sqSize
	}
	sq, err := unix.Mmap(r.fd, offSQRing, int(sqSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("uring: mmap the submission ring: %w", err)
	}
	r.mem = append(r.mem, sq)
	cq := sq
	if p.features&featSingleMmap == 0 {
		if cq, err = unix.Mmap(r.fd, offCQRing, int(cqSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			return fmt.Errorf("uring: mmap the completion ring: %w", err)
		}
		r.mem = append(r.mem, cq)
	}
	sqesMem, err := unix.Mmap(r.fd, offSQEs, int(uintptr(p.sqEntries)*unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("uring: mmap the submission entries: %w", err)
	}
	r.mem = append(r.mem, sqesMem)
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead, r.sqTail, r.sqMask, r.sqArray = u32(sq, p.sqOff.head), u32(sq, p.sqOff.tail), u32(sq, p.sqOff.ringMask), u32(sq, p.sqOff.array)
	r.cqHead, r.cqTail, r.cqMask = u32(cq, p.cqOff.head), u32(cq, p.cqOff.tail), u32(cq, p.cqOff.ringMask)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&sqesMem[0])), p.sqEntries)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&cq[p.cqOff.cqes])), p.cqEntries)
	return nil
}

func (r *Ring) unmap() {
	for _, m := range r.mem {
		_ = unix.Munmap(m)
	}
	r.mem = nil
}

// ReadAt reads len(b) bytes at off of fd, as pread does: a short count
// with a nil error only at the end of the file.
func (r *Ring) ReadAt(fd int, b []byte, off int64) (int, error) {
	return r.do(opRead, fd, b, off)
}

// WriteAt writes b at off of fd, as pwrite does.
func (r *Ring) WriteAt(fd int, b []byte, off int64) (int, error) {
	return r.do(opWrite, fd, b, off)
}

func (r *Ring) do(op uint8, fd int, b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	q := requests.Get().(*request)
	q.buf = b
	r.mu.Lock()
	for !r.closed && len(r.free) == 0 {
		r.room.Wait()
	}
	if r.closed {
		r.mu.Unlock()
		q.buf = nil
		requests.Put(q)
		return 0, ErrClosed
	}
	slot := r.free[len(r.free)-1]
	r.free = r.free[:len(r.free)-1]
	r.inflight[slot] = q
	errno := r.submit(sqe{opcode: op, fd: int32(fd), off: uint64(off), addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), len: uint32(len(b)), userData: slot})
	if errno != 0 {
		r.inflight[slot] = nil
		r.free = append(r.free, slot)
		r.mu.Unlock()
		q.buf = nil
		requests.Put(q)
		return 0, os.NewSyscallError("io_uring_enter", errno)
	}
	r.mu.Unlock()
	<-q.done
	res := q.res
	q.buf = nil
	requests.Put(q)
	if res < 0 {
		return 0, syscall.Errno(-res)
	}
	return int(res), nil
}

// submit puts e in the SQ and submits it, retrying while a signal (Go's
// preemption, EINTR) or a short-lived shortage (EAGAIN, EBUSY) cuts the
// call. On any other error the entry is taken back out. The caller holds
// mu, so entries are submitted one at a time, in order.
func (r *Ring) submit(e sqe) syscall.Errno {
	tail := atomic.LoadUint32(r.sqTail)
	i := tail & *r.sqMask
	r.sqes[i] = e
	*(*uint32)(unsafe.Add(unsafe.Pointer(r.sqArray), uintptr(i)*4)) = i
	atomic.StoreUint32(r.sqTail, tail+1)
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 0, 0, 0, 0)
		r.Submits.Add(1)
		switch {
		case errno == 0 && n == 1:
			return 0
		case errno == 0, errno == unix.EINTR, errno == unix.EAGAIN, errno == unix.EBUSY:
			if atomic.LoadUint32(r.sqHead) == tail+1 {
				return 0 // consumed after all
			}
			if errno == unix.EAGAIN || errno == unix.EBUSY {
				runtime.Gosched()
			}
		default:
			atomic.StoreUint32(r.sqTail, tail)
			return errno
		}
	}
}

// Close fails the calls that come after it with ErrClosed, waits for the
// I/O in flight and releases the ring.
func (r *Ring) Close() error {
	r.mu.Lock()
	if r.failed {
		r.failed = false // release once
		r.mu.Unlock()
		<-r.stopped
		r.unmap()
		return unix.Close(r.fd)
	}
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	r.closed = true
	r.room.Broadcast()
	// A NOP's completion wakes the reaper from its wait; it then exits
	// once nothing else is in flight.
	errno := r.submit(sqe{opcode: opNop, userData: closeSlot})
	r.mu.Unlock()
	if errno != 0 {
		return os.NewSyscallError("io_uring_enter", errno)
	}
	<-r.stopped
	r.unmap()
	return unix.Close(r.fd)
}

// reap waits for completions and hands each to its caller, until Close's
// NOP has completed and nothing else is in flight.
func (r *Ring) reap() {
	defer close(r.stopped)
	mask := *r.cqMask
	closing := false
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 1, enterGetEvents, 0, 0)
		if errno != 0 && errno != unix.EINTR && errno != unix.EAGAIN && errno != unix.EBUSY {
			// Nothing a retry would cure; there is no caller to tell but
			// the ones waiting, who get the error below.
			r.failAll(errno)
			return
		}
		head := atomic.LoadUint32(r.cqHead)
		tail := atomic.LoadUint32(r.cqTail)
		if head == tail {
			continue
		}
		r.mu.Lock()
		for ; head != tail; head++ {
			c := r.cqes[head&mask]
			if c.userData == closeSlot {
				closing = true
				continue
			}
			q := r.inflight[c.userData]
			r.inflight[c.userData] = nil
			r.free = append(r.free, c.userData)
			q.res = c.res
			// Counted before its caller wakes, so a caller that reads
			// Ops after its I/O sees the I/O counted.
			r.Ops.Add(1)
			q.done <- struct{}{}
		}
		atomic.StoreUint32(r.cqHead, head)
		r.room.Broadcast()
		idle := len(r.free) == len(r.inflight)
		r.mu.Unlock()
		if closing && idle {
			return
		}
	}
}

// failAll answers every request in flight with errno (the ring itself
// failed: io_uring_enter refused to wait, which on a ring fd that is open
// does not happen in practice) and closes the ring to new ones, whose
// callers then fall back to pread/pwrite.
func (r *Ring) failAll(errno syscall.Errno) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		// Nobody called Close: the next Close releases the ring.
		r.closed, r.failed = true, true
	}
	for slot, q := range r.inflight {
		if q != nil {
			q.res = -int32(errno)
			q.done <- struct{}{}
			r.inflight[slot] = nil
		}
	}
	r.room.Broadcast()
}
