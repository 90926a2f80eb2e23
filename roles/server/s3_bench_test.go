package server

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/objtier/s3bucket"
	"github.com/dfkv/dfkv/engine/objtier/s3test"
	"github.com/dfkv/dfkv/wire/client"
)

// The object store tier's read-through against the same S3 server read
// by its own client library, in one run:
//
//	go test -run '^$' -bench ObjectStore -benchtime 400x ./roles/server/
//
// Both read 1 MiB values with 16 workers. s3-client is minio-go GETting
// the objects straight from versitygw; node-read-through is a node (over
// TCP, 16 connections) whose disk holds a quarter of the keys it cycles
// through in order, so every GET misses RAM and disk, reads through,
// verifies the object and promotes it into the disk (evicting another).
// put/* compares PUT throughput with the tier off and in async mode.
func BenchmarkObjectStore(b *testing.B) {
	s3 := s3test.Start(b)
	const workers, size, keys = 16, 1 << 20, 256
	addr, httpAddr, _, _ := s3Node(b, s3, filepath.Join(b.TempDir(), "d0"), map[string][]string{"disk-capacity-bytes": {"64MiB"}})
	cl := benchClient(b, addr, workers)
	ctx := context.Background()
	key := func(i int) []byte { return []byte(fmt.Sprint("obj-", i)) }
	for i := range keys {
		if err := cl.Put(ctx, key(i), s3Value(i, size)); err != nil {
			b.Fatal(err)
		}
	}
	waitUploads(b, httpAddr, keys)

	b.Run("s3-client", func(b *testing.B) {
		b.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
		b.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
		bk, err := s3bucket.Open(ctx, s3bucket.Options{Endpoint: s3.Endpoint, Bucket: s3.Bucket, Lookup: "path"})
		if err != nil {
			b.Fatal(err)
		}
		names := objectNames(b, s3)
		bufs := sync.Pool{New: func() any { b := make([]byte, size+4096); return &b }}
		cpuShares(b, s3, func() {
			run(b, workers, size, func(i int) error {
				bp := bufs.Get().(*[]byte)
				defer bufs.Put(bp)
				buf := *bp
				_, err := bk.Get(ctx, names[i%len(names)], int64(len(buf)), func(n int) []byte { return buf[:n] })
				return err
			})
		})
	})
	b.Run("node-read-through", func(b *testing.B) {
		before := value(b, scrape(b, httpAddr), "dfkv_s3_read_through_total", map[string]string{"result": "hit"})
		bufs := sync.Pool{New: func() any { b := make([]byte, size); return &b }}
		cpuShares(b, s3, func() {
			run(b, workers, size, func(i int) error {
				bp := bufs.Get().(*[]byte)
				defer bufs.Put(bp)
				_, _, err := cl.Get(ctx, key(i%keys), *bp)
				return err
			})
		})
		after := value(b, scrape(b, httpAddr), "dfkv_s3_read_through_total", map[string]string{"result": "hit"})
		b.ReportMetric((after-before)/float64(b.N), "read-through/op")
	})
	for _, mode := range []string{"off", "async"} {
		b.Run("put-64KiB/tier-"+mode, func(b *testing.B) {
			extra := map[string][]string{"disk-capacity-bytes": {"1GiB"}}
			var a, ah string
			if mode == "off" {
				a, _, _ = runNode(b, map[string][]string{"disks": {filepath.Join(b.TempDir(), "d")}, "disk-capacity-bytes": {"1GiB"}})
			} else {
				a, ah, _, _ = s3Node(b, s3, filepath.Join(b.TempDir(), "d"), extra)
			}
			pc := benchClient(b, a, workers)
			v := s3Value(1, 64<<10)
			cpuShares(b, s3, func() {
				run(b, workers, len(v), func(i int) error { return pc.Put(ctx, key(i%4096), v) })
				if mode == "async" {
					waitUploads(b, ah, 0) // the uploads' cost belongs to the PUTs
				}
			})
		})
	}
}

func benchClient(b *testing.B, addr string, conns int) *client.Client {
	b.Helper()
	cl, err := client.Open(client.Options{Namespace: []byte("s3-bench"), Members: []string{addr}, Timeout: 30 * time.Second,
		PoolSize: conns, SharedMemory: client.ShmOff})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Close() })
	return cl
}

// selfCPU is the CPU time this process (the node and its client) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuShares reports, per operation, the CPU this process and the S3
// server used while f ran: on a machine with few cores they compete, so
// throughput alone cannot say which side a cost is on.
func cpuShares(b *testing.B, s3 *s3test.Server, f func()) {
	self, srv := selfCPU(), s3.CPUTime()
	f()
	b.ReportMetric(float64((selfCPU()-self).Microseconds())/float64(b.N), "self-cpu-µs/op")
	b.ReportMetric(float64((s3.CPUTime()-srv).Microseconds())/float64(b.N), "s3-cpu-µs/op")
}

// run calls op b.N times from workers goroutines, i counting up.
func run(b *testing.B, workers, size int, op func(i int) error) {
	b.Helper()
	b.SetBytes(int64(size))
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if err := op(i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

func objectNames(b *testing.B, s3 *s3test.Server) []string {
	var names []string
	for o := range s3.Client(b).ListObjects(context.Background(), s3.Bucket, minioListAll()) {
		if o.Err != nil {
			b.Fatal(o.Err)
		}
		names = append(names, o.Key)
	}
	return names
}
