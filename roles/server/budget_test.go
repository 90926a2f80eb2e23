package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// waitStats polls the node's counters until cond holds (30 s at most),
// failing at once if check finds them wrong on the way.
func waitStats(t *testing.T, n *testNode, what string, cond, check func(Stats) bool) {
	t.Helper()
	waitUntil(t, 30*time.Second, func() error {
		st := n.srv.Stats()
		if check != nil && !check(st) {
			t.Fatalf("while waiting for %s: %+v", what, st)
		}
		if !cond(st) {
			return fmt.Errorf("%s: %+v", what, st)
		}
		return nil
	})
}

// TestBufferBudgetBoundsPUTs: with a budget of two 1 MiB buffers, three
// clients each sending all but the last byte of a 1 MiB PUT make the node
// hold two buffers, never three: the third waits (its client's socket
// fills). When the bodies complete, every PUT is stored and the budget is
// all free again. Without the budget the node allocated a buffer per
// connection (150 such clients held 8 GB of a real node).
func TestBufferBudgetBoundsPUTs(t *testing.T) {
	eng := newMemEngine()
	n := startNode(t, eng, func(o *Options) {
		o.BufferBudget = 2 * testMaxBlock
		o.BodyTimeout = 30 * time.Second
		o.StalledCut = time.Hour // the held bodies must stay, however slow the machine
	})
	body := bytes.Repeat([]byte{7}, testMaxBlock)
	conns := make([]net.Conn, 3)
	sent := make(chan error, 3)
	for i := range conns {
		conns[i] = dial(t, n.addr)
		c, k := conns[i], key(byte(i+1))
		go func() {
			_, err := c.Write(append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: testMaxBlock}), body[:testMaxBlock-1]...))
			sent <- err
		}()
	}
	waitStats(t, n, "two buffers held and a PUT waiting",
		func(st Stats) bool { return st.BufferInUse == 2*testMaxBlock && st.BufferWaits >= 1 },
		func(st Stats) bool { return st.BufferInUse <= 2*testMaxBlock })
	for _, c := range conns {
		if _, err := c.Write(body[:1]); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range conns {
		if h, msg := readResp(t, c); h.Status != wire.StatusOK {
			t.Fatalf("PUT %d: %v %s", i, h.Status, msg)
		}
	}
	for range conns {
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	for i := range conns {
		if got, err := eng.Exist(key(byte(i + 1))); err != nil || got != testMaxBlock {
			t.Fatalf("key %d after the PUTs: %d bytes, %v", i+1, got, err)
		}
	}
	if st := n.srv.Stats(); st.BufferInUse != 0 || st.BufferTimeouts != 0 {
		t.Fatalf("after every PUT completed: %+v", st)
	}
}

// dialSmallReceive connects with a 64 KiB receive buffer, so a response
// it does not read stalls the node's write early.
func dialSmallReceive(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestBufferBudgetTimeoutAnswersUnavailable: a client that stops reading
// its 1 MiB GET holds the node's only buffer; a PUT that waits its whole
// body timeout for one is answered UNAVAILABLE, naming the setting, with
// its body read off, and its connection serves the next request. Once the
// reader takes its value, PUTs go through again.
func TestBufferBudgetTimeoutAnswersUnavailable(t *testing.T) {
	eng := newMemEngine()
	n := startNode(t, eng, func(o *Options) {
		o.BufferBudget = testMaxBlock
		o.BodyTimeout = 300 * time.Millisecond
		o.WriteTimeout = 30 * time.Second
		o.SocketBuffer = 64 << 10
		o.StalledCut = time.Hour // the stalled reader must keep its buffer
	})
	value := bytes.Repeat([]byte{9}, testMaxBlock)
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(1)}, value)
	if h, msg := readResp(t, c); h.Status != wire.StatusOK {
		t.Fatalf("PUT: %v %s", h.Status, msg)
	}

	reader := dialSmallReceive(t, n.addr)
	writeReq(t, reader, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	waitStats(t, n, "the stalled GET holding the buffer", func(st Stats) bool { return st.BufferInUse == testMaxBlock }, nil)

	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(2), BodyLen: testMaxBlock}), value...))
		sent <- err
	}()
	h, msg := readResp(t, c)
	if h.Status != wire.StatusUnavailable || !strings.Contains(string(msg), "server.buffer_budget_bytes") {
		t.Fatalf("PUT with the budget spent: %v %q, want UNAVAILABLE naming the setting", h.Status, msg)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, msg := readResp(t, c); h.Status != wire.StatusOK {
		t.Fatalf("PING after the refused PUT: %v %s", h.Status, msg)
	}
	if st := n.srv.Stats(); st.BufferTimeouts != 1 {
		t.Fatalf("buffer wait timeouts = %d, want 1", st.BufferTimeouts)
	}
	if _, err := eng.Exist(key(2)); err == nil {
		t.Fatal("the refused PUT was stored")
	}

	h, got := readResp(t, reader)
	if h.Status != wire.StatusOK || !bytes.Equal(got, value) {
		t.Fatalf("the stalled GET, read at last: %v, %d bytes", h.Status, len(got))
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(2)}, value)
	if h, msg := readResp(t, c); h.Status != wire.StatusOK {
		t.Fatalf("PUT after the reader finished: %v %s", h.Status, msg)
	}
	waitStats(t, n, "the budget all free", func(st Stats) bool { return st.BufferInUse == 0 }, nil)
}

// TestBufferBudgetTooSmallRefused: a budget below one buffer for the
// largest value could never serve it; New refuses it.
func TestBufferBudgetTooSmallRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := New(Options{Engine: newMemEngine(), Listener: ln, MaxBlockBytes: testMaxBlock, BufferBudget: testMaxBlock - 1}); err == nil || !strings.Contains(err.Error(), "BufferBudget") {
		t.Fatalf("New with a budget under one buffer: %v", err)
	}
}

// TestBufferBudgetBatchPutStoresEarly: a BATCH_PUT that finds the budget
// spent mid-run stores the values it has read, giving their budget back,
// and goes on a value at a time: with a 1 MiB budget of which a stalled
// PUT holds half, a batch of three 512 KiB values completes, all stored,
// while the stalled PUT still holds its half.
func TestBufferBudgetBatchPutStoresEarly(t *testing.T) {
	const half = testMaxBlock / 2
	eng := newMemEngine()
	n := startNode(t, eng, func(o *Options) {
		o.BufferBudget = testMaxBlock
		o.BodyTimeout = 30 * time.Second
	})
	holder := dial(t, n.addr)
	value := bytes.Repeat([]byte{5}, half)
	if _, err := holder.Write(append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(9), BodyLen: half}), value[:half-1]...)); err != nil {
		t.Fatal(err)
	}
	waitStats(t, n, "the stalled PUT holding half the budget", func(st Stats) bool { return st.BufferInUse == half }, nil)

	c := dial(t, n.addr)
	var tbl, data []byte
	for i := range 3 {
		tbl = wire.AppendPutItem(tbl, key(byte(i+1)), half)
		data = append(data, value...)
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: 3}, append(tbl, data...))
	if h, _ := readResp(t, c); h.Status != wire.StatusOK || h.Stored != 3 {
		t.Fatalf("batch put: %+v", h)
	}
	var st [3]byte
	if _, err := io.ReadFull(c, st[:]); err != nil || st != [3]byte{} {
		t.Fatalf("batch put statuses %v %v", st, err)
	}
	for i := range 3 {
		if got, err := eng.Exist(key(byte(i + 1))); err != nil || got != half {
			t.Fatalf("batch value %d: %d bytes, %v", i, got, err)
		}
	}
	if s := n.srv.Stats(); s.BufferInUse != half {
		t.Fatalf("after the batch, with the PUT still stalled: %+v", s)
	}
	if _, err := holder.Write(value[:1]); err != nil {
		t.Fatal(err)
	}
	if h, msg := readResp(t, holder); h.Status != wire.StatusOK {
		t.Fatalf("the stalled PUT, completed: %v %s", h.Status, msg)
	}
}

// TestValueOverMaxBlockAfterRestart: a value stored under a larger
// max_block_bytes than the node now has (restarted with a smaller one) is
// answered TOO_LARGE, naming the setting, and can still be read in ranges
// within the limit; the node and the connection go on. Before, the GET
// crashed the node (iobuf: Get size out of range), and on the slab engine
// the restart after the crash was cold.
func TestValueOverMaxBlockAfterRestart(t *testing.T) {
	eng := newMemEngine()
	big := bytes.Repeat([]byte{3}, 2*testMaxBlock)
	eng.m[key(1)] = big // stored before the restart with a 2 MiB limit
	n := startNode(t, eng, nil)
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	h, msg := readResp(t, c)
	if h.Status != wire.StatusTooLarge || h.Stored != 2*testMaxBlock || !strings.Contains(string(msg), "server.max_block_bytes") {
		t.Fatalf("GET of a value over max_block_bytes: %v stored %d %q", h.Status, h.Stored, msg)
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: key(1), Offset: testMaxBlock, Length: testMaxBlock}, nil)
	if h, got := readResp(t, c); h.Status != wire.StatusOK || !bytes.Equal(got, big[testMaxBlock:]) {
		t.Fatalf("a range within the limit: %v, %d bytes", h.Status, len(got))
	}
	// The engine asking for more than the pool's largest buffer (the value
	// grew between the Exist and the read) gets a buffer of its own.
	cc := newConn(n.srv, nil)
	if b := cc.Alloc(n.srv.pool.Max() + 1); len(b) != n.srv.pool.Max()+1 {
		t.Fatalf("Alloc over the pool's largest buffer: %d bytes", len(b))
	}
}

// TestSmallRequestsPassLargeWaiters: clients that ask for large values and
// do not read them hold the whole budget, and a large PUT queues behind
// them; small PUTs and GETs of another client are served at once from the
// reserve instead of waiting in that queue for its timeout.
func TestSmallRequestsPassLargeWaiters(t *testing.T) {
	eng := newMemEngine()
	n := startNode(t, eng, func(o *Options) {
		o.BufferBudget = 2 * testMaxBlock // a reserve of 256 KiB, 32 KiB per request
		o.BodyTimeout = 20 * time.Second
		o.WriteTimeout = 20 * time.Second
		o.SocketBuffer = 64 << 10
	})
	big := bytes.Repeat([]byte{9}, testMaxBlock)
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(1)}, big)
	small := bytes.Repeat([]byte{5}, 4096)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(2)}, small)
	for range 2 {
		if h, msg := readResp(t, c); h.Status != wire.StatusOK {
			t.Fatalf("PUT: %v %s", h.Status, msg)
		}
	}
	for range 2 { // two GETs nobody reads hold the whole budget
		r := dialSmallReceive(t, n.addr)
		writeReq(t, r, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	}
	waitStats(t, n, "the unread GETs holding the budget", func(st Stats) bool { return st.BufferInUse == 2*testMaxBlock }, nil)
	waiter := dial(t, n.addr)
	go func() {
		_, _ = waiter.Write(append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(3), BodyLen: testMaxBlock}), big...))
	}()
	waitStats(t, n, "a large PUT waiting", func(st Stats) bool { return st.BufferWaits >= 1 }, nil)

	start := time.Now()
	for i := range 20 {
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(byte(10 + i))}, small)
		if h, msg := readResp(t, c); h.Status != wire.StatusOK {
			t.Fatalf("small PUT %d behind the large waiter: %v %s", i, h.Status, msg)
		}
		writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: key(2)}, nil)
		if h, got := readResp(t, c); h.Status != wire.StatusOK || !bytes.Equal(got, small) {
			t.Fatalf("small GET %d behind the large waiter: %v, %d bytes", i, h.Status, len(got))
		}
	}
	if st := n.srv.Stats(); st.BufferTimeouts != 0 {
		t.Fatalf("%d requests timed out waiting for budget", st.BufferTimeouts)
	}
	t.Logf("40 small requests behind the large waiter took %v", time.Since(start))
}

// TestReserveServesOnlySmallRequests: the reserve on top of the budget
// serves requests of at most smallRequest bytes, so clients stalling on
// values of a few MiB cannot use it up as well.
func TestReserveServesOnlySmallRequests(t *testing.T) {
	b := newPayloadBudget(1 << 30)
	if ok, res := b.tryAcquire(1 << 30); !ok || res {
		t.Fatal("the whole budget")
	}
	if ok, _ := b.tryAcquire(smallRequest + 1); ok {
		t.Fatal("a request over smallRequest took the reserve")
	}
	if ok, res := b.tryAcquire(smallRequest); !ok || !res {
		t.Fatal("a small request did not get the reserve")
	}
	b.release(smallRequest, true)
	b.release(1<<30, false)
	if b.inUse.Load() != 0 {
		t.Fatalf("in use %d after releasing everything", b.inUse.Load())
	}
}
