package embed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// pipeListener hands the node the server ends of the connections the
// client dials: the same frames as over TCP, over anonymous socket pairs,
// with no port and no name anyone else could connect to.
type pipeListener struct {
	conns     chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept waits for the next connection the client dials.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and DialContext.
func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

// Addr is the name the client knows the node by.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// DialContext connects to the node: the client's wire/client.Dialer.
func (l *pipeListener) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	client, server, err := socketPair()
	if err != nil {
		return nil, err
	}
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, errors.New("embedded store is closed")
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// pipeAddr names the embedded node.
type pipeAddr struct{}

// Address is the member address an embedded client dials; it never
// reaches a socket.
const Address = "embedded:0"

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return Address }

// socketPair returns the two ends of an anonymous Unix stream socket
// pair: kernel-buffered in both directions like TCP (so a side that
// writes while the other writes too does not deadlock, as with an
// unbuffered net.Pipe), with deadlines through the runtime's poller, and
// no name in the filesystem or the network.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("embedded store: socketpair: %w", err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "dfkv-embedded")
		c, err := net.FileConn(f) // dups fd
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				unix.Close(fds[1])
			}
			return nil, nil, fmt.Errorf("embedded store: %w", err)
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}
