package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine/vfs"
	"github.com/dfkv/dfkv/roles/mds"
	"github.com/dfkv/dfkv/wire/client"
)

// startMDS runs a bbolt-backed MDS in-process with a short heartbeat TTL.
func startMDS(t *testing.T) string {
	t.Helper()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	return startMDSOn(t, ln)
}

// startMDSOn is startMDS on the listener ln.
func startMDSOn(t *testing.T, ln net.Listener) string {
	t.Helper()
	cfg, _, err := config.LoadFrom("mds", "", nil, map[string][]string{
		"db": {filepath.Join(t.TempDir(), "mds.db")}, "heartbeat-ttl-ms": {"2000"}, "http-listen": {""},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- mds.Run(ctx, cfg, mds.Deps{Listener: ln, Ready: func() { close(ready) }}) }()
	<-ready
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// startRegisteredNode runs a node that registers with the MDS at mdsAddr.
func startRegisteredNode(t *testing.T, mdsAddr, id string) (addr string, stop func()) {
	t.Helper()
	dir := t.TempDir()
	addr, _, stopErr := runNode(t, map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}, "mds": {mdsAddr}, "id": {id}})
	return addr, func() {
		if err := stopErr(); err != nil {
			t.Errorf("node %s: %v", id, err)
		}
	}
}

// waitMembers waits until the client routes over n members and returns
// how long that took.
func waitMembers(t *testing.T, cl *client.Client, n int) time.Duration {
	t.Helper()
	return waitUntil(t, 15*time.Second, func() error {
		if got := len(cl.Members()); got != n {
			return fmt.Errorf("client sees %d members, want %d", got, n)
		}
		return nil
	})
}

// dirMembers waits until the MDS at mc lists want members.
func dirMembers(t *testing.T, mc *client.MDSClient, want int) {
	t.Helper()
	waitUntil(t, 20*time.Second, func() error {
		_, ms, _, err := mc.Members(context.Background(), 0)
		if err != nil || len(ms) != want {
			return fmt.Errorf("directory holds %d members (%v), want %d", len(ms), err, want)
		}
		return nil
	})
}

// acceptSignal is a listener that signals each connection it accepts.
// An MDS client dials a connection per call, so once nothing else calls
// an MDS, its accepts count a client's polls.
type acceptSignal struct {
	net.Listener
	accepted chan struct{}
}

func (l acceptSignal) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.accepted <- struct{}{}:
		default: // nobody counting yet
		}
	}
	return c, err
}

// TestDiscoveryFollowsMembership: nodes register on start and leave on
// graceful stop; a client configured with only the MDS address follows
// both, and data stays readable where it lives.
func TestDiscoveryFollowsMembership(t *testing.T) {
	mdsAddr := startMDS(t)
	a1, _ := startRegisteredNode(t, mdsAddr, "n1")
	_, _ = startRegisteredNode(t, mdsAddr, "n2")

	cl, err := client.Open(client.Options{Namespace: []byte("disc"), MDS: []string{mdsAddr}, MDSPoll: 50 * time.Millisecond, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	waitMembers(t, cl, 2)
	e2 := cl.Epoch()
	ctx := context.Background()
	keys := make([][]byte, 40)
	vals := make([][]byte, 40)
	for i := range keys {
		keys[i], vals[i] = []byte(fmt.Sprint("k", i)), []byte(fmt.Sprint("value-", i))
	}
	for i, err := range cl.PutBatch(ctx, keys, vals) {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	// A third node joins: the epoch moves and the client picks it up.
	a3, stop3 := startRegisteredNode(t, mdsAddr, "n3")
	took := waitMembers(t, cl, 3)
	t.Logf("client saw the new node %v after it was ready (poll 50ms)", took.Round(time.Millisecond))
	if cl.Epoch() <= e2 {
		t.Fatalf("epoch %d did not move past %d", cl.Epoch(), e2)
	}
	moved := 0
	for i, r := range cl.GetBatch(ctx, keys, nil) {
		owner, _ := cl.Owner(keys[i])
		switch {
		case owner == a3:
			moved++ // its keys now route to the new, empty node: misses
		case r.Err != nil || !bytes.Equal(r.Data, vals[i]):
			t.Fatalf("key %d on an old node: %v", i, r.Err)
		}
	}
	if moved == 0 || moved == len(keys) {
		t.Fatalf("%d of %d keys moved to the new node", moved, len(keys))
	}
	// Graceful stop deregisters at once (no TTL wait).
	stop3()
	took = waitMembers(t, cl, 2)
	t.Logf("client dropped the stopped node %v after its graceful stop", took.Round(time.Millisecond))
	for _, m := range cl.MemberList() {
		if m.Addr == a3 {
			t.Fatal("stopped node still listed")
		}
	}
	if len(cl.Members()) != 2 || (cl.Members()[0] != a1 && cl.Members()[1] != a1) {
		t.Fatalf("members after the stop: %v", cl.Members())
	}
}

// TestReregisterAfterDirectoryReset: when the MDS comes back with an
// empty directory (its bbolt file lost), the node's next heartbeat is
// refused and the node registers again by itself.
func TestReregisterAfterDirectoryReset(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	mdsAddr := ln.Addr().String()
	run := func(ln net.Listener, db string) func() {
		cfg, _, err := config.LoadFrom("mds", "", nil, map[string][]string{"db": {db}, "heartbeat-ttl-ms": {"2000"}, "http-listen": {""}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		ready := make(chan struct{})
		go func() { done <- mds.Run(ctx, cfg, mds.Deps{Listener: ln, Ready: func() { close(ready) }}) }()
		<-ready
		return func() { cancel(); <-done }
	}
	stopMDS := run(ln, filepath.Join(t.TempDir(), "a.db"))
	startRegisteredNode(t, mdsAddr, "n1")
	mc, _ := client.NewMDSClient([]string{mdsAddr}, "default", nil, time.Second)
	dirMembers(t, mc, 1)
	stopMDS()
	ln2, err := net.Listen("tcp", mdsAddr)
	if err != nil {
		t.Skipf("MDS port %s taken meanwhile: %v", mdsAddr, err)
	}
	stopMDS = run(ln2, filepath.Join(t.TempDir(), "fresh.db"))
	defer stopMDS()
	dirMembers(t, mc, 1)
}

// TestRegisteredGauge: dfkv_server_registered says whether the node's
// registration is current: 0 while the MDS cannot be reached (the node
// serves, but clients discovering through the MDS never route to it), 1
// once registered; a node without server.mds does not export it.
func TestRegisteredGauge(t *testing.T) {
	registered := func(httpAddr string) (float64, bool) {
		mf := scrape(t, httpAddr)
		f := mf["dfkv_server_registered"]
		if f == nil || len(f.Metric) != 1 {
			return 0, false
		}
		return f.Metric[0].GetGauge().GetValue(), true
	}
	waitFor := func(httpAddr string, want float64) {
		t.Helper()
		waitUntil(t, 15*time.Second, func() error {
			if got, ok := registered(httpAddr); !ok || got != want {
				return fmt.Errorf("dfkv_server_registered = %v (exported: %v), want %v", got, ok, want)
			}
			return nil
		})
	}

	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close() // registrations are refused from now on
	_, httpAddr, _ := runNode(t, map[string][]string{"disk": {t.TempDir() + "/d0"}, "disk-capacity": {"256MiB"}, "mds": {deadAddr}, "id": {"lonely"}})
	waitFor(httpAddr, 0)

	mdsAddr := startMDS(t)
	_, httpAddr, _ = runNode(t, map[string][]string{"disk": {t.TempDir() + "/d0"}, "disk-capacity": {"256MiB"}, "mds": {mdsAddr}, "id": {"joined"}})
	waitFor(httpAddr, 1)

	_, httpAddr, _ = runNode(t, map[string][]string{"disk": {t.TempDir() + "/d0"}, "disk-capacity": {"256MiB"}})
	if _, ok := registered(httpAddr); ok {
		t.Fatal("dfkv_server_registered exported by a node without server.mds")
	}
}

// TestClientKeepsMembersWhenMDSListsNone: when the MDS lists no members at
// all (every heartbeat lapsing at once looks like this), a following
// client keeps routing over the last members it knew instead of failing
// every call with "no cache node is registered"; when the MDS lists
// members again, the client takes them.
func TestClientKeepsMembersWhenMDSListsNone(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	polls := acceptSignal{Listener: ln, accepted: make(chan struct{}, 1024)}
	mdsAddr := startMDSOn(t, polls)
	a1, stop1 := startRegisteredNode(t, mdsAddr, "n1")
	cl, err := client.Open(client.Options{Namespace: []byte("disc"), MDS: []string{mdsAddr}, MDSPoll: 20 * time.Millisecond, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	waitMembers(t, cl, 1)
	e1 := cl.Epoch()
	stop1() // deregisters: the MDS now lists none
	mc, err := client.NewMDSClient([]string{mdsAddr}, "default", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 15*time.Second, func() error {
		epoch, ms, _, err := mc.Members(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 0 || epoch <= e1 {
			return fmt.Errorf("the MDS lists %d members at epoch %d after the stop (before: epoch %d)", len(ms), epoch, e1)
		}
		return nil
	})
	// From here only the client calls the MDS: ten accepted connections
	// are ten of its polls, the nine before the last answered with the
	// empty list.
	for len(polls.accepted) > 0 {
		<-polls.accepted
	}
	for i := range 10 {
		select {
		case <-polls.accepted:
		case <-time.After(15 * time.Second):
			t.Fatalf("the client stopped polling the MDS after %d polls", i)
		}
	}
	if ms := cl.Members(); len(ms) != 1 || ms[0] != a1 || cl.Epoch() != e1 {
		t.Fatalf("with the MDS listing none, the client routes over %v at epoch %d; want the last member %s at epoch %d", ms, cl.Epoch(), a1, e1)
	}
	a2, _ := startRegisteredNode(t, mdsAddr, "n2")
	waitUntil(t, 15*time.Second, func() error {
		if ms := cl.Members(); len(ms) != 1 || ms[0] != a2 {
			return fmt.Errorf("the client did not take the new member list: %v", ms)
		}
		return nil
	})
}

// TestNodeLeavesWhenEveryDiskFailedClosed: a node whose only disk failed
// closed (here its slot table refuses writes, as a filesystem gone
// read-only does) leaves the MDS, so clients route its keys to nodes that
// can serve them instead of getting IO_ERROR from it until someone
// restarts it. Before, it stayed registered and answered PING.
func TestNodeLeavesWhenEveryDiskFailedClosed(t *testing.T) {
	mdsAddr := startMDS(t)
	var readOnly atomic.Bool
	fsys := &vfs.FaultFS{Inject: func(op vfs.Op, path string, _ int) error {
		if readOnly.Load() && op == vfs.OpWrite && filepath.Base(path) == "slots.tbl" {
			return syscall.EROFS
		}
		return nil
	}}
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{
		"disk": {filepath.Join(t.TempDir(), "d0")}, "disk-capacity": {"256MiB"}, "mds": {mdsAddr}, "id": {"n1"},
		"http-listen": {""}, // no HTTP: the default port may be taken by a node a developer runs
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{Listener: ln, FS: fsys}) }()
	defer func() { cancel(); <-done }() // Run reports the failed disk at the stop

	mc, err := client.NewMDSClient([]string{mdsAddr}, "default", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	members := func() int {
		_, ms, _, err := mc.Members(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	wantMembers := func(what string, want int) {
		t.Helper()
		waitUntil(t, 15*time.Second, func() error {
			if got := members(); got != want {
				return fmt.Errorf("%s: the MDS lists %d members", what, got)
			}
			return nil
		})
	}
	wantMembers("the node registered", 1)
	cl, err := client.Open(client.Options{Namespace: []byte("ro"), Members: []string{ln.Addr().String()}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	readOnly.Store(true)
	if err := cl.Put(context.Background(), []byte("k"), []byte("value")); err == nil {
		t.Fatal("a PUT through a read-only slot table succeeded")
	}
	wantMembers("the node left the MDS", 0)
}
