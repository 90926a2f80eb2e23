package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/dfkv/dfkv/engine/objtier/s3test"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// startS3Server starts `dfkv server` with the object store tier on s3.
func startS3Server(t *testing.T, s3 *s3test.Server, addr, httpAddr, disk string, extra ...string) *child {
	t.Helper()
	args := append([]string{"server", "--listen", addr, "--http-listen", httpAddr, "--disks", disk, "--disk-capacity-bytes", "1GiB",
		"--s3-endpoint", s3.Endpoint, "--s3-bucket", s3.Bucket, "--s3-tls", "0", "--s3-bucket-lookup", "path"}, extra...)
	cmd := exec.Command(binPath, args...)
	cmd.Env = s3.Env()
	return startChildCmd(t, "server", "http://"+httpAddr+"/readyz", cmd)
}

func s3TestValue(i int) []byte {
	v := make([]byte, 16<<10)
	for j := range v {
		v[j] = byte(i>>(8*(j%3)) ^ j*29)
	}
	return v
}

// After SIGKILL, every block whose upload completed before the kill is
// served again, byte-exact: from the bucket on the first GET (the node is
// restarted on an empty disk, as a replaced host would be), from the disk
// on the second.
func TestServerProcessObjectStoreAfterSIGKILL(t *testing.T) {
	s3 := s3test.Start(t)
	addr, httpAddr := freePort(t), freePort(t)
	srv := startS3Server(t, s3, addr, httpAddr, filepath.Join(t.TempDir(), "d0"))
	cl, err := client.Open(client.Options{Namespace: []byte("s3-sigkill"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const n = 1000
	key := func(i int) []byte { return []byte(fmt.Sprint("block-", i)) }
	keys := make([][]byte, 0, 100)
	values := make([][]byte, 0, 100)
	for i := 0; i < n; i += 100 {
		keys, values = keys[:0], values[:0]
		for j := i; j < i+100; j++ {
			keys, values = append(keys, key(j)), append(values, s3TestValue(j))
		}
		for j, err := range cl.PutBatch(ctx, keys, values) {
			if err != nil {
				t.Fatalf("PUT %d: %v", i+j, err)
			}
		}
	}
	waitFor(t, "uploads of every block", time.Minute, func() bool {
		return scrapeSample(t, httpAddr, "dfkv_s3_uploads_total ") == fmt.Sprint(n) &&
			scrapeGauge(t, httpAddr, "dfkv_s3_upload_queue_items") == 0
	})
	srv.signal(t, syscall.SIGKILL)

	srv = startS3Server(t, s3, addr, httpAddr, filepath.Join(t.TempDir(), "replacement"))
	defer srv.stop(t)
	dst := make([]byte, 64<<10)
	for pass := range 2 {
		for i := range n {
			got, _, err := cl.Get(ctx, key(i), dst)
			if err != nil || !bytes.Equal(dst[:got], s3TestValue(i)) {
				t.Fatalf("pass %d: GET %d after SIGKILL: %v", pass, i, err)
			}
		}
		if hits := scrapeSample(t, httpAddr, `dfkv_s3_read_through_total{result="hit"}`); hits != fmt.Sprint(n) {
			t.Fatalf("pass %d: %s read-through hits, want %d (the first pass from the bucket, the second from disk)", pass, hits, n)
		}
	}
}

// A REMOVE acknowledged while the object store was unreachable stays
// done across a SIGKILL: the restarted node does not read the removed
// blocks back from the bucket, and deletes them once it answers.
func TestServerProcessRemoveDuringOutageSurvivesSIGKILL(t *testing.T) {
	s3 := s3test.Start(t)
	addr, httpAddr := freePort(t), freePort(t)
	disk := filepath.Join(t.TempDir(), "d0")
	srv := startS3Server(t, s3, addr, httpAddr, disk)
	cl, err := client.Open(client.Options{Namespace: []byte("s3-removed"), Members: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const n = 20
	key := func(i int) []byte { return []byte(fmt.Sprint("removed-", i)) }
	for i := range n {
		if err := cl.Put(ctx, key(i), s3TestValue(i)); err != nil {
			t.Fatalf("PUT %d: %v", i, err)
		}
	}
	waitFor(t, "uploads of every block", time.Minute, func() bool {
		return scrapeSample(t, httpAddr, "dfkv_s3_uploads_total ") == fmt.Sprint(n) &&
			scrapeGauge(t, httpAddr, "dfkv_s3_upload_queue_items") == 0
	})
	s3.Stop()
	for i := range n {
		if err := cl.Remove(ctx, key(i)); err != nil {
			t.Fatalf("REMOVE %d during the outage: %v", i, err)
		}
	}
	srv.signal(t, syscall.SIGKILL)
	s3.Restart(t)
	if objects := s3.Client(t).ListObjects(ctx, s3.Bucket, minio.ListObjectsOptions{Recursive: true}); len(drain(t, objects)) != n {
		t.Fatal("test premise: the bucket should still hold every removed block's object")
	}

	srv = startS3Server(t, s3, addr, httpAddr, disk)
	defer srv.stop(t)
	dst := make([]byte, 64<<10)
	for i := range n {
		if _, _, err := cl.Get(ctx, key(i), dst); wire.StatusOf(err) != wire.StatusNotFound {
			t.Fatalf("GET %d after the restart: %v, want NOT_FOUND (removed while the store was down)", i, err)
		}
	}
	waitFor(t, "the removed blocks' objects deleted", time.Minute, func() bool {
		return len(drain(t, s3.Client(t).ListObjects(ctx, s3.Bucket, minio.ListObjectsOptions{Recursive: true}))) == 0
	})
}

// drain lists what a listing channel yields, failing on an error.
func drain(t *testing.T, ch <-chan minio.ObjectInfo) []string {
	t.Helper()
	var names []string
	for o := range ch {
		if o.Err != nil {
			t.Fatalf("list the bucket: %v", o.Err)
		}
		names = append(names, o.Key)
	}
	return names
}

// After a ring change a block written through another node is found in
// the bucket by the node its key now maps to.
func TestServerProcessObjectStoreAfterRingChange(t *testing.T) {
	s3 := s3test.Start(t)
	addrA, httpA, addrB, httpB := freePort(t), freePort(t), freePort(t), freePort(t)
	a := startS3Server(t, s3, addrA, httpA, filepath.Join(t.TempDir(), "a"))
	b := startS3Server(t, s3, addrB, httpB, filepath.Join(t.TempDir(), "b"))
	defer b.stop(t)
	both, err := client.Open(client.Options{Namespace: []byte("s3-ring"), Members: []string{addrA, addrB}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	ctx := context.Background()
	const n = 200
	for i := range n {
		if err := both.Put(ctx, []byte(fmt.Sprint("r", i)), s3TestValue(i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "uploads on both nodes", time.Minute, func() bool {
		return scrapeGauge(t, httpA, "dfkv_s3_upload_queue_items") == 0 && scrapeGauge(t, httpB, "dfkv_s3_upload_queue_items") == 0
	})
	a.stop(t) // A leaves the ring; its keys now map to B
	onlyB, err := client.Open(client.Options{Namespace: []byte("s3-ring"), Members: []string{addrB}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer onlyB.Close()
	dst := make([]byte, 64<<10)
	for i := range n {
		got, _, err := onlyB.Get(ctx, []byte(fmt.Sprint("r", i)), dst)
		if err != nil || !bytes.Equal(dst[:got], s3TestValue(i)) {
			t.Fatalf("GET r%d through the remaining node: %v", i, err)
		}
	}
	if hits := scrapeSample(t, httpB, `dfkv_s3_read_through_total{result="hit"}`); hits == "0" {
		t.Fatal("no read-through on the remaining node: the test did not move any key")
	}
	if _, _, err := onlyB.Get(ctx, []byte("nowhere"), dst); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("GET of a key never stored: %v", err)
	}
}
