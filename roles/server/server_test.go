package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

const testMaxBlock = 1 << 20

type testNode struct {
	srv    *Server
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func startNode(t testing.TB, eng engine.StoreEngine, mutate func(*Options)) *testNode {
	t.Helper()
	return startNodeWith(t, eng, mutate, nil)
}

// startNodeWith is startNode with before run on the server before it
// serves (to set fields Options does not reach).
func startNodeWith(t testing.TB, eng engine.StoreEngine, mutate func(*Options), before func(*Server)) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Engine: eng, Listener: ln, MaxBlockBytes: testMaxBlock, MaxBatchItems: 64, ShutdownTimeout: 5 * time.Second}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{srv: srv, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- srv.Serve(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

func (n *testNode) stop(t testing.TB) {
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		n.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func key(b byte) wire.BlockKey {
	var k wire.BlockKey
	k.Tenant = uint64(b) * 7
	k.ID[0] = b
	return k
}

func writeReq(t *testing.T, c net.Conn, h wire.RequestHeader, body []byte) {
	t.Helper()
	h.BodyLen = uint64(len(body))
	if _, err := c.Write(append(wire.AppendRequest(nil, &h), body...)); err != nil {
		t.Fatal(err)
	}
}

func readResp(t *testing.T, c net.Conn) (wire.ResponseHeader, []byte) {
	t.Helper()
	var b [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read response: %v", err)
	}
	h, err := wire.DecodeResponse(b[:])
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatalf("read body: %v", err)
	}
	return h, body
}

// expectClosed asserts the server closed c (EOF or reset on read).
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	var b [1]byte
	_, err := c.Read(b[:])
	if err == nil {
		t.Fatal("connection still open: read returned data")
	}
	if errors.Is(err, io.EOF) {
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection still open: read timed out")
	}
}

func TestPipelinedFIFO(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	c := dial(t, n.addr)
	// 100 PUTs and GETs written back to back without reading anything.
	var out []byte
	for i := 0; i < 50; i++ {
		val := bytes.Repeat([]byte{byte(i)}, i+1)
		h := wire.RequestHeader{Op: wire.OpPut, Key: key(byte(i)), BodyLen: uint64(len(val))}
		out = append(wire.AppendRequest(out, &h), val...)
		out = wire.AppendRequest(out, &wire.RequestHeader{Op: wire.OpGet, Key: key(byte(i))})
	}
	go func() { _, _ = c.Write(out) }()
	for i := 0; i < 50; i++ {
		if h, _ := readResp(t, c); h.Status != wire.StatusOK {
			t.Fatalf("put %d: %s", i, h.Status)
		}
		h, body := readResp(t, c)
		if h.Status != wire.StatusOK || h.Stored != uint64(i+1) || !bytes.Equal(body, bytes.Repeat([]byte{byte(i)}, i+1)) {
			t.Fatalf("get %d out of order or wrong: %+v %v", i, h, body)
		}
	}
}

func TestRangeContractOverWire(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	c := dial(t, n.addr)
	val := []byte("0123456789")
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(1)}, val)
	readResp(t, c)
	f := func(off, length uint64, want string, st wire.Status) {
		t.Helper()
		writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: key(1), Offset: off, Length: length}, nil)
		h, body := readResp(t, c)
		if h.Status != st {
			t.Fatalf("off %d len %d: status %s, want %s", off, length, h.Status, st)
		}
		if st == wire.StatusOK && (string(body) != want || h.Stored != 10) {
			t.Fatalf("off %d len %d: %q stored %d, want %q stored 10", off, length, body, h.Stored, want)
		}
	}
	f(0, 0, "0123456789", wire.StatusOK)
	f(3, 0, "3456789", wire.StatusOK)
	f(3, 2, "34", wire.StatusOK)
	f(8, 100, "89", wire.StatusOK)
	f(10, 0, "", wire.StatusOK)
	f(11, 0, "", wire.StatusInvalid)
	// An INVALID range answer leaves the connection usable.
	f(0, 1, "0", wire.StatusOK)
}

func TestMalformedFramesCloseOnlyThatConnection(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	good := dial(t, n.addr)
	writeReq(t, good, wire.RequestHeader{Op: wire.OpPut, Key: key(1)}, []byte("v"))
	readResp(t, good)

	cases := []struct {
		name string
		raw  func() []byte
		want wire.Status
	}{
		{"wrong epoch", func() []byte {
			b := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})
			b[0] = 5 // an older epoch (7 is the lease protocol's RDMA bootstrap: rdma_test.go)
			return b
		}, wire.StatusEpochMismatch},
		{"unknown op", func() []byte {
			b := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})
			b[1] = 99
			return b
		}, wire.StatusUnsupported},
		{"put over max block", func() []byte {
			return wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(2), BodyLen: testMaxBlock + 1})
		}, wire.StatusTooLarge},
		{"put of 1 TiB", func() []byte {
			return wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(2), BodyLen: 1 << 40})
		}, wire.StatusTooLarge},
		{"zero-byte put", func() []byte {
			return wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(2)})
		}, wire.StatusInvalid},
		{"batch put table lies", func() []byte {
			tbl := wire.AppendPutItem(nil, key(3), 5)
			h := wire.RequestHeader{Op: wire.OpBatchPut, Length: 1, BodyLen: uint64(len(tbl)) + 9}
			return append(append(wire.AppendRequest(nil, &h), tbl...), make([]byte, 9)...)
		}, wire.StatusInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, n.addr)
			if _, err := c.Write(tc.raw()); err != nil {
				t.Fatal(err)
			}
			h, msg := readResp(t, c)
			if h.Status != tc.want {
				t.Fatalf("status %s, want %s (%s)", h.Status, tc.want, msg)
			}
			if len(msg) == 0 {
				t.Fatal("refusal carries no message")
			}
			expectClosed(t, c)
			// Nothing of the refused frame was applied, and others still work.
			writeReq(t, good, wire.RequestHeader{Op: wire.OpExist, Key: key(2)}, nil)
			if h, _ := readResp(t, good); h.Status != wire.StatusNotFound {
				t.Fatalf("refused PUT was applied: %s", h.Status)
			}
		})
	}
	// A truncated frame followed by a hang-up leaves the node serving.
	c := dial(t, n.addr)
	_, _ = c.Write(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(4), BodyLen: 100})[:30])
	c.Close()
	c = dial(t, n.addr)
	_, _ = c.Write(append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: key(4), BodyLen: 100}), 1, 2, 3))
	c.Close()
	writeReq(t, good, wire.RequestHeader{Op: wire.OpExist, Key: key(4)}, nil)
	if h, _ := readResp(t, good); h.Status != wire.StatusNotFound {
		t.Fatalf("half-sent PUT was applied: %s", h.Status)
	}
	if got := n.srv.Stats().FrameErrors; got != uint64(len(cases)) {
		t.Fatalf("frame error counter %d, want %d", got, len(cases))
	}
}

func TestFirstRequestDeadline(t *testing.T) {
	// 1 s: long enough for the connection that must send in time to do so
	// on a loaded machine; the drip feeder and the silent one wait it out.
	n := startNode(t, newMemEngine(), func(o *Options) { o.FirstRequest = time.Second })
	// A connection whose first frame arrives in time may then idle: it
	// sends it before the two below are dialed, so it has idled past the
	// deadline by the time the node closed them.
	ok := dial(t, n.addr)
	writeReq(t, ok, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, ok)
	// A drip feeder whose first prefix stops part-way is refused as a
	// peer of another generation as soon as it goes quiet, and closed; a
	// silent connection is closed at the deadline.
	drip := dial(t, n.addr)
	_, _ = drip.Write(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})[:10])
	if h, msg := readResp(t, drip); h.Status != wire.StatusEpochMismatch {
		t.Fatalf("drip feeder: %s %q", h.Status, msg)
	}
	expectClosed(t, drip)
	silent := dial(t, n.addr)
	expectClosed(t, silent)
	if got := n.srv.Stats().FirstReqTimeouts; got != 1 {
		t.Fatalf("first-request timeouts %d, want 1 (the silent one)", got)
	}
	writeReq(t, ok, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, ok); h.Status != wire.StatusOK {
		t.Fatalf("idle connection after first request: %s", h.Status)
	}
}

func TestMaxConnsRefusesWithStatus(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxConns = 1 })
	a := dial(t, n.addr)
	writeReq(t, a, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, a)
	b := dial(t, n.addr)
	h, msg := readResp(t, b)
	if h.Status != wire.StatusUnavailable || !bytes.Contains(msg, []byte("max_conns")) {
		t.Fatalf("second connection: %s %q", h.Status, msg)
	}
	writeReq(t, a, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, a); h.Status != wire.StatusOK {
		t.Fatal("first connection broke")
	}
}

// TestGracefulShutdownFinishesInFlight holds a PUT inside the engine,
// cancels the server, and checks the PUT is still answered OK, idle
// connections are closed and Serve returns only afterwards.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	eng := newMemEngine()
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	eng.gate = func() {
		once.Do(func() { close(entered); <-release })
	}
	n := startNode(t, eng, nil)
	busy := dial(t, n.addr)
	idle := dial(t, n.addr)
	writeReq(t, idle, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, idle)
	writeReq(t, busy, wire.RequestHeader{Op: wire.OpPut, Key: key(9)}, []byte("payload"))
	<-entered
	n.cancel()
	expectClosed(t, idle)
	select {
	case <-n.done:
		t.Fatal("Serve returned with a request in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if h, _ := readResp(t, busy); h.Status != wire.StatusOK {
		t.Fatalf("in-flight PUT answered %s", h.Status)
	}
	expectClosed(t, busy)
	if err := <-n.done; err != nil {
		t.Fatal(err)
	}
	n.done <- nil
	if _, err := eng.Exist(key(9)); err != nil {
		t.Fatal("in-flight PUT was not applied")
	}
	if _, err := net.DialTimeout("tcp", n.addr, time.Second); err == nil {
		t.Fatal("listener still accepting after shutdown")
	}
}

func TestBatchFramesOverWire(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	c := dial(t, n.addr)
	vals := [][]byte{[]byte("a"), bytes.Repeat([]byte("b"), 70000), []byte("ccc")}
	var tbl, data []byte
	for i, v := range vals {
		tbl = wire.AppendPutItem(tbl, key(byte(i)), uint64(len(v)))
		data = append(data, v...)
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: 3}, append(tbl, data...))
	h, body := readResp(t, c)
	if h.Status != wire.StatusOK || h.Stored != 3 {
		t.Fatalf("batch put header %+v", h)
	}
	_ = body // batch records follow the prefix with BodyLen 0
	var st [3]byte
	if _, err := io.ReadFull(c, st[:]); err != nil || st != [3]byte{} {
		t.Fatalf("batch put statuses %v %v", st, err)
	}
	tbl = nil
	for i := 0; i < 4; i++ {
		tbl = wire.AppendGetItem(tbl, key(byte(i)), 0, 0)
	}
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchGet, Length: 4}, tbl)
	h, _ = readResp(t, c)
	if h.Stored != 4 {
		t.Fatalf("batch get header %+v", h)
	}
	for i := 0; i < 4; i++ {
		var rec [wire.BatchGetRecordLen]byte
		if _, err := io.ReadFull(c, rec[:]); err != nil {
			t.Fatal(err)
		}
		s, stored, dl := wire.DecodeGetRecord(rec[:])
		if i == 3 {
			if s != wire.StatusNotFound || dl != 0 {
				t.Fatalf("missing item: %s %d", s, dl)
			}
			continue
		}
		got := make([]byte, dl)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if s != wire.StatusOK || stored != uint64(len(vals[i])) || !bytes.Equal(got, vals[i]) {
			t.Fatalf("item %d: %s stored %d", i, s, stored)
		}
	}
}

// TestStalledBodyClosesConnection: a client that sends a PUT header and
// part of its value and then stalls is cut off at BodyTimeout (nothing
// stored), after a first request and, with no first-request deadline set,
// as its first request too (then it is not counted as a first-request
// timeout); an idle connection between requests is left alone. In-process
// node over a real loopback socket.
func TestStalledBodyClosesConnection(t *testing.T) {
	eng := newMemEngine()
	n := startNode(t, eng, func(o *Options) { o.BodyTimeout = 100 * time.Millisecond })
	ping := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})
	var resp [wire.ResponsePrefixLen]byte
	pinged := func(c net.Conn, what string) {
		t.Helper()
		if _, err := c.Write(ping); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(c, resp[:]); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	stalls := func(c net.Conn, k wire.BlockKey, what string) {
		t.Helper()
		h := wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: 4096}
		if _, err := c.Write(append(wire.AppendRequest(nil, &h), make([]byte, 1000)...)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(resp[:]); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: connection not closed by the server (read: %v)", what, err)
		}
		if _, err := eng.Exist(k); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("%s stored something: %v", what, err)
		}
	}
	idle := dial(t, n.addr)
	defer idle.Close()
	pinged(idle, "idle connection")

	c := dial(t, n.addr)
	defer c.Close()
	pinged(c, "second connection")
	stalls(c, key(1), "a stalled PUT body after a first request")

	first := dial(t, n.addr)
	defer first.Close()
	stalls(first, key(2), "a stalled PUT body as the first request")
	if got := n.srv.stats.firstReqTimeouts.Load(); got != 0 {
		t.Fatalf("%d first-request timeouts counted with no first-request deadline set, want 0 (it was a body timeout)", got)
	}

	pinged(idle, "idle connection after the body deadlines")
}
