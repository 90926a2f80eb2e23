package client

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// FuzzClientReplies answers one call with arbitrary bytes (truncated,
// another epoch, an unknown status, a body longer than asked for, a batch
// with the wrong record count, garbage) and then closes the connection.
// Whatever a node sends, the client returns an error or a result those
// bytes justify: it never panics, never hands back more bytes than the
// caller's buffer holds, and never returns value bytes the node did not
// send. op picks GET, EXIST, BATCH_GET or BATCH_EXIST.
func FuzzClientReplies(f *testing.F) {
	resp := func(st wire.Status, stored uint64, body []byte) []byte {
		b := wire.AppendResponse(nil, &wire.ResponseHeader{Status: st, Stored: stored, BodyLen: uint64(len(body))})
		return append(b, body...)
	}
	getRec := func(st wire.Status, stored uint64, data []byte) []byte {
		b := wire.AppendGetRecord(nil, st, stored, uint64(len(data)))
		return append(b, data...)
	}
	f.Add(byte(0), resp(wire.StatusOK, 5, []byte("hello")))
	f.Add(byte(0), resp(wire.StatusNotFound, 0, nil))
	f.Add(byte(0), resp(wire.StatusIOError, 0, []byte("disk says no")))
	f.Add(byte(0), resp(wire.StatusOK, 1<<40, make([]byte, 100))) // more than asked for
	f.Add(byte(0), resp(wire.StatusOK, 5, []byte("hello"))[:10])  // truncated prefix
	f.Add(byte(0), append([]byte{wire.EpochTCP + 1}, resp(wire.StatusOK, 1, []byte("x"))[1:]...))
	f.Add(byte(1), resp(wire.StatusOK, 3, nil))
	f.Add(byte(1), resp(wire.Status(200), 3, nil))
	f.Add(byte(2), resp(wire.StatusOK, 2, append(getRec(wire.StatusOK, 3, []byte("abc")), getRec(wire.StatusNotFound, 0, nil)...)))
	f.Add(byte(2), resp(wire.StatusOK, 1, getRec(wire.StatusOK, 3, []byte("abc")))) // one record for two keys
	f.Add(byte(3), resp(wire.StatusOK, 2, append(wire.AppendExistRecord(nil, wire.StatusOK, 7), wire.AppendExistRecord(nil, wire.StatusNotFound, 0)...)))
	f.Fuzz(func(t *testing.T, op byte, reply []byte) {
		addr := fakeNode(t, func(c net.Conn) {
			if _, err := readRequest(c); err != nil {
				return
			}
			_, _ = c.Write(reply)
		})
		cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, Timeout: 2 * time.Second, DialTimeout: time.Second,
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
			n, _, err := cl.Get(ctx, keys[0], dst)
			if n < 0 || n > len(dst) {
				t.Fatalf("Get returned n = %d for a %d-byte buffer", n, len(dst))
			}
			if err == nil {
				h, herr := wire.DecodeResponse(reply)
				if herr != nil || h.Status != wire.StatusOK || h.BodyLen != uint64(n) || len(reply) < wire.ResponsePrefixLen+n ||
					!bytes.Equal(dst[:n], reply[wire.ResponsePrefixLen:wire.ResponsePrefixLen+n]) {
					t.Fatalf("Get succeeded with %q on reply %x", dst[:n], reply)
				}
			}
		case 1:
			stored, err := cl.Exist(ctx, keys[0])
			if err == nil {
				h, herr := wire.DecodeResponse(reply)
				if herr != nil || h.Status != wire.StatusOK || h.Stored != stored {
					t.Fatalf("Exist succeeded (stored %d) on reply %x", stored, reply)
				}
			}
		case 2:
			dsts := [][]byte{make([]byte, 32), make([]byte, 32)}
			res := cl.GetBatch(ctx, keys, dsts)
			if len(res) != len(keys) {
				t.Fatalf("GetBatch returned %d results for %d keys", len(res), len(keys))
			}
			for i, r := range res {
				if r.Err != nil {
					continue
				}
				if len(r.Data) > len(dsts[i]) || !bytes.Contains(reply, r.Data) {
					t.Fatalf("GetBatch item %d succeeded with %q on reply %x", i, r.Data, reply)
				}
			}
		case 3:
			if res := cl.ExistBatch(ctx, keys); len(res) != len(keys) {
				t.Fatalf("ExistBatch returned %d results for %d keys", len(res), len(keys))
			}
		}
	})
}
