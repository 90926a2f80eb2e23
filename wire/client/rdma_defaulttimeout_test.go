package client_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// With the defaults, client.Options.Timeout (10 s) and the RDMA
// OpTimeout (10 s) are equal, and the deadline a call without one of its
// own gets from Timeout is computed before the RDMA call's: it is always
// the earlier, so every RDMA call counts as "cut by the caller's own
// deadline". A node whose RDMA reads never complete then never has RDMA
// turned off: every call spends its whole Timeout on RDMA and fails,
// instead of the first failure moving the node to TCP for rdmaRetry.
// (Here both timeouts are 300 ms, equal as the defaults are.)
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
