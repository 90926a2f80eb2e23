package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire/client"
)

// TestRDMACallHonoursCancel: TestRDMACallEndsByItsDeadline with a
// cancelled context instead of a deadline: as over TCP, the call ends
// with context.Canceled, not when the stalled operation completes. Run
// against the in-process fake provider, not RDMA hardware.
func TestRDMACallHonoursCancel(t *testing.T) {
	fake := rdma.NewFake("fk0")
	addr := runNode(t, server.Deps{RDMAProvider: fake}, nil)
	cl, err := client.Open(client.Options{Namespace: []byte("rdma"), Members: []string{addr}, SharedMemory: client.ShmOff,
		RDMA: &rdma.ClientOptions{Provider: fake, BufferBytes: 8 << 20, OpTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bg := context.Background()
	val := bytes.Repeat([]byte("R"), 1<<20)
	if err := cl.Put(bg, []byte("a"), val); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 1<<20)
	if _, _, err := cl.Get(bg, []byte("a"), dst); err != nil {
		t.Fatal(err)
	}
	fake.SetHook(func(rdma.FakeOp) rdma.FakeFault { time.Sleep(3 * time.Second); return rdma.FaultNone })
	defer fake.SetHook(nil)
	ctx, cancel := context.WithCancel(bg)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, _, err = cl.Get(ctx, []byte("a"), dst)
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("GET over a stalled RDMA connection, cancelled after 200 ms: took %v, err %v; want context.Canceled", took, err)
	}
	t.Logf("cancelled after %v (each stalled operation takes 3 s)", took)
}
