package server

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// TestBatchPutOverNValuesRefusedWhole: a BATCH_PUT whose body is over n
// values of max_block_bytes is refused whole with TOO_LARGE, even one
// byte over (values of max+1 and max bytes): nothing of it is stored.
func TestBatchPutOverNValuesRefusedWhole(t *testing.T) {
	eng := newMemEngine()
	n := startNode(t, eng, nil)
	c := dial(t, n.addr)
	body := wire.AppendPutItem(nil, key(1), testMaxBlock+1)
	body = wire.AppendPutItem(body, key(2), testMaxBlock)
	body = append(body, bytes.Repeat([]byte{'a'}, testMaxBlock+1)...)
	body = append(body, bytes.Repeat([]byte{'b'}, testMaxBlock)...)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: 2}, body)
	h, rest := readResp(t, c)
	if h.Status != wire.StatusTooLarge {
		var recs []byte
		if h.Status == wire.StatusOK && h.Stored == 2 {
			recs = make([]byte, 2)
			readFullConn(c, recs)
		}
		t.Fatalf("BATCH_PUT with %d value bytes for 2 items (max_block_bytes %d): status %s stored %d body %q records %v; want the frame refused TOO_LARGE",
			2*testMaxBlock+1, testMaxBlock, h.Status, h.Stored, rest, recs)
	}
	if _, _, err := eng.Get(key(2), 0, 0, nil); err == nil {
		t.Fatal("the refused frame's second value was stored")
	}
}

// TestNewRefusesMaxBatchItemsPastTheLimit: a program embedding the server
// cannot allow more items per batch frame than the config can.
func TestNewRefusesMaxBatchItemsPastTheLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = New(Options{Engine: newMemEngine(), Listener: ln, MaxBlockBytes: testMaxBlock, MaxBatchItems: MaxBatchItemsLimit + 1})
	if err == nil || !strings.Contains(err.Error(), "MaxBatchItems") {
		t.Fatalf("New with MaxBatchItems %d: %v, want it refused", MaxBatchItemsLimit+1, err)
	}
}
