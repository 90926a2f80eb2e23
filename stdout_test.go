package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/server"
)

// startNode runs a file-engine node in-process (as roles/internal/roletest
// does, which this package may not import) and returns its address.
func startNode(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.LoadFrom("server", "", nil, map[string][]string{"disks": {filepath.Join(t.TempDir(), "d0")},
		"disk-capacity-bytes": {"256MiB"}, "http-listen": {""}, "store-engine": {"file"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, ready := make(chan error, 1), make(chan struct{})
	go func() {
		done <- server.Run(ctx, cfg, server.Deps{Listener: ln, Ready: func(*server.Server) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// fullWriter fails every write, as stdout on a full disk (> /dev/full)
// or a closed stdout (>&-) does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestStdoutWriteFailure: a ctl verb whose output cannot be written has
// failed: it exits 2, not 0 and not exist's 1 ("not stored").
func TestStdoutWriteFailure(t *testing.T) {
	addr := startNode(t)
	src := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(src, []byte("value"), 0o600); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	if code := run([]string{"dfkv", "ctl", "--members", addr, "put", "k", src}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("put: %d %s", code, errb.String())
	}
	failed := false
	for _, verb := range [][]string{{"get", "k"}, {"exist", "k"}, {"stats"}, {"stats", "--json"}, {"info"}, {"members"}} {
		var errs bytes.Buffer
		args := append([]string{"dfkv", "ctl", "--members", addr}, verb...)
		code := run(args, fullWriter{}, &errs)
		t.Logf("ctl %q with a failing stdout: exit %d, stderr %q", verb, code, errs.String())
		if code != 2 {
			failed = true
		}
	}
	if failed {
		t.Fatal("a ctl verb whose stdout could not be written did not exit 2 (see above)")
	}
}
