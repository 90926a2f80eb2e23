package server

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// An evloop serves the small requests of idle connections without a
// goroutine per connection. A connection whose last request was small
// (EXIST, PING, a buffered BATCH_EXIST) parks in a loop when it has nothing
// buffered; the loop's epoll reports when its next request arrives, reads
// it with one read(2), answers every complete small request in the buffer
// and writes the replies with one write(2). Anything else (a value to
// read or write, a partial frame, a malformed one, a reply the socket
// cannot take at once) hands the connection back to a goroutine that
// serves it as before, from the bytes already buffered.
//
// Why: waiting on Go's netpoller costs every request a read that returns
// EAGAIN, a goroutine park and a wake-up through the scheduler; for a
// request answered from memory in a microsecond that overhead is about a
// fifth of the node's CPU per request (issue 5: EXIST throughput against
// memcached, which serves the same way).
//
// The loop's epoll set is level-triggered, so a connection handed back to
// it with bytes already waiting is reported at once and no readiness is
// lost across a hand-off. The loop itself waits in Go's netpoller, on the
// epoll descriptor (readable when any connection in it is): a blocking
// epoll_wait would make the runtime hand the loop's P to another thread on
// every wait, which costs more than the goroutines it replaces.
//
// A parked connection belongs to its loop alone: only the loop serves,
// hands off or closes it, and its socket I/O goes through the
// connection's RawConn, so a concurrent forced close cannot make it touch
// a recycled descriptor.
type evloop struct {
	s    *Server
	epfd int
	ep   *os.File        // epfd, registered with Go's netpoller
	rc   syscall.RawConn // ep's, for waiting on it
	wake int             // eventfd: shutdown asks the loop to close its stopped connections

	mu     sync.Mutex
	conns  map[int32]*conn // parked connections by descriptor
	closed bool
	done   chan struct{}
}

// Descriptors registered with epoll are keyed by their number; the
// eventfd is told apart by its own number.
const loopEvents = 128

func newEvloop(s *Server) (*evloop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("event loop: epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("event loop: non-blocking epoll descriptor: %w", err)
	}
	ep := os.NewFile(uintptr(epfd), "epoll") // owns epfd from here on
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("event loop: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		ep.Close()
		return nil, fmt.Errorf("event loop: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(wake)
		ep.Close()
		return nil, fmt.Errorf("event loop: registering its eventfd: %w", err)
	}
	l := &evloop{s: s, epfd: epfd, ep: ep, rc: rc, wake: wake, conns: make(map[int32]*conn), done: make(chan struct{})}
	go l.run()
	return l, nil
}

// park registers c, which must be idle with nothing buffered, so the loop
// serves it from now on. The caller holds c.mu.
func (l *evloop) park(c *conn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("event loop closed")
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: c.fd}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, int(c.fd), &ev); err != nil {
		return fmt.Errorf("event loop: epoll_ctl add: %w", err)
	}
	l.conns[c.fd] = c
	c.loop = l
	l.s.stats.parked.Add(1)
	return nil
}

// unpark removes c from the loop; it is called on the loop's goroutine.
func (l *evloop) unpark(c *conn) {
	l.mu.Lock()
	delete(l.conns, c.fd)
	l.mu.Unlock()
	l.s.stats.parked.Add(-1)
	// A descriptor already closed left the epoll set by itself; any other
	// failure leaves nothing to undo.
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, int(c.fd), nil)
	c.mu.Lock()
	c.loop = nil
	c.mu.Unlock()
}

// kick wakes the loop so it closes the connections shutdown stopped.
func (l *evloop) kick() {
	var one = [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

// close stops the loop once every connection has left it.
func (l *evloop) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.kick()
	<-l.done
	unix.Close(l.wake)
	l.ep.Close()
}

func (l *evloop) run() {
	defer close(l.done)
	events := make([]unix.EpollEvent, loopEvents)
	exit := false
	var waitErr error
	// One RawConn.Read for the loop's whole life: the callback returns
	// false to wait in the netpoller until the epoll descriptor is
	// readable, and readiness that arrives while it serves is kept for
	// that wait (it is reset only once, before the first call).
	err := l.rc.Read(func(uintptr) bool {
		for {
			n, err := unix.EpollWait(l.epfd, events, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				waitErr = err
				return true
			}
			if n == 0 {
				return false
			}
			again := n == len(events)
			for i := range n {
				fd := events[i].Fd
				if fd == int32(l.wake) {
					if l.onKick() {
						exit = true
						return true
					}
					continue
				}
				l.mu.Lock()
				c := l.conns[fd]
				l.mu.Unlock()
				if c != nil && l.serve(c) {
					again = true
				}
			}
			// A connection read only in part stays ready, but the
			// netpoller reports the epoll descriptor only when new
			// readiness arrives: look again before waiting.
			if !again {
				return false
			}
		}
	})
	if exit {
		return
	}
	if err == nil {
		err = waitErr
	}
	l.s.log.Error("event loop failed; its connections are closed", "error", err.Error())
	l.closeAll()
}

// onKick closes the stopped connections; it reports whether the loop is
// closed and should exit. A parked connection is idle even when the start
// of its next request prefix has arrived: nothing of that request was
// executed, and shutdown closes it like any idle connection.
func (l *evloop) onKick() bool {
	var buf [8]byte
	_, _ = unix.Read(l.wake, buf[:])
	l.mu.Lock()
	closed := l.closed
	parked := make([]*conn, 0, len(l.conns))
	for _, c := range l.conns {
		parked = append(parked, c)
	}
	l.mu.Unlock()
	// c.mu is taken only after l.mu is released: park holds c.mu while it
	// takes l.mu.
	for _, c := range parked {
		if c.isStopped() {
			l.unpark(c)
			c.finish()
		}
	}
	return closed
}

func (l *evloop) closeAll() {
	l.mu.Lock()
	all := make([]*conn, 0, len(l.conns))
	for _, c := range l.conns {
		all = append(all, c)
	}
	l.closed = true
	l.mu.Unlock()
	for _, c := range all {
		l.unpark(c)
		c.finish()
	}
}

// serve answers what c's readable socket brought, then leaves c parked,
// hands it to a goroutine, or closes it. It reports whether c stayed
// parked with unread bytes in its socket (its read filled the buffer).
func (l *evloop) serve(c *conn) (more bool) {
	if !c.begin() {
		l.unpark(c)
		c.finish()
		return false
	}
	outcome, more := c.serveParked()
	switch outcome {
	case parkedIdle:
		if c.end() {
			return more
		}
		l.unpark(c)
		c.finish()
	case parkedHandOff:
		l.unpark(c)
		c.end() // the goroutine begins the buffered request itself
		go c.run()
	case parkedEnd:
		l.unpark(c)
		c.finish()
	}
	return false
}
