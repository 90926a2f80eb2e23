package server

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// TestWriteOnlyBatchRunJudgedAsNewAcrossChunkBoundary: a write-only
// credential's BATCH_PUT run is judged as if all its keys were new, also
// when max_block_bytes cuts it into chunks: the item whose arrival cuts
// the chunk still counts in the next, so an item that does not fit as a
// new key gets the same blind QUOTA_EXCEEDED whether its key exists.
func TestWriteOnlyBatchRunJudgedAsNewAcrossChunkBoundary(t *testing.T) {
	const writerToken = "writer-token-0123456789abcd"
	text := credentialsText(aliceToken) + fmt.Sprintf("[[credential]]\ntoken_sha256 = %q\nname = \"writer\"\ntenants = [\"acme\"]\nallow = [\"write\"]\n", sumOf(writerToken))
	node := func() string {
		dir := t.TempDir()
		cpath := filepath.Join(dir, "credentials.toml")
		if err := os.WriteFile(cpath, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		addr, _, _ := runNode(t, map[string][]string{
			"disk": {dir + "/d0"}, "disk-capacity": {"64MiB"}, "tenant-default-quota": {"100000"},
			"credentials-file": {cpath}, "max-block-bytes": {"65536"},
		})
		return addr
	}
	km, err := wire.NewKeyMapper([]byte("acme"))
	if err != nil {
		t.Fatal(err)
	}
	key := func(s string) wire.BlockKey { k, _ := km.BlockKey([]byte(s)); return k }
	// statusOfLast sends P (40000, new), A (30000, new), B (20000, key b):
	// 30000 used + 40000 + 30000 = 100000 already, so B cannot fit as a
	// new key. A cuts the chunk (40000 + 30000 > 65536).
	statusOfLast := func(addr string, b wire.BlockKey) []byte {
		ctx := context.Background()
		alice := openAs(t, addr, "acme", aliceToken)
		if err := alice.Put(ctx, []byte("secret-prompt"), bytes.Repeat([]byte("s"), 30000)); err != nil {
			t.Fatal(err)
		}
		c := rawAuthed(t, addr, writerToken)
		sizes := []int{40000, 30000, 20000}
		keys := []wire.BlockKey{key("p-new"), key("a-new"), b}
		var tbl, vals []byte
		for i, k := range keys {
			tbl = wire.AppendPutItem(tbl, k, uint64(sizes[i]))
			vals = append(vals, bytes.Repeat([]byte{byte('a' + i)}, sizes[i])...)
		}
		writeReq(t, c, wire.RequestHeader{Op: wire.OpBatchPut, Length: 3}, append(tbl, vals...))
		h, _ := readResp(t, c)
		if h.Status != wire.StatusOK || h.Stored != 3 {
			t.Fatalf("BATCH_PUT: %s, %d records", h.Status, h.Stored)
		}
		rec := make([]byte, 3)
		readFullConn(c, rec)
		return rec
	}
	present := statusOfLast(node(), key("secret-prompt"))
	absent := statusOfLast(node(), key("never-written"))
	if present[2] != absent[2] || wire.Status(present[2]) != wire.StatusQuotaExceeded {
		t.Fatalf("third item (does not fit as a new key): existing key %s, absent key %s; want the same blind QUOTA_EXCEEDED for both (records %v / %v)",
			wire.Status(present[2]), wire.Status(absent[2]), present, absent)
	}
}
