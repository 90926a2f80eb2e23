package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// In-process tests of the Go client's batch calls against a real node on
// a loopback listener (memEngine behind it): the cases where the items of
// one batch must not pay for each other.

func openClient(t *testing.T, addr string, edit func(*client.Options)) *client.Client {
	t.Helper()
	o := client.Options{Namespace: []byte("batch-test"), Members: []string{addr}, Timeout: 30 * time.Second}
	if edit != nil {
		edit(&o)
	}
	cl, err := client.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestBatchGetPastClientLimitFailsOnlyThatItem: a value longer than the
// reading client's max_block_bytes (the node, or a client with a larger
// limit, stored it) fails that item alone, whether the client gives no
// buffer (TOO_LARGE) or one of exactly its limit (buffer too small, the
// C ABI's case); the other items of the frame are read.
func TestBatchGetPastClientLimitFailsOnlyThatItem(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	ctx := context.Background()
	const limit = 1024
	keys := [][]byte{[]byte("a"), []byte("big"), []byte("c")}
	vals := [][]byte{enginetest.Value(1, 100), enginetest.Value(2, 2000), enginetest.Value(3, limit)}
	for i, err := range openClient(t, n.addr, nil).PutBatch(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	small := openClient(t, n.addr, func(o *client.Options) { o.MaxBlockBytes = limit })
	check := func(what string, res []client.GetResult, bigErr error) {
		t.Helper()
		for _, i := range []int{0, 2} {
			if res[i].Err != nil || !bytes.Equal(res[i].Data, vals[i]) {
				t.Fatalf("%s: item %d: %v (%d bytes)", what, i, res[i].Err, len(res[i].Data))
			}
		}
		if !errors.Is(res[1].Err, bigErr) || res[1].Stored != 2000 {
			t.Fatalf("%s: the long item: %v, stored %d; want %v, stored 2000", what, res[1].Err, res[1].Stored, bigErr)
		}
	}
	check("no buffers", small.GetBatch(ctx, keys, nil), wire.StatusTooLarge)
	dsts := [][]byte{make([]byte, limit), make([]byte, limit), make([]byte, limit)}
	check("buffers of the limit", small.GetBatch(ctx, keys, dsts), client.ErrBufferTooSmall)
	if _, err := small.GetAuto(ctx, keys[1]); !errors.Is(err, wire.StatusTooLarge) {
		t.Fatalf("GetAuto of the long value: %v, want TOO_LARGE", err)
	}
	// The connection is still usable: the next call gets its answer.
	if got, err := small.GetAuto(ctx, keys[0]); err != nil || !bytes.Equal(got, vals[0]) {
		t.Fatalf("GetAuto after: %v", err)
	}
}

// TestPutBatchRepeatedKeyLastWins: a batch that stores one key several
// times, its items spread over several frames to the node, leaves the
// last value, every time (frames sent at once land in any order).
func TestPutBatchRepeatedKeyLastWins(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	cl := openClient(t, n.addr, func(o *client.Options) { o.MaxBatchItems = 2 })
	ctx := context.Background()
	for trial := range 20 {
		k := []byte(fmt.Sprintf("k%d", trial))
		keys := [][]byte{k, []byte("x1"), k, []byte("x2"), k}
		vals := make([][]byte, len(keys))
		for i := range vals {
			vals[i] = enginetest.Value(uint64(100*trial+i), 64)
		}
		for i, err := range cl.PutBatch(ctx, keys, vals) {
			if err != nil {
				t.Fatalf("trial %d: put %d: %v", trial, i, err)
			}
		}
		got, err := cl.GetAuto(ctx, k)
		if err != nil || !bytes.Equal(got, vals[4]) {
			t.Fatalf("trial %d: GET of the repeated key: %v, last value %v", trial, err, bytes.Equal(got, vals[4]))
		}
		for i, err := range cl.RemoveBatch(ctx, [][]byte{k, []byte("x1"), k}) {
			if want := i == 2; (wire.StatusOf(err) == wire.StatusNotFound) != want {
				t.Fatalf("trial %d: remove item %d: %v (only the second remove of the key misses)", trial, i, err)
			}
		}
	}
}

// TestBatchAfterBackoffReachesRecoveredNode: once a node that was down is
// back and the client's back-off window has passed, a batch of several
// frames to it succeeds whole: its first frame is the probe, and the
// others wait for its verdict instead of failing fast.
func TestBatchAfterBackoffReachesRecoveredNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // down: connections are refused
	cl := openClient(t, addr, func(o *client.Options) { o.MaxBatchItems = 2 })
	ctx := context.Background()
	if err := cl.Put(ctx, []byte("first"), []byte("v")); wire.StatusOf(err) != wire.StatusUnavailable {
		t.Fatalf("Put to a down node: %v, want UNAVAILABLE", err)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	srv, err := New(Options{Engine: newMemEngine(), Listener: ln, MaxBlockBytes: testMaxBlock, MaxBatchItems: 64, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx) }()
	defer func() { cancel(); <-done }()
	// Kept: the client's back-off runs on the real clock, with no hook,
	// and a probe before the window passed would lengthen it.
	time.Sleep(300 * time.Millisecond) // past the first window (100 ms)
	keys := make([][]byte, 6)
	vals := make([][]byte, 6)
	for i := range keys {
		keys[i], vals[i] = []byte(fmt.Sprintf("b%d", i)), enginetest.Value(uint64(i), 100)
	}
	for i, err := range cl.PutBatch(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("put %d to the recovered node: %v", i, err)
		}
	}
}
