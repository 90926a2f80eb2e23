//go:build linux

// Package uring submits positioned reads and writes through one io_uring
// instance, so many goroutines' small disk I/Os reach the kernel in one
// system call instead of one each.
//
// Each caller of ReadAt or WriteAt puts its request in the submission
// queue and blocks until it completes. The first caller to find no
// submission under way submits (a system call that starts the I/O and
// does not wait for it), and keeps submitting, one call for all of them,
// the requests others queued during its call, until none is left; the
// others only queue and wait. So concurrent callers share system calls
// (on a virtual disk each call also costs an exit to the host to kick the
// device), and no lock is held across one. One reaper goroutine waits for
// completions, parked on the Go runtime's poller (the ring's fd is
// readable while completions wait), and hands each back to its caller.
// The disk sees as many requests in flight as there are callers (up to
// the ring's size), while no thread blocks per I/O as it does in pread:
// the goroutines waiting cost no threads, and the reaper collects many
// completions per wait.
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
	"time"
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

	// mu guards the SQ, the slots, submitting and closed; room is
	// signalled when a slot frees and when a submitter finishes.
	mu         sync.Mutex
	room       *sync.Cond
	submitting bool       // a caller is submitting the queue (mu released during its system calls)
	inflight   []*request // by slot, the user_data of its SQE
	free       []uint64   // free slots
	closed     bool
	failed     bool          // the reaper stopped on an error; Close still releases the ring
	closeErr   syscall.Errno // submitting Close's NOP failed
	stopped    chan struct{}

	// file owns fd; poll, where the runtime's poller holds the ring, is
	// how the reaper waits for completions.
	file  *os.File
	poll  syscall.RawConn
	ready func(uintptr) bool // poll.Read's check: a completion waits; made once

	// Submits counts io_uring_enter calls that submitted (one may carry
	// many requests), Ops the requests completed.
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
	r.file, r.poll = pollable(r.fd, usePoller)
	r.ready = func(uintptr) bool { return atomic.LoadUint32(r.cqHead) != atomic.LoadUint32(r.cqTail) }
	go r.reap()
	return r, nil
}

// pollable gives the ring fd to an os.File (which closes it) and, where
// the Go runtime's poller (epoll) takes it, returns the way to wait on it
// there: the ring is readable while completions wait. The reaper then
// waits as a goroutine parked on the poller rather than as a thread
// blocked in io_uring_enter, so a wake-up costs a goroutine switch, not a
// thread's wake-up and a hand-off of its processor, which at small I/Os
// is a fair share of each request's time. With nil the reaper blocks in
// the kernel instead.
func pollable(fd int, try bool) (*os.File, syscall.RawConn) {
	nonblock := try && unix.SetNonblock(fd, true) == nil
	f := os.NewFile(uintptr(fd), "io_uring") // polled when non-blocking
	if nonblock {
		// A file the poller does not hold refuses deadlines.
		if f.SetReadDeadline(time.Time{}) == nil {
			if rc, err := f.SyscallConn(); err == nil {
				return f, rc
			}
		}
		_ = unix.SetNonblock(fd, false)
	}
	return f, nil
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
	if off < 0 {
		// pread refuses it; the ring would take -1 as "the file's
		// current position".
		return 0, syscall.EINVAL
	}
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
	r.push(sqe{opcode: op, fd: int32(fd), off: uint64(off), addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), len: uint32(len(b)), userData: slot})
	if !r.submitting {
		r.submitQueued() // else the caller submitting takes ours along
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

// usePoller is false in tests of the reaper that blocks in the kernel.
var usePoller = true

// waitHook, when a test sets it, runs before each wait of the reaper; a
// non-zero errno is what the wait returns instead of waiting.
var waitHook func(r *Ring) syscall.Errno

// enterHook, when a test sets it, runs before each submitting system call,
// with mu released.
var enterHook func()

// push puts e at the tail of the SQ, not yet submitted. The caller holds
// mu; the in-flight bound keeps the SQ from filling.
func (r *Ring) push(e sqe) {
	tail := atomic.LoadUint32(r.sqTail)
	i := tail & *r.sqMask
	r.sqes[i] = e
	*(*uint32)(unsafe.Add(unsafe.Pointer(r.sqArray), uintptr(i)*4)) = i
	atomic.StoreUint32(r.sqTail, tail+1)
}

// submitQueued submits what the SQ holds, with mu released during each
// system call, until the SQ is empty: entries pushed meanwhile go with the
// next call. It retries while a signal (Go's preemption, EINTR) or a
// short-lived shortage (EAGAIN, EBUSY) cuts a call. On any other error the
// entries not taken are taken back out and their callers get the error.
// Only the submitter enters the kernel with entries to submit (the reaper
// submits none), so the kernel consumes the SQ only during these calls.
// Called with mu held; returns with it held.
func (r *Ring) submitQueued() {
	r.submitting = true
	for {
		head, tail := atomic.LoadUint32(r.sqHead), atomic.LoadUint32(r.sqTail)
		if head == tail {
			break
		}
		r.mu.Unlock()
		if enterHook != nil {
			enterHook()
		}
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(tail-head), 0, 0, 0, 0)
		r.Submits.Add(1)
		if errno == unix.EAGAIN || errno == unix.EBUSY {
			runtime.Gosched()
		}
		r.mu.Lock()
		switch errno {
		case 0, unix.EINTR, unix.EAGAIN, unix.EBUSY:
		default:
			r.failQueued(errno)
		}
	}
	r.submitting = false
	r.room.Broadcast() // Close may wait for the submitter to finish
}

// failQueued takes the entries the kernel has not consumed back out of the
// SQ and answers their callers with errno. The caller holds mu.
func (r *Ring) failQueued(errno syscall.Errno) {
	head, tail := atomic.LoadUint32(r.sqHead), atomic.LoadUint32(r.sqTail)
	for i := head; i != tail; i++ {
		slot := r.sqes[i&*r.sqMask].userData
		if slot == closeSlot {
			r.closeErr = errno
			continue
		}
		q := r.inflight[slot]
		if q == nil {
			continue // answered already
		}
		r.inflight[slot] = nil
		r.free = append(r.free, slot)
		q.res = -int32(errno)
		q.done <- struct{}{}
	}
	atomic.StoreUint32(r.sqTail, head)
	r.room.Broadcast()
}

// Close fails the calls that come after it with ErrClosed, waits for the
// I/O in flight and releases the ring.
func (r *Ring) Close() error {
	r.mu.Lock()
	if r.failed {
		r.failed = false // release once
		for r.submitting {
			r.room.Wait() // it reads the rings after its system call
		}
		r.mu.Unlock()
		<-r.stopped
		r.unmap()
		return r.file.Close()
	}
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	r.closed = true
	r.room.Broadcast()
	// No caller queues after closed; one submitting still may be in its
	// system call, and submits the NOP below only if it looks again.
	for r.submitting {
		r.room.Wait()
	}
	// A NOP's completion wakes the reaper from its wait; it then exits
	// once nothing else is in flight.
	r.push(sqe{opcode: opNop, userData: closeSlot})
	r.submitQueued()
	errno := r.closeErr
	r.mu.Unlock()
	if errno != 0 {
		return os.NewSyscallError("io_uring_enter", errno)
	}
	<-r.stopped
	r.unmap()
	return r.file.Close()
}

// reap waits for completions and hands each to its caller, until Close's
// NOP has completed and nothing else is in flight.
func (r *Ring) reap() {
	defer close(r.stopped)
	mask := *r.cqMask
	closing := false
	for {
		errno := r.wait()
		if errno != 0 && errno != unix.EINTR && errno != unix.EAGAIN && errno != unix.EBUSY {
			// Nothing a retry would cure.
			r.drain()
			return
		}
		if done, _ := r.reapReady(mask, &closing); done {
			return
		}
	}
}

// reapReady hands every completion in the CQ to its caller and reports
// whether the reaper is done (Close's NOP completed and nothing else is in
// flight) and whether nothing is in flight.
func (r *Ring) reapReady(mask uint32, closing *bool) (done, idle bool) {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	r.mu.Lock()
	if head != tail {
		for ; head != tail; head++ {
			c := r.cqes[head&mask]
			if c.userData == closeSlot {
				*closing = true
				continue
			}
			q := r.inflight[c.userData]
			if q == nil {
				continue // failQueued answered it already
			}
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
	}
	idle = len(r.free) == len(r.inflight)
	r.mu.Unlock()
	return *closing && idle, idle
}

// drainPoll is how often drain looks at the CQ.
const drainPoll = time.Millisecond

// drain is the reaper after its wait failed (io_uring_enter
// refused to wait, which on a ring fd that is open does not happen in
// practice). The ring takes no new requests (their callers fall back to
// pread and pwrite; the next Close releases it), but the ones in flight
// are not failed: the kernel may still be moving bytes into or out of
// their buffers, which their callers would reuse. The CQ is shared
// memory the kernel posts to without being asked, so drain looks at it
// every drainPoll, with a non-blocking enter to run the kernel's
// completion work, and answers each request with its own result, until
// none is in flight.
func (r *Ring) drain() {
	r.mu.Lock()
	if !r.closed {
		// Nobody called Close: the next Close releases the ring.
		r.closed, r.failed = true, true
	}
	r.room.Broadcast()
	r.mu.Unlock()
	mask := *r.cqMask
	closing := false
	for {
		_, _, _ = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 0, enterGetEvents, 0, 0)
		if _, idle := r.reapReady(mask, &closing); idle {
			return
		}
		time.Sleep(drainPoll)
	}
}

// wait returns when the CQ holds a completion (or, blocking in the kernel,
// when a signal cut the wait).
func (r *Ring) wait() syscall.Errno {
	if waitHook != nil {
		if errno := waitHook(r); errno != 0 {
			return errno
		}
	}
	if r.poll == nil {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 1, enterGetEvents, 0, 0)
		return errno
	}
	err := r.poll.Read(r.ready)
	if err == nil {
		return 0
	}
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		return errno
	}
	return unix.EIO // the poller failed the file: nothing a retry cures
}
