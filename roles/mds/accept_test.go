package mds

import (
	"bytes"
	"context"
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

	"github.com/dfkv/dfkv/config"
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
