package server

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// TestWriteOnlyCredentialCannotProbeKeysAtTheQuotaEdge: the quota charges
// a PUT its size less the size of the value it replaces, so a value sized
// just past the tenant's free bytes would be refused for a key that does
// not exist and accepted for one that does. A credential that may write
// acme's keys but not read them gets the same answer for both, for a PUT
// and for a BATCH_PUT item.
func TestWriteOnlyCredentialCannotProbeKeysAtTheQuotaEdge(t *testing.T) {
	const writerToken = "writer-token-0123456789abcd"
	text := credentialsText(aliceToken) + fmt.Sprintf("[[credential]]\ntoken_sha256 = %q\nname = \"writer\"\ntenants = [\"acme\"]\nallow = [\"write\"]\n", sumOf(writerToken))
	addr := quotaCredNode(t, text, "100000")
	ctx := context.Background()
	alice := openAs(t, addr, "acme", aliceToken)
	if err := alice.Put(ctx, []byte("secret-prompt"), bytes.Repeat([]byte("s"), 30000)); err != nil {
		t.Fatal(err)
	}
	km, err := wire.NewKeyMapper([]byte("acme"))
	if err != nil {
		t.Fatal(err)
	}
	present, _ := km.BlockKey([]byte("secret-prompt"))
	absent, _ := km.BlockKey([]byte("never-written"))

	c := rawAuthed(t, addr, writerToken)
	answer := func(k wire.BlockKey) wire.Status {
		// 30000 bytes are used of 100000: 70001 does not fit as a new key,
		// and fits as a replacement of a key that holds at least 1 byte.
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPut, Key: k}, bytes.Repeat([]byte("w"), 70001))
		h, _ := readResp(t, c)
		return h.Status
	}
	sa := answer(absent)
	sp := answer(present)
	if sp != sa {
		t.Fatalf("a write-only credential tells an existing key from an absent one by the PUT's status at the quota's edge: existing %s, absent %s", sp, sa)
	}
	batch := func(k wire.BlockKey) byte {
		body := wire.AppendPutItem(nil, k, 70001)
		body = append(body, bytes.Repeat([]byte("b"), 70001)...)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: 1}, body)
		h, _ := readResp(t, c)
		if h.Status != wire.StatusOK || h.Stored != 1 {
			t.Fatalf("BATCH_PUT: %s, %d records", h.Status, h.Stored)
		}
		rec := make([]byte, 1)
		readFullConn(c, rec)
		return rec[0]
	}
	if bp, ba := batch(present), batch(absent); bp != ba {
		t.Fatalf("the same, by a BATCH_PUT item's status: existing %s, absent %s", wire.Status(bp), wire.Status(ba))
	}
	// The reader's value is untouched.
	got := make([]byte, 30000)
	if _, _, err := alice.Get(ctx, []byte("secret-prompt"), got); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("s"), 30000)) {
		t.Fatalf("the tenant's value after the refused writes: %v", err)
	}
}
