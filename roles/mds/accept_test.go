package mds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// emfileListener fails its first fails Accepts as a listener out of file
// descriptors does, then accepts.
type emfileListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestControlListenerOutlivesEMFILE: accept failing for lack of file
// descriptors does not end the MDS's control listener (before, it stopped
// accepting for good, and every node's next heartbeat went unanswered): it
// waits, accepts again, serves, and says so in one line when the trouble
// starts and one when it ends, counted in dfkv_mds_accept_errors_total.
func TestControlListenerOutlivesEMFILE(t *testing.T) {
	cfg, _, err := config.LoadFrom("mds", "", nil, map[string][]string{"db": {filepath.Join(t.TempDir(), "m.db")}})
	if err != nil {
		t.Fatal(err)
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &emfileListener{Listener: real, fails: 3}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- Run(ctx, cfg, Deps{Listener: ln, HTTPListener: hln, Logger: slog.New(slog.NewTextHandler(logs, nil)), Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("mds did not start: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mds: %v", err)
		}
	}()

	mc := mdsClient(t, "default", real.Addr().String())
	if _, err := mc.Register(context.Background(), member(1)); err != nil {
		t.Fatalf("register after three EMFILEs from accept: %v", err)
	}
	resp, err := http.Get("http://" + hln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "dfkv_mds_accept_errors_total 3\n") {
		t.Fatalf("metrics do not count the three failed accepts:\n%s", body)
	}
	out := logs.String()
	if strings.Count(out, "accept failed") != 1 || strings.Count(out, "accepting again") != 1 || !strings.Contains(out, "failed_accepts=3") {
		t.Fatalf("want one line as accept starts failing and one as it recovers, log:\n%s", out)
	}
}

// controlCall sends one control request on c and returns its status,
// reading the reply's body past.
func controlCall(t *testing.T, c net.Conn, op wire.Op, req wire.MDSRequest) wire.Status {
	t.Helper()
	body, _ := json.Marshal(req)
	if _, err := c.Write(append(wire.AppendMDSRequest(nil, op, 0, len(body)), body...)); err != nil {
		t.Fatal(err)
	}
	var prefix [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c, prefix[:]); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeMDSResponse(prefix[:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, c, int64(h.BodyLen)); err != nil {
		t.Fatal(err)
	}
	return h.Status
}

// closedByPeer reports whether the other end closed c (a read ends in
// EOF or a reset rather than waiting).
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// A request refused for its token gets its answer, and then the MDS
// closes the connection: a client without a right to the port does not
// keep a descriptor of it.
func TestRefusedControlClientIsDisconnected(t *testing.T) {
	ctrl := credMDS(t, true)
	for _, c := range []struct {
		op   wire.Op
		req  wire.MDSRequest
		want wire.Status
	}{
		{wire.OpMDSMembers, wire.MDSRequest{Group: "default"}, wire.StatusUnauthenticated},
		{wire.OpMDSRegister, wire.MDSRequest{Group: "default", Member: &wire.MemberInfo{ID: "node-3x", Addr: "127.0.0.1:7603", Weight: 1}, Token: rackAToken}, wire.StatusForbidden},
	} {
		conn, err := net.Dial("tcp", ctrl)
		if err != nil {
			t.Fatal(err)
		}
		if st := controlCall(t, conn, c.op, c.req); st != c.want {
			t.Fatalf("%s: %s, want %s", wire.MDSOpName(c.op), st, c.want)
		}
		if !closedByPeer(conn) {
			t.Fatalf("%s refused with %s: the connection stayed open", wire.MDSOpName(c.op), c.want)
		}
		conn.Close()
	}
}

// At its connection cap the control port closes the connection idle the
// longest to admit a new one: clients holding connections open without
// requests cannot lock nodes out of heartbeating.
func TestControlPortShedsTheLongestIdleAtItsCap(t *testing.T) {
	d, err := openBoltDir(filepath.Join(t.TempDir(), "mds.db"), 10*time.Second, engine.SystemClock{}, slog.New(slog.DiscardHandler), boltHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &controlServer{dir: d, ln: ln, log: slog.New(slog.DiscardHandler), ttl: 10 * time.Second, maxConns: 2}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cs.serve(ctx)
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
		deadline := time.Now().Add(10 * time.Second)
		for {
			cs.mu.Lock()
			n := len(cs.conns)
			cs.mu.Unlock()
			if n == len(idle) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections held, want %d", n, len(idle))
			}
			time.Sleep(time.Millisecond)
		}
	}
	c := mdsClient(t, "default", ln.Addr().String())
	if _, err := c.Register(ctx, member(1)); err != nil {
		t.Fatalf("a REGISTER with the port full of idle connections: %v", err)
	}
	if !closedByPeer(idle[0]) {
		t.Fatal("the longest idle connection was not closed")
	}
	if cs.shedConns.Load() == 0 {
		t.Fatal("no shed connection counted")
	}
}
