package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// fixedEngine serves one preloaded value for every key and accepts every
// PUT without storing it: the wire path alone, with the storage taken out.
// It lends the value in place (engine.Lender), as the RAM tier does for a
// resident value, so a GET writes it to the socket with no copy.
type fixedEngine struct{ val []byte }

func (e *fixedEngine) Lend(_ wire.BlockKey, off, length uint64) ([]byte, uint64, engine.Loan, bool, error) {
	n := uint64(len(e.val))
	if off > n {
		return nil, n, engine.Loan{}, true, wire.StatusInvalid
	}
	if length == 0 || length > n-off {
		length = n - off
	}
	return e.val[off : off+length], n, engine.Loan{}, true, nil
}
func (e *fixedEngine) Return(engine.Loan) {}

func (e *fixedEngine) Put(wire.BlockKey, []byte) error { return nil }
func (e *fixedEngine) PutBatch(_ []wire.BlockKey, _ [][]byte, errs []error) {
	for i := range errs {
		errs[i] = nil
	}
}
func (e *fixedEngine) Get(_ wire.BlockKey, off, length uint64, a engine.Allocator) ([]byte, uint64, error) {
	n := uint64(len(e.val))
	if off > n {
		return nil, n, wire.StatusInvalid
	}
	if length == 0 || length > n-off {
		length = n - off
	}
	dst := a.Alloc(int(length))
	copy(dst, e.val[off:off+length])
	return dst, n, nil
}
func (e *fixedEngine) Exist(wire.BlockKey) (uint64, error) { return uint64(len(e.val)), nil }
func (e *fixedEngine) Remove(wire.BlockKey) error          { return nil }
func (e *fixedEngine) Stats() engine.Stats                 { return engine.Stats{Engine: "fixed", Healthy: true} }
func (e *fixedEngine) Close() error                        { return nil }

// wireSocketBuffer, when set (-wire.sockbuf), sizes the node's socket
// buffers in BenchmarkWirePath; 0 keeps kernel autotuning.
var wireSocketBuffer = flag.Int("wire.sockbuf", 0, "SO_SNDBUF/SO_RCVBUF of the wire-path benchmark node")

func fixedNode(b testing.TB, size int) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	fe := &fixedEngine{val: make([]byte, size)}
	g, _ := engine.NewGroup([]engine.StoreEngine{fe}, []string{"mem"})
	srv, err := New(Options{Engine: fe, Listener: ln, MaxBlockBytes: 64 << 20, SocketBuffer: *wireSocketBuffer})
	if err != nil {
		b.Fatal(err)
	}
	if srv.metrics, err = NewMetrics(prometheus.NewRegistry(), srv, g); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// BenchmarkWirePath: client → frame → server → payload from memory →
// client over one real loopback TCP connection, through the Go client.
// The target: 1 MiB GETs at ≥ 80% of iperf3 --len 1M single-stream
// bandwidth (scripts/bench-vs-peers.sh prints that ceiling).
func BenchmarkWirePath(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("GET/%dKiB", size>>10), func(b *testing.B) {
			addr := fixedNode(b, size)
			cl, err := client.Open(client.Options{Namespace: []byte("w"), Members: []string{addr}, Timeout: time.Minute, PoolSize: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			dst := make([]byte, size)
			key := []byte("k")
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := cl.Get(ctx, key, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWirePathBatch: the same path with 16 GETs per BATCH_GET frame
// on one connection, so the node streams replies back to back instead of
// waiting a round trip per value (what an engine loading a prefix does).
func BenchmarkWirePathBatch(b *testing.B) {
	const batch = 16
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("GET/%dKiB/x%d", size>>10, batch), func(b *testing.B) {
			addr := fixedNode(b, size)
			cl, err := client.Open(client.Options{Namespace: []byte("w"), Members: []string{addr}, Timeout: time.Minute, PoolSize: 1, BatchConcurrency: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			keys := make([][]byte, batch)
			dsts := make([][]byte, batch)
			for i := range keys {
				keys[i] = []byte(fmt.Sprint("k", i))
				dsts[i] = make([]byte, size)
			}
			ctx := context.Background()
			b.SetBytes(int64(size * batch))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, r := range cl.GetBatch(ctx, keys, dsts) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
		})
	}
}

// BenchmarkServerHotPathAllocs drives the server with pre-encoded GET and
// PUT frames over one connection and reads replies into fixed buffers, so
// allocs/op counts the server's own allocations per request (the fixed
// engine allocates nothing). Target: 0.
// TestServerHotPathAllocatesNothing: a GET and a PUT of a 64 KiB value,
// request metrics on, allocate nothing once the pools are warm (averaged
// over 200 rounds: the rare allocation of a background goroutine does
// not count).
func TestServerHotPathAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector; run without -race")
	}
	const size = 64 << 10
	for _, op := range []string{"GET", "PUT"} {
		addr := fixedNode(t, size)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var k wire.BlockKey
		req := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpGet, Key: k})
		resp := make([]byte, wire.ResponsePrefixLen+size)
		if op == "PUT" {
			req = append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: size}), make([]byte, size)...)
			resp = resp[:wire.ResponsePrefixLen]
		}
		round := func() {
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, resp); err != nil {
				t.Fatal(err)
			}
		}
		for range 100 { // warm the buffer pool
			round()
		}
		if n := testing.AllocsPerRun(200, round); n != 0 {
			t.Errorf("%s: %v allocations per request, want 0", op, n)
		}
	}
}

func BenchmarkServerHotPathAllocs(b *testing.B) {
	const size = 64 << 10
	for _, op := range []string{"GET", "PUT"} {
		b.Run(op, func(b *testing.B) {
			addr := fixedNode(b, size)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var k wire.BlockKey
			var req []byte
			respLen := wire.ResponsePrefixLen
			if op == "GET" {
				req = wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpGet, Key: k})
				respLen += size
			} else {
				req = append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: size}), make([]byte, size)...)
			}
			resp := make([]byte, respLen)
			round := func() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < 100; i++ { // warm the buffer pool
				round()
			}
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				round()
			}
		})
	}
}
