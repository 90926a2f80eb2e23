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
	"github.com/dfkv/dfkv/wire/client"
)

// failingListener accepts normally until broken is set, then fails every
// Accept with a non-transient error (as a listener whose socket was
// closed under it, or EBADF/EINVAL, does).
type failingListener struct {
	net.Listener
	broken atomic.Bool
	wake   chan struct{}
}

var errListenerBroke = errors.New("listener broke (EINVAL)")

func (l *failingListener) Accept() (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Listener.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		if l.broken.Load() {
			if r.c != nil {
				r.c.Close()
			}
			return nil, errListenerBroke
		}
		return r.c, r.err
	case <-l.wake:
		return nil, errListenerBroke
	}
}

// TestAcceptFailureEndsRunAndLeavesMDS: when the data port's accept fails
// for good (not a transient shortage), the node can no longer take
// connections: Run ends, reporting the error (so a supervisor restarts
// the node), and the node leaves the MDS, so clients stop routing to a
// port nobody accepts on, rather than heartbeating on until a signal.
func TestAcceptFailureEndsRunAndLeavesMDS(t *testing.T) {
	mdsAddr := startMDS(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &failingListener{Listener: inner, wake: make(chan struct{})}
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{
		"disk": {filepath.Join(t.TempDir(), "d0")}, "disk-capacity": {"256MiB"}, "mds": {mdsAddr}, "id": {"n1"}, "http-listen": {""},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Deps{Listener: ln}) }()
	defer func() {
		cancel()
		<-done
	}()
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
	waitUntil(t, 15*time.Second, func() error {
		if n := members(); n != 1 {
			return fmt.Errorf("the MDS lists %d members, want the node", n)
		}
		return nil
	})
	ln.broken.Store(true)
	close(ln.wake)
	select {
	case err := <-done:
		done <- err // for the deferred wait
		if err == nil || !errors.Is(err, errListenerBroke) {
			t.Fatalf("Run after the accept failure: %v, want the accept error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("Run did not return after its data port failed for good (the node still lists itself at the MDS: %d members)", members())
	}
	if n := members(); n != 0 {
		t.Fatalf("after the node stopped on an accept failure the MDS still lists %d members", n)
	}
}
