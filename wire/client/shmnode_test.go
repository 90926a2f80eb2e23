package client_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TestLeaseLapsedDuringCopyIsAMiss: against a real node, a client paused
// between copying a leased value and checking its lease word, past the
// lease time, answers a miss; it never returns the bytes it copied, which
// the node may have reused for another key by then. Unpaused, the same
// read returns the value.
func TestLeaseLapsedDuringCopyIsAMiss(t *testing.T) {
	dir := t.TempDir()
	addr := runNode(t, server.Deps{}, map[string][]string{"shm-socket": {filepath.Join(dir, "s.sock")}, "lease-ms": {"20"}})
	cl, err := client.Open(client.Options{Namespace: []byte("lapse"), Members: []string{addr}, SharedMemory: client.ShmOn})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	val := bytes.Repeat([]byte("L"), 300000)
	if err := cl.Put(context.Background(), []byte("k"), val); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(val))
	if n, _, err := cl.Get(context.Background(), []byte("k"), dst); err != nil || !bytes.Equal(dst[:n], val) {
		t.Fatalf("unpaused read: %v", err)
	}
	client.SetAfterLeaseCopy(func() { time.Sleep(300 * time.Millisecond) }) // 15 lease times: the sweeper has run
	defer client.SetAfterLeaseCopy(nil)
	_, _, err = cl.Get(context.Background(), []byte("k"), dst)
	if wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("a read paused past its lease: %v, want a miss", err)
	}
	res := cl.GetBatch(context.Background(), [][]byte{[]byte("k")}, nil)
	if wire.StatusOf(res[0].Err) != wire.StatusNotFound || res[0].Data != nil {
		t.Fatalf("a batch read paused past its lease: %+v, want a miss with no bytes", res[0])
	}
}
