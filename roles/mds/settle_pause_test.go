package mds

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/internal/testetcd"
	"github.com/dfkv/dfkv/wire"
)

// TestEtcdPauseLongerThanTTLSettles: a backend away longer than the
// heartbeat TTL (etcd stopped, partitioned or paused) comes back without
// clients seeing the mass expiry. A 6 s pause fails the MDS's probes; a
// 2.6 s one (with mds.heartbeat_ttl_ms at its minimum, 2 s) does not,
// since a probe waits up to 3 s, yet runs out every lease: a probe that
// answered only after a quarter of the TTL counts as a return too.
func TestEtcdPauseLongerThanTTLSettles(t *testing.T) {
	// The 2.6 s pause: the one no probe fails in. (A pause that fails
	// the probes is TestMassExpirySettles's.)
	pauseAndWatch(t, 2600*time.Millisecond)
}

func pauseAndWatch(t *testing.T, pause time.Duration) {
	etcd := testetcd.Start(t)
	cfg, _, err := config.LoadFrom("mds", "", nil, map[string][]string{"etcd": {etcd.Endpoint}, "heartbeat-ttl-ms": {"2000"},
		"probe-cache-ms": {"0"}, "http-listen": {""}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	var cancel context.CancelFunc
	var done chan error
	start := func(ln net.Listener) {
		var rctx context.Context
		rctx, cancel = context.WithCancel(context.Background())
		done = make(chan error, 1)
		ready := make(chan struct{})
		go func() {
			done <- Run(rctx, cfg, Deps{Listener: ln, Logger: slog.New(slog.NewTextHandler(logs, nil)), Ready: func() { close(ready) }})
		}()
		<-ready
	}
	start(ln)
	ctx := context.Background()

	// Three nodes: heartbeat every 500 ms (a third of the TTL, less);
	// told NOT_FOUND, each registers again after its own jittered wait
	// (here 0, 0.4 and 0.8 s), as a fleet does.
	var wg sync.WaitGroup
	nodeCtx, stopNodes := context.WithCancel(context.Background())
	for i := 1; i <= 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mc := mdsClient(t, "default", addr)
			register := func() {
				for nodeCtx.Err() == nil {
					rctx, c := context.WithTimeout(nodeCtx, 2*time.Second)
					_, err := mc.Register(rctx, member(i))
					c()
					if err == nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			register()
			for nodeCtx.Err() == nil {
				hctx, c := context.WithTimeout(nodeCtx, time.Second)
				_, err := mc.Heartbeat(hctx, member(i).ID)
				c()
				if wire.StatusOf(err) == wire.StatusNotFound {
					time.Sleep(time.Duration(i-1) * 400 * time.Millisecond)
					register()
					continue
				}
				wait := 500 * time.Millisecond
				if err != nil {
					wait = 200 * time.Millisecond
				}
				select {
				case <-nodeCtx.Done():
				case <-time.After(wait):
				}
			}
		}()
	}
	defer func() {
		stopNodes()
		wg.Wait()
		cancel()
		<-done
	}()

	cli := mdsClient(t, "default", addr)
	var known uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		e, ms, _, err := cli.Members(ctx, 0)
		if err == nil && len(ms) == 3 {
			known = e
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 members never listed: %v %v", ms, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // steady heartbeats

	if err := etcd.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if err := etcd.Resume(); err != nil {
		t.Fatal(err)
	}
	// A client polling as clients do (faster, to see every list).
	minSeen, seen := 3, []string{}
	end := time.Now().Add(pause + 5*time.Second)
	for time.Now().Before(end) {
		pctx, c := context.WithTimeout(ctx, 2*time.Second)
		e, ms, changed, err := cli.Members(pctx, known)
		c()
		if err == nil && changed {
			seen = append(seen, fmt.Sprintf("%d@%d", len(ms), e))
			if len(ms) > 0 { // wire/client holds back an empty list, and keeps its epoch
				known = e
				minSeen = min(minSeen, len(ms))
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	expired := strings.Count(logs.String(), "MDS: member registered") > 3 // nodes registered again: the leases ran out
	t.Logf("lists handed to the client after the pause: %v; settle window opened: %v; etcd seen down: %v",
		seen, strings.Contains(logs.String(), "backend back"), strings.Contains(logs.String(), "etcd unreachable"))
	if !expired {
		t.Fatal("no lease ran out")
	}
	if minSeen < 3 {
		t.Fatalf("after a %v etcd pause (heartbeat TTL 2 s) the client was handed a list of %d of the 3 members (lists: %v)", pause, minSeen, seen)
	}
}
