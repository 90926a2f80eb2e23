package server

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxRawCall bounds the bytes one read or writev moves: a raw system call
// holds its P and cannot be preempted, so a garbage collection waiting to
// stop the world waits for it, and a socket's buffers can hold tens of
// MiB; 1 MiB keeps one call to a fraction of a millisecond of copying.
const maxRawCall = 1 << 20

// rawSock reads and writes a connection's socket with raw system calls
// (unix.RawSyscall), waiting through the netpoller (syscall.RawConn) only
// when the socket says EAGAIN, so the runtime's deadlines still apply.
//
// Why: net.Conn's Read and Write enter the system call through the
// scheduler (entersyscall/exitsyscall), which after an idle spell wakes
// the runtime's sysmon thread into polling, and a long write can lose its
// P to another thread; both cost CPU per large GET at low concurrency.
// Socket calls on a non-blocking descriptor never block, so nothing is
// lost by not telling the scheduler about them; maxRawCall bounds how
// long one runs.
//
// The callbacks are bound once, so a call allocates nothing. One rawSock
// serves one connection's goroutine: it is not safe for concurrent use.
type rawSock struct {
	rc      syscall.RawConn
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool

	// The current call's arguments and results.
	p    []byte
	bufs [2][]byte
	iov  [2]unix.Iovec
	n    int
	err  error
}

// newRawSock returns nil when nc has no file descriptor to call on (a
// net.Pipe in a test, say); the caller then keeps using nc.
func newRawSock(nc net.Conn) *rawSock {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawSock{rc: rc}
	r.readFn = r.doRead
	r.writeFn = r.doWrite
	return r
}

// Read implements io.Reader: at most len(p) bytes, as soon as any are
// there; io.EOF once the peer has closed.
func (r *rawSock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err = p, 0, nil
	err := r.rc.Read(r.readFn)
	r.p = nil
	if err != nil {
		return 0, err // a deadline, or the connection closed under us
	}
	return r.n, r.err
}

func (r *rawSock) doRead(fd uintptr) bool {
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(min(len(r.p), maxRawCall)))
	switch {
	case e == unix.EAGAIN:
		return false // wait for the socket to become readable
	case e == unix.EINTR:
		return r.doRead(fd)
	case e != 0:
		r.err = e
	case n == 0:
		r.err = io.EOF
	default:
		r.n = int(n)
	}
	return true
}

// writev writes a and then b in full, or fails; it returns how many bytes
// went out.
func (r *rawSock) writev(a, b []byte) (int, error) {
	r.bufs[0], r.bufs[1] = a, b
	r.n, r.err = 0, nil
	err := r.rc.Write(r.writeFn)
	r.bufs[0], r.bufs[1] = nil, nil
	r.iov = [2]unix.Iovec{}
	if err == nil {
		err = r.err
	}
	return r.n, err
}

func (r *rawSock) doWrite(fd uintptr) bool {
	for {
		cnt, room := 0, maxRawCall
		for i := range r.bufs {
			if k := min(len(r.bufs[i]), room); k > 0 {
				r.iov[cnt].Base = &r.bufs[i][0]
				r.iov[cnt].SetLen(k)
				cnt++
				room -= k
			}
		}
		if cnt == 0 {
			return true
		}
		n, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(cnt))
		switch e {
		case 0:
		case unix.EAGAIN:
			return false // wait for room in the socket's send buffer
		case unix.EINTR:
			continue
		default:
			r.err = e
			return true
		}
		r.n += int(n)
		for i, k := 0, int(n); i < len(r.bufs) && k > 0; i++ {
			d := min(k, len(r.bufs[i]))
			r.bufs[i] = r.bufs[i][d:]
			k -= d
		}
	}
}
