package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/file"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// benchNode starts a node on the file engine in a temporary directory.
func benchNode(b *testing.B) *testNode {
	b.Helper()
	st, err := file.Open(file.Options{Dir: b.TempDir(), CapacityBytes: 8 << 30, DirectIO: true})
	if err != nil {
		b.Fatal(err)
	}
	g, err := engine.NewGroup([]engine.StoreEngine{st}, []string{"d0"})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Options{Engine: g, Listener: ln, MaxBlockBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	// Measure with metrics on, as a node runs.
	if srv.metrics, err = NewMetrics(prometheus.NewRegistry(), srv, g); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &testNode{srv: srv, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- srv.Serve(ctx) }()
	b.Cleanup(func() { cancel(); <-n.done; _ = g.Close() })
	return n
}

// BenchmarkLoopback measures PUT and GET throughput of one node on the
// file engine over loopback TCP through the Go client, at concurrency 1
// and 16. Throughput is value bytes (b.SetBytes).
func BenchmarkLoopback(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, conc := range []int{1, 16} {
			for _, op := range []string{"PUT", "GET"} {
				b.Run(fmt.Sprintf("%s/%dKiB/c%d", op, size>>10, conc), func(b *testing.B) {
					benchLoopback(b, op, size, conc)
				})
			}
		}
	}
}

func benchLoopback(b *testing.B, op string, size, conc int) {
	n := benchNode(b)
	cl, err := client.Open(client.Options{Namespace: []byte("bench"), Members: []string{n.addr}, PoolSize: conc, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const keys = 64 // a working set that stays in the page cache
	val := make([]byte, size)
	for i := range val {
		val[i] = byte(i)
	}
	for i := 0; i < keys; i++ {
		if err := cl.Put(ctx, []byte(fmt.Sprint("k", i)), val); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var next atomic.Int64
	b.ResetTimer()
	work := func(dst []byte) error {
		k := []byte(fmt.Sprint("k", next.Add(1)%keys))
		if op == "PUT" {
			return cl.Put(ctx, k, val)
		}
		_, _, err := cl.Get(ctx, k, dst)
		return err
	}
	if conc == 1 {
		dst := make([]byte, size)
		for i := 0; i < b.N; i++ {
			if err := work(dst); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism((conc + 1) / 2) // GOMAXPROCS is 2 on the reference machine
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]byte, size)
		for pb.Next() {
			if err := work(dst); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkServerGetPath drives one connection with pre-encoded GET frames
// and reads replies into a fixed buffer, so the allocations it reports are
// the server's own per-request allocations on the GET path (engine
// included).
func BenchmarkServerGetPath(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			n := benchNode(b)
			c, err := net.Dial("tcp", n.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var k wire.BlockKey
			k.ID[0] = 1
			val := make([]byte, size)
			put := append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: uint64(size)}), val...)
			get := wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpGet, Key: k})
			resp := make([]byte, wire.ResponsePrefixLen+size)
			if _, err := c.Write(put); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, resp[:wire.ResponsePrefixLen]); err != nil || resp[1] != 0 {
				b.Fatalf("put: %v status %d", err, resp[1])
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(get); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
