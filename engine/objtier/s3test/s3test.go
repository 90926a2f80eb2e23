// Package s3test starts a real S3 server for tests: versitygw (a Go S3
// gateway over a local directory) as a child process on a free loopback
// port, its objects in a temporary directory, stopped by PID when the test
// ends. When versitygw is not installed the test is skipped with the
// command that installs it, except under CI (CI=true), where a missing
// server is a failure: scripts/ci-deps.sh installs it.
package s3test

import (
	"context"
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

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Version is the versitygw release the tests run against.
const Version = "v1.8.0"

// InstallHint is the command that installs it.
const InstallHint = "go install github.com/versity/versitygw/cmd/versitygw@" + Version

// Server is one running versitygw with one bucket.
type Server struct {
	Endpoint  string // host:port
	Bucket    string
	AccessKey string
	SecretKey string
	Root      string // the directory holding the bucket's files
	bin       string
	cmd       *exec.Cmd
	done      chan struct{}
	logPath   string
}

// Binary finds versitygw: on PATH, else in $GOBIN or $GOPATH/bin (where
// go install puts it), else "".
func Binary() string {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if home, err := os.UserHomeDir(); err == nil {
			gopath = filepath.Join(home, "go")
		}
	}
	for _, p := range filepath.SplitList(gopath) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// Start starts versitygw with bucket "dfkv-test" for t, or skips t.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("versitygw is not installed; scripts/ci-deps.sh should have run: " + InstallHint)
		}
		t.Skip("versitygw is not installed (" + InstallHint + "); skipping the tests that need a real S3 server")
	}
	dir := t.TempDir()
	s := &Server{
		Bucket: "dfkv-test", AccessKey: "dfkvtestkey", SecretKey: "dfkv-test-secret-key",
		Root: filepath.Join(dir, "root"), bin: bin, logPath: filepath.Join(dir, "versitygw.log"),
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	// A port chosen free can be taken before versitygw binds it (other
	// test packages start servers meanwhile): it then exits at once
	// saying so, and a new port is chosen.
	for attempt := 1; ; attempt++ {
		s.Endpoint = PickAddr(t)
		err := s.startErr()
		if err == nil {
			break
		}
		if attempt == 5 || !strings.Contains(s.Log(), "address already in use") {
			t.Fatal(err)
		}
		_ = os.Remove(s.logPath)
	}
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("create bucket %s on versitygw: %v; log:\n%s", s.Bucket, err, s.Log())
	}
	return s
}

// PickAddr chooses the loopback address the server listens on. By default
// the kernel chooses (port 0); a test package whose tests run beside other
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

// startErr starts versitygw on s.Endpoint and waits until it answers.
func (s *Server) startErr() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// --keep-alive: versitygw closes every connection after one response
	// unless told otherwise, which no production S3 service does; with it,
	// clients pay one dial per connection rather than one per request.
	s.cmd = exec.Command(s.bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", s.Endpoint, "--keep-alive", "--quiet", "posix", s.Root)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %v", err)
	}
	s.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Any HTTP answer (403 to an unsigned request) means it serves.
		resp, err := http.Get("http://" + s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("versitygw exited at start; log:\n%s", s.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw not answering after 20s; log:\n%s", s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a plain minio-go client of the server.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Env is the environment a dfkv process needs to use the server.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey}
}

// Stop stops the server (SIGTERM, then SIGKILL after 3 s: a graceful
// versitygw waits for its clients' kept-alive connections) and waits for
// it.
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
		case <-time.After(3 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
}

// Restart starts the server again on the same port and directory.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Log returns what the server wrote.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return strings.TrimSpace(string(b))
}

// String names the server.
func (s *Server) String() string { return fmt.Sprintf("versitygw at %s", s.Endpoint) }

// CPUTime is the CPU time (user and system) the server has used so far,
// read from /proc: benchmarks on a small machine report it to tell the
// S3 server's share of the cores from the client's.
func (s *Server) CPUTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}
