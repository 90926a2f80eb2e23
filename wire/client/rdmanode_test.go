package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TestClientOverRDMA runs the client's RDMA path against a real node, both
// over rdma's in-process fake verbs provider: not a hardware test (the
// test machines have no RDMA device). Values written over RDMA read back
// over RDMA and over TCP; a buffer too small is ErrBufferTooSmall as over
// TCP; when the RDMA connection breaks mid-call the call is served over
// TCP instead, and the node keeps no registration of it.
func TestClientOverRDMA(t *testing.T) {
	fake, viaRDMA, viaTCP := rdmaNode(t, 8<<20)
	bg := context.Background()
	val := bytes.Repeat([]byte("R"), 1<<20)
	if err := viaRDMA.Put(bg, []byte("a"), val); err != nil {
		t.Fatal(err)
	}
	if errs := viaRDMA.PutBatch(bg, [][]byte{[]byte("b"), []byte("c")}, [][]byte{[]byte("bee"), val[:4097]}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	got, err := viaTCP.GetAuto(bg, []byte("a"))
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("a value PUT over RDMA, read over TCP: %v", err)
	}
	dst := make([]byte, 1<<20)
	if n, stored, err := viaRDMA.Get(bg, []byte("a"), dst); err != nil || stored != 1<<20 || !bytes.Equal(dst[:n], val) {
		t.Fatalf("GET over RDMA: %d of %d, %v", n, stored, err)
	}
	res := viaRDMA.GetBatch(bg, [][]byte{[]byte("b"), []byte("c"), []byte("none"), []byte("a")},
		[][]byte{make([]byte, 3), make([]byte, 4097), make([]byte, 8), make([]byte, 100)})
	if string(res[0].Data) != "bee" || !bytes.Equal(res[1].Data, val[:4097]) || wire.StatusOf(res[2].Err) != wire.StatusNotFound ||
		res[3].Err != client.ErrBufferTooSmall || res[3].Stored != 1<<20 || !bytes.Equal(res[3].Data, val[:100]) {
		t.Fatalf("GetBatch over RDMA: %+v", res)
	}
	if fake.Registered() == 0 {
		t.Fatal("nothing registered: the calls did not go over RDMA")
	}
	// Break every RDMA connection: the next call still answers, over TCP.
	fake.SetHook(func(rdma.FakeOp) rdma.FakeFault { return rdma.FaultBreak })
	if n, _, err := viaRDMA.Get(bg, []byte("a"), dst); err != nil || !bytes.Equal(dst[:n], val) {
		t.Fatalf("GET after RDMA broke: %v", err)
	}
	fake.SetHook(nil)
}

// stalledRDMA starts a node over the fake RDMA provider, stores 1 MiB
// under "a" through RDMA, then makes every RDMA operation stall for 3 s
// (the fake's hook; not a hardware test). It returns the client and a
// destination for "a".
func stalledRDMA(t *testing.T) (*client.Client, []byte) {
	t.Helper()
	fake := rdma.NewFake("fk0")
	addr := runNode(t, server.Deps{RDMAProvider: fake}, nil)
	cl, err := client.Open(client.Options{Namespace: []byte("rdma"), Members: []string{addr}, SharedMemory: client.ShmOff,
		RDMA: &rdma.ClientOptions{Provider: fake, BufferBytes: 8 << 20, OpTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
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
	t.Cleanup(func() { fake.SetHook(nil) })
	return cl, dst
}

// A call over RDMA ends by its context's deadline, not the RDMA
// operation timeout: while a node's RDMA stalls, a GET whose context
// allows 200 ms is a TIMEOUT, though the operation timeout is an hour and
// the operation would have succeeded after the stall.
func TestRDMACallEndsByItsDeadline(t *testing.T) {
	cl, dst := stalledRDMA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := cl.Get(ctx, []byte("a"), dst); wire.StatusOf(err) != wire.StatusTimeout {
		t.Fatalf("GET from a node whose RDMA stalls past the call's deadline: %v, want TIMEOUT", err)
	}
}

// The same with a cancelled context instead of a deadline: as over TCP,
// the call ends with context.Canceled, not with what the stalled
// operation answers when it completes.
func TestRDMACallHonoursCancel(t *testing.T) {
	cl, dst := stalledRDMA(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := cl.Get(ctx, []byte("a"), dst)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("GET over a stalled RDMA connection, cancelled after 200 ms: took %v, err %v; want context.Canceled", time.Since(start), err)
	}
}

// rdmaNode starts a node on rdma's fake provider and opens two clients
// of it: one over RDMA with a registered buffer of bufferBytes, one over
// TCP.
func rdmaNode(t *testing.T, bufferBytes uint64) (fake *rdma.Fake, viaRDMA, viaTCP *client.Client) {
	t.Helper()
	fake = rdma.NewFake("fk0")
	addr := runNode(t, server.Deps{RDMAProvider: fake}, nil)
	viaRDMA, err := client.Open(client.Options{Namespace: []byte("rdma"), Members: []string{addr}, SharedMemory: client.ShmOff,
		RDMA: &rdma.ClientOptions{Provider: fake, BufferBytes: bufferBytes, OpTimeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaRDMA.Close() })
	viaTCP, err = client.Open(client.Options{Namespace: []byte("rdma"), Members: []string{addr}, SharedMemory: client.ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaTCP.Close() })
	return fake, viaRDMA, viaTCP
}
