package server

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/wire"
)

// These run the node's RDMA transport over rdma's in-process fake verbs
// provider: they are not hardware tests (the test machines have no RDMA
// device). What they check is the node's side: an RDMA client's
// bootstrap on the data port is handed to the transport, which serves
// leased reads out of the RAM tier and PUTs through staging; the same
// values read back over TCP.
func TestRDMAOnTheDataPort(t *testing.T) {
	fake := rdma.NewFake("fk0")
	dir := t.TempDir()
	cfg, _, err := config.LoadFrom("server", "", nil, withRAMTier(map[string][]string{
		"disk": {filepath.Join(dir, "d0")}, "disk-capacity": {"256MiB"}, "http-listen": {""}}))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{Listener: ln, RDMAProvider: fake, Ready: func(*Server) { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node stop: %v", err)
		}
		if n := fake.Registered(); n != 0 {
			t.Errorf("%d memory regions still registered after the node stopped", n)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("node did not start: %v", err)
	}
	addr := ln.Addr().String()
	rc, err := rdma.Dial(addr, rdma.ClientOptions{Provider: fake, BufferBytes: 4 << 20, OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("RDMA bootstrap on the data port: %v", err)
	}
	defer rc.Close()
	keys := []wire.BlockKey{{Tenant: 1, ID: [16]byte{1}}, {Tenant: 1, ID: [16]byte{2}}}
	vals := [][]byte{bytes.Repeat([]byte("r"), 1<<20), []byte("small")}
	errs := make([]error, 2)
	if err := rc.PutBatch(keys, vals, errs); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("PUT over RDMA: %v %v", err, errs)
	}
	dst := [][]byte{make([]byte, 1<<20), make([]byte, 5)}
	res := make([]rdma.GetResult, 2)
	if err := rc.GetBatch([]rdma.GetItem{{Key: keys[0]}, {Key: keys[1]}}, dst, res); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		if res[i].Err != nil || !bytes.Equal(dst[i][:res[i].N], vals[i]) {
			t.Fatalf("GET %d over RDMA: %+v", i, res[i])
		}
	}
	if st := nodeStats(t, addr).RDMA; st == nil || st.Conns != 1 || st.Leases.Granted < 2 {
		t.Fatalf("STATS of the RDMA transport: %+v, want one connection and its leases", st)
	}
	// The TCP port still speaks TCP, and sees what RDMA stored.
	c := dial(t, addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpGet, Key: keys[1]}, nil)
	if h, body := readResp(t, c); h.Status != wire.StatusOK || string(body) != "small" {
		t.Fatalf("GET over TCP of a value stored over RDMA: %s %q", h.Status, body)
	}
}

// A node without RDMA refuses an RDMA client's bootstrap with the reason,
// as a welcome the client reads, and keeps serving TCP.
func TestRDMARefusedByNodeWithout(t *testing.T) {
	dir := t.TempDir()
	addr, _, _ := runNode(t, map[string][]string{"disk": {dir + "/d0"}, "disk-capacity": {"256MiB"}})
	_, err := rdma.Dial(addr, rdma.ClientOptions{Provider: rdma.NewFake("fk0"), OpTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "does not serve RDMA") {
		t.Fatalf("RDMA bootstrap against a TCP-only node: %v", err)
	}
	c := dial(t, addr)
	writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
	if h, _ := readResp(t, c); h.Status != wire.StatusOK {
		t.Fatalf("PING after the refusal: %s", h.Status)
	}
}

// An RDMA session keeps its data-port connection as its control channel
// for its whole life, and its requests do not pass the connection's
// begin and end. At max_conns the node closes the connection that has
// waited longest on its client to admit a new one; a session in use must
// not be taken for it. (The fake verbs provider; not a hardware test.)
func TestRDMASessionIsNotClosedAsIdle(t *testing.T) {
	fake := rdma.NewFake("fk0")
	dir := t.TempDir()
	cfg, _, err := config.LoadFrom("server", "", nil, withRAMTier(map[string][]string{
		"disk": {filepath.Join(dir, "d0")}, "disk-capacity": {"256MiB"}, "http-listen": {""}, "max-conns": {"2"}}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{Listener: ln, RDMAProvider: fake, Ready: func(*Server) { close(ready) }})
	}()
	defer func() { cancel(); <-done }()
	<-ready
	addr := ln.Addr().String()
	rc, err := rdma.Dial(addr, rdma.ClientOptions{Provider: fake, BufferBytes: 4 << 20, OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	keys := []wire.BlockKey{{Tenant: 1, ID: [16]byte{1}}}
	vals, errs := [][]byte{[]byte("value")}, make([]error, 1)
	put := func(when string) {
		t.Helper()
		if err := rc.PutBatch(keys, vals, errs); err != nil || errs[0] != nil {
			t.Fatalf("PUT over RDMA %s: %v %v", when, err, errs)
		}
	}
	// In use for longer than a connection must wait to be cut as idle.
	for end := time.Now().Add(idleCutAfter + idleCutAfter/2); time.Now().Before(end); {
		put("in use")
		time.Sleep(20 * time.Millisecond)
	}
	c1 := dial(t, addr) // the second connection: max_conns
	defer c1.Close()
	writeReq(t, c1, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, c1)
	c2 := dial(t, addr) // a third: one must go, and it is not the session
	defer c2.Close()
	writeReq(t, c2, wire.RequestHeader{Op: wire.OpPing}, nil)
	readResp(t, c2)
	put("after the node made room for a new connection")
}
