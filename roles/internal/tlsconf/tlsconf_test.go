package tlsconf

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/dfkv/dfkv/roles/internal/testcerts"
)

// handshake serves one TLS connection with cfg on loopback and returns
// the serial number of the certificate the client saw, or the client's
// handshake error.
func handshake(t *testing.T, cfg *tls.Config, client *tls.Config) (string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc := tls.Server(c, cfg)
		_ = tc.Handshake()
		_, _ = tc.Read(make([]byte, 1)) // until the client closes
		tc.Close()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestServerReloadsItsCertificate: a certificate rewritten in place is
// served after a reload; a pair that does not load keeps the old one and
// is logged once; mutual TLS refuses a client without a certificate.
func TestServerReloadsItsCertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "a")
	pair := ca.Server(t, "node")
	var logs bytes.Buffer
	s, err := NewServer(ServerFiles{Cert: pair.Cert, Key: pair.Key, Setting: "server.tls_cert"}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Client(ClientFiles{CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	first, err := handshake(t, s.Config(), cl)
	if err != nil {
		t.Fatal(err)
	}
	ca.Server(t, "node") // renewed in place
	s.Reload()
	second, err := handshake(t, s.Config(), cl)
	if err != nil || second == first {
		t.Fatalf("after the renewal the node serves serial %s (was %s): %v", second, first, err)
	}
	if err := os.WriteFile(pair.Key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	s.Reload()
	if third, err := handshake(t, s.Config(), cl); err != nil || third != second {
		t.Fatalf("a broken key replaced the certificate in force: %s %v", third, err)
	}
	if n := strings.Count(logs.String(), "could not be reloaded"); n != 1 {
		t.Fatalf("a broken pair logged %d times:\n%s", n, logs.String())
	}

	other := testcerts.NewCA(t, "b")
	if _, err := handshake(t, s.Config(), mustClient(t, ClientFiles{CA: other.File})); err == nil {
		t.Fatal("a client trusting another CA completed the handshake")
	}
	pair2 := ca.Server(t, "node2")
	mtls, err := NewServer(ServerFiles{Cert: pair2.Cert, Key: pair2.Key, ClientCA: ca.File, Setting: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// TLS 1.3 reports a missing client certificate after the client's
	// handshake returns: the first read fails.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			tc := tls.Server(c, mtls.Config())
			_ = tc.Handshake()
			tc.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cl)
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client without a certificate under mutual TLS: %v", err)
	}
	withCert := mustClient(t, ClientFiles{CA: ca.File, Cert: ca.Client(t, "c", "team-a").Cert, Key: ca.Dir + "/c-key.pem"})
	if _, err := handshake(t, mtls.Config(), withCert); err != nil {
		t.Fatalf("a client with a certificate under mutual TLS: %v", err)
	}
	if _, err := handshake(t, mtls.HTTPConfig(), cl); err != nil {
		t.Fatalf("the HTTP side asked for a client certificate: %v", err)
	}
}

func mustClient(t *testing.T, f ClientFiles) *tls.Config {
	t.Helper()
	c, err := Client(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMinVersionAndBadFiles(t *testing.T) {
	if v, err := MinVersion("1.2"); err != nil || v != tls.VersionTLS12 {
		t.Fatal("1.2")
	}
	if _, err := MinVersion("1.1"); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
	ca := testcerts.NewCA(t, "a")
	p := ca.Server(t, "n")
	if _, err := NewServer(ServerFiles{Cert: p.Cert, Key: ca.File, Setting: "server.tls_cert"}, nil); err == nil || !strings.Contains(err.Error(), "server.tls_cert") {
		t.Fatalf("a key that is not the certificate's: %v", err)
	}
	if _, err := Client(ClientFiles{CA: p.Key}); err == nil {
		t.Fatal("a CA file without a certificate")
	}
	if _, err := Client(ClientFiles{Cert: p.Cert}); err == nil {
		t.Fatal("a client certificate without its key")
	}
}

// TestClientCertificateFollowsReloads: a node that presents its own
// certificate to its MDS presents the renewed one after a reload.
func TestClientCertificateFollowsReloads(t *testing.T) {
	ca := testcerts.NewCA(t, "a")
	node := ca.Server(t, "node")
	nodeSrv, err := NewServer(ServerFiles{Cert: node.Cert, Key: node.Key, Setting: "server.tls_cert"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mdsPair := ca.Server(t, "mds")
	mds, err := NewServer(ServerFiles{Cert: mdsPair.Cert, Key: mdsPair.Key, ClientCA: ca.File, Setting: "mds.tls_cert"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	presented := func() string {
		t.Helper()
		cl := mustClient(t, ClientFiles{CA: ca.File})
		cl.GetClientCertificate = nodeSrv.ClientCertificate
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		got := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- ""
				return
			}
			tc := tls.Server(c, mds.Config())
			if tc.Handshake() != nil || len(tc.ConnectionState().PeerCertificates) == 0 {
				got <- ""
			} else {
				got <- tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
			}
			tc.Close()
		}()
		c, err := tls.Dial("tcp", ln.Addr().String(), cl)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Read(make([]byte, 1))
		c.Close()
		return <-got
	}
	first := presented()
	ca.Server(t, "node") // renewed in place
	nodeSrv.Reload()
	if second := presented(); first == "" || second == "" || second == first {
		t.Fatalf("the client certificate presented after a renewal: %q, before: %q", second, first)
	}
}
