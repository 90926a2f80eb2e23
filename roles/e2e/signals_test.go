package e2e

import (
	"bytes"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
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

// TestServerProcessSecondSignalSaid: a second SIGTERM or SIGINT during a
// drain is logged (why the process is still there, and that SIGKILL would
// end it) instead of swallowed, and the drain goes on to a clean stop.
func TestServerProcessSecondSignalSaid(t *testing.T) {
	addr, httpAddr := freePort(t), freePort(t)
	srv := startServer(t, addr, httpAddr, filepath.Join(t.TempDir(), "d0"))
	// A PUT whose body is still arriving keeps the drain waiting.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var k wire.BlockKey
	k.ID[0] = 1
	body := bytes.Repeat([]byte{1}, 4096)
	if _, err := c.Write(append(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: uint64(len(body))}), body[:100]...)); err != nil {
		t.Fatal(err)
	}
	// Wait until the node has read the header: the request is in flight.
	waitFor(t, "the PUT in flight", 10*time.Second, func() bool {
		_, out, _ := dfkv(t, nil, "ctl", "--members", addr, "stats", "--json")
		return bytes.Contains(out, []byte(`"PUT": 1,`)) // ops are sorted: REMOVE follows
	})
	_ = srv.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the shutdown line", 10*time.Second, func() bool { return strings.Contains(srv.logs.String(), "shutdown requested") })
	_ = srv.cmd.Process.Signal(syscall.SIGINT)
	waitFor(t, "the second signal's line", 10*time.Second, func() bool { return strings.Contains(srv.logs.String(), "already shutting down") })
	if _, err := c.Write(body[100:]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the node did not stop after the drained PUT:\n%s", srv.logs.String())
	}
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(srv.logs.String(), "stopped cleanly") {
		t.Fatalf("exit %d after the drain:\n%s", code, srv.logs.String())
	}
}
