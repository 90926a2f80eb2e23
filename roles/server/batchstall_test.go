package server

import (
	"bytes"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// TestStalledBatchPutKeepsOnlyStoredRuns pins what the package doc says of
// a BATCH_PUT cut by a body-timeout stall: it is stored in runs of up to
// max_block_bytes as its values arrive, the stall drops the run it cuts
// (items received in full included) and keeps the runs stored before it,
// and the client gets no answer. In-process node over a real loopback
// socket.
func TestStalledBatchPutKeepsOnlyStoredRuns(t *testing.T) {
	eng := newMemEngine()
	n := startNode(t, eng, func(o *Options) { o.BodyTimeout = 500 * time.Millisecond })
	// stall sends a BATCH_PUT of values with keys from base: its table,
	// the values before cut in full and part of value cut, then waits for
	// the node to close the connection.
	stall := func(base byte, vals [][]byte, cut int) {
		t.Helper()
		var tbl, body []byte
		total := 0
		for i, v := range vals {
			tbl = wire.AppendPutItem(tbl, key(base+byte(i)), uint64(len(v)))
			total += len(v)
			if i < cut {
				body = append(body, v...)
			}
		}
		body = append(body, vals[cut][:len(vals[cut])/2]...)
		h := wire.RequestHeader{Op: wire.OpBatchPut, Length: uint64(len(vals)), BodyLen: uint64(len(tbl) + total)}
		c := dial(t, n.addr)
		if _, err := c.Write(append(append(wire.AppendRequest(nil, &h), tbl...), body...)); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c)
	}
	stored := func(k wire.BlockKey, v []byte) bool {
		t.Helper()
		eng.mu.Lock()
		got, ok := eng.m[k]
		eng.mu.Unlock()
		if ok && !bytes.Equal(got, v) {
			t.Fatalf("key %x holds %d bytes that differ from the %d sent", k.ID[0], len(got), len(v))
		}
		return ok
	}
	small := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }

	// Two complete items and a cut third: one run, none of it stored.
	vals := [][]byte{small('a'), small('b'), small('c')}
	stall(10, vals, 2)
	for i, v := range vals {
		if stored(key(10+byte(i)), v) {
			t.Errorf("small batch cut at item 2: item %d stored; a run cut by a stall is dropped whole", i)
		}
	}

	// A first item of max_block_bytes fills a run, which is stored before
	// the next item is read: it stays; the complete second item, in the
	// run the stall cuts, does not.
	vals = [][]byte{bytes.Repeat([]byte{'x'}, testMaxBlock), small('y'), small('z')}
	stall(20, vals, 2)
	if !stored(key(20), vals[0]) {
		t.Error("batch cut at item 2: item 0, a run stored before the stall, was dropped")
	}
	for i := 1; i < 3; i++ {
		if stored(key(20+byte(i)), vals[i]) {
			t.Errorf("batch cut at item 2: item %d, in the run the stall cut, was stored", i)
		}
	}
}
