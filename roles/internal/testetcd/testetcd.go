// Package testetcd starts a real etcd server for tests: a child process on
// free loopback ports with its data in a temporary directory, stopped by
// PID when the test ends. When no etcd binary is installed the test is
// skipped with a message saying how to install one, except under CI
// (CI=true), where a missing etcd is a failure: .ci/run installs Debian's
// etcd-server package.
package testetcd

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one running etcd.
type Server struct {
	Endpoint string // host:port of the client URL
	dir      string
	peer     string
	bin      string
	cmd      *exec.Cmd
	done     chan struct{}
	log      *os.File
}

// Start starts etcd for t, or skips t when etcd is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("etcd is not installed; .ci/run should have installed Debian's etcd-server")
		}
		t.Skip("etcd is not installed (apt-get install etcd-server); skipping the tests that need a real etcd")
	}
	s := &Server{bin: bin, dir: t.TempDir()}
	t.Cleanup(func() { s.Stop() })
	// A port chosen free can be taken before etcd binds it (other test
	// packages start servers meanwhile): etcd then exits at once saying
	// so, and new ports are chosen.
	for attempt := 1; ; attempt++ {
		s.Endpoint, s.peer = PickAddr(t), PickAddr(t)
		err := s.startErr()
		if err == nil {
			return s
		}
		if attempt == 5 || !strings.Contains(s.Log(), "address already in use") {
			t.Fatal(err)
		}
		_ = os.RemoveAll(filepath.Join(s.dir, "data"))
		_ = os.Remove(filepath.Join(s.dir, "etcd.log"))
	}
}

// PickAddr chooses the loopback addresses etcd listens on. By default the
// kernel chooses (port 0); a test package whose tests run beside other
// packages' (roles/e2e) sets it to choose ports no other test takes.
var PickAddr = freeAddr

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	if err := s.startErr(); err != nil {
		t.Fatal(err)
	}
}

// startErr starts etcd on s's ports and waits until it is healthy.
func (s *Server) startErr() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "etcd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	s.log = logf
	s.cmd = exec.Command(s.bin,
		"--name", "dfkv-test",
		"--data-dir", filepath.Join(s.dir, "data"),
		"--listen-client-urls", "http://"+s.Endpoint,
		"--advertise-client-urls", "http://"+s.Endpoint,
		"--listen-peer-urls", "http://"+s.peer,
		"--initial-advertise-peer-urls", "http://"+s.peer,
		"--initial-cluster", "dfkv-test=http://"+s.peer,
		"--log-level", "warn",
	)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start etcd: %v", err)
	}
	s.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.Endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-s.done:
			s.closeLog()
			return fmt.Errorf("etcd exited at start; log:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd not healthy after 30s; log:\n%s", s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops etcd (SIGTERM, then SIGKILL) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.closeLog()
}

func (s *Server) closeLog() {
	if s.log != nil {
		_ = s.log.Close()
		s.log = nil
	}
}

// Restart starts etcd again on the same ports and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Pause stops etcd in place (SIGSTOP), as a hung or paused VM would:
// connections stay open and nothing answers. Resume continues it.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused etcd (SIGCONT).
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Log returns what etcd wrote.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "etcd.log"))
	return strings.TrimSpace(string(b))
}

// String is the endpoint.
func (s *Server) String() string { return fmt.Sprintf("etcd at %s", s.Endpoint) }
