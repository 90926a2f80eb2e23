package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServerProcessIgnoresSIGHUP: SIGHUP (a closed terminal, or "kill -HUP
// to reload") leaves a node serving, with a line saying it was ignored and
// why; its default action would have ended the process without a drain or
// a clean mark, so the slab disk would have come back cold. SIGTERM still
// stops it cleanly afterwards.
func TestServerProcessIgnoresSIGHUP(t *testing.T) {
	addr, httpAddr := freePort(t), freePort(t)
	srv := startServer(t, addr, httpAddr, filepath.Join(t.TempDir(), "d0"))
	_ = srv.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the SIGHUP line", 10*time.Second, func() bool { return strings.Contains(srv.logs.String(), "SIGHUP ignored") })
	select {
	case <-srv.done:
		t.Fatalf("the node exited on SIGHUP:\n%s", srv.logs.String())
	default:
	}
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz after SIGHUP: %d", resp.StatusCode)
	}
	if code, out, errs := dfkv(t, []byte("after the hangup"), "ctl", "--members", addr, "put", "hup", "-"); code != 0 {
		t.Fatalf("ctl put after SIGHUP (exit %d): %s %s", code, out, errs)
	}
	if code, out, errs := dfkv(t, nil, "ctl", "--members", addr, "get", "hup", "-"); code != 0 || string(out) != "after the hangup" {
		t.Fatalf("ctl get after SIGHUP (exit %d): %q %s", code, out, errs)
	}
	srv.stop(t)
	if strings.Contains(srv.logs.String(), "shutdown requested\" role=server signal=hangup") {
		t.Fatal("SIGHUP was taken as a shutdown request")
	}
}
