package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/testetcd"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TestRollingUpgrade replaces each of three node processes in turn
// (SIGTERM, then a new process on the same disks and port) under a mixed
// client load, with one MDS on a real etcd, as an operator upgrades a
// fleet. The old and new builds are both this one: no earlier release of
// this wire epoch exists to start from, and the procedure (drain, leave,
// restart, rejoin) is what is under test. The load sees no error, only
// misses while a node is away, and every block written before the
// upgrade is served, byte for byte, after it.
func TestRollingUpgrade(t *testing.T) {
	etcd := testetcd.Start(t)
	dir := t.TempDir()
	mdsAddr, mdsHTTP := freePort(t), freePort(t)
	startChild(t, "mds", "http://"+mdsHTTP+"/readyz", "mds", "--listen", mdsAddr, "--http-listen", mdsHTTP,
		"--etcd-endpoints", etcd.Endpoint, "--heartbeat-ttl-ms", "10000")
	type node struct {
		args []string
		http string
		proc *child
	}
	nodes := map[string]*node{}
	ids := []string{"n1", "n2", "n3"}
	for _, id := range ids {
		addr, httpAddr := freePort(t), freePort(t)
		n := &node{http: httpAddr, args: []string{"server", "--listen", addr, "--http-listen", httpAddr, "--id", id,
			"--disks", filepath.Join(dir, id), "--disk-capacity-bytes", "512MiB", "--mds", mdsAddr}}
		n.proc = startChild(t, id, "http://"+httpAddr+"/readyz", n.args...)
		nodes[id] = n
	}
	waitFor(t, "three members registered", 30*time.Second, func() bool { return len(mdsMembers(t, mdsHTTP)) == 3 })

	cl, err := client.Open(client.Options{Namespace: []byte("upgrade"), MDS: []string{mdsAddr}, MDSPoll: 200 * time.Millisecond,
		Timeout: 10 * time.Second, SharedMemory: client.ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	value := func(k string) []byte { return bytes.Repeat([]byte(k+"|"), 4096/(len(k)+1)) }
	const before = 600
	for i := range before {
		k := fmt.Sprint("before-", i)
		if err := cl.Put(ctx, []byte(k), value(k)); err != nil {
			t.Fatalf("PUT before the upgrade: %v", err)
		}
	}

	// The load: GETs of the blocks written before, EXISTs, and PUTs and
	// GETs of new blocks, from four workers, until the upgrade is done.
	var (
		stop               atomic.Bool
		ops, misses, wrong atomic.Int64
		errMu              sync.Mutex
		errs               []string
		wg                 sync.WaitGroup
	)
	fail := func(what string, err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf("%s at %s: %v", what, time.Now().Format("15:04:05.000"), err))
		}
	}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			buf := make([]byte, 8192)
			for n := 0; !stop.Load(); n++ {
				ops.Add(1)
				switch op := rng.IntN(4); op {
				case 0, 1:
					k := fmt.Sprint("before-", rng.IntN(before))
					got, _, err := cl.Get(ctx, []byte(k), buf)
					switch {
					case errors.Is(err, wire.StatusNotFound):
						misses.Add(1)
					case err != nil:
						fail("GET "+k, err)
					case !bytes.Equal(buf[:got], value(k)):
						wrong.Add(1)
					}
				case 2:
					k := fmt.Sprintf("during-%d-%d", w, n)
					if err := cl.Put(ctx, []byte(k), value(k)); err != nil {
						fail("PUT "+k, err)
					}
				case 3:
					k := fmt.Sprint("before-", rng.IntN(before))
					if _, err := cl.Exist(ctx, []byte(k)); errors.Is(err, wire.StatusNotFound) {
						misses.Add(1)
					} else if err != nil {
						fail("EXIST "+k, err)
					}
				}
			}
		}()
	}
	time.Sleep(time.Second) // load on the whole cluster first
	for _, id := range ids {
		n := nodes[id]
		start := time.Now()
		n.proc.stop(t) // SIGTERM: leave the MDS, drain, flush, exit 0
		if !strings.Contains(n.proc.logs.String(), "left the MDS; serving while clients move off") {
			t.Fatalf("%s did not drain before stopping:\n%s", id, n.proc.logs.String())
		}
		n.proc = startChild(t, id+"-new", "http://"+n.http+"/readyz", n.args...)
		waitFor(t, id+" back in the client's ring", 30*time.Second, func() bool { return len(cl.Members()) == 3 })
		t.Logf("%s replaced in %v", id, time.Since(start).Round(10*time.Millisecond))
		time.Sleep(500 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("load during the upgrade: %d calls, %d misses, %d errors", ops.Load(), misses.Load(), len(errs))
	if len(errs) > 0 || wrong.Load() > 0 {
		t.Fatalf("the load saw %d wrong values and errors:\n%s", wrong.Load(), strings.Join(errs, "\n"))
	}
	for i := range before {
		k := fmt.Sprint("before-", i)
		got, err := cl.GetAuto(ctx, []byte(k))
		if err != nil || !bytes.Equal(got, value(k)) {
			t.Fatalf("block %s written before the upgrade, after it: %v", k, err)
		}
	}
	for _, id := range ids {
		nodes[id].proc.signal(t, syscall.SIGTERM)
	}
}

// TestDrainWithTheMDSDown: a node stopped while its MDS is gone cannot
// leave it; it says so, skips the wait for clients that would not hear
// of its leaving anyway, and still stops cleanly (its lease lapses at the
// MDS when it returns).
func TestDrainWithTheMDSDown(t *testing.T) {
	dir := t.TempDir()
	mdsAddr, mdsHTTP := freePort(t), freePort(t)
	mds := startChild(t, "mds", "http://"+mdsHTTP+"/readyz", "mds", "--listen", mdsAddr, "--http-listen", mdsHTTP,
		"--db-path", filepath.Join(dir, "mds.db"))
	addr, httpAddr := freePort(t), freePort(t)
	node := startChild(t, "node", "http://"+httpAddr+"/readyz", "server", "--listen", addr, "--http-listen", httpAddr, "--id", "n1",
		"--disks", filepath.Join(dir, "d0"), "--disk-capacity-bytes", "256MiB", "--mds", mdsAddr)
	waitFor(t, "the node registered", 30*time.Second, func() bool { return len(mdsMembers(t, mdsHTTP)) == 1 })
	mds.signal(t, syscall.SIGKILL)
	start := time.Now()
	node.stop(t)
	logs := node.logs.String()
	t.Logf("stopped %v after SIGTERM with the MDS down", time.Since(start).Round(10*time.Millisecond))
	if !strings.Contains(logs, "could not deregister from the MDS") || !strings.Contains(logs, "stopped cleanly") {
		t.Fatalf("the node's log:\n%s", logs)
	}
	if strings.Contains(logs, "serving while clients move off") {
		t.Fatal("the node waited for clients to move off although it could not tell them to")
	}
}
