package client

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// FuzzClientReplies answers one call with arbitrary bytes (truncated,
// another epoch, an unknown status, a body longer than asked for, a batch
// with the wrong record count, garbage) and ends that connection's answers,
// then answers a second call correctly. Whatever a node sends, the client returns an error or a
// result those bytes justify, as the test decodes them on its own: it
// never panics, never hands back more bytes than the caller's buffer
// holds or other bytes than the node sent for that item, and never
// leaves the connection out of step for the next call. op picks GET,
// EXIST, BATCH_GET or BATCH_EXIST.
func FuzzClientReplies(f *testing.F) {
	resp := func(st wire.Status, stored uint64, body []byte) []byte {
		b := wire.AppendResponse(nil, &wire.ResponseHeader{Status: st, Stored: stored, BodyLen: uint64(len(body))})
		return append(b, body...)
	}
	getRec := func(st wire.Status, stored uint64, data []byte) []byte {
		b := wire.AppendGetRecord(nil, st, stored, uint64(len(data)))
		return append(b, data...)
	}
	// batch is a batch answer: a prefix announcing n records (no body
	// length: the records delimit themselves), then the records.
	batch := func(n uint64, recs ...[]byte) []byte {
		b := wire.AppendResponse(nil, &wire.ResponseHeader{Status: wire.StatusOK, Stored: n})
		for _, r := range recs {
			b = append(b, r...)
		}
		return b
	}
	f.Add(byte(0), resp(wire.StatusOK, 5, []byte("hello")))
	f.Add(byte(0), resp(wire.StatusNotFound, 0, nil))
	f.Add(byte(0), resp(wire.StatusIOError, 0, []byte("disk says no")))
	f.Add(byte(0), resp(wire.StatusOK, 1<<40, make([]byte, 100))) // more than asked for
	f.Add(byte(0), resp(wire.StatusOK, 5, []byte("hello"))[:10])  // truncated prefix
	f.Add(byte(0), resp(wire.StatusOK, 5, []byte("hel")))         // shorter than the value
	f.Add(byte(0), append([]byte{wire.EpochTCP + 1}, resp(wire.StatusOK, 1, []byte("x"))[1:]...))
	f.Add(byte(1), resp(wire.StatusOK, 3, nil))
	f.Add(byte(1), resp(wire.Status(200), 3, nil))
	f.Add(byte(1), resp(wire.StatusOK, 7, resp(wire.StatusOK, 4, []byte("evil")))) // a body EXIST does not read
	f.Add(byte(2), batch(2, getRec(wire.StatusOK, 3, []byte("abc")), getRec(wire.StatusNotFound, 0, nil)))
	f.Add(byte(2), batch(1, getRec(wire.StatusOK, 3, []byte("abc"))))                                          // one record for two keys
	f.Add(byte(2), batch(2, getRec(wire.StatusOK, 9, []byte("abc")), getRec(wire.StatusOK, 3, []byte("xyz")))) // a short item
	f.Add(byte(2), resp(wire.StatusOK, 2, getRec(wire.StatusOK, 3, []byte("abc"))))                            // records given as a body
	f.Add(byte(3), batch(2, wire.AppendExistRecord(nil, wire.StatusOK, 7), wire.AppendExistRecord(nil, wire.StatusNotFound, 0)))
	f.Add(byte(3), batch(2, wire.AppendExistRecord(nil, wire.StatusOK, 7)))
	f.Fuzz(func(t *testing.T, op byte, answer []byte) {
		// The first request gets answer; every later one, on this
		// connection or a new one, a well-formed EXIST answer (stored 42),
		// so an answer longer than the client read shows as a second call
		// that misreads what the first left behind.
		var served atomic.Int32
		addr := fakeNode(t, func(c net.Conn) {
			for {
				h, err := readRequest(c)
				if err != nil {
					return
				}
				if served.Add(1) == 1 {
					// Then end this side: a client waiting for more of a
					// short answer gets EOF at once, while bytes it left
					// unread stay there for its next call to misread.
					if _, err := c.Write(answer); err != nil {
						return
					}
					_ = c.(*net.TCPConn).CloseWrite()
					continue
				}
				if h.Op != wire.OpExist {
					return
				}
				reply(c, wire.ResponseHeader{Status: wire.StatusOK, Stored: 42}, nil)
			}
		})
		cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, SharedMemory: ShmOff, Timeout: 400 * time.Millisecond, DialTimeout: time.Second,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx := context.Background()
		keys := [][]byte{[]byte("a"), []byte("b")}
		switch op % 4 {
		case 0:
			dst := make([]byte, 64)
			n, stored, err := cl.Get(ctx, keys[0], dst)
			if n < 0 || n > len(dst) {
				t.Fatalf("Get returned n = %d for a %d-byte buffer", n, len(dst))
			}
			if err == nil {
				h, herr := wire.DecodeResponse(answer)
				if herr != nil || h.Status != wire.StatusOK || h.BodyLen != uint64(n) || stored != uint64(n) ||
					len(answer) < wire.ResponsePrefixLen+n || !bytes.Equal(dst[:n], answer[wire.ResponsePrefixLen:wire.ResponsePrefixLen+n]) {
					t.Fatalf("Get succeeded with %q (stored %d) on answer %x", dst[:n], stored, answer)
				}
			}
		case 1:
			stored, err := cl.Exist(ctx, keys[0])
			if err == nil {
				h, herr := wire.DecodeResponse(answer)
				if herr != nil || h.Status != wire.StatusOK || h.Stored != stored || h.BodyLen != 0 {
					t.Fatalf("Exist succeeded (stored %d) on answer %x", stored, answer)
				}
			}
		case 2:
			dsts := [][]byte{make([]byte, 32), make([]byte, 32)}
			res := cl.GetBatch(ctx, keys, dsts)
			if len(res) != len(keys) {
				t.Fatalf("GetBatch returned %d results for %d keys", len(res), len(keys))
			}
			recs, ok := decodeBatchGet(answer, len(keys))
			for i, r := range res {
				if r.Err != nil {
					continue
				}
				if !ok || recs[i].st != wire.StatusOK || !bytes.Equal(r.Data, recs[i].data) || r.Stored != recs[i].stored || uint64(len(r.Data)) != r.Stored {
					t.Fatalf("GetBatch item %d succeeded with %q (stored %d) on answer %x", i, r.Data, r.Stored, answer)
				}
			}
		case 3:
			res := cl.ExistBatch(ctx, keys)
			if len(res) != len(keys) {
				t.Fatalf("ExistBatch returned %d results for %d keys", len(res), len(keys))
			}
			recs, ok := decodeBatchExist(answer, len(keys))
			for i, r := range res {
				if r.Err == nil && (!ok || recs[i].st != wire.StatusOK || r.Stored != recs[i].stored) {
					t.Fatalf("ExistBatch item %d succeeded (stored %d) on answer %x", i, r.Stored, answer)
				}
			}
		}
		// A second call: answered right, it must read that answer, not
		// what the first answer left on the connection. (It may also fail:
		// a first answer that timed out backs the node off.)
		if stored, err := cl.Exist(ctx, []byte("second")); err == nil && stored != 42 {
			t.Fatalf("the call after answer %x read stored %d, not the node's 42: the connection was left out of step", answer, stored)
		}
	})
}

type batchRec struct {
	st     wire.Status
	stored uint64
	data   []byte
}

// decodeBatchGet decodes a BATCH_GET answer of n records on its own, as
// the protocol lays it out; ok is false unless all of it is there.
func decodeBatchGet(b []byte, n int) (recs []batchRec, ok bool) {
	h, err := wire.DecodeResponse(b)
	if err != nil || h.Status != wire.StatusOK || h.Stored != uint64(n) || h.BodyLen != 0 {
		return nil, false
	}
	b = b[wire.ResponsePrefixLen:]
	for range n {
		if len(b) < wire.BatchGetRecordLen {
			return nil, false
		}
		st, stored, dl := wire.DecodeGetRecord(b)
		b = b[wire.BatchGetRecordLen:]
		if uint64(len(b)) < dl {
			return nil, false
		}
		recs = append(recs, batchRec{st: st, stored: stored, data: b[:dl]})
		b = b[dl:]
	}
	return recs, true
}

// decodeBatchExist is decodeBatchGet for a BATCH_EXIST answer.
func decodeBatchExist(b []byte, n int) (recs []batchRec, ok bool) {
	h, err := wire.DecodeResponse(b)
	if err != nil || h.Status != wire.StatusOK || h.Stored != uint64(n) || h.BodyLen != 0 {
		return nil, false
	}
	b = b[wire.ResponsePrefixLen:]
	for range n {
		if len(b) < wire.BatchExistRecLen {
			return nil, false
		}
		st, stored := wire.DecodeExistRecord(b)
		recs = append(recs, batchRec{st: st, stored: stored})
		b = b[wire.BatchExistRecLen:]
	}
	return recs, true
}
