package server

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// The event loop tests run an in-process node over real loopback sockets
// (startNode gives it two loops) and watch connections park and leave
// through the node's own counters.

// waitParked waits until the node has want connections parked in its
// event loops. Parking follows the reply, so a test waits for it before
// it counts what the loop answers.
func waitParked(t *testing.T, n *testNode, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.srv.Stats().ParkedConns != want {
		if time.Now().After(deadline) {
			t.Fatalf("parked connections: %d, want %d", n.srv.Stats().ParkedConns, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// settle sends the parkAfter small requests in a row after which an idle
// connection parks.
func settle(t *testing.T, c net.Conn) {
	t.Helper()
	for range parkAfter {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
		wantResp(t, c, "ping", wire.StatusOK, 0, []byte{})
	}
}

func wantResp(t *testing.T, c net.Conn, what string, st wire.Status, stored uint64, body []byte) {
	t.Helper()
	h, got := readResp(t, c)
	if h.Status != st || h.Stored != stored || !bytes.Equal(got, body) {
		t.Fatalf("%s: status %s stored %d body %q; want %s stored %d body %q", what, h.Status, h.Stored, got, st, stored, body)
	}
}

func appendReq(out []byte, h wire.RequestHeader, body []byte) []byte {
	h.BodyLen = uint64(len(body))
	return append(wire.AppendRequest(out, &h), body...)
}

// TestEventLoopAnswersSmallRequestsAndHandsOff: a connection whose last
// parkAfter requests were small parks; the loop answers the next small requests
// itself; a pipelined mix of small and large requests is answered in
// order, the loop handing the connection to a goroutine at the first one
// it does not serve; afterwards the connection parks again.
func TestEventLoopAnswersSmallRequestsAndHandsOff(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxBatchItems = 4096 })
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(1)}, []byte("v1"))
	wantResp(t, c, "put", wire.StatusOK, 0, []byte{})
	waitParked(t, n, 0) // a PUT leaves the connection on its goroutine
	for range parkAfter - 1 {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: key(1)}, nil)
		wantResp(t, c, "exist on the goroutine", wire.StatusOK, 2, []byte{})
	}
	waitParked(t, n, 0) // one small request short of parking
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	wantResp(t, c, "ping on the goroutine", wire.StatusOK, 0, []byte{})
	waitParked(t, n, 1)

	before := n.srv.Stats().LoopRequests
	writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: key(1)}, nil)
	wantResp(t, c, "parked exist", wire.StatusOK, 2, []byte{})
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	wantResp(t, c, "parked ping", wire.StatusOK, 0, []byte{})
	writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: key(9)}, nil)
	wantResp(t, c, "parked exist of a missing key", wire.StatusNotFound, 0, []byte{})
	if got := n.srv.Stats().LoopRequests - before; got != 3 {
		t.Fatalf("event loop answered %d requests, want 3", got)
	}

	var out []byte
	out = appendReq(out, wire.RequestHeader{Op: wire.OpExist, Key: key(1)}, nil)
	out = appendReq(out, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	out = appendReq(out, wire.RequestHeader{Op: wire.OpExist, Key: key(2)}, nil)
	out = appendReq(out, wire.RequestHeader{Op: wire.OpPut, Key: key(2)}, []byte("second"))
	out = appendReq(out, wire.RequestHeader{Op: wire.OpExist, Key: key(2)}, nil)
	var tbl []byte
	for _, k := range []byte{1, 2, 3} {
		tbl = wire.AppendKeyItem(tbl, key(k))
	}
	out = appendReq(out, wire.RequestHeader{Op: wire.OpBatchExist, Length: 3}, tbl)
	out = appendReq(out, wire.RequestHeader{Op: wire.OpPing}, nil)
	out = appendReq(out, wire.RequestHeader{Op: wire.OpPing}, nil)
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	wantResp(t, c, "exist", wire.StatusOK, 2, []byte{})
	wantResp(t, c, "get", wire.StatusOK, 2, []byte("v1"))
	wantResp(t, c, "exist before put", wire.StatusNotFound, 0, []byte{})
	wantResp(t, c, "put", wire.StatusOK, 0, []byte{})
	wantResp(t, c, "exist after put", wire.StatusOK, 6, []byte{})
	wantResp(t, c, "batch exist", wire.StatusOK, 3, []byte{})
	for i, want := range []struct {
		st     wire.Status
		stored uint64
	}{{wire.StatusOK, 2}, {wire.StatusOK, 6}, {wire.StatusNotFound, 0}} {
		var rec [wire.BatchExistRecLen]byte
		if _, err := io.ReadFull(c, rec[:]); err != nil {
			t.Fatal(err)
		}
		if st, stored := wire.DecodeExistRecord(rec[:]); st != want.st || stored != want.stored {
			t.Fatalf("batch exist item %d: %s stored %d", i, st, stored)
		}
	}
	wantResp(t, c, "ping", wire.StatusOK, 0, []byte{})
	wantResp(t, c, "ping", wire.StatusOK, 0, []byte{})
	waitParked(t, n, 1) // EXIST, BATCH_EXIST, PING, PING after the PUT

	// A BATCH_EXIST too large for the loops is answered on a goroutine,
	// and the connection stays there until its next small request.
	tbl = nil
	for i := 0; i < 1000; i++ {
		tbl = wire.AppendKeyItem(tbl, key(byte(i)))
	}
	before = n.srv.Stats().LoopRequests
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchExist, Length: 1000}, tbl)
	wantResp(t, c, "large batch exist", wire.StatusOK, 1000, []byte{})
	if _, err := io.ReadFull(c, make([]byte, 1000*wire.BatchExistRecLen)); err != nil {
		t.Fatal(err)
	}
	waitParked(t, n, 0)
	if got := n.srv.Stats().LoopRequests - before; got != 0 {
		t.Fatalf("event loop answered %d requests of a 1000-key BATCH_EXIST", got)
	}
	settle(t, c)
	waitParked(t, n, 1)
}

// TestEventLoopsOff: with no event loops nothing parks and every request
// is answered on the connection's goroutine.
func TestEventLoopsOff(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.EventLoops = 0 })
	c := dial(t, n.addr)
	for i := 0; i < 3; i++ {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
		wantResp(t, c, "ping", wire.StatusOK, 0, []byte{})
	}
	if st := n.srv.Stats(); st.ParkedConns != 0 || st.LoopRequests != 0 {
		t.Fatalf("loops off, yet %d parked and %d loop requests", st.ParkedConns, st.LoopRequests)
	}
}

// TestEventLoopPartialFramesAndLateReaders: a parked connection's frame
// that arrives in pieces, a value larger than the read buffer, a client
// that reads its replies only after sending thousands of requests (the
// socket fills, the loop hands the rest to a goroutine) and a malformed
// frame (answered with its status, that connection closed, the others
// untouched).
func TestEventLoopPartialFramesAndLateReaders(t *testing.T) {
	// Small socket buffers, so the late reader's replies fill them and the
	// loop's write finds the socket full (the smallest the loops run with,
	// see minLoopSocketBuffer).
	n := startNode(t, newMemEngine(), func(o *Options) { o.SocketBuffer = 64 << 10 })
	c := dial(t, n.addr)
	_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
	other := dial(t, n.addr)
	settle(t, c)
	settle(t, other)
	waitParked(t, n, 2)

	// A header in two writes, the loop reading the first part alone.
	req := appendReq(nil, wire.RequestHeader{Op: wire.OpExist, Key: key(4)}, nil)
	if _, err := c.Write(req[:20]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := c.Write(req[20:]); err != nil {
		t.Fatal(err)
	}
	wantResp(t, c, "split exist", wire.StatusNotFound, 0, []byte{})

	// A 1 MiB value, its header and first bytes together.
	val := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	req = appendReq(nil, wire.RequestHeader{Op: wire.OpPut, Key: key(4)}, val)
	for off := 0; off < len(req); off += 100 << 10 {
		if _, err := c.Write(req[off:min(off+100<<10, len(req))]); err != nil {
			t.Fatal(err)
		}
	}
	wantResp(t, c, "large put", wire.StatusOK, 0, []byte{})
	for range parkAfter {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: key(4)}, nil)
		wantResp(t, c, "exist", wire.StatusOK, uint64(len(val)), []byte{})
	}
	waitParked(t, n, 2)

	// 200,000 EXISTs (10 MB of requests, 3.6 MB of replies) written before
	// a single reply is read.
	const many = 200000
	one := appendReq(nil, wire.RequestHeader{Op: wire.OpExist, Key: key(4)}, nil)
	go func() { _, _ = c.Write(bytes.Repeat(one, many)) }()
	time.Sleep(50 * time.Millisecond)
	for i := 0; i < many; i++ {
		h, _ := readResp(t, c)
		if h.Status != wire.StatusOK || h.Stored != uint64(len(val)) {
			t.Fatalf("late reply %d: %s stored %d", i, h.Status, h.Stored)
		}
	}
	waitParked(t, n, 2)

	// A malformed frame to a parked connection.
	bad := appendReq(nil, wire.RequestHeader{Op: wire.OpExist, Key: key(4)}, nil)
	bad[0] = 99 // wrong epoch
	if _, err := c.Write(bad); err != nil {
		t.Fatal(err)
	}
	h, msg := readResp(t, c)
	if h.Status != wire.StatusEpochMismatch {
		t.Fatalf("wrong epoch answered %s %q", h.Status, msg)
	}
	expectClosed(t, c)
	writeReq(t, other, wire.RequestHeader{Op: wire.OpExist, Key: key(4)}, nil)
	wantResp(t, other, "other connection", wire.StatusOK, uint64(len(val)), []byte{})
	waitParked(t, n, 1)
}

// TestEventLoopClosesAndShutdown: a parked connection the client closes
// leaves the node; shutdown closes the parked ones promptly (the
// shutdown timeout is an hour, so only the loops' own closing can end
// Serve in time).
func TestEventLoopClosesAndShutdown(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.ShutdownTimeout = time.Hour })
	gone := dial(t, n.addr)
	settle(t, gone)
	waitParked(t, n, 1)
	gone.Close()
	waitParked(t, n, 0)
	deadline := time.Now().Add(10 * time.Second)
	for n.srv.Stats().OpenConns != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("closed parked connection still open on the node")
		}
		time.Sleep(time.Millisecond)
	}

	idle := []net.Conn{dial(t, n.addr), dial(t, n.addr), dial(t, n.addr)}
	for _, c := range idle {
		settle(t, c)
	}
	waitParked(t, n, 3)
	n.stop(t)
	for _, c := range idle {
		expectClosed(t, c)
	}
	if st := n.srv.Stats(); st.OpenConns != 0 || st.ParkedConns != 0 {
		t.Fatalf("after shutdown: %d open, %d parked", st.OpenConns, st.ParkedConns)
	}
}

// TestEventLoopConcurrentClients runs clients that mix parked-path and
// goroutine-path requests, pipelined, each checking every reply against
// its own keys (run with -race).
func TestEventLoopConcurrentClients(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	const clients, rounds = 8, 300
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for ci := 0; ci < clients; ci++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loopClient(n.addr, ci, rounds); err != nil {
				errs <- fmt.Errorf("client %d: %w", ci, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n.srv.Stats().LoopRequests == 0 {
		t.Fatal("no request was answered on an event loop")
	}
}

// loopClient sends rounds of 1 to 4 pipelined requests on keys of its own
// and checks every reply against what it stored.
func loopClient(addr string, id, rounds int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	stored := map[byte][]byte{}
	k := func(i byte) wire.BlockKey {
		var bk wire.BlockKey
		bk.Tenant = uint64(id) + 1
		bk.ID[0] = i
		return bk
	}
	type want struct {
		op     wire.Op
		st     wire.Status
		stored uint64
		body   []byte
		batch  []wire.Status
	}
	for r := 0; r < rounds; r++ {
		var out []byte
		var wants []want
		for range 1 + rng.IntN(4) {
			i := byte(rng.IntN(8))
			v, ok := stored[i]
			switch rng.IntN(5) {
			case 0:
				val := bytes.Repeat([]byte{byte(r)}, 1+rng.IntN(100<<10))
				out = appendReq(out, wire.RequestHeader{Op: wire.OpPut, Key: k(i)}, val)
				stored[i] = val
				wants = append(wants, want{op: wire.OpPut, st: wire.StatusOK})
			case 1:
				out = appendReq(out, wire.RequestHeader{Op: wire.OpGet, Key: k(i)}, nil)
				if ok {
					wants = append(wants, want{op: wire.OpGet, st: wire.StatusOK, stored: uint64(len(v)), body: v})
				} else {
					wants = append(wants, want{op: wire.OpGet, st: wire.StatusNotFound})
				}
			case 2:
				var tbl []byte
				var sts []wire.Status
				for j := byte(0); j < 3; j++ {
					tbl = wire.AppendKeyItem(tbl, k(i+j))
					if _, ok := stored[i+j]; ok {
						sts = append(sts, wire.StatusOK)
					} else {
						sts = append(sts, wire.StatusNotFound)
					}
				}
				out = appendReq(out, wire.RequestHeader{Op: wire.OpBatchExist, Length: 3}, tbl)
				wants = append(wants, want{op: wire.OpBatchExist, st: wire.StatusOK, stored: 3, batch: sts})
			case 3:
				out = appendReq(out, wire.RequestHeader{Op: wire.OpPing}, nil)
				wants = append(wants, want{op: wire.OpPing, st: wire.StatusOK})
			default:
				out = appendReq(out, wire.RequestHeader{Op: wire.OpExist, Key: k(i)}, nil)
				if ok {
					wants = append(wants, want{op: wire.OpExist, st: wire.StatusOK, stored: uint64(len(v))})
				} else {
					wants = append(wants, want{op: wire.OpExist, st: wire.StatusNotFound})
				}
			}
		}
		if _, err := c.Write(out); err != nil {
			return err
		}
		for _, w := range wants {
			var b [wire.ResponsePrefixLen]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return err
			}
			h, err := wire.DecodeResponse(b[:])
			if err != nil {
				return err
			}
			body := make([]byte, h.BodyLen)
			if _, err := io.ReadFull(c, body); err != nil {
				return err
			}
			if h.Status != w.st || h.Stored != w.stored || !bytes.Equal(body, w.body) && len(w.body)+len(body) > 0 {
				return fmt.Errorf("round %d %s: status %s stored %d body %d bytes; want %s stored %d body %d bytes",
					r, w.op, h.Status, h.Stored, len(body), w.st, w.stored, len(w.body))
			}
			for j, st := range w.batch {
				var rec [wire.BatchExistRecLen]byte
				if _, err := io.ReadFull(c, rec[:]); err != nil {
					return err
				}
				if got, _ := wire.DecodeExistRecord(rec[:]); got != st {
					return fmt.Errorf("round %d batch exist item %d: %s, want %s", r, j, got, st)
				}
			}
		}
	}
	return nil
}

// TestEventLoopOutlivesWriteDeadline: a connection parked for longer than
// the write timeout its last goroutine flush set is still answered (the
// loop's writes never wait, so no stale deadline may refuse them).
func TestEventLoopOutlivesWriteDeadline(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.WriteTimeout = 20 * time.Millisecond })
	c := dial(t, n.addr)
	settle(t, c)
	waitParked(t, n, 1)
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 3; i++ {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpExist, Key: key(1)}, nil)
		wantResp(t, c, "exist after the write timeout passed", wire.StatusNotFound, 0, []byte{})
	}
	waitParked(t, n, 1)
}
