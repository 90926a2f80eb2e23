package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// startRunNode runs a whole node through Run (config, file engines on two
// disk directories, listener) in-process and returns its address.
func startRunNode(t *testing.T) (addr string, stop func()) {
	t.Helper()
	dir := t.TempDir()
	addr, _, stopErr := runNode(t, map[string][]string{"disk": {dir + "/d0", dir + "/d1"}, "disk-capacity": {"256MiB"}})
	return addr, func() {
		if err := stopErr(); err != nil {
			t.Errorf("node stopped with %v", err)
		}
	}
}

// TestThreeNodeCluster routes a batch over three nodes, checks every block
// landed on the node the ring names and nowhere else, and that batch
// results keep caller order with per-item misses.
func TestThreeNodeCluster(t *testing.T) {
	var addrs []string
	for i := 0; i < 3; i++ {
		a, _ := startRunNode(t)
		addrs = append(addrs, a)
	}
	ctx := context.Background()
	open := func(members []string) *client.Client {
		cl, err := client.Open(client.Options{Namespace: []byte("cluster-test"), Members: members, Timeout: 30 * time.Second, MaxBatchItems: 7})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	cl := open(addrs)
	const n = 60
	keys := make([][]byte, n)
	vals := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("blk-%03d", i))
		vals[i] = enginetest.Value(uint64(i), 1000+i*97)
	}
	for i, err := range cl.PutBatch(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	// Each block is on exactly its owner: a client of one node only sees
	// that node's share.
	perNode := map[string]int{}
	for i, k := range keys {
		owner, _ := cl.Owner(k)
		perNode[owner]++
		for _, a := range addrs {
			single := open([]string{a})
			_, err := single.Exist(ctx, k)
			if (a == owner) != (err == nil) {
				t.Fatalf("key %d: owner %s, node %s answers %v", i, owner, a, err)
			}
		}
	}
	if len(perNode) != 3 {
		t.Fatalf("blocks landed on %d nodes: %v", len(perNode), perNode)
	}
	// Batch get with misses interleaved keeps order and sizes.
	probe := append([][]byte{}, keys...)
	probe = append(probe[:10:10], append([][]byte{[]byte("absent-1")}, probe[10:]...)...)
	dsts := make([][]byte, len(probe))
	for i := range dsts {
		dsts[i] = make([]byte, 20000)
	}
	res := cl.GetBatch(ctx, probe, dsts)
	for i, r := range res {
		switch {
		case i == 10:
			if wire.StatusOf(r.Err) != wire.StatusNotFound {
				t.Fatalf("absent key: %v", r.Err)
			}
		default:
			j := i
			if i > 10 {
				j = i - 1
			}
			if r.Err != nil || !bytes.Equal(r.Data, vals[j]) || r.Stored != uint64(len(vals[j])) {
				t.Fatalf("item %d: %v", i, r.Err)
			}
		}
	}
	// A too-small destination fails only that item and keeps the rest.
	small := [][]byte{make([]byte, 10), make([]byte, 5000)}
	res = cl.GetBatch(ctx, [][]byte{keys[0], keys[1]}, small)
	if res[0].Err != client.ErrBufferTooSmall || res[0].Stored != uint64(len(vals[0])) || !bytes.Equal(res[0].Data, vals[0][:10]) {
		t.Fatalf("short dst: %+v", res[0])
	}
	if res[1].Err != nil || !bytes.Equal(res[1].Data, vals[1]) {
		t.Fatalf("neighbour of short dst: %v", res[1].Err)
	}
	if got, err := cl.ExistPrefix(ctx, probe); err != nil || got != 10 {
		t.Fatalf("prefix %d %v, want 10", got, err)
	}
	for i, err := range cl.RemoveBatch(ctx, keys[:30]) {
		if err != nil {
			t.Fatalf("remove %d: %v", i, err)
		}
	}
	for i, r := range cl.ExistBatch(ctx, keys) {
		want := wire.StatusOK
		if i < 30 {
			want = wire.StatusNotFound
		}
		if wire.StatusOf(r.Err) != want {
			t.Fatalf("exist %d after remove: %v", i, r.Err)
		}
	}
}

// TestClusterNodeDown: with one of three nodes stopped, its reads are
// misses (wrapping client.ErrPeerDown), its writes UNAVAILABLE, and the
// other nodes' items succeed.
func TestClusterNodeDown(t *testing.T) {
	var addrs []string
	var stops []func()
	for i := 0; i < 3; i++ {
		a, s := startRunNode(t)
		addrs, stops = append(addrs, a), append(stops, s)
	}
	cl, err := client.Open(client.Options{Namespace: []byte("down-test"), Members: addrs, Timeout: 10 * time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	keys := make([][]byte, 30)
	vals := make([][]byte, 30)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("k", i))
		vals[i] = []byte(fmt.Sprint("v", i))
	}
	for _, err := range cl.PutBatch(ctx, keys, vals) {
		if err != nil {
			t.Fatal(err)
		}
	}
	stops[1]()
	downs := 0
	for i, r := range cl.GetBatch(ctx, keys, nil) {
		owner, _ := cl.Owner(keys[i])
		if owner == addrs[1] {
			downs++
			if wire.StatusOf(r.Err) != wire.StatusNotFound || !errors.Is(r.Err, client.ErrPeerDown) {
				t.Fatalf("item %d on the stopped node: %v, want a miss", i, r.Err)
			}
		} else if r.Err != nil || !bytes.Equal(r.Data, vals[i]) {
			t.Fatalf("item %d on a live node: %v", i, r.Err)
		}
	}
	if downs == 0 {
		t.Fatal("no key routed to the stopped node; test proves nothing")
	}
	for i, err := range cl.PutBatch(ctx, keys, vals) {
		owner, _ := cl.Owner(keys[i])
		if want := owner == addrs[1]; want != (wire.StatusOf(err) == wire.StatusUnavailable) {
			t.Fatalf("put %d (owner %s): %v", i, owner, err)
		}
	}
}
