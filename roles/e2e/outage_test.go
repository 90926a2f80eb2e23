package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/testetcd"
	"github.com/dfkv/dfkv/wire/client"
)

// TestEtcdPauseDoesNotShrinkTheRing: etcd is paused (SIGSTOP) for longer
// than the heartbeat TTL and then continued. On resume it expires every
// member's lease at once, and the nodes register again one after another;
// a client polling the MDS meanwhile used to be handed a list of one or
// two nodes and route (and write) over it. The MDS now serves the list of
// before the outage until the nodes are back, so the client's ring never
// shrinks.
func TestEtcdPauseDoesNotShrinkTheRing(t *testing.T) {
	etcd := testetcd.Start(t)
	dir := t.TempDir()
	mdsAddr, mdsHTTP := freePort(t), freePort(t)
	mds := startChild(t, "mds", "http://"+mdsHTTP+"/readyz", "mds", "--listen", mdsAddr, "--http-listen", mdsHTTP,
		"--etcd-endpoints", etcd.Endpoint, "--heartbeat-ttl-ms", "2000")
	for _, id := range []string{"n1", "n2", "n3"} {
		addr, httpAddr := freePort(t), freePort(t)
		startChild(t, id, "http://"+httpAddr+"/readyz", "server", "--listen", addr, "--http-listen", httpAddr, "--id", id,
			"--disks", filepath.Join(dir, id), "--disk-capacity-bytes", "256MiB", "--mds", mdsAddr)
	}
	waitFor(t, "three members registered", 30*time.Second, func() bool { return len(mdsMembers(t, mdsHTTP)) == 3 })
	cl, err := client.Open(client.Options{Namespace: []byte("outage"), MDS: []string{mdsAddr}, MDSPoll: 100 * time.Millisecond, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var fewest atomic.Int64
	fewest.Store(3)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if n := int64(len(cl.Members())); n < fewest.Load() {
				fewest.Store(n)
			}
		}
	}()
	if err := etcd.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // past the 2 s TTL
	// The MDS's probe (every 2 s, giving up after 3 s) must have seen the
	// outage before etcd comes back, however late it ran under load.
	waitFor(t, "the MDS to see etcd gone", 30*time.Second, func() bool { return strings.Contains(mds.logs.String(), "etcd unreachable") })
	if err := etcd.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the MDS to see etcd back", 30*time.Second, func() bool { return strings.Contains(mds.logs.String(), "etcd reachable again") })
	time.Sleep(5 * time.Second) // the nodes register again; clients poll every 100 ms
	close(stop)
	<-watched
	settled := strings.Contains(mds.logs.String(), "serving the member lists of before the outage")
	t.Logf("fewest members the client routed over: %d; the MDS held the old list while nodes re-registered: %v", fewest.Load(), settled)
	if fewest.Load() != 3 {
		t.Fatalf("the client's ring shrank to %d members while etcd's leases were renewed", fewest.Load())
	}
	if len(cl.Members()) != 3 {
		t.Fatalf("after the outage the client routes over %v", cl.Members())
	}
	ctx := context.Background()
	if err := cl.Put(ctx, []byte("after"), []byte("the outage")); err != nil {
		t.Fatal(err)
	}
}
