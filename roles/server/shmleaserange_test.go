package server

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// TestShmRangeLeasesCountTheSlotTheyPin: a lease pins its value's whole
// arena slot, whatever range of it the client asked for, so the eighth of
// the arena one connection may pin counts the value, not the range: a
// client that leases one byte of each of many 1 MiB values gets no more
// than its share.
func TestShmRangeLeasesCountTheSlotTheyPin(t *testing.T) {
	flags, sock := shmNodeFlags(t, map[string][]string{"lease-max": {"1024"}, "lease-ms": {"600000"}})
	addr, _, _ := runNode(t, flags)
	const size, n = 1 << 20, 20
	var keys []wire.BlockKey
	for i := range n {
		keys = append(keys, putResident(t, addr, fmt.Sprintf("big%d", i), bytes.Repeat([]byte{byte(i)}, size)))
	}
	hog := dialShm(t, sock, 0)
	share := hog.w.ArenaBytes / 8
	if uint64(n*size) <= share {
		t.Fatalf("precondition: %d values of %d bytes fit in the %d-byte share", n, size, share)
	}
	var body []byte
	for _, k := range keys {
		body = wire.AppendGetItem(body, k, 0, 1) // one byte of each
	}
	writeReq(t, hog.c, wire.RequestHeader{Op: wire.OpLeaseGet, Length: uint64(n), BodyLen: uint64(len(body))}, body)
	h, _ := readResp(t, hog.c)
	if h.Status != wire.StatusOK || h.Stored != n {
		t.Fatalf("LEASE_GET answered %s with %d records", h.Status, h.Stored)
	}
	leased := 0
	for range n {
		var b [wire.LeaseRecordLen]byte
		if _, err := io.ReadFull(hog.c, b[:]); err != nil {
			t.Fatal(err)
		}
		rec, err := wire.DecodeLeaseRecord(b[:])
		if err != nil {
			t.Fatal(err)
		}
		switch rec.Kind {
		case wire.LeaseArena:
			leased++
		case wire.LeaseInline:
			if _, err := io.CopyN(io.Discard, hog.c, int64(rec.Length)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pinned := uint64(leased) * size; pinned > share {
		t.Fatalf("one connection holds %d leases on 1-byte ranges of %d-byte values: %d arena bytes pinned, past its share of %d (an eighth of the %d-byte arena)",
			leased, size, pinned, share, hog.w.ArenaBytes)
	}
}
