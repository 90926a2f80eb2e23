package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestServerProcessSharedMemory: a node process with the RAM tier and a
// shared-memory socket passes smoke over shared memory (--shm on) and over
// TCP; ctl reads over shared memory what it wrote over TCP; the socket has
// the configured mode and is gone after SIGTERM; a restart after a SIGKILL
// (which leaves the socket file behind) replaces the stale file.
func TestServerProcessSharedMemory(t *testing.T) {
	dir := t.TempDir()
	addr, httpAddr := freePort(t), freePort(t)
	sock := filepath.Join(dir, "dfkv.sock")
	args := []string{"server", "--listen", addr, "--http-listen", httpAddr, "--disks", filepath.Join(dir, "d0"),
		"--disk-capacity-bytes", "1GiB", "--ram-tier", "1", "--ram-tier-bytes", "256MiB", "--shm-socket", sock, "--shm-socket-mode", "0660"}
	srv := startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket %s: %v, mode %v; want 0660", sock, err, fi.Mode().Perm())
	}
	for _, mode := range []string{"on", "off"} {
		code, out, errs := dfkv(t, nil, "smoke", "--members", addr, "--shm", mode, "--run-id", "shm-"+mode)
		if code != 0 || !bytes.Contains(out, []byte(" 0 failed")) {
			t.Fatalf("smoke --shm %s (exit %d):\n%s\n%s", mode, code, out, errs)
		}
		// --shm on fails a call that cannot use shared memory; the
		// node's lease count says the reads took leases.
		if granted := scrapeGauge(t, httpAddr, "dfkv_lease_granted_total"); mode == "on" && granted == 0 {
			t.Fatal("smoke --shm on passed without a lease granted")
		}
	}
	val := bytes.Repeat([]byte("shared"), 100000)
	if code, out, errs := dfkv(t, val, "ctl", "--members", addr, "--shm", "off", "put", "k", "-"); code != 0 {
		t.Fatalf("ctl put: %d %s %s", code, out, errs)
	}
	code, out, errs := dfkv(t, nil, "ctl", "--members", addr, "--shm", "on", "get", "k", "-")
	if code != 0 || !bytes.Equal(out, val) {
		t.Fatalf("ctl get over shared memory: exit %d, %d bytes, %s", code, len(out), errs)
	}
	srv.stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived the node: %v", err)
	}
	srv = startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
	srv.signal(t, 9)
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("SIGKILL should leave the socket file behind: %v", err)
	}
	srv = startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
	if code, out, errs := dfkv(t, nil, "ctl", "--members", addr, "--shm", "on", "exist", "k"); code != 0 {
		t.Fatalf("after a restart over the stale socket file: exit %d %s %s", code, out, errs)
	}
	srv.stop(t)
}
