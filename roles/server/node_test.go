package server

import (
	"context"
	"net"
	"testing"

	"github.com/dfkv/dfkv/config"
)

// runNode runs Run in-process with flags and returns its addresses and a
// stop function reporting Run's error.
func runNode(t testing.TB, flags map[string][]string) (addr, httpAddr string, stop func() error) {
	t.Helper()
	return runNodeAt(t, flags, "127.0.0.1:0")
}

// runNodeAt is runNode on a given data-port address, so a test can stop a
// node and start it again where its clients know it.
func runNodeAt(t testing.TB, flags map[string][]string, at string) (addr, httpAddr string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	hln, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg, _, err := config.LoadFrom("server", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- Run(ctx, cfg, Deps{Listener: ln, HTTPListener: hln, Ready: func(*Server) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("node did not start: %v", err)
	}
	var stopped bool
	var stopErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			stopErr = <-done
		}
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), hln.Addr().String(), stop
}
