package ctl

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// TestEmbeddedPutWithoutDiskIsNotASuccess: `dfkv ctl --embedded put`
// with no server.disks and no bucket would store the value in a RAM tier
// that the command's own exit throws away (the next `ctl --embedded get`
// misses): it is refused, or at least said, rather than reported done.
func TestEmbeddedPutWithoutDiskIsNotASuccess(t *testing.T) {
	code, out, errs := runCtl(t, "hello", "--embedded", "put", "greeting", "-")
	if code == 0 && errs == "" {
		// Show what the operator meets next.
		gcode, gout, gerrs := runCtl(t, "", "--embedded", "get", "greeting")
		t.Fatalf("ctl --embedded put without a disk: exit 0, stdout %q, no word on stderr; the next ctl --embedded get: exit %d, %q %q", out, gcode, gout, gerrs)
	}
}

// TestSilentNodeIsNotBlamedOnSharedMemory: a node on this host that
// accepts the connection and never answers (hung, or not a dfkv node)
// is reported as not answering. The client's first request to a loopback
// node is the SHM_INFO probe; its timeout must not read as the absence
// of shared memory, which would send the operator to server.shm_socket.
func TestSilentNodeIsNotBlamedOnSharedMemory(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	code, _, errs := runCtl(t, "", "--members", ln.Addr().String(), "--timeout-ms", "300", "get", "k")
	if code != 2 || strings.Contains(errs, "shared memory") {
		t.Fatalf("ctl get against a node that never answers: exit %d, stderr %q; want exit 2 saying the node did not answer, not that it lacks shared memory", code, errs)
	}
}
