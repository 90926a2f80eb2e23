package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// The Go client's vectored (scatter-gather) calls against a real node:
// a value is the concatenation of the caller's parts, however they are
// split on the way in and on the way out.

// split cuts v into parts of the given sizes (the last takes the rest).
func split(v []byte, sizes ...int) [][]byte {
	var parts [][]byte
	for _, n := range sizes {
		n = min(n, len(v))
		parts = append(parts, v[:n:n])
		v = v[n:]
	}
	return append(parts, v)
}

// emptyLike returns zeroed parts of the same sizes as parts.
func emptyLike(parts [][]byte) [][]byte {
	out := make([][]byte, len(parts))
	for i, p := range parts {
		out[i] = make([]byte, len(p))
	}
	return out
}

func TestVectoredRoundTrip(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxBlockBytes = 8 << 20 })
	cl := openClient(t, n.addr, nil)
	ctx := context.Background()
	val := enginetest.Value(7, 3<<20+5) // past progressPiece, so flushv writes several rounds
	// A zero-length part in the middle is allowed and carries nothing.
	in := split(val, 1, 0, 100<<10, 1<<20, 7)
	if err := cl.PutV(ctx, []byte("v"), in); err != nil {
		t.Fatal(err)
	}
	whole := make([]byte, len(val))
	if _, _, err := cl.Get(ctx, []byte("v"), whole); err != nil || !bytes.Equal(whole, val) {
		t.Fatalf("Get after PutV: %v, equal %v", err, bytes.Equal(whole, val))
	}
	// Read back split differently from how it was written.
	out := emptyLike(split(val, 64<<10, 3, 2<<20))
	got, stored, err := cl.GetV(ctx, []byte("v"), out)
	if err != nil || got != len(val) || stored != uint64(len(val)) || !bytes.Equal(bytes.Join(out, nil), val) {
		t.Fatalf("GetV: n=%d stored=%d err=%v equal=%v", got, stored, err, bytes.Equal(bytes.Join(out, nil), val))
	}
	// Parts longer than the value: a prefix of them is filled.
	long := [][]byte{make([]byte, 10), make([]byte, len(val))}
	got, stored, err = cl.GetV(ctx, []byte("v"), long)
	if err != nil || got != len(val) || !bytes.Equal(long[0], val[:10]) || !bytes.Equal(long[1][:len(val)-10], val[10:]) {
		t.Fatalf("GetV into longer parts: n=%d stored=%d err=%v", got, stored, err)
	}
	// Parts shorter than the value: filled, and the call says so.
	short := [][]byte{make([]byte, 5), make([]byte, 6)}
	got, stored, err = cl.GetV(ctx, []byte("v"), short)
	if !errors.Is(err, client.ErrBufferTooSmall) || got != 11 || stored != uint64(len(val)) || !bytes.Equal(bytes.Join(short, nil), val[:11]) {
		t.Fatalf("GetV into shorter parts: n=%d stored=%d err=%v", got, stored, err)
	}
	// The connection stays in step after the short read.
	if _, _, err := cl.GetV(ctx, []byte("v"), out); err != nil || !bytes.Equal(bytes.Join(out, nil), val) {
		t.Fatalf("GetV after a short read: %v", err)
	}
	if _, _, err := cl.GetV(ctx, []byte("missing"), out); !errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("GetV of a missing key: %v, want NOT_FOUND", err)
	}
}

func TestVectoredRefusals(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	cl := openClient(t, n.addr, func(o *client.Options) { o.MaxBlockBytes = 1 << 10 })
	ctx := context.Background()
	for name, parts := range map[string][][]byte{"no parts": nil, "empty parts": {{}, {}}} {
		if err := cl.PutV(ctx, []byte("k"), parts); !errors.Is(err, wire.StatusInvalid) {
			t.Errorf("PutV of %s: %v, want INVALID", name, err)
		}
		if _, _, err := cl.GetV(ctx, []byte("k"), parts); !errors.Is(err, wire.StatusInvalid) {
			t.Errorf("GetV into %s: %v, want INVALID", name, err)
		}
	}
	if err := cl.PutV(ctx, []byte("k"), [][]byte{make([]byte, 1000), make([]byte, 25)}); !errors.Is(err, wire.StatusTooLarge) {
		t.Errorf("PutV past max_block_bytes: %v, want TOO_LARGE", err)
	}
	if err := cl.PutV(ctx, nil, [][]byte{{1}}); !errors.Is(err, wire.StatusInvalid) {
		t.Errorf("PutV with an empty key: %v, want INVALID", err)
	}
}

func TestVectoredBatch(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxBlockBytes = 8 << 20 })
	cl := openClient(t, n.addr, func(o *client.Options) { o.MaxBlockBytes = 4 << 20 })
	ctx := context.Background()
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	vals := [][]byte{enginetest.Value(1, 70<<10), enginetest.Value(2, 1), enginetest.Value(3, 2<<20), enginetest.Value(4, 5<<20)}
	parts := [][][]byte{split(vals[0], 33<<10), split(vals[1]), split(vals[2], 1<<20, 0, 5), split(vals[3], 1)}
	errs := cl.PutBatchV(ctx, keys, parts)
	for i, err := range errs[:3] {
		if err != nil {
			t.Fatalf("PutBatchV item %d: %v", i, err)
		}
	}
	if !errors.Is(errs[3], wire.StatusTooLarge) {
		t.Fatalf("PutBatchV item past max_block_bytes: %v, want TOO_LARGE (and the others stored)", errs[3])
	}
	// Read back with other splits; "d" was never stored; "c" into a
	// buffer too small for it.
	outs := [][][]byte{emptyLike(split(vals[0], 1, 2, 3)), emptyLike(split(vals[1])), {make([]byte, 100)}, {make([]byte, 10)}}
	res := cl.GetBatchV(ctx, keys, outs)
	for _, i := range []int{0, 1} {
		if res[i].Err != nil || res[i].Stored != uint64(len(vals[i])) || !bytes.Equal(bytes.Join(outs[i], nil), vals[i]) {
			t.Fatalf("GetBatchV item %d: %v stored %d", i, res[i].Err, res[i].Stored)
		}
	}
	if !errors.Is(res[2].Err, client.ErrBufferTooSmall) || res[2].Stored != uint64(len(vals[2])) || !bytes.Equal(outs[2][0], vals[2][:100]) {
		t.Fatalf("GetBatchV into a short buffer: %v stored %d", res[2].Err, res[2].Stored)
	}
	if !errors.Is(res[3].Err, wire.StatusNotFound) {
		t.Fatalf("GetBatchV of a missing key: %v", res[3].Err)
	}
	// Mismatched lengths are refused item by item, nothing sent.
	for _, r := range cl.GetBatchV(ctx, keys, outs[:1]) {
		if !errors.Is(r.Err, wire.StatusInvalid) {
			t.Fatalf("GetBatchV with fewer part lists than keys: %v", r.Err)
		}
	}
}

// copyCountingConn counts the bytes the client's reads take from the
// socket into memory other than the caller's destination buffers: those
// land in a staging buffer and are copied again on their way to the
// caller.
type copyCountingConn struct {
	net.Conn
	dst    *[][][]byte
	staged *atomic.Int64
}

func (c copyCountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !inside(p, *c.dst) {
		c.staged.Add(int64(n))
	}
	return n, err
}

// inside reports whether p lies within one of the parts.
func inside(p []byte, parts [][][]byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, item := range parts {
		for _, q := range item {
			qlo := uintptr(unsafe.Pointer(unsafe.SliceData(q)))
			if lo >= qlo && lo+uintptr(len(p)) <= qlo+uintptr(len(q)) {
				return true
			}
		}
	}
	return false
}

type copyCountingDialer struct {
	dst    *[][][]byte
	staged *atomic.Int64
}

func (d copyCountingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return copyCountingConn{Conn: c, dst: d.dst, staged: d.staged}, nil
}

// BenchmarkGetBatchV: 64 values of 1 MiB, each read into two 512 KiB
// parts (a block's K and V planes), over one loopback connection. It
// reports staged-B/op, the value bytes that passed through any buffer
// other than the caller's parts (frame headers and records are about 1.6
// KiB of it), next to B/op allocated.
func BenchmarkGetBatchV(b *testing.B) {
	const items, size = 64, 1 << 20
	addr := fixedNode(b, size)
	var staged atomic.Int64
	var dst [][][]byte
	cl, err := client.Open(client.Options{Namespace: []byte("w"), Members: []string{addr}, Timeout: time.Minute,
		PoolSize: 1, BatchConcurrency: 1, Dialer: copyCountingDialer{dst: &dst, staged: &staged}})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	keys := make([][]byte, items)
	dst = make([][][]byte, items)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("k", i))
		dst[i] = [][]byte{make([]byte, size/2), make([]byte, size/2)}
	}
	ctx := context.Background()
	// One call to warm the connection; counting starts after it.
	for _, r := range cl.GetBatchV(ctx, keys, dst) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	staged.Store(0)
	b.SetBytes(items * size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, r := range cl.GetBatchV(ctx, keys, dst) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	b.ReportMetric(float64(staged.Load())/float64(b.N), "staged-B/op")
}

// GetBatchRangeV reads a byte range of each value into its parts: the
// middle, the tail, a range running past a short value, the empty range at
// the very end, a range past the end (INVALID for that item alone), and
// missing keys, all in one call to one node.
func TestVectoredBatchRange(t *testing.T) {
	n := startNode(t, newMemEngine(), func(o *Options) { o.MaxBlockBytes = 8 << 20 })
	cl := openClient(t, n.addr, func(o *client.Options) { o.MaxBlockBytes = 4 << 20 })
	ctx := context.Background()
	big := enginetest.Value(1, 3<<20+100) // past directReadMin, so parts are read from the socket
	small := enginetest.Value(2, 100)
	if errs := cl.PutBatchV(ctx, [][]byte{[]byte("big"), []byte("small")}, [][][]byte{split(big, 1<<20), {small}}); errs[0] != nil || errs[1] != nil {
		t.Fatalf("PutBatchV: %v", errs)
	}
	type item struct {
		name   string
		key    string
		off    uint64
		sizes  []int  // the parts' sizes
		want   []byte // the bytes expected at the front of the parts
		stored uint64
		err    error
	}
	items := []item{
		{"middle of a large value", "big", 1<<20 - 3, []int{5, 2 << 20, 0, 9}, big[1<<20-3 : 1<<20-3+5+2<<20+9], uint64(len(big)), nil},
		{"tail of a large value", "big", uint64(len(big)) - 11, []int{4, 7}, big[len(big)-11:], uint64(len(big)), nil},
		{"middle of a small value", "small", 10, []int{20, 30}, small[10:60], 100, nil},
		{"range past a short value", "small", 90, []int{8, 8}, small[90:], 100, nil},
		{"offset at the stored length", "small", 100, []int{16}, nil, 100, nil},
		{"offset past the stored length", "small", 101, []int{16}, nil, 100, wire.StatusInvalid},
		{"missing key", "nope", 0, []int{16}, nil, 0, wire.StatusNotFound},
		{"missing key at an offset", "nope2", 50, []int{16}, nil, 0, wire.StatusNotFound},
		{"from the start, after the failures", "small", 0, []int{100}, small, 100, nil},
	}
	keys := make([][]byte, len(items))
	offs := make([]uint64, len(items))
	parts := make([][][]byte, len(items))
	for i, it := range items {
		keys[i], offs[i] = []byte(it.key), it.off
		for _, sz := range it.sizes {
			p := make([]byte, sz)
			for j := range p {
				p[j] = 0xEE // bytes the read must not touch stay so
			}
			parts[i] = append(parts[i], p)
		}
	}
	res := cl.GetBatchRangeV(ctx, keys, offs, parts)
	for i, it := range items {
		r := res[i]
		if it.err != nil {
			if !errors.Is(r.Err, it.err) || r.Stored != it.stored {
				t.Errorf("%s: err %v stored %d, want %v stored %d", it.name, r.Err, r.Stored, it.err, it.stored)
			}
			continue
		}
		got := bytes.Join(parts[i], nil)
		if r.Err != nil || r.Stored != it.stored || r.Data != nil || !bytes.Equal(got[:len(it.want)], it.want) {
			t.Errorf("%s: err %v stored %d, want stored %d; bytes equal %v", it.name, r.Err, r.Stored, it.stored, bytes.Equal(got[:len(it.want)], it.want))
			continue
		}
		for _, b := range got[len(it.want):] {
			if b != 0xEE {
				t.Errorf("%s: a byte past the value's end was written", it.name)
				break
			}
		}
	}
	// The connection stays in step: a whole read after all of it.
	whole := make([]byte, len(big))
	if r := cl.GetBatchV(ctx, [][]byte{[]byte("big")}, [][][]byte{{whole}}); r[0].Err != nil || !bytes.Equal(whole, big) {
		t.Fatalf("GetBatchV after ranged reads: %v", r[0].Err)
	}
}

// GetBatchRangeV refuses, item by item and without sending it, what no
// node could answer as asked.
func TestVectoredBatchRangeRefusals(t *testing.T) {
	n := startNode(t, newMemEngine(), nil)
	cl := openClient(t, n.addr, func(o *client.Options) { o.MaxBlockBytes = 1 << 10 })
	ctx := context.Background()
	if err := cl.Put(ctx, []byte("k"), []byte("value")); err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{[]byte("k"), []byte("k"), []byte("k"), nil}
	parts := [][][]byte{nil, {{}, {}}, {make([]byte, 1000), make([]byte, 25)}, {make([]byte, 1)}}
	res := cl.GetBatchRangeV(ctx, keys, []uint64{0, 0, 0, 0}, parts)
	for i, want := range []error{wire.StatusInvalid, wire.StatusInvalid, wire.StatusTooLarge, wire.StatusInvalid} {
		if !errors.Is(res[i].Err, want) {
			t.Errorf("item %d: %v, want %v", i, res[i].Err, want)
		}
	}
	for _, r := range cl.GetBatchRangeV(ctx, keys, []uint64{0}, parts) {
		if !errors.Is(r.Err, wire.StatusInvalid) {
			t.Fatalf("GetBatchRangeV with fewer offsets than keys: %v", r.Err)
		}
	}
	one := [][]byte{make([]byte, 3)}
	if r := cl.GetBatchRangeV(ctx, keys[:1], []uint64{2}, [][][]byte{one}); r[0].Err != nil || string(one[0]) != "lue" || r[0].Stored != 5 {
		t.Fatalf("a plain range after the refusals: %v %q stored %d", r[0].Err, one[0], r[0].Stored)
	}
}
