package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// crashValue is the value PUT under key id in TestServerProcessSIGKILLUnderLoad:
// its size and bytes both follow from the key, so any other value
// (another key's, a torn one) shows.
func crashValue(id int) []byte {
	n := 1 + (id*7919)%(32<<10)
	v := make([]byte, n)
	x := uint64(id)*0x9e3779b97f4a7c15 + 1
	for i := range v {
		if i%8 == 0 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		v[i] = byte(x >> (8 * (i % 8)))
	}
	return v
}

// TestServerProcessSIGKILLUnderLoad: a slab node killed with SIGKILL while
// clients PUT, GET and REMOVE comes back with everything it acknowledged:
// after each restart every acknowledged PUT (of every round so far) is
// served byte-exact, every acknowledged REMOVE stays removed, and nothing
// is served with bytes other than its own. The node is killed
// DFKV_TEST_SIGKILLS times (3 by default), each time under load; each
// restart checks the round just killed, the last one every round.
func TestServerProcessSIGKILLUnderLoad(t *testing.T) {
	kills := 3
	if v := os.Getenv("DFKV_TEST_SIGKILLS"); v != "" {
		kills, _ = strconv.Atoi(v)
	}
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	args := []string{"server", "--listen", addr, "--http-listen", httpAddr, "--disks", filepath.Join(dir, "d0"), "--disk-capacity-bytes", "2GiB"}
	ready := "http://" + httpAddr + "/readyz"
	// A client per node process: one that saw the kill backs off from
	// the address for a while.
	open := func() *client.Client {
		cl, err := client.Open(client.Options{Namespace: []byte("sigkill-load"), Members: []string{addr}, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	keyOf := func(id int) []byte { return []byte("block-" + strconv.Itoa(id)) }

	var mu sync.Mutex
	state := map[int]ackedOp{} // acknowledged operations, by key id
	var next atomic.Int64
	var early, total int
	for round := range kills {
		srv := startChild(t, "server", ready, args...)
		cl := open()
		if round > 0 {
			checkAcked(t, cl, keyOf, state, round, round-1)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		start := time.Now()
		var n atomic.Int64
		for w := range 4 {
			wg.Go(func() {
				dst := make([]byte, 32<<10)
				for i := 0; ctx.Err() == nil; i++ {
					if n.Load() >= 3000 {
						// Enough to check: keep the load on, slower.
						time.Sleep(2 * time.Millisecond)
					}
					id := int(next.Add(1))
					if err := cl.Put(ctx, keyOf(id), crashValue(id)); err != nil {
						continue // the kill, or a PUT cut by it: not acknowledged
					}
					mu.Lock()
					state[id] = ackedOp{at: time.Now(), round: round}
					mu.Unlock()
					n.Add(1)
					if i%5 == 4 { // remove one written earlier
						victim := id - 7*(w+1)
						mu.Lock()
						a, ok := state[victim]
						mu.Unlock()
						if ok && !a.removed && !a.unsure {
							err := cl.Remove(ctx, keyOf(victim))
							mu.Lock()
							if err == nil || wire.StatusOf(err) == wire.StatusNotFound { // NOT_FOUND: another worker removed it
								state[victim] = ackedOp{at: time.Now(), round: round, removed: true}
							} else {
								// Cut by the kill: it may or may not
								// have happened.
								a.unsure = true
								state[victim] = a
							}
							mu.Unlock()
						}
					}
					if i%3 == 0 { // and read one back
						if got, _, err := cl.Get(ctx, keyOf(id), dst); err == nil && !bytes.Equal(dst[:got], crashValue(id)) {
							t.Errorf("GET of block %d under load: wrong bytes", id)
						}
					}
				}
			})
		}
		for n.Load() < 1500 || time.Since(start) < 2*time.Second {
			if time.Since(start) > 2*time.Minute {
				cancel()
				wg.Wait()
				t.Fatalf("only %d blocks acknowledged in %v: the node stalled under load", n.Load(), time.Since(start).Round(time.Second))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if v := diskMetric(t, httpAddr, "dfkv_disk_evictions_total"); v != "0" {
			t.Fatalf("dfkv_disk_evictions_total %s: the disk is too small for this test, whose blocks must all stay", v)
		}
		kill := time.Now()
		srv.signal(t, syscall.SIGKILL)
		cancel()
		wg.Wait()
		for _, a := range state {
			if !a.removed && a.round == round {
				total++
				if a.at.Before(kill.Add(-time.Second)) {
					early++
				}
			}
		}
	}
	srv := startChild(t, "server", ready, args...)
	defer srv.stop(t)
	checkAcked(t, open(), keyOf, state, kills, -1)
	t.Logf("%d SIGKILLs under load: all %d blocks acknowledged before their kill (%d of them at least 1 s before) served byte-exact after every later restart", kills, total, early)
	if v := diskMetric(t, httpAddr, "dfkv_disk_checksum_failures_total"); v != "0" {
		t.Fatalf("dfkv_disk_checksum_failures_total %s after the restarts, want 0", v)
	}
}

// ackedOp is the last acknowledged operation on a key: a PUT, or a REMOVE
// (removed); unsure marks a REMOVE cut by the kill, after which the key may
// be either there with its bytes or not.
type ackedOp struct {
	at      time.Time
	round   int
	removed bool
	unsure  bool
}

// checkAcked checks a restarted node against every acknowledged operation
// of round only (all rounds: -1), four GETs at a time.
func checkAcked(t *testing.T, cl *client.Client, keyOf func(int) []byte, state map[int]ackedOp, kill, round int) {
	t.Helper()
	ids := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			dst := make([]byte, 32<<10)
			for id := range ids {
				a := state[id]
				got, _, err := cl.Get(context.Background(), keyOf(id), dst)
				switch {
				case a.removed:
					if wire.StatusOf(err) != wire.StatusNotFound {
						t.Errorf("after kill %d: block %d was removed (acknowledged) but answers %v", kill, id, err)
					}
				case a.unsure && wire.StatusOf(err) == wire.StatusNotFound:
				case err != nil:
					t.Errorf("after kill %d: acknowledged block %d: %v", kill, id, err)
				case !bytes.Equal(dst[:got], crashValue(id)):
					t.Errorf("after kill %d: acknowledged block %d: wrong bytes", kill, id)
				}
			}
		})
	}
	for id, a := range state {
		if round < 0 || a.round == round {
			ids <- id
		}
	}
	close(ids)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestServerProcessSmallDisksSmokeAcrossRestarts: a node of two 256 MiB
// disks (the smallest a newcomer tries) passes `dfkv smoke` round after
// round, restarted in between by SIGTERM and by SIGKILL in turn, without
// evicting anything: its extents follow the disk size, so the smoke's
// values of 1 byte to several MiB never crowd each other out.
func TestServerProcessSmallDisksSmokeAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	args := []string{"server", "--listen", addr, "--http-listen", httpAddr,
		"--disks", filepath.Join(dir, "d0"), "--disks", filepath.Join(dir, "d1"), "--disk-capacity-bytes", "256MiB"}
	for round := range 4 {
		srv := startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
		code, out, errs := dfkv(t, nil, "smoke", "--members", addr)
		if code != 0 || !bytes.Contains(out, []byte(" 0 failed")) {
			t.Fatalf("round %d: smoke exit %d:\n%s\n%s", round, code, out, errs)
		}
		for _, d := range []string{"d0", "d1"} {
			if v := scrapeSample(t, httpAddr, `dfkv_disk_evictions_total{disk="`+filepath.Join(dir, d)+`"`); v != "0" {
				t.Fatalf("round %d: disk %s evicted %s values", round, d, v)
			}
		}
		if round%2 == 0 {
			srv.stop(t)
		} else {
			srv.signal(t, syscall.SIGKILL)
		}
	}
}
