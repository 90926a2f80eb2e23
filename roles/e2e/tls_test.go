package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/testcerts"
)

// TestTLSClusterProcesses: an MDS and a node process serving TLS on
// every port, the node's data port mutual (clients need a certificate of
// the CA), the node registering with the MDS over TLS, and tools reaching
// both with --tls. A tool without TLS, or without a client certificate,
// is refused with a message that says why; /readyz answers over HTTPS;
// a renewed certificate is served after SIGHUP without a restart.
func TestTLSClusterProcesses(t *testing.T) {
	ca := testcerts.NewCA(t, "cluster")
	srv := ca.Server(t, "server")
	ops := ca.Client(t, "ops", "ops")
	dir := t.TempDir()
	mdsAddr, mdsHTTP := freePort(t), freePort(t)
	startChild(t, "mds", "https://"+mdsHTTP+"/readyz", "mds", "--listen", mdsAddr, "--http-listen", mdsHTTP,
		"--db-path", filepath.Join(dir, "mds.db"), "--tls-cert", srv.Cert, "--tls-key", srv.Key, "--http-tls")
	addr, httpAddr := freePort(t), freePort(t)
	node := startChild(t, "node", "https://"+httpAddr+"/readyz", "server", "--listen", addr, "--http-listen", httpAddr,
		"--disks", filepath.Join(dir, "d0"), "--disk-capacity-bytes", "1GiB", "--id", "n1",
		"--tls-cert", srv.Cert, "--tls-key", srv.Key, "--tls-client-ca", ca.File, "--http-tls",
		"--mds", mdsAddr, "--mds-tls-ca", ca.File)
	// The HTTP listener (and so /readyz) is up before the node logs its
	// start line, and the log reaches us through a pipe: wait for it.
	waitFor(t, "the start line saying how the node serves TLS", 10*time.Second, func() bool {
		return strings.Contains(node.logs.String(), `tls="on, TLS 1.3+, client certificates required, HTTP too"`)
	})
	tlsFlags := []string{"--tls", "--tls-ca", ca.File, "--tls-cert", ops.Cert, "--tls-key", ops.Key}
	waitFor(t, "the node registered over TLS", 30*time.Second, func() bool {
		code, out, _ := dfkv(t, nil, append(append([]string{"ctl", "--mds", mdsAddr}, tlsFlags...), "members")...)
		return code == 0 && strings.Contains(string(out), "n1")
	})
	ctl := func(stdin []byte, args ...string) (int, []byte, string) {
		t.Helper()
		return dfkv(t, stdin, append(append([]string{"ctl", "--mds", mdsAddr}, tlsFlags...), args...)...)
	}
	for i := range 3 {
		if code, _, errs := ctl([]byte(fmt.Sprint("value ", i)), "put", fmt.Sprint("k", i), "-"); code != 0 {
			t.Fatalf("PUT over TLS (exit %d): %s", code, errs)
		}
	}
	if code, out, errs := ctl(nil, "get", "k2", "-"); code != 0 || string(out) != "value 2" {
		t.Fatalf("GET over TLS (exit %d): %q %s", code, out, errs)
	}
	if code, out, errs := dfkv(t, nil, append([]string{"smoke", "--members", addr}, tlsFlags...)...); code != 0 {
		t.Fatalf("smoke over mutual TLS (exit %d):\n%s\n%s", code, out, errs)
	}
	if code, _, errs := dfkv(t, nil, "ctl", "--members", addr, "get", "k7", "-"); code == 0 || !strings.Contains(errs, "requires TLS") {
		t.Fatalf("a plaintext tool on the TLS port (exit %d): %s", code, errs)
	}
	if code, _, errs := dfkv(t, nil, "ctl", "--members", addr, "--tls", "--tls-ca", ca.File, "get", "k7", "-"); code == 0 || !strings.Contains(errs, "certificate") {
		t.Fatalf("a tool without a client certificate under mutual TLS (exit %d): %s", code, errs)
	}

	// Renewal: the files are rewritten in place and SIGHUP reloads them;
	// new connections see the new certificate.
	serial := func() string {
		pem, _ := os.ReadFile(ca.File)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: mustPair(t, ops)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	ca.Server(t, "server")
	_ = node.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the certificate reloaded", 10*time.Second, func() bool { return strings.Contains(node.logs.String(), "TLS certificate reloaded") })
	if after := serial(); after == before {
		t.Fatalf("the node still serves serial %s after the renewal", before)
	}
	if code, out, errs := ctl(nil, "get", "k1", "-"); code != 0 || string(out) != "value 1" {
		t.Fatalf("GET after the renewal (exit %d): %q %s", code, out, errs)
	}
	resp, err := probeClient.Get("https://" + httpAddr + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over HTTPS: %v %v", resp, err)
	}
	resp.Body.Close()
	node.stop(t)
}

func mustPair(t *testing.T, p testcerts.Pair) []tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return []tls.Certificate{c}
}
