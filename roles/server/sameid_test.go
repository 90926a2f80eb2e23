package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// gateDialer dials TCP while open; closed, every dial fails at once (the
// node cut off from the MDS). It counts the dials that succeeded.
type gateDialer struct {
	closed atomic.Bool
	dials  atomic.Int64
}

func (g *gateDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.closed.Load() {
		return nil, errors.New("cut off from the MDS")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err == nil {
		g.dials.Add(1)
	}
	return c, err
}

// TestStopDoesNotRemoveAnotherNodesRegistration: node A (id n1) is cut
// off from the MDS long enough for its registration to go; node B,
// misconfigured with the same id, registers n1 at its own address (the
// MDS refuses it only while A's registration is live). When A stops it
// deregisters n1 with its own address, and the MDS, which lists n1 at
// B's, leaves B listed.
func TestStopDoesNotRemoveAnotherNodesRegistration(t *testing.T) {
	mdsAddr := startMDS(t)
	gate := &gateDialer{}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hln, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{
		"disk": {filepath.Join(t.TempDir(), "d0")}, "disk-capacity": {"256MiB"}, "mds": {mdsAddr}, "id": {"n1"}, "drain-ms": {"0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{Listener: inner, HTTPListener: hln, Dialer: gate}) }()
	defer func() { cancel(); <-done }()

	mc, err := client.NewMDSClient([]string{mdsAddr}, "default", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	listed := func() map[string]string {
		_, ms, _, err := mc.Members(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range ms {
			out[m.ID] = m.Addr
		}
		return out
	}
	aAddr := inner.Addr().String()
	waitUntil(t, 15*time.Second, func() error {
		if got := listed()["n1"]; got != aAddr {
			return fmt.Errorf("n1 listed at %q, want A at %s", got, aAddr)
		}
		return nil
	})
	// A is cut off; its registration goes (as it would after the TTL);
	// B registers the same id at its own address and keeps heartbeating.
	gate.closed.Store(true)
	if err := mc.Deregister(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	bAddr := "127.0.0.1:1"
	info := wireMember("n1", bAddr)
	if _, err := mc.Register(context.Background(), info); err != nil {
		t.Fatalf("B's registration: %v", err)
	}
	bctx, bstop := context.WithCancel(context.Background())
	defer bstop()
	go func() {
		for bctx.Err() == nil {
			_, _ = mc.Heartbeat(bctx, "n1")
			select {
			case <-bctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	// A reaches the MDS again; wait for two of its calls to have gone
	// through (at least one answered).
	from := gate.dials.Load()
	gate.closed.Store(false)
	waitUntil(t, 15*time.Second, func() error {
		if n := gate.dials.Load() - from; n < 3 {
			return fmt.Errorf("A made %d MDS calls since it was let through", n)
		}
		return nil
	})
	if got := listed()["n1"]; got != bAddr {
		t.Fatalf("n1 listed at %q, want B at %s", got, bAddr)
	}
	// A stops: it must not take B's registration with it.
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	if got := listed()["n1"]; got != bAddr {
		t.Fatalf("after A's stop n1 is listed at %q, want B's %s still listed: A's DEREGISTER removed another node's registration", got, bAddr)
	}
}

func wireMember(id, addr string) wire.MemberInfo {
	return wire.MemberInfo{ID: id, Addr: addr, Weight: 1}
}
