package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/heaptest"
	"github.com/dfkv/dfkv/wire"
)

// stalledNode is a node with one 1 MiB payload buffer, minute-long I/O
// deadlines, small socket buffers and a 200 ms stall cut, holding key(1).
func stalledNode(t *testing.T) (*testNode, []byte) {
	t.Helper()
	n := startNode(t, newMemEngine(), func(o *Options) {
		o.BufferBudget = testMaxBlock
		o.WriteTimeout = 5 * time.Minute
		o.BodyTimeout = 5 * time.Minute
		o.SocketBuffer = 64 << 10
		o.StalledCut = 200 * time.Millisecond
	})
	value := bytes.Repeat([]byte{3}, testMaxBlock)
	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(1)}, value)
	if h, msg := readResp(t, c); h.Status != wire.StatusOK {
		t.Fatalf("PUT: %v %s", h.Status, msg)
	}
	return n, value
}

// TestStalledReaderCutForAWaitingRequest: a client that stops reading its
// 1 MiB GET holds the node's only payload buffer; another client's GET,
// which used to wait the 5-minute write timeout and fail UNAVAILABLE, is
// served once the stalled reader has held the buffer for the stall cut:
// that connection is closed and counted.
func TestStalledReaderCutForAWaitingRequest(t *testing.T) {
	n, value := stalledNode(t)
	reader := dialSmallReceive(t, n.addr)
	writeReq(t, reader, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	waitStats(t, n, "the stalled GET holding the buffer", func(st Stats) bool { return st.BufferInUse == testMaxBlock }, nil)

	c := dial(t, n.addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	if h, got := readResp(t, c); h.Status != wire.StatusOK || !bytes.Equal(got, value) {
		t.Fatalf("GET while a stalled reader held the buffer: %v, %d bytes", h.Status, len(got))
	}
	if st := n.srv.Stats(); st.StalledClosed != 1 || st.BufferTimeouts != 0 {
		t.Fatalf("after the cut: stalled_closed %d (want 1), buffer timeouts %d (want 0)", st.StalledClosed, st.BufferTimeouts)
	}
	got, _ := io.ReadAll(reader)
	if len(got) >= wire.ResponsePrefixLen+testMaxBlock {
		t.Fatalf("the cut reader still got its whole response (%d bytes)", len(got))
	}
}

// TestStalledBodyCutForAWaitingRequest: the same for a client that stops
// sending a PUT's body: the waiting PUT is stored, the stalled one is not.
//
// Also when a request pipelined ahead of the stalled PUT left a reply to
// send first: that reply goes out, and the body wait is still marked.
func TestStalledBodyCutForAWaitingRequest(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			n, value := stalledNode(t)
			stalled := dial(t, n.addr)
			var req []byte
			if pipelined {
				req = wire.AppendRequest(req, &wire.RequestHeader{Op: wire.OpPing})
			}
			req = wire.AppendRequest(req, &wire.RequestHeader{Op: wire.OpPut, Key: key(2), BodyLen: testMaxBlock})
			if _, err := stalled.Write(append(req, value[:1000]...)); err != nil {
				t.Fatal(err)
			}
			if pipelined {
				if h, _ := readResp(t, stalled); h.Status != wire.StatusOK {
					t.Fatalf("the PING ahead of the stalled PUT: %v", h.Status)
				}
			}
			waitStats(t, n, "the stalled PUT holding the buffer", func(st Stats) bool { return st.BufferInUse == testMaxBlock }, nil)

			c := dial(t, n.addr)
			writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: key(3)}, value)
			if h, msg := readResp(t, c); h.Status != wire.StatusOK {
				t.Fatalf("PUT while a stalled PUT held the buffer: %v %s", h.Status, msg)
			}
			if st := n.srv.Stats(); st.StalledClosed != 1 {
				t.Fatalf("stalled_closed %d, want 1", st.StalledClosed)
			}
			if _, err := n.srv.opts.Engine.Exist(key(2)); err == nil {
				t.Fatal("the stalled PUT was stored")
			}
		})
	}
}

// TestStalledReaderKeptWithoutPressure: a slow reader nobody waits for is
// never cut, however long past the stall cut it stays.
func TestStalledReaderKeptWithoutPressure(t *testing.T) {
	n, value := stalledNode(t)
	reader := dialSmallReceive(t, n.addr)
	writeReq(t, reader, wire.RequestHeader{Op: wire.OpGet, Key: key(1)}, nil)
	waitStats(t, n, "the stalled GET holding the buffer", func(st Stats) bool { return st.BufferInUse == testMaxBlock }, nil)
	time.Sleep(5 * n.srv.opts.StalledCut) // time passing is what is tested
	if h, got := readResp(t, reader); h.Status != wire.StatusOK || !bytes.Equal(got, value) {
		t.Fatalf("the slow reader, reading at last: %v, %d bytes", h.Status, len(got))
	}
	if st := n.srv.Stats(); st.StalledClosed != 0 {
		t.Fatalf("stalled_closed %d without anyone waiting, want 0", st.StalledClosed)
	}
}

// TestAnnouncedBatchTablesCostNothingUntilSent: a batch frame's item
// table is read into a buffer that grows as it arrives, so headers that
// announce the largest table and send nothing do not make the node set
// that memory aside, outside the payload budget, until their body
// deadline (64 such connections held 128 MiB).
func TestAnnouncedBatchTablesCostNothingUntilSent(t *testing.T) {
	const conns, items = 64, 65536
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxBatchItems = items })
	cs := pingedConns(t, n.addr, conns)
	before := heaptest.Live()
	h := wire.RequestHeader{Op: wire.OpBatchPut, Length: items, BodyLen: items * (wire.BatchPutItemLen + 1)}
	for _, c := range cs {
		if _, err := c.Write(wire.AppendRequest(nil, &h)); err != nil {
			t.Fatal(err)
		}
	}
	limit := int64(conns * items * wire.BatchPutItemLen / 4)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if grew := heaptest.Live() - before; grew > limit {
			t.Fatalf("%d connections announcing %d-item tables grew the heap by %d MiB (limit %d MiB)", conns, items, grew>>20, limit>>20)
		}
	}
}

// TestAnnouncedBodiesHoldNoResponseBuffer: a connection gives its
// response buffer (about 272 KiB, outside the payload budget) back before
// it waits for a body or a batch table its client has announced and not
// sent, as it does before waiting for the next request; so clients that
// announce and stall do not each hold one until their body deadline (128
// such connections held 34 MiB). Replies to requests pipelined before the
// stalled one go out first.
func TestAnnouncedBodiesHoldNoResponseBuffer(t *testing.T) {
	const conns = 128
	n := startNode(t, newMemEngine(), nil)
	cs := pingedConns(t, n.addr, conns)
	before := heaptest.Live()
	stalled := []wire.RequestHeader{
		{Op: wire.OpBatchGet, Length: 16, BodyLen: 16 * wire.BatchGetItemLen},
		{Op: wire.OpBatchRemove, Length: 16, BodyLen: 16 * wire.BatchKeyItemLen},
		{Op: wire.OpBatchPut, Length: 16, BodyLen: 16 * (wire.BatchPutItemLen + 1)},
		{Op: wire.OpAuth, BodyLen: 32},
	}
	for i, c := range cs {
		// A PING pipelined ahead of the stalled header: its reply must
		// still come.
		req := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})
		req = wire.AppendRequest(req, &stalled[i%len(stalled)])
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cs {
		if h, _ := readResp(t, c); h.Status != wire.StatusOK {
			t.Fatalf("connection %d: the PING ahead of a stalled %v answered %v", i, stalled[i%len(stalled)].Op, h.Status)
		}
	}
	limit := int64(conns * wbufCap / 8)
	waitStats(t, n, "no connection holding a response buffer", func(st Stats) bool { return st.Serving == 0 }, nil)
	if grew := heaptest.Live() - before; grew > limit {
		t.Fatalf("%d connections stalled in a body grew the heap by %d KiB (limit %d KiB)", conns, grew>>10, limit>>10)
	}
}

// pingedConns dials n connections that have each served a PING, so their
// first request's working memory has come and gone before a test measures.
func pingedConns(t *testing.T, addr string, n int) []net.Conn {
	cs := make([]net.Conn, n)
	for i := range cs {
		cs[i] = dial(t, addr)
		writeReq(t, cs[i], wire.RequestHeader{Op: wire.OpPing}, nil)
		readResp(t, cs[i])
	}
	return cs
}
