package wire

import (
	"errors"
	"math/big"
	"testing"
)

// TestBatchPutBodyOverNValuesRefused: a BATCH_PUT body over n values of
// max_block_bytes refuses the whole frame with TOO_LARGE, however few
// bytes over (1 to n-1 extra bytes vanish in a rounded-down division).
func TestBatchPutBodyOverNValuesRefused(t *testing.T) {
	m := testLimits.MaxBlockBytes
	for _, n := range []uint64{2, 3, 64} {
		for _, extra := range []uint64{1, n - 1} {
			h := RequestHeader{Op: OpBatchPut, Length: n, BodyLen: n*BatchPutItemLen + n*m + extra}
			_, err := DecodeRequest(AppendRequest(nil, &h), testLimits)
			if StatusOf(err) != StatusTooLarge {
				t.Errorf("BATCH_PUT of %d items with %d value bytes (%d over %d x max_block_bytes %d): got %v, want TOO_LARGE",
					n, h.BodyLen-n*BatchPutItemLen, extra, n, m, err)
			}
		}
	}
	// Exactly n values of the limit stays accepted.
	h := RequestHeader{Op: OpBatchPut, Length: 2, BodyLen: 2*BatchPutItemLen + 2*m}
	if _, err := DecodeRequest(AppendRequest(nil, &h), testLimits); err != nil {
		t.Fatalf("BATCH_PUT of exactly 2 x max_block_bytes: %v", err)
	}
}

// TestBatchBodyCountTimesSizeOverflow: the caller may trust an accepted
// prefix's lengths whatever Limits it passes. With a MaxBatchItems large
// enough, count times item size wraps around 2^64 (a 40-byte body for
// 2^62+1 BATCH_GET items), and a node would index its table past its
// end: every such frame is refused.
func TestBatchBodyCountTimesSizeOverflow(t *testing.T) {
	lim := Limits{MaxBlockBytes: 1 << 20, MaxBatchItems: ^uint64(0)}
	cases := []RequestHeader{
		{Op: OpBatchGet, Length: 1<<62 + 1, BodyLen: BatchGetItemLen},   // 40*(2^62+1) mod 2^64 = 40
		{Op: OpBatchExist, Length: 1<<61 + 1, BodyLen: BatchKeyItemLen}, // 24*(2^61+1) mod 2^64 = 24
		{Op: OpBatchPut, Length: 1<<59 + 1, BodyLen: 1<<59 + 33},        // table n*32 wraps to 32; body = table + n
		{Op: OpLeaseGet, Length: 1<<62 + 1, BodyLen: LeaseItemLen},      // n*40 wraps to 40
		{Op: OpRelease, Offset: 1<<61 + 1, BodyLen: LeaseIDLen},         // r*8 wraps to 8
	}
	for _, h := range cases {
		got, err := DecodeRequest(AppendRequest(nil, &h), lim)
		if err == nil {
			t.Errorf("%s with offset %d, %d items and a %d-byte body accepted (%+v): the count times the item size overflows", h.Op, h.Offset, h.Length, h.BodyLen, got)
		}
	}
}

// FuzzDecodeRequestLimits is FuzzDecodeRequest with the limits drawn from
// the input too, checking the body-length arithmetic exactly (big ints).
func FuzzDecodeRequestLimits(f *testing.F) {
	for _, h := range validRequests() {
		f.Add(AppendRequest(nil, &h), uint64(1<<20), uint64(64))
	}
	// The two cases the unit tests above pin: a BATCH_PUT one byte over
	// n values of the limit, and a BATCH_GET whose n*40 wraps.
	f.Add(AppendRequest(nil, &RequestHeader{Op: OpBatchPut, Length: 2, BodyLen: 2*BatchPutItemLen + 2<<20 + 1}), uint64(1<<20), uint64(64))
	f.Add(AppendRequest(nil, &RequestHeader{Op: OpBatchGet, Length: 1<<62 + 1, BodyLen: BatchGetItemLen}), uint64(1<<20), ^uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, maxBlock, maxItems uint64) {
		if maxBlock == 0 || maxItems == 0 {
			return
		}
		lim := Limits{MaxBlockBytes: maxBlock, MaxBatchItems: maxItems}
		h, err := DecodeRequest(data, lim)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("not a FrameError: %v", err)
			}
			return
		}
		B := func(v uint64) *big.Int { return new(big.Int).SetUint64(v) }
		mul := func(a, b uint64) *big.Int { return new(big.Int).Mul(B(a), B(b)) }
		body := B(h.BodyLen)
		switch h.Op {
		case OpBatchGet:
			if body.Cmp(mul(h.Length, BatchGetItemLen)) != 0 {
				t.Fatalf("BATCH_GET %d items body %d", h.Length, h.BodyLen)
			}
		case OpBatchExist, OpBatchRemove:
			if body.Cmp(mul(h.Length, BatchKeyItemLen)) != 0 {
				t.Fatalf("%s %d items body %d", h.Op, h.Length, h.BodyLen)
			}
		case OpBatchPut:
			lo := new(big.Int).Add(mul(h.Length, BatchPutItemLen), B(h.Length))
			hi := new(big.Int).Add(mul(h.Length, BatchPutItemLen), mul(h.Length, maxBlock))
			if body.Cmp(lo) < 0 || body.Cmp(hi) > 0 {
				t.Fatalf("BATCH_PUT %d items body %d outside [%v, %v]", h.Length, h.BodyLen, lo, hi)
			}
		case OpLeaseGet, OpLeasePut, OpRelease:
			want := new(big.Int).Add(mul(h.Offset, LeaseIDLen), mul(h.Length, LeaseItemLen))
			if body.Cmp(want) != 0 {
				t.Fatalf("%s r=%d n=%d body %d", h.Op, h.Offset, h.Length, h.BodyLen)
			}
		}
	})
}
