package client

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// refusingNode is a fake node with a max_block_bytes of limit that
// refuses a larger PUT or BATCH_PUT the way a careless node would: it
// answers TOO_LARGE as soon as it has the prefix and closes without
// reading the body, so the kernel resets the connection under the
// client's send. With answer unset it closes without answering. Other
// requests are answered OK.
func refusingNode(t *testing.T, limit uint64, answer bool) string {
	t.Helper()
	return fakeNode(t, func(c net.Conn) {
		for {
			var b [wire.RequestPrefixLen]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return
			}
			h, err := wire.DecodeRequest(b[:], wire.Limits{MaxBlockBytes: limit, MaxBatchItems: 1 << 10})
			if err != nil {
				if answer {
					var fe *wire.FrameError
					errors.As(err, &fe)
					reply(c, wire.ResponseHeader{Status: fe.Status}, []byte(fe.Message))
				}
				return // close with the body unread: RST
			}
			if _, err := io.CopyN(io.Discard, c, int64(h.BodyLen)); err != nil {
				return
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
		}
	})
}

// tooLargeValue is larger than loopback's socket buffers can hold, so the
// send is still going when the node closes.
const tooLargeValue = 32 << 20

// TestRefusalAnswersAFailedSend: a node that refuses a PUT and closes
// under the client's send has its answer surface as the call's result,
// not as an unreachable node: the status and message are the node's, the
// node is not backed off, the refused connection is not pooled, and the
// next call goes through at once.
func TestRefusalAnswersAFailedSend(t *testing.T) {
	addr := refusingNode(t, 1<<20, true)
	cl := open(t, addr)
	p := peerOf(t, cl, addr)
	err := cl.Put(context.Background(), []byte("big"), make([]byte, tooLargeValue))
	_, want := wire.DecodeRequest(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, BodyLen: tooLargeValue}), wire.Limits{MaxBlockBytes: 1 << 20})
	var se *wire.StatusError
	if !errors.As(err, &se) || se.Status != wire.StatusTooLarge || se.Message != want.(*wire.FrameError).Message {
		t.Fatalf("got %v, want the node's %v", err, want)
	}
	if errors.Is(err, ErrPeerDown) {
		t.Fatalf("a refusal reported as an unreachable node: %v", err)
	}
	if p.brk.failures.Load() != 0 || p.isDown(time.Now()) {
		t.Fatalf("after a refusal: %d failures, down %v; want the node up", p.brk.failures.Load(), p.isDown(time.Now()))
	}
	p.mu.Lock()
	idle := len(p.idle)
	p.mu.Unlock()
	if idle != 0 {
		t.Fatalf("%d connections pooled after the refusal, want 0 (the node closed it)", idle)
	}
	if err := cl.Put(context.Background(), []byte("k"), []byte("v")); err != nil {
		t.Fatalf("the next PUT: %v", err)
	}

	errs := cl.PutBatch(context.Background(), [][]byte{[]byte("a"), []byte("b")}, [][]byte{make([]byte, tooLargeValue), []byte("v")})
	for i, err := range errs {
		if wire.StatusOf(err) != wire.StatusTooLarge || errors.Is(err, ErrPeerDown) {
			t.Fatalf("BATCH_PUT item %d: %v, want the node's TOO_LARGE for the whole frame", i, err)
		}
	}
	if p.brk.failures.Load() != 0 || p.isDown(time.Now()) {
		t.Fatalf("after a refused batch: %d failures, down %v; want the node up", p.brk.failures.Load(), p.isDown(time.Now()))
	}
	if err := cl.Put(context.Background(), []byte("k"), []byte("v")); err != nil {
		t.Fatalf("the PUT after the batch: %v", err)
	}
}

// TestResetWithoutAnswerIsAFailure: a node that closes under the send
// without answering is still a connection failure: UNAVAILABLE, and the
// node is backed off.
func TestResetWithoutAnswerIsAFailure(t *testing.T) {
	addr := refusingNode(t, 1<<20, false)
	cl := open(t, addr)
	err := cl.Put(context.Background(), []byte("big"), make([]byte, tooLargeValue))
	if !errors.Is(err, ErrPeerDown) || wire.StatusOf(err) != wire.StatusUnavailable {
		t.Fatalf("got %v, want an unreachable node (UNAVAILABLE)", err)
	}
	if p := peerOf(t, cl, addr); p.brk.failures.Load() != 1 {
		t.Fatalf("%d failures, want 1", p.brk.failures.Load())
	}
}

// TestLingeringRefusalNotPooled: a node that reads the refused body
// before it answers and closes (a lingering close: the send succeeds) has
// its connection dropped, not pooled, for a refused PUT and for a refused
// batch alike.
func TestLingeringRefusalNotPooled(t *testing.T) {
	addr := fakeNode(t, func(c net.Conn) {
		for {
			var b [wire.RequestPrefixLen]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return
			}
			h, refused := wire.DecodeRequest(b[:], wire.Limits{MaxBlockBytes: 1 << 20, MaxBatchItems: 1 << 10})
			if _, err := io.CopyN(io.Discard, c, int64(h.BodyLen)); err != nil {
				return
			}
			if refused != nil {
				var fe *wire.FrameError
				errors.As(refused, &fe)
				reply(c, wire.ResponseHeader{Status: fe.Status}, []byte(fe.Message))
				return
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
		}
	})
	cl := open(t, addr)
	p := peerOf(t, cl, addr)
	pooled := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.idle)
	}
	if err := cl.Put(context.Background(), []byte("big"), make([]byte, 2<<20)); wire.StatusOf(err) != wire.StatusTooLarge {
		t.Fatalf("PUT: %v, want TOO_LARGE", err)
	}
	if n := pooled(); n != 0 {
		t.Fatalf("%d connections pooled after a refused PUT, want 0", n)
	}
	errs := cl.PutBatch(context.Background(), [][]byte{[]byte("a")}, [][]byte{make([]byte, 2<<20)})
	if wire.StatusOf(errs[0]) != wire.StatusTooLarge {
		t.Fatalf("BATCH_PUT: %v, want TOO_LARGE", errs[0])
	}
	if n := pooled(); n != 0 {
		t.Fatalf("%d connections pooled after a refused BATCH_PUT, want 0", n)
	}
	if p.brk.failures.Load() != 0 {
		t.Fatalf("%d failures counted for refusals, want 0", p.brk.failures.Load())
	}
}
