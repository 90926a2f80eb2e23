package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine/objtier/s3test"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// lockedBuf is a log sink the test reads while the node writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// s3Node runs a node in-process with the object store tier on s3 and
// disk directory dir; extra flags override.
func s3Node(t testing.TB, s3 *s3test.Server, dir string, extra map[string][]string) (addr, httpAddr string, logs *lockedBuf, stop func() error) {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	flags := map[string][]string{
		"disks": {dir}, "disk-capacity-bytes": {"256MiB"},
		"s3-endpoint": {s3.Endpoint}, "s3-bucket": {s3.Bucket}, "s3-tls": {"0"}, "s3-bucket-lookup": {"path"},
		"s3-timeout-ms": {"1000"},
	}
	for k, v := range extra {
		flags[k] = v
	}
	cfg, _, err := config.LoadFrom("server", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	hln, _ := net.Listen("tcp", "127.0.0.1:0")
	logs = &lockedBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	log := slog.New(slog.NewTextHandler(logs, nil))
	go func() {
		done <- Run(ctx, cfg, Deps{Listener: ln, HTTPListener: hln, Logger: log, Ready: func(*Server) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("node did not start: %v", err)
	}
	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), hln.Addr().String(), logs, stop
}

func s3Client(t *testing.T, members ...string) *client.Client {
	t.Helper()
	cl, err := client.Open(client.Options{Namespace: []byte("s3-tier"), Members: members, Timeout: 10 * time.Second, SharedMemory: client.ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func s3Value(i, n int) []byte {
	v := make([]byte, n)
	for j := range v {
		v[j] = byte(i*131 + j*7 + j>>9)
	}
	return v
}

func waitUploads(t testing.TB, httpAddr string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mf := scrape(t, httpAddr)
		if value(t, mf, "dfkv_s3_uploads_total", nil) >= want && value(t, mf, "dfkv_s3_upload_queue_items", nil) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("uploads not done after 30s: %v of %v", value(t, mf, "dfkv_s3_uploads_total", nil), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A node whose disk is replaced by an empty one finds every block in the
// bucket: EXIST (remote) and GET read through, the first GET promotes to
// disk and the second does not touch the bucket; a range is a range.
func TestObjectStoreRefillsAnEmptyDisk(t *testing.T) {
	s3 := s3test.Start(t)
	addr, httpAddr, _, stop := s3Node(t, s3, filepath.Join(t.TempDir(), "d0"), nil)
	cl := s3Client(t, addr)
	ctx := context.Background()
	const n = 40
	for i := range n {
		if err := cl.Put(ctx, []byte(fmt.Sprint("k", i)), s3Value(i, 10000+i*999)); err != nil {
			t.Fatal(err)
		}
	}
	waitUploads(t, httpAddr, n)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	addr, httpAddr, _, _ = s3Node(t, s3, filepath.Join(t.TempDir(), "fresh"), nil)
	cl = s3Client(t, addr)
	if hits, err := cl.ExistPrefix(ctx, [][]byte{[]byte("k0"), []byte("k1"), []byte("k2"), []byte("none")}); err != nil || hits != 3 {
		t.Fatalf("prefix count on an empty disk: %d, %v; want 3 found in the bucket", hits, err)
	}
	buf := make([]byte, 1<<20)
	for i := range n {
		got, _, err := cl.Get(ctx, []byte(fmt.Sprint("k", i)), buf)
		if err != nil || !bytes.Equal(buf[:got], s3Value(i, 10000+i*999)) {
			t.Fatalf("GET k%d from the bucket: %v", i, err)
		}
	}
	// Promotions finish behind the reads.
	deadline := time.Now().Add(10 * time.Second)
	for value(t, scrape(t, httpAddr), "dfkv_s3_promoted_total", nil) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mf := scrape(t, httpAddr)
	gets := value(t, mf, "dfkv_s3_requests_total", map[string]string{"op": "get", "status": "ok"})
	if gets != n || value(t, mf, "dfkv_s3_promoted_total", nil) != n {
		t.Fatalf("bucket GETs %v, promoted %v; want %d each", gets, value(t, mf, "dfkv_s3_promoted_total", nil), n)
	}
	for i := range n {
		if _, _, err := cl.Get(ctx, []byte(fmt.Sprint("k", i)), buf); err != nil {
			t.Fatal(err)
		}
	}
	if again := value(t, scrape(t, httpAddr), "dfkv_s3_requests_total", map[string]string{"op": "get", "status": "ok"}); again != gets {
		t.Fatalf("second GETs went to the bucket again (%v bucket GETs, was %v)", again, gets)
	}
	// A missing key costs one bucket GET and is NOT_FOUND.
	if _, _, err := cl.Get(ctx, []byte("never"), buf); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("GET of a key nowhere: %v", err)
	}
	// REMOVE deletes the object too: a node with yet another empty disk
	// does not find it.
	if err := cl.Remove(ctx, []byte("k3")); err != nil {
		t.Fatal(err)
	}
	if n := countObjects(t, s3); n != 39 {
		t.Fatalf("%d objects in the bucket after one REMOVE of 40, want 39", n)
	}
}

// During an outage of the store the node serves from disk, stays ready,
// says so once in the log and once when it ends, and uploads what was
// queued when the store is back.
func TestObjectStoreOutage(t *testing.T) {
	s3 := s3test.Start(t)
	addr, httpAddr, logs, _ := s3Node(t, s3, filepath.Join(t.TempDir(), "d0"), nil)
	cl := s3Client(t, addr)
	ctx := context.Background()
	if err := cl.Put(ctx, []byte("before"), s3Value(1, 5000)); err != nil {
		t.Fatal(err)
	}
	waitUploads(t, httpAddr, 1)
	s3.Stop()
	buf := make([]byte, 1<<16)
	for i := range 30 {
		if err := cl.Put(ctx, []byte(fmt.Sprint("during", i)), s3Value(i, 5000)); err != nil {
			t.Fatalf("PUT during the outage: %v", err)
		}
		if _, _, err := cl.Get(ctx, []byte("before"), buf); err != nil {
			t.Fatalf("GET from disk during the outage: %v", err)
		}
		if _, _, err := cl.Get(ctx, []byte(fmt.Sprint("nowhere", i)), buf); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("GET of a missing key during the outage: %v, want NOT_FOUND", err)
		}
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz = %d during a store outage, want 200", resp.StatusCode)
	}
	mf := scrape(t, httpAddr)
	if value(t, mf, "dfkv_s3_reachable", nil) != 0 {
		t.Fatal("dfkv_s3_reachable = 1 during the outage")
	}
	if skipped := value(t, mf, "dfkv_s3_requests_total", map[string]string{"status": "skipped"}); skipped == 0 {
		t.Fatal("no call skipped during the outage: every miss waited on the store")
	}
	s3.Restart(t)
	waitUploads(t, httpAddr, 31)
	if value(t, scrape(t, httpAddr), "dfkv_s3_reachable", nil) != 1 {
		t.Fatal("dfkv_s3_reachable = 0 after the store came back")
	}
	l := logs.String()
	if a, b := strings.Count(l, "object store unreachable"), strings.Count(l, "object store reachable again"); a != 1 || b != 1 {
		t.Fatalf("outage logged %d times and its end %d times, want once each:\n%s", a, b, l)
	}
}

// A node whose bucket or credentials cannot work refuses to start,
// naming the endpoint and the bucket.
func TestObjectStoreRefusedAtStart(t *testing.T) {
	s3 := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	for _, c := range []struct {
		name, bucket, secret, want string
	}{
		{"missing bucket", "no-such-bucket", s3.SecretKey, "does not exist"},
		{"bad credentials", s3.Bucket, "not-the-secret", "access denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("AWS_SECRET_ACCESS_KEY", c.secret)
			cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{
				"disks": {filepath.Join(t.TempDir(), "d0")}, "disk-capacity-bytes": {"256MiB"}, "listen": {"127.0.0.1:0"},
				"s3-endpoint": {s3.Endpoint}, "s3-bucket": {c.bucket}, "s3-tls": {"0"}, "s3-bucket-lookup": {"path"},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = Run(ctx, cfg, Deps{})
			if err == nil {
				t.Fatal("started")
			}
			for _, w := range []string{c.want, s3.Endpoint, c.bucket} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("start error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), c.secret) {
				t.Errorf("start error prints the secret: %q", err)
			}
		})
	}
}

func minioListAll() minio.ListObjectsOptions { return minio.ListObjectsOptions{Recursive: true} }

func countObjects(t *testing.T, s3 *s3test.Server) int {
	t.Helper()
	n := 0
	for o := range s3.Client(t).ListObjects(context.Background(), s3.Bucket, minioListAll()) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
	}
	return n
}

// With the RAM tier in front, a lookup on a fresh node reaches the bucket
// through it, and the GETs after it are served (from RAM or disk) without
// reading the bucket again.
func TestObjectStoreBehindRAMTier(t *testing.T) {
	s3 := s3test.Start(t)
	ram := map[string][]string{"ram-tier": {"1"}, "ram-tier-bytes": {"64MiB"}}
	addr, httpAddr, _, stop := s3Node(t, s3, filepath.Join(t.TempDir(), "d0"), ram)
	cl := s3Client(t, addr)
	ctx := context.Background()
	keys := make([][]byte, 12)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("r", i))
		if err := cl.Put(ctx, keys[i], s3Value(i, 20000)); err != nil {
			t.Fatal(err)
		}
	}
	waitUploads(t, httpAddr, float64(len(keys)))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	addr, httpAddr, _, _ = s3Node(t, s3, filepath.Join(t.TempDir(), "fresh"), ram)
	cl = s3Client(t, addr)
	if hits, err := cl.ExistPrefix(ctx, append(keys, []byte("absent"))); err != nil || hits != len(keys) {
		t.Fatalf("prefix count through the RAM tier on an empty node: %d, %v; want %d", hits, err, len(keys))
	}
	buf := make([]byte, 32<<10)
	for i, k := range keys {
		n, _, err := cl.Get(ctx, k, buf)
		if err != nil || !bytes.Equal(buf[:n], s3Value(i, 20000)) {
			t.Fatalf("GET %s: %v", k, err)
		}
	}
	if gets := value(t, scrape(t, httpAddr), "dfkv_s3_requests_total", map[string]string{"op": "get", "status": "ok"}); gets != float64(len(keys)) {
		t.Fatalf("%v bucket GETs for %d keys looked up and read, want one each", gets, len(keys))
	}
}
