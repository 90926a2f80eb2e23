package client_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// The RDMA dial a call makes ends with the call's context, as the TCP dial
// does (cancel_dial_test.go): here the node's RDMA bootstrap never answers
// (a blackholed dial, DialTimeout an hour) and the caller cancels.
func TestRDMADialEndsWithTheCallsContext(t *testing.T) {
	fake := rdma.NewFake("fk0")
	addr := runNode(t, server.Deps{RDMAProvider: fake}, nil)
	release := make(chan struct{})
	blackhole := func(ctx context.Context, _ string) (net.Conn, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-release:
			return nil, errors.New("test over")
		}
	}
	cl, err := client.Open(client.Options{Namespace: []byte("rdma"), Members: []string{addr}, SharedMemory: client.ShmOff,
		RDMA: &rdma.ClientOptions{Provider: fake, BufferBytes: 1 << 20, DialTimeout: time.Hour, Dial: blackhole}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		_, _, err := cl.Get(ctx, []byte("a"), make([]byte, 16))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("GET cancelled while its RDMA dial hangs: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GET cancelled while its RDMA dial hangs did not return: the RDMA dial ignores the call's context (it runs under DialTimeout)")
	}
}

// A caller whose own deadline passes while its call is over RDMA gave up;
// that says nothing about the node's RDMA: the next call still goes over
// RDMA, rather than every caller being served over TCP for rdmaRetry.
func TestRDMACallersDeadlineDoesNotTurnRDMAOff(t *testing.T) {
	fake := rdma.NewFake("fk0")
	addr := runNode(t, server.Deps{RDMAProvider: fake}, nil)
	cl, err := client.Open(client.Options{Namespace: []byte("rdma"), Members: []string{addr}, SharedMemory: client.ShmOff,
		RDMA: &rdma.ClientOptions{Provider: fake, BufferBytes: 8 << 20, OpTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	bg := context.Background()
	val := bytes.Repeat([]byte("R"), 4096)
	if err := cl.Put(bg, []byte("a"), val); err != nil {
		t.Fatal(err)
	}
	var stalled atomic.Bool
	var ops atomic.Int64
	fake.SetHook(func(rdma.FakeOp) rdma.FakeFault {
		ops.Add(1)
		if stalled.Load() {
			time.Sleep(500 * time.Millisecond)
		}
		return rdma.FaultNone
	})
	t.Cleanup(func() { fake.SetHook(nil) })
	stalled.Store(true)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	dst := make([]byte, 4096)
	_, _, err = cl.Get(ctx, []byte("a"), dst)
	cancel()
	if wire.StatusOf(err) != wire.StatusTimeout {
		t.Fatalf("GET past its caller's deadline: %v, want TIMEOUT", err)
	}
	stalled.Store(false)
	ops.Store(0)
	if n, _, err := cl.Get(bg, []byte("a"), dst); err != nil || !bytes.Equal(dst[:n], val) {
		t.Fatalf("GET after: %v", err)
	}
	if ops.Load() == 0 {
		t.Fatal("the next call went over TCP: one caller's own deadline turned RDMA to the node off for rdmaRetry")
	}
}

// With the defaults, client.Options.Timeout and the RDMA OpTimeout are
// equal (10 s), and the deadline a call without one of its own gets from
// Timeout comes first: that is not the caller's own deadline. A node
// whose RDMA reads never complete has RDMA turned off at the first
// timeout, and the next call goes over TCP. (Here both timeouts are
// 300 ms, equal as the defaults are.)
func TestRDMAStalledNodeTurnsRDMAOffWithEqualDefaultTimeouts(t *testing.T) {
	fake := rdma.NewFake("fk0")
	addr := runNode(t, server.Deps{RDMAProvider: fake}, nil)
	const timeout = 300 * time.Millisecond
	cl, err := client.Open(client.Options{Namespace: []byte("rdma"), Members: []string{addr}, SharedMemory: client.ShmOff,
		Timeout: timeout, RDMA: &rdma.ClientOptions{Provider: fake, BufferBytes: 8 << 20, OpTimeout: timeout, BatchOpTimeout: timeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	bg := context.Background()
	val := bytes.Repeat([]byte("R"), 4096)
	if err := cl.Put(bg, []byte("a"), val); err != nil {
		t.Fatal(err)
	}
	var stalled atomic.Bool
	var ops atomic.Int64
	fake.SetHook(func(rdma.FakeOp) rdma.FakeFault {
		ops.Add(1)
		if stalled.Load() {
			time.Sleep(3 * timeout) // the node's RDMA reads hang
		}
		return rdma.FaultNone
	})
	t.Cleanup(func() { fake.SetHook(nil) })
	stalled.Store(true)
	dst := make([]byte, 4096)
	// No deadline of the caller's own: the call's comes from Timeout.
	if _, _, err := cl.Get(bg, []byte("a"), dst); wire.StatusOf(err) != wire.StatusTimeout {
		t.Logf("first GET with the node's RDMA hung: %v", err)
	}
	if ops.Load() == 0 {
		t.Fatal("precondition: the first GET did not go over RDMA")
	}
	ops.Store(0)
	n, _, err := cl.Get(bg, []byte("a"), dst)
	if ops.Load() != 0 {
		t.Errorf("the GET after an RDMA call timed out under the transport's own (default-equal) timeout went over RDMA again "+
			"(%d work requests): the client's own Timeout counted as the caller's deadline, so RDMA to the node is never turned off", ops.Load())
	}
	if err != nil || !bytes.Equal(dst[:n], val) {
		t.Errorf("GET after: %v (a node whose RDMA hangs is never served over TCP)", err)
	}
}
