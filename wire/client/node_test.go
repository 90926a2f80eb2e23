package client_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/server"
)

// runNode starts a real cache node in this process with a RAM tier and
// the extra flags, and returns its data address; it stops with the test.
func runNode(t *testing.T, deps server.Deps, extra map[string][]string) string {
	t.Helper()
	dir := t.TempDir()
	flags := map[string][]string{"disks": {filepath.Join(dir, "d0")}, "disk-capacity-bytes": {"256MiB"}, "ram-tier": {"1"},
		"ram-tier-bytes": {"128MiB"}, "http-listen": {""}}
	for k, v := range extra {
		flags[k] = v
	}
	cfg, _, err := config.LoadFrom("server", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deps.Listener = ln
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	deps.Ready = func(*server.Server) { close(ready) }
	go func() { done <- server.Run(ctx, cfg, deps) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("node did not start: %v", err)
	}
	return ln.Addr().String()
}
