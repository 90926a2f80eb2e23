package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// In-process tests (a node on a loopback listener, memEngine) of
// connections that wait on their clients: idle ones at max_conns, and
// ones stalled in the middle of a request prefix.

// halfSentPrefix dials addr, has one PING answered (so the connection is
// past its first request), then sends the first n bytes of the next
// request's prefix and nothing more.
func halfSentPrefix(t *testing.T, addr string, n int) net.Conn {
	t.Helper()
	c := dial(t, addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, c)
	if _, err := c.Write(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})[:n]); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMaxConnsClosesLongestIdle: a node at max_conns closes the
// connection idle longest (a second or more) to admit a new one, instead
// of refusing it; one client's idle connections cannot lock others out.
// The node's clock is stepped instead of slept: a connection starts
// waiting on its client (end) before its reply is flushed, so once the
// reply is read, the steps count as time it waited.
func TestMaxConnsClosesLongestIdle(t *testing.T) {
	clock := &stepClock{}
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxConns = 2; o.Clock = clock })
	oldest := dial(t, n.addr)
	writeReq(t, oldest, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, oldest)
	clock.step(100 * time.Millisecond)
	newer := dial(t, n.addr)
	writeReq(t, newer, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, newer)
	clock.step(idleCutAfter) // both idle past the cut, the oldest longer

	fresh := dial(t, n.addr)
	writeReq(t, fresh, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, msg := readResp(t, fresh); h.Status != wire.StatusOK {
		t.Fatalf("a new connection at max_conns with idle ones open: %v %s", h.Status, msg)
	}
	expectClosed(t, oldest)
	writeReq(t, newer, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, newer); h.Status != wire.StatusOK {
		t.Fatal("the younger idle connection was closed instead of the oldest")
	}
	if st := n.srv.Stats(); st.IdleClosed != 1 || st.Refused != 0 {
		t.Fatalf("idle closed %d, refused %d; want 1 and 0", st.IdleClosed, st.Refused)
	}
	// Every connection has just been used: the next is refused.
	writeReq(t, fresh, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, fresh)
	late := dial(t, n.addr)
	if h, _ := readResp(t, late); h.Status != wire.StatusUnavailable {
		t.Fatalf("a connection at max_conns with none idle for long: %v, want UNAVAILABLE", h.Status)
	}
}

// TestHalfSentPrefixIsCut: a client that sends part of a request prefix
// and stops is cut after the body timeout; it held its connection for
// ever before.
func TestHalfSentPrefixIsCut(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.BodyTimeout = 300 * time.Millisecond })
	c := halfSentPrefix(t, n.addr, 10)
	expectClosed(t, c)
}

// TestHalfSentPrefixDoesNotHoldShutdown: shutdown cuts a connection
// stalled in a request prefix at once, as it does an idle one, instead of
// waiting for its shutdown timeout.
func TestHalfSentPrefixDoesNotHoldShutdown(t *testing.T) {
	rec := &logRecorder{}
	n := startNode(t, newMemEngine(), func(o *Options) {
		o.BodyTimeout = time.Minute
		o.ShutdownTimeout = 3 * time.Second
		o.Logger = slog.New(rec)
	})
	c := halfSentPrefix(t, n.addr, 10)
	// Kept: a real socket, and nothing tells when the node's read has
	// taken the partial prefix; the wait only makes the case the named one.
	time.Sleep(50 * time.Millisecond)
	n.cancel()
	if err := <-n.done; err != nil {
		t.Fatal(err)
	}
	n.done <- nil
	if rec.logged("shutdown timeout") {
		t.Fatal("shutdown waited for a connection stalled in a request prefix until its timeout")
	}
	expectClosed(t, c)
}

// TestRefusalsLoggedOncePerInterval: a client connecting in a loop to a
// full node gets every refusal counted, but the log a line per interval,
// not one per connection (128,226 lines in 10 s before).
func TestRefusalsLoggedOncePerInterval(t *testing.T) {
	rec := &logRecorder{}
	n := startNode(t, newMemEngine(), func(o *Options) {
		o.MaxConns = 1
		o.Logger = slog.New(rec)
	})
	busy := dial(t, n.addr)
	writeReq(t, busy, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, busy)
	for range 50 {
		c := dial(t, n.addr)
		if h, _ := readResp(t, c); h.Status != wire.StatusUnavailable {
			t.Fatalf("connection past max_conns: %v", h.Status)
		}
		c.Close()
	}
	if st := n.srv.Stats(); st.Refused != 50 {
		t.Fatalf("refused %d, want 50", st.Refused)
	}
	rec.mu.Lock()
	lines := 0
	for _, m := range rec.msgs {
		if strings.Contains(m, "refusing connection") {
			lines++
		}
	}
	rec.mu.Unlock()
	if lines != 1 {
		t.Fatalf("%d log lines for 50 refusals, want 1", lines)
	}
}

// TestIdleConnectionsHoldNoWorkingMemory: connections that served large
// batches and then wait for their clients give their response buffers and
// batch tables back, so idle connections cost no working memory (345 KiB
// each before).
func TestIdleConnectionsHoldNoWorkingMemory(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	conns := make([]net.Conn, 20)
	for i := range conns {
		c := dial(t, n.addr)
		conns[i] = c
		body := make([]byte, 0, 64*wire.BatchKeyItemLen)
		for j := range 64 {
			body = wire.AppendKeyItem(body, key(byte(j)))
		}
		writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchExist, Length: 64}, body)
		if h, _ := readResp(t, c); h.Status != wire.StatusOK || h.Stored != 64 {
			t.Fatalf("BATCH_EXIST on connection %d: %v, %d records", i, h.Status, h.Stored)
		}
		if _, err := io.ReadFull(c, make([]byte, 64*wire.BatchExistRecLen)); err != nil {
			t.Fatal(err)
		}
	}
	// Connections stalled in a request prefix hold none either.
	for range 10 {
		halfSentPrefix(t, n.addr, 5)
	}
	waitUntil(t, 10*time.Second, func() error {
		if k := n.srv.Stats().Serving; k != 0 {
			return fmt.Errorf("%d idle connections still hold working memory", k)
		}
		return nil
	})
	writeReq(t, conns[0], wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, conns[0]); h.Status != wire.StatusOK {
		t.Fatal("an idle connection does not serve again")
	}
}

// TestRepliesSentBeforeWaitingInPrefix: the reply of a request already
// served goes out before the node waits for the rest of the client's next
// prefix; it waited unsent, and a cut then dropped it.
func TestRepliesSentBeforeWaitingInPrefix(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, c)
	req := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(1), BodyLen: 3})
	req = append(req, "abc"...)
	req = append(req, wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})[:5]...)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if h, msg := readResp(t, c); h.Status != wire.StatusOK {
		t.Fatalf("PUT followed by part of the next prefix: %v %s", h.Status, msg)
	}
}

// TestCutConnectionBlockedWritingEnds: a connection whose client stopped
// reading its replies counts as waiting on the client; when max_conns cuts
// it, its write ends too, instead of holding the socket until the write
// timeout while another connection takes its place.
func TestCutConnectionBlockedWritingEnds(t *testing.T) {
	clock := &stepClock{}
	eng := newMemEngine()
	n := startNode(t, eng, func(o *Options) {
		o.MaxConns = 1
		o.WriteTimeout = time.Minute // past waitStats' 30 s: only the cut can end the write in time
		o.SocketBuffer = 16 << 10
		o.Clock = clock
	})
	v := make([]byte, 16<<10)
	if err := eng.Put(key(1), v); err != nil {
		t.Fatal(err)
	}
	a := dialSmallReceive(t, n.addr)
	var reqs []byte
	for range 12 { // replies under flushAt: they go out in the flush after the last request, not inside one
		reqs = wire.AppendRequest(reqs, &wire.RequestHeader{Op: wire.OpGet, Key: key(1)})
	}
	if _, err := a.Write(reqs); err != nil {
		t.Fatal(err)
	}
	waitStats(t, n, "the GETs served", func(st Stats) bool { return st.Ops["GET"] == 12 }, nil)
	// The last GET ended (its end set waitSince): the connection now
	// waits on its client, blocked writing the replies.
	waitUntil(t, 10*time.Second, func() error {
		if countConns(n, func(c *conn) bool { return !c.busy && !c.stopped }) != 1 {
			return errors.New("the connection is still serving a GET")
		}
		return nil
	})
	clock.step(idleCutAfter)
	b := dial(t, n.addr)
	writeReq(t, b, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, b); h.Status != wire.StatusOK {
		t.Fatalf("new connection: %v", h.Status)
	}
	waitStats(t, n, "the cut connection to end", func(st Stats) bool { return st.OpenConns == 1 }, nil)
}
