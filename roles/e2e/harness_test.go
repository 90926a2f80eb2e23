package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/objtier/s3test"
	"github.com/dfkv/dfkv/roles/internal/testetcd"
)

// binPath is the dfkv binary built once for the multi-process tests.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dfkv-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "dfkv")
	testetcd.PickAddr, s3test.PickAddr = freePort, freePort
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	// By import path: the tests run in this package's directory.
	cmd := exec.Command("go", append(args, "github.com/dfkv/dfkv")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dfkv for the multi-process tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// child is one dfkv process a test started.
type child struct {
	name string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// syncBuffer is the log of a running child: os/exec writes it from its own
// goroutine while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startChild starts `dfkv args...` and waits until readyURL answers 200.
func startChild(t *testing.T, name, readyURL string, args ...string) *child {
	t.Helper()
	return startChildCmd(t, name, readyURL, exec.Command(binPath, args...))
}

// startChildCmd starts cmd (a dfkv process, perhaps through a shell that
// sets its limits first) and waits until readyURL answers 200. cmd.Env,
// when set, is added to the caller's environment without its DFKV_*.
func startChildCmd(t *testing.T, name, readyURL string, cmd *exec.Cmd) *child {
	t.Helper()
	cmd.Env = append(cleanEnv(), cmd.Env...) // what the caller set wins
	c := &child{name: name, cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.logs, c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, c.logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := probeClient.Get(readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return c
			}
		}
		select {
		case <-c.done:
			t.Fatalf("%s exited before it was ready:\n%s", name, c.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60s:\n%s", name, c.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probeClient polls readiness as a kubelet does: over HTTPS it does not
// verify the certificate.
var probeClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func (c *child) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit on %v", c.name, sig)
	}
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// cleanEnv is the environment without DFKV_* settings of the caller.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DFKV_") {
			env = append(env, kv)
		}
	}
	return env
}

// Ports for the processes these tests start come from a band below the
// kernel's ephemeral range (32768 and up), not from port 0: scripts/test.sh
// runs this package beside other packages' tests and the contrib tests,
// whose listeners and connections the kernel gives ports of that range,
// and a port chosen by binding port 0 and closing it could be taken before
// the child listens on it. The contrib tests choose from 30000-32767, the
// benchmark scripts from 10000-19999.
const portBandLow, portBandHigh = 20000, 30000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // never handed out twice: a child may restart on its port
)

// freePort returns a loopback address on a port of the band that nothing
// listens on and this process has not handed out before.
func freePort(t testing.TB) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := portBandLow + rand.IntN(portBandHigh-portBandLow)
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[port] = true
		return ln.Addr().String()
	}
	t.Fatalf("no free loopback port in %d-%d", portBandLow, portBandHigh-1)
	return ""
}

// startServer starts `dfkv server` on addr with its HTTP on httpAddr and
// the given disks (1 GiB each) as a child process, ready to serve.
func startServer(t *testing.T, addr, httpAddr string, disks ...string) *child {
	t.Helper()
	args := []string{"server", "--listen", addr, "--http-listen", httpAddr, "--disk-capacity-bytes", "1GiB"}
	for _, d := range disks {
		args = append(args, "--disks", d)
	}
	return startChild(t, "server", "http://"+httpAddr+"/readyz", args...)
}

// stop sends SIGTERM and expects a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.signal(t, syscall.SIGTERM)
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM:\n%s", c.name, code, c.logs.String())
	}
}

// dfkv runs the binary with args and stdin, returning exit code and output.
func dfkv(t *testing.T, stdin []byte, args ...string) (int, []byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = cleanEnv()
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode(), out.Bytes(), errb.String()
}
