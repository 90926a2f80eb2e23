package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

var testLimits = Limits{MaxBlockBytes: 1 << 20, MaxBatchItems: 64}

func sampleKey(b byte) BlockKey {
	k := BlockKey{Tenant: 0x0102030405060708 * uint64(b)}
	for i := range k.ID {
		k.ID[i] = b + byte(i)
	}
	return k
}

// validRequests is the table the unit tests and the fuzz seeds share.
func validRequests() []RequestHeader {
	return []RequestHeader{
		{Op: OpPing},
		{Op: OpStats},
		{Op: OpPut, Key: sampleKey(1), BodyLen: 1},
		{Op: OpPut, Key: sampleKey(2), BodyLen: 1 << 20},
		{Op: OpGet, Key: sampleKey(3)},
		{Op: OpGet, Key: sampleKey(3), Offset: 4096, Length: 65536},
		{Op: OpExist, Key: sampleKey(4)},
		{Op: OpRemove, Key: sampleKey(5)},
		{Op: OpBatchPut, Length: 2, BodyLen: 2*BatchPutItemLen + 10},
		{Op: OpBatchGet, Length: 3, BodyLen: 3 * BatchGetItemLen},
		{Op: OpBatchExist, Length: 64, BodyLen: 64 * BatchKeyItemLen},
		{Op: OpBatchRemove, Length: 1, BodyLen: BatchKeyItemLen},
	}
}

func TestRequestRoundTrip(t *testing.T) {
	for _, h := range validRequests() {
		t.Run(h.Op.String(), func(t *testing.T) {
			b := AppendRequest(nil, &h)
			if len(b) != RequestPrefixLen {
				t.Fatalf("prefix is %d bytes, want %d", len(b), RequestPrefixLen)
			}
			if b[0] != EpochTCP {
				t.Fatalf("byte 0 is %d, want epoch %d", b[0], EpochTCP)
			}
			got, err := DecodeRequest(b, testLimits)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			want := h
			want.Epoch = EpochTCP
			if got != want {
				t.Fatalf("round trip\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestRequestLayout pins the byte offsets documented in doc.go.
func TestRequestLayout(t *testing.T) {
	h := RequestHeader{Op: OpGet, Key: BlockKey{Tenant: 0x1122334455667788}, Offset: 0xAABB, Length: 0xCCDD}
	h.Key.ID[0], h.Key.ID[15] = 0xE1, 0xE2
	b := AppendRequest(nil, &h)
	want := map[int]byte{0: 6, 1: byte(OpGet), 2: 0x88, 9: 0x11, 10: 0xE1, 25: 0xE2, 26: 0xBB, 27: 0xAA, 34: 0xDD, 35: 0xCC}
	for off, v := range want {
		if b[off] != v {
			t.Errorf("byte %d = %#x, want %#x", off, b[off], v)
		}
	}
	r := AppendResponse(nil, &ResponseHeader{Status: StatusNotFound, Stored: 0x0102, BodyLen: 0x0304})
	if len(r) != ResponsePrefixLen || r[0] != 6 || r[1] != byte(StatusNotFound) || r[2] != 0x02 || r[3] != 0x01 || r[10] != 0x04 || r[11] != 0x03 {
		t.Fatalf("response layout % x", r)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for s := StatusOK; s <= LastStatus; s++ {
		h := ResponseHeader{Status: s, Stored: uint64(s) * 1000, BodyLen: uint64(s)}
		got, err := DecodeResponse(AppendResponse(nil, &h))
		h.Epoch = EpochTCP
		if err != nil || got != h {
			t.Fatalf("status %s: got %+v, %v", s, got, err)
		}
	}
}

// TestAuthFrame: AUTH carries a token of 1..MaxTokenBytes as its body
// and nothing else; anything else is refused before the body is read.
func TestAuthFrame(t *testing.T) {
	lim := Limits{MaxBlockBytes: 1 << 20, MaxBatchItems: 64}
	for _, c := range []struct {
		h    RequestHeader
		want Status
	}{
		{RequestHeader{Op: OpAuth, BodyLen: 1}, StatusOK},
		{RequestHeader{Op: OpAuth, BodyLen: MaxTokenBytes}, StatusOK},
		{RequestHeader{Op: OpAuth}, StatusInvalid},
		{RequestHeader{Op: OpAuth, BodyLen: MaxTokenBytes + 1}, StatusInvalid},
		{RequestHeader{Op: OpAuth, BodyLen: 8, Key: sampleKey(1)}, StatusInvalid},
		{RequestHeader{Op: OpAuth, BodyLen: 8, Length: 1}, StatusInvalid},
	} {
		_, err := DecodeRequest(AppendRequest(nil, &c.h), lim)
		if got := StatusOf(err); got != c.want {
			t.Errorf("%+v: %v, want %s", c.h, err, c.want)
		}
	}
	if OpAuth.String() != "AUTH" || StatusForbidden.String() != "FORBIDDEN" || StatusUnauthenticated.String() != "UNAUTHENTICATED" {
		t.Error("names of the new op and statuses")
	}
}

func TestDecodeRequestRejects(t *testing.T) {
	f := func(name string, mutate func(b []byte), want Status) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			h := RequestHeader{Op: OpGet, Key: sampleKey(9)}
			b := AppendRequest(nil, &h)
			mutate(b)
			_, err := DecodeRequest(b, testLimits)
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("want a FrameError, got %v", err)
			}
			if fe.Status != want {
				t.Fatalf("status %s, want %s (%v)", fe.Status, want, err)
			}
			if fe.Message == "" {
				t.Fatal("frame error without a message")
			}
		})
	}
	put := func(b []byte, v uint64) { putU64(b, v) }
	f("epoch 5", func(b []byte) { b[0] = 5 }, StatusEpochMismatch)
	f("epoch 7 (RDMA on TCP)", func(b []byte) { b[0] = 7 }, StatusEpochMismatch)
	f("epoch 0", func(b []byte) { b[0] = 0 }, StatusEpochMismatch)
	f("op 0", func(b []byte) { b[1] = 0 }, StatusUnsupported)
	f("op 200", func(b []byte) { b[1] = 200 }, StatusUnsupported)
	f("GET with body", func(b []byte) { put(b[42:], 5) }, StatusInvalid)
	f("PUT zero bytes", func(b []byte) { b[1] = byte(OpPut) }, StatusInvalid)
	f("PUT over max", func(b []byte) { b[1] = byte(OpPut); put(b[42:], testLimits.MaxBlockBytes+1) }, StatusTooLarge)
	f("PUT with offset", func(b []byte) { b[1] = byte(OpPut); put(b[42:], 10); put(b[26:], 1) }, StatusInvalid)
	f("EXIST with length", func(b []byte) { b[1] = byte(OpExist); put(b[34:], 1) }, StatusInvalid)
	f("REMOVE with body", func(b []byte) { b[1] = byte(OpRemove); put(b[42:], 1) }, StatusInvalid)
	f("PING with key", func(b []byte) { b[1] = byte(OpPing) }, StatusInvalid)
	zeroKey := func(b []byte) {
		for i := 2; i < 26; i++ {
			b[i] = 0
		}
	}
	f("batch of 0", func(b []byte) { zeroKey(b); b[1] = byte(OpBatchExist) }, StatusInvalid)
	f("batch over max items", func(b []byte) {
		zeroKey(b)
		b[1] = byte(OpBatchExist)
		put(b[34:], testLimits.MaxBatchItems+1)
		put(b[42:], (testLimits.MaxBatchItems+1)*BatchKeyItemLen)
	}, StatusInvalid)
	f("batch with key", func(b []byte) { b[1] = byte(OpBatchExist); put(b[34:], 1); put(b[42:], BatchKeyItemLen) }, StatusInvalid)
	f("batch exist wrong body", func(b []byte) { zeroKey(b); b[1] = byte(OpBatchExist); put(b[34:], 2); put(b[42:], BatchKeyItemLen) }, StatusInvalid)
	f("batch get wrong body", func(b []byte) { zeroKey(b); b[1] = byte(OpBatchGet); put(b[34:], 1); put(b[42:], 39) }, StatusInvalid)
	f("batch put body smaller than table", func(b []byte) {
		zeroKey(b)
		b[1] = byte(OpBatchPut)
		put(b[34:], 2)
		put(b[42:], 2*BatchPutItemLen)
	}, StatusInvalid)
	f("batch put body past n*max", func(b []byte) {
		zeroKey(b)
		b[1] = byte(OpBatchPut)
		put(b[34:], 1)
		put(b[42:], BatchPutItemLen+testLimits.MaxBlockBytes+1)
	}, StatusTooLarge) // more than n values of the limit: one is over it
	f("batch put huge body", func(b []byte) { zeroKey(b); b[1] = byte(OpBatchPut); put(b[34:], 1); put(b[42:], ^uint64(0)) }, StatusTooLarge)

	if _, err := DecodeRequest(make([]byte, RequestPrefixLen-1), testLimits); err == nil {
		t.Fatal("a truncated prefix decoded")
	}
}

func putU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

func TestDecodeResponseRejects(t *testing.T) {
	b := AppendResponse(nil, &ResponseHeader{Status: StatusOK})
	b[0] = 7
	if _, err := DecodeResponse(b); !errors.Is(err, StatusEpochMismatch) {
		t.Fatalf("foreign epoch: %v", err)
	}
	b[0] = EpochMDS // a member address that is an MDS: named as such
	if _, err := DecodeResponse(b); !errors.Is(err, StatusEpochMismatch) || !strings.Contains(err.Error(), "this address is an MDS") {
		t.Fatalf("MDS epoch: %v", err)
	}
	b[0], b[1] = EpochTCP, 99
	if _, err := DecodeResponse(b); !errors.Is(err, StatusInvalid) {
		t.Fatalf("unknown status: %v", err)
	}
	if _, err := DecodeResponse(b[:17]); err == nil {
		t.Fatal("truncated response decoded")
	}
}

func TestBatchPutTable(t *testing.T) {
	mk := func(lens ...uint64) []byte {
		var b []byte
		for i, l := range lens {
			b = AppendPutItem(b, sampleKey(byte(i)), l)
		}
		return b
	}
	f := func(lens []uint64, body uint64, want Status) {
		t.Helper()
		err := ValidateBatchPutTable(mk(lens...), body, testLimits)
		if got := StatusOf(err); got != want {
			t.Fatalf("lens %v body %d: got %v, want %s", lens, body, err, want)
		}
	}
	f([]uint64{1, 2, 3}, 3*BatchPutItemLen+6, StatusOK)
	f([]uint64{1, 0, 3}, 3*BatchPutItemLen+4, StatusInvalid)
	f([]uint64{1, 2}, 2*BatchPutItemLen+4, StatusInvalid)
	f([]uint64{1, 2}, 2*BatchPutItemLen+2, StatusInvalid)
	// A value over the limit is that item's TOO_LARGE, answered by the
	// node; the table itself is sound.
	f([]uint64{testLimits.MaxBlockBytes + 1, 1}, 2*BatchPutItemLen+testLimits.MaxBlockBytes+2, StatusOK)
	// A lying table whose values would wrap the sum around is refused.
	f([]uint64{math.MaxUint64, 2}, 2*BatchPutItemLen+1, StatusInvalid)
	f([]uint64{1 << 63, 1 << 63, 1}, 3*BatchPutItemLen+1, StatusInvalid)
	k, l := DecodePutItem(mk(7))
	if k != sampleKey(0) || l != 7 {
		t.Fatalf("put item round trip: %v %d", k, l)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	k := sampleKey(3)
	if got := DecodeKeyItem(AppendKeyItem(nil, k)); got != k {
		t.Fatal("key item round trip")
	}
	gk, off, ln := DecodeGetItem(AppendGetItem(nil, k, 5, 6))
	if gk != k || off != 5 || ln != 6 {
		t.Fatal("get item round trip")
	}
	s, st, n := DecodeGetRecord(AppendGetRecord(nil, StatusNotFound, 9, 10))
	if s != StatusNotFound || st != 9 || n != 10 {
		t.Fatal("get record round trip")
	}
	es, est := DecodeExistRecord(AppendExistRecord(nil, StatusOK, 11))
	if es != StatusOK || est != 11 {
		t.Fatal("exist record round trip")
	}
}

func TestStatusOf(t *testing.T) {
	if StatusOf(nil) != StatusOK {
		t.Fatal("nil is not OK")
	}
	if StatusOf(fmt.Errorf("x: %w", StatusCacheFull)) != StatusCacheFull {
		t.Fatal("wrapped status lost")
	}
	if StatusOf(errors.New("plain")) != StatusInternal {
		t.Fatal("plain error is not INTERNAL")
	}
	if StatusOf(&StatusError{Status: StatusTimeout, Message: "m"}) != StatusTimeout {
		t.Fatal("StatusError lost its status")
	}
	if Status(200).Known() || Status(200).String() != "STATUS_200" {
		t.Fatal("unknown status naming")
	}
}

func TestFrameCodecAllocs(t *testing.T) {
	h := RequestHeader{Op: OpGet, Key: sampleKey(1), Length: 10}
	buf := make([]byte, 0, 64)
	b := AppendRequest(buf, &h)
	if n := testing.AllocsPerRun(100, func() {
		b = AppendRequest(buf[:0], &h)
		if _, err := DecodeRequest(b, testLimits); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("encode+decode allocates %v times", n)
	}
}

func BenchmarkRequestEncodeDecode(b *testing.B) {
	h := RequestHeader{Op: OpGet, Key: sampleKey(1), Offset: 4096, Length: 1 << 20}
	buf := make([]byte, 0, RequestPrefixLen)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		enc := AppendRequest(buf[:0], &h)
		if _, err := DecodeRequest(enc, testLimits); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResponseEncodeDecode(b *testing.B) {
	h := ResponseHeader{Status: StatusOK, Stored: 1 << 20, BodyLen: 1 << 20}
	buf := make([]byte, 0, ResponsePrefixLen)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		enc := AppendResponse(buf[:0], &h)
		if _, err := DecodeResponse(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeRequest feeds arbitrary prefixes to the decoder. Properties:
// it never panics; whatever it accepts re-encodes to the same bytes; and an
// accepted frame never declares a body the node could not bound (so the
// caller's allocation stays within the limits).
func FuzzDecodeRequest(f *testing.F) {
	for _, h := range validRequests() {
		f.Add(AppendRequest(nil, &h))
	}
	bad := AppendRequest(nil, &RequestHeader{Op: OpPut, Key: sampleKey(1), BodyLen: 1 << 40})
	f.Add(bad)
	f.Add([]byte{7, 3})
	f.Add(AppendRequest(nil, &RequestHeader{Op: OpAuth, BodyLen: 32}))
	f.Add(AppendRequest(nil, &RequestHeader{Op: OpAuth, BodyLen: MaxTokenBytes + 1}))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeRequest(data, testLimits)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Message == "" || !fe.Status.Known() {
				t.Fatalf("error is not a described FrameError: %v", err)
			}
			return
		}
		if !bytes.Equal(AppendRequest(nil, &h), data[:RequestPrefixLen]) {
			t.Fatalf("accepted frame does not re-encode identically: %+v", h)
		}
		switch {
		case h.Op == OpPut && (h.BodyLen == 0 || h.BodyLen > testLimits.MaxBlockBytes):
			t.Fatalf("accepted PUT body %d", h.BodyLen)
		case h.Op.IsBatch() && (h.Length == 0 || h.Length > testLimits.MaxBatchItems):
			t.Fatalf("accepted batch of %d", h.Length)
		case h.Op.IsBatch() && h.BodyLen > h.Length*(BatchGetItemLen+testLimits.MaxBlockBytes):
			t.Fatalf("accepted batch body %d for %d items", h.BodyLen, h.Length)
		case h.Op.IsLease() && (h.Offset > testLimits.MaxBatchItems || h.Length > testLimits.MaxBatchItems ||
			h.BodyLen != h.Offset*LeaseIDLen+h.Length*LeaseItemLen):
			t.Fatalf("accepted %s releasing %d with %d items and body %d", h.Op, h.Offset, h.Length, h.BodyLen)
		case h.Op == OpAuth && (h.BodyLen == 0 || h.BodyLen > MaxTokenBytes):
			t.Fatalf("accepted AUTH token of %d bytes", h.BodyLen)
		case !h.Op.IsBatch() && !h.Op.IsLease() && h.Op != OpPut && h.Op != OpAuth && h.BodyLen != 0:
			t.Fatalf("accepted %s with body %d", h.Op, h.BodyLen)
		}
	})
}

// FuzzBatchPutTable checks the table validator on arbitrary tables: it
// never panics and accepts only tables whose values fit the body exactly
// (values over max_block_bytes included: the node answers those per item).
func FuzzBatchPutTable(f *testing.F) {
	f.Add(AppendPutItem(AppendPutItem(nil, sampleKey(1), 3), sampleKey(2), 4), uint64(2*BatchPutItemLen+7))
	f.Add(AppendPutItem(nil, sampleKey(1), 0), uint64(BatchPutItemLen))
	f.Fuzz(func(t *testing.T, table []byte, body uint64) {
		table = table[:len(table)/BatchPutItemLen*BatchPutItemLen]
		if len(table) == 0 || body < uint64(len(table)) {
			return
		}
		if err := ValidateBatchPutTable(table, body, testLimits); err != nil {
			return
		}
		var sum uint64
		for i := 0; i < len(table); i += BatchPutItemLen {
			_, l := DecodePutItem(table[i:])
			if l == 0 || l > body-uint64(len(table)) {
				t.Fatalf("accepted value length %d for body %d", l, body)
			}
			sum += l
		}
		if sum != body-uint64(len(table)) {
			t.Fatalf("accepted sum %d for body %d", sum, body)
		}
	})
}

// TestForeignProtocolNamed: HTTP or TLS sent to the data port is named as
// such (still EPOCH_MISMATCH on the wire), not answered with advice to
// upgrade a peer that does not exist; a real dfkv epoch mismatch keeps it.
func TestForeignProtocolNamed(t *testing.T) {
	pad := func(s string) []byte {
		b := []byte(s)
		for len(b) < RequestPrefixLen {
			b = append(b, 0)
		}
		return b
	}
	for _, c := range []struct {
		name string
		src  []byte
		want string
	}{
		{"curl", []byte("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:7600\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"), "looks like HTTP"},
		{"HTTP/2 preface", pad("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), "looks like HTTP"},
		{"TLS ClientHello", pad("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), "TLS handshake"},
		{"dfkv epoch 5", func() []byte {
			b := AppendRequest(nil, &RequestHeader{Op: OpGet, Key: sampleKey(1)})
			b[0] = 5
			return b
		}(), "upgrade the older side"},
		{"an MDS request", func() []byte {
			b := AppendRequest(nil, &RequestHeader{Op: OpGet, Key: sampleKey(1)})
			b[0] = EpochMDS
			return b
		}(), "not an MDS"},
	} {
		_, err := DecodeRequest(c.src, testLimits)
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Status != StatusEpochMismatch || !strings.Contains(fe.Message, c.want) {
			t.Fatalf("%s: %v, want EPOCH_MISMATCH saying %q", c.name, err, c.want)
		}
	}
}
