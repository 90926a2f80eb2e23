package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// oversized is a PUT value over testMaxBlock, larger than loopback's
// socket buffers (so a node that closes at once resets the sender
// mid-write) and smaller than the linger's byte bound.
const oversized = 32 << 20

// logRecorder is a slog.Handler that keeps every message, for tests that
// check what a node logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *logRecorder) logged(substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.Contains(m, substr) {
			return true
		}
	}
	return false
}

// lingerLong raises a test node's linger time bound to a minute, for tests
// of the linger's effect on a body sent in full: 32 MiB took up to 1.4 s
// to drain on a CPU shared with 24 busy loops, near the 2 s default.
func lingerLong(o *Options) { o.lingerTime = time.Minute }

// TestRefusedPutDrainedNotReset: a PUT over max_block_bytes sent in full,
// body and all, is answered TOO_LARGE, and the node reads the body it
// refused before closing, so the client's write completes and it reads the
// refusal and then EOF, not a reset. The same for a BATCH_PUT refused
// after its table (a zero-byte item) with a large body behind it.
func TestRefusedPutDrainedNotReset(t *testing.T) {
	n := startNode(t, newMemEngine(), lingerLong)
	put := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(1), BodyLen: oversized})
	put = append(put, make([]byte, oversized)...)
	// 40 items, the first empty: the prefix passes (the body's average is
	// under the limit) and the table is refused.
	const items = 40
	tbl := wire.AppendPutItem(nil, key(2), 0)
	for i := 1; i < items-1; i++ {
		tbl = wire.AppendPutItem(tbl, key(byte(2+i)), 1)
	}
	tbl = wire.AppendPutItem(tbl, key(byte(2+items-1)), oversized-(items-2))
	batch := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpBatchPut, Length: items, BodyLen: uint64(len(tbl)) + oversized})
	batch = append(append(batch, tbl...), make([]byte, oversized)...)
	for _, tc := range []struct {
		name   string
		frame  []byte
		status wire.Status
		msg    string
	}{
		{"PUT", put, wire.StatusTooLarge, "exceeds the node's max_block_bytes"},
		{"BATCH_PUT", batch, wire.StatusInvalid, "item 0 has a zero-byte value"},
	} {
		c := dial(t, n.addr)
		if _, err := c.Write(tc.frame); err != nil {
			t.Fatalf("%s: writing the refused body: %v, want the node to read it", tc.name, err)
		}
		resp, msg := readResp(t, c)
		if resp.Status != tc.status || !bytes.Contains(msg, []byte(tc.msg)) {
			t.Fatalf("%s: answer %s %q, want %s and %q", tc.name, resp.Status, msg, tc.status, tc.msg)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the refusal: %v, want EOF", tc.name, err)
		}
	}
	ok := dial(t, n.addr)
	writeReq(t, ok, wire.RequestHeader{Op: wire.OpPing}, nil)
	if resp, _ := readResp(t, ok); resp.Status != wire.StatusOK {
		t.Fatalf("PING after the refusals: %s", resp.Status)
	}
	for i := byte(1); i < 2+items; i++ {
		if _, err := n.srv.opts.Engine.Exist(key(i)); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("key %d of a refused frame was stored: %v", i, err)
		}
	}
}

// TestClientLargerBlockGetsTooLarge: a client whose max block size is
// larger than the node's gets the node's TOO_LARGE and message for a PUT
// and a BATCH_PUT over the node's limit, and the node is not taken for
// down: the next calls on the same client go through at once (a node
// backed off would fail them without dialing).
func TestClientLargerBlockGetsTooLarge(t *testing.T) {
	n := startNode(t, newMemEngine(), lingerLong)
	cl, err := client.Open(client.Options{Namespace: []byte("refusal"), Members: []string{n.addr}, MaxBlockBytes: 64 << 20, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		var se *wire.StatusError
		if !errors.As(err, &se) || se.Status != wire.StatusTooLarge || !strings.Contains(se.Message, "max_block_bytes 1048576") {
			t.Fatalf("%s: %v, want the node's TOO_LARGE naming its max_block_bytes", what, err)
		}
		if errors.Is(err, client.ErrPeerDown) {
			t.Fatalf("%s: the node was taken for down: %v", what, err)
		}
		if err := cl.Put(ctx, []byte("small"), []byte("value")); err != nil {
			t.Fatalf("PUT after %s: %v", what, err)
		}
		if got, err := cl.GetAuto(ctx, []byte("small")); err != nil || string(got) != "value" {
			t.Fatalf("GET after %s: %q, %v", what, got, err)
		}
	}
	check("PUT over max_block_bytes", cl.Put(ctx, []byte("big"), make([]byte, oversized)))

	// One value over the limit in a batch whose average is under it: that
	// item is TOO_LARGE and the others are stored (one status per item, as
	// dfkv.h promises), on a connection that stays open.
	keys, vals := [][]byte{[]byte("b0")}, [][]byte{make([]byte, 8<<20)}
	for i := 1; i <= 8; i++ {
		keys, vals = append(keys, []byte{'b', byte('0' + i)}), append(vals, []byte("v"))
	}
	for i, err := range cl.PutBatch(ctx, keys, vals) {
		if i == 0 {
			if wire.StatusOf(err) != wire.StatusTooLarge || errors.Is(err, client.ErrPeerDown) {
				t.Fatalf("BATCH_PUT item 0 (8 MiB, over the node's 1 MiB): %v, want its own TOO_LARGE", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("BATCH_PUT item %d beside an oversized one: %v, want it stored", i, err)
		}
		if got, err := cl.GetAuto(ctx, keys[i]); err != nil || string(got) != "v" {
			t.Fatalf("GET %s after the batch: %q, %v", keys[i], got, err)
		}
	}
	// A batch of one oversized value: more than one value's worth of body,
	// refused whole from its prefix, with TOO_LARGE.
	for _, err := range cl.PutBatch(ctx, [][]byte{[]byte("alone")}, [][]byte{make([]byte, oversized)}) {
		check("BATCH_PUT of one value over max_block_bytes", err)
	}
	if got := n.srv.Stats().FrameErrors; got != 2 {
		t.Fatalf("frame errors %d, want 2 (the PUT and the one-value batch)", got)
	}
}

// TestLingerDoesNotHoldShutdown: a connection lingering after a refusal
// (its client declared a large body and sends none of it) does not make
// shutdown wait for the linger's deadline: Serve returns without its
// shutdown timeout forcing the connection closed.
func TestLingerDoesNotHoldShutdown(t *testing.T) {
	rec := &logRecorder{}
	// A shutdown timeout shorter than lingerTime: a linger that shutdown
	// could not cut would run into it.
	n := startNode(t, newMemEngine(), func(o *Options) {
		o.ShutdownTimeout = lingerTime / 2
		o.Logger = slog.New(rec)
	})
	c := refusedPrefix(t, n.addr)
	expectClosed(t, c) // the half-close: the node is lingering now
	n.cancel()
	if err := <-n.done; err != nil {
		t.Fatal(err)
	}
	n.done <- nil
	if rec.logged("shutdown timeout") {
		t.Fatal("shutdown waited for a lingering connection until its timeout")
	}
}

// refusedPrefix dials addr and sends the prefix of a PUT over the node's
// limit and none of its body; it returns the connection after reading the
// node's TOO_LARGE.
func refusedPrefix(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := dial(t, addr)
	h := wire.RequestHeader{Op: wire.OpPut, Key: key(1), BodyLen: oversized}
	if _, err := c.Write(wire.AppendRequest(nil, &h)); err != nil {
		t.Fatal(err)
	}
	if resp, _ := readResp(t, c); resp.Status != wire.StatusTooLarge {
		t.Fatalf("answer %s, want TOO_LARGE", resp.Status)
	}
	return c
}

// TestLingerEnds: a client that declares a large body after its refusal,
// sends none of it and keeps the connection open does not hold the
// connection: the node closes it once the linger's deadline passes.
func TestLingerEnds(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	refusedPrefix(t, n.addr) // kept open by the client until the test's cleanup
	waitUntil(t, 30*time.Second, func() error {
		if n.srv.Stats().OpenConns != 0 {
			return fmt.Errorf("the node still holds the stalled connection (linger bound %s)", lingerTime)
		}
		return nil
	})
}

// TestLingerStopsAtItsByteBound: a client that declares a refused body
// far larger than the linger's byte bound (max(lingerFloor, 2 ×
// max_block_bytes); the floor here) and sends all of it is read up to the
// bound and then cut off, not drained to the end: its writes fail after
// at least the bound and well before the declared length. The linger's
// time bound is raised to a minute, so only the byte bound can end it on a
// loaded machine (128 MiB took up to 1 s with 10 busy loops beside -race).
func TestLingerStopsAtItsByteBound(t *testing.T) {
	n := startNode(t, newMemEngine(), lingerLong)
	const declared = lingerFloor + 256<<20
	c := dial(t, n.addr)
	h := wire.RequestHeader{Op: wire.OpPut, Key: key(1), BodyLen: declared}
	if _, err := c.Write(wire.AppendRequest(nil, &h)); err != nil {
		t.Fatal(err)
	}
	if resp, _ := readResp(t, c); resp.Status != wire.StatusTooLarge {
		t.Fatalf("answer %s, want TOO_LARGE", resp.Status)
	}
	chunk := make([]byte, 1<<20)
	start, written := time.Now(), 0
	var err error
	for written < declared && err == nil {
		var k int
		k, err = c.Write(chunk)
		written += k
	}
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the node read all %d declared bytes of a refused body; its bound is %d", declared, lingerFloor)
	}
	if written < lingerFloor {
		t.Fatalf("writes failed after %d bytes (%v), before the linger's %d-byte bound: %v", written, took, lingerFloor, err)
	}
	if written > lingerFloor+64<<20 {
		t.Fatalf("writes failed only after %d bytes, more than the %d-byte bound and the socket buffers", written, lingerFloor)
	}
}

// TestShortFrameOfAnotherEpochRefusedAtOnce: a frame of an older
// generation, shorter than this prefix (42 bytes), is answered on its
// first byte, not after the first-request deadline (60 s here) its
// missing bytes would run into.
func TestShortFrameOfAnotherEpochRefusedAtOnce(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.FirstRequest = time.Minute })
	c := dial(t, n.addr)
	legacy := make([]byte, 42)
	legacy[0], legacy[1] = 5, byte(wire.OpGet)
	if _, err := c.Write(legacy); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	h, msg := readResp(t, c)
	t.Logf("refused after %s: %s", time.Since(start).Round(time.Microsecond), msg)
	if h.Status != wire.StatusEpochMismatch || !strings.Contains(string(msg), "epoch 5") {
		t.Fatalf("a 42-byte frame of epoch 5: %s %q", h.Status, msg)
	}
}

// TestShortFirstPrefixOfThisEpochRefusedAtOnce: a 42-byte frame that
// starts with this epoch's byte (a peer of a generation whose prefix was
// shorter) is answered once it has gone quiet part-way through the
// prefix, not after the first-request deadline (a minute here).
func TestShortFirstPrefixOfThisEpochRefusedAtOnce(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.FirstRequest = time.Minute })
	c := dial(t, n.addr)
	legacy := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpGet, Key: key(1)})[:42]
	if _, err := c.Write(legacy); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h, msg := readResp(t, c)
	t.Logf("refused after %s: %s", time.Since(start).Round(time.Microsecond), msg)
	if h.Status != wire.StatusEpochMismatch || !strings.Contains(string(msg), "after 42 bytes of the 50-byte prefix") {
		t.Fatalf("a 42-byte frame of epoch 6: %s %q", h.Status, msg)
	}
	expectClosed(t, c)
	// A whole first request, and a later one that pauses part-way, are
	// served as before: only a first prefix that stops short is refused.
	c2 := dial(t, n.addr)
	writeReq(t, c2, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, c2); h.Status != wire.StatusOK {
		t.Fatalf("PING: %+v", h)
	}
	ping := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})
	if _, err := c2.Write(ping[:20]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := c2.Write(ping[20:]); err != nil {
		t.Fatal(err)
	}
	if h, _ := readResp(t, c2); h.Status != wire.StatusOK {
		t.Fatalf("a later PING in two pieces: %+v", h)
	}
}
