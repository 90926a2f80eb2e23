package server

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair is a connected loopback TCP pair: a (the node's side) and b.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	bc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ac := <-accepted
	if ac == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { ac.Close(); bc.Close() })
	return ac.(*net.TCPConn), bc.(*net.TCPConn)
}

// TestRawSockWritesAcrossFullBuffers: a reply larger than the socket's
// send buffer and than maxRawCall, behind a header, arrives whole and in
// order at a reader that drains slowly: the writev resumes where each
// partial write stopped, across both vectors, after waiting for room.
func TestRawSockWritesAcrossFullBuffers(t *testing.T) {
	a, b := tcpPair(t)
	_ = a.SetWriteBuffer(4 << 10) // so writes stop part-way
	r := newRawSock(a)
	if r == nil {
		t.Fatal("no raw socket for a TCP connection")
	}
	head := []byte("header-of-18-bytes")
	body := make([]byte, 3*maxRawCall+12345)
	rng := rand.NewChaCha8([32]byte{7})
	_, _ = rng.Read(body)
	got := make(chan []byte, 1)
	go func() {
		var all bytes.Buffer
		buf := make([]byte, 64<<10)
		for all.Len() < len(head)+len(body) {
			n, err := b.Read(buf)
			all.Write(buf[:n])
			if err != nil {
				break
			}
			if all.Len() < 1<<20 {
				// Slow at first, so the writer fills the real socket's
				// buffer and waits for room (nothing else forces it).
				time.Sleep(time.Millisecond)
			}
		}
		got <- all.Bytes()
	}()
	n, err := r.writev(head, body)
	if err != nil || n != len(head)+len(body) {
		t.Fatalf("writev: %d bytes, %v; want %d, nil", n, err, len(head)+len(body))
	}
	all := <-got
	if !bytes.Equal(all[:len(head)], head) || !bytes.Equal(all[len(head):], body) {
		t.Fatal("the bytes that arrived differ from the bytes written")
	}
}

// TestRawSockReadDeadlineAndEOF: Read honours the connection's read
// deadline (the node's first-request and shutdown deadlines rely on it),
// returns what has arrived, and io.EOF once the peer has closed.
func TestRawSockReadDeadlineAndEOF(t *testing.T) {
	a, b := tcpPair(t)
	r := newRawSock(a)
	_ = a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	buf := make([]byte, 64)
	if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = a.SetReadDeadline(time.Time{})
	if _, err := b.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read: %q, %v; want hello", buf[:n], err)
	}
	b.Close()
	if _, err := r.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
}

// TestRawSockWriteDeadline: a writer whose reader never reads gives up at
// the write deadline, reporting how much went out.
func TestRawSockWriteDeadline(t *testing.T) {
	a, _ := tcpPair(t)
	_ = a.SetWriteBuffer(4 << 10)
	r := newRawSock(a)
	_ = a.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	body := make([]byte, 64<<20) // far more than both socket buffers hold
	n, err := r.writev(nil, body)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= len(body) {
		t.Fatalf("writev to a reader that never reads: %d bytes, %v; want fewer than %d and os.ErrDeadlineExceeded", n, err, len(body))
	}
}

// TestRawSockAllocatesNothing: a read and a two-part write cost no
// allocation (the node's GET and PUT paths make one of each per request).
func TestRawSockAllocatesNothing(t *testing.T) {
	a, b := tcpPair(t)
	r := newRawSock(a)
	head, body := make([]byte, 18), make([]byte, 4096)
	in := make([]byte, 4096)
	echo := make([]byte, len(head)+len(body))
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := r.writev(head, body); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, echo); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Write(in[:100]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, in[:100]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per read and write, want 0", allocs)
	}
}

// TestRawSockNeedsADescriptor: a connection without one (net.Pipe) gets
// no raw socket, and the node keeps using the connection itself.
func TestRawSockNeedsADescriptor(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if newRawSock(a) != nil {
		t.Fatal("a raw socket for a connection with no file descriptor")
	}
}

// TestRawSockReadIsBounded: one Read moves at most maxRawCall bytes even
// when more are buffered and asked for (a PUT's value is read straight
// into its slot), and the rest follows intact.
func TestRawSockReadIsBounded(t *testing.T) {
	a, b := tcpPair(t)
	_ = a.SetReadBuffer(4 << 20) // room for more than maxRawCall to wait
	r := newRawSock(a)
	sent := make([]byte, 3*maxRawCall)
	rng := rand.NewChaCha8([32]byte{9})
	_, _ = rng.Read(sent)
	wrote := make(chan error, 1)
	go func() { _, err := b.Write(sent); wrote <- err }()
	if err := <-wrote; err != nil { // all of it is in the sockets' buffers
		t.Fatal(err)
	}
	got := make([]byte, len(sent))
	n, err := r.Read(got)
	if err != nil || n == 0 || n > maxRawCall {
		t.Fatalf("one read of %d buffered bytes: %d, %v; want 1 to %d", len(sent), n, err, maxRawCall)
	}
	if _, err := io.ReadFull(r, got[n:]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes read differ from the bytes sent")
	}
}
