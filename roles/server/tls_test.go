package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/roles/internal/testcerts"
	"github.com/dfkv/dfkv/roles/internal/tlsconf"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// tlsNode starts a memory-engine node serving TLS with a certificate of
// ca, mutual when clientCA is set.
func tlsNode(t *testing.T, ca *testcerts.CA, clientCA string, mutate func(*Options)) *testNode {
	t.Helper()
	p := ca.Server(t, "node")
	srv, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: p.Cert, Key: p.Key, ClientCA: clientCA, Setting: "server.tls_cert"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return startNode(t, newMemEngine(), func(o *Options) {
		o.TLS = srv.Config()
		if mutate != nil {
			mutate(o)
		}
	})
}

func tlsClient(t *testing.T, addr, namespace string, files tlsconf.ClientFiles, token string) *client.Client {
	t.Helper()
	cfg, err := tlsconf.Client(files)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.Open(client.Options{Members: []string{addr}, Namespace: []byte(namespace), TLS: cfg, Token: token,
		MaxBlockBytes: testMaxBlock, SharedMemory: client.ShmOff, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestTLSDataPort: values travel over TLS both ways, single and batched;
// a plaintext client is told in plaintext that the port needs TLS; a TLS
// client of a plaintext node, or one trusting another CA, gets an error
// that says so; a handshake that never completes is cut by the first
// request's deadline.
func TestTLSDataPort(t *testing.T) {
	ca := testcerts.NewCA(t, "a")
	n := tlsNode(t, ca, "", func(o *Options) { o.FirstRequest = 300 * time.Millisecond })
	ctx := context.Background()
	cl := tlsClient(t, n.addr, "ns", tlsconf.ClientFiles{CA: ca.File}, "")
	big := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	if err := cl.Put(ctx, []byte("big"), big); err != nil {
		t.Fatal(err)
	}
	if got, err := cl.GetAuto(ctx, []byte("big")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GET over TLS: %d bytes, %v", len(got), err)
	}
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	for i, err := range cl.PutBatch(ctx, keys, [][]byte{[]byte("1"), []byte("22"), []byte("333")}) {
		if err != nil {
			t.Fatalf("BATCH_PUT %d: %v", i, err)
		}
	}
	for i, r := range cl.GetBatch(ctx, keys, nil) {
		if r.Err != nil || len(r.Data) != i+1 {
			t.Fatalf("BATCH_GET %d: %v", i, r.Err)
		}
	}

	t.Run("plaintext client", func(t *testing.T) {
		c := dial(t, n.addr)
		writeReq(t, c, wire.RequestHeader{Op: wire.OpPing}, nil)
		h, body := readResp(t, c)
		if h.Status != wire.StatusEpochMismatch || !strings.Contains(string(body), "requires TLS") {
			t.Fatalf("plaintext PING: %s %q", h.Status, body)
		}
		expectClosed(t, c)
	})
	t.Run("another CA", func(t *testing.T) {
		other := testcerts.NewCA(t, "b")
		bad := tlsClient(t, n.addr, "ns", tlsconf.ClientFiles{CA: other.File}, "")
		_, err := bad.Exist(ctx, []byte("big"))
		if err == nil || !strings.Contains(err.Error(), "certificate") || !errors.Is(err, client.ErrAuth) || errors.Is(err, wire.StatusNotFound) {
			t.Fatalf("a client trusting another CA: %v", err)
		}
	})
	t.Run("TLS client, plaintext node", func(t *testing.T) {
		plain := startNode(t, newMemEngine(), nil)
		c := tlsClient(t, plain.addr, "ns", tlsconf.ClientFiles{CA: ca.File}, "")
		_, err := c.Exist(ctx, []byte("k"))
		if err == nil || !strings.Contains(err.Error(), "does not speak TLS") || errors.Is(err, wire.StatusNotFound) {
			t.Fatalf("TLS against a plaintext node: %v", err)
		}
	})
	t.Run("handshake never completes", func(t *testing.T) {
		c := dial(t, n.addr)
		// The first bytes of a ClientHello record, and then nothing.
		if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		expectClosed(t, c)
		if time.Since(start) > 20*time.Second {
			t.Fatal("a stalled handshake held its connection")
		}
	})
	if got := n.srv.stats.tlsFailures.Load(); got == 0 {
		t.Fatal("TLS handshake failures are not counted")
	}
}

// TestClientCertificateStandsInForToken: under mutual TLS a credential
// may name a client certificate's common name instead of a token; the
// certificate's holder is then confined to that credential's tenants,
// and a client without a certificate does not get in.
func TestClientCertificateStandsInForToken(t *testing.T) {
	ca := testcerts.NewCA(t, "a")
	path := filepath.Join(t.TempDir(), "c.toml")
	body := "[[credential]]\nname = \"team-a\"\ncert_common_name = \"team-a.inference\"\ntenants = [\"acme\"]\nallow = [\"read\", \"write\"]\n\n" + credentialsText(bobToken)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := creds.NewWatch(path, "credentials file", creds.LoadTenants, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := tlsNode(t, ca, ca.File, func(o *Options) { o.Credentials = w })
	ctx := context.Background()
	teamA := ca.Client(t, "team-a", "team-a.inference")
	files := tlsconf.ClientFiles{CA: ca.File, Cert: teamA.Cert, Key: teamA.Key}
	acme := tlsClient(t, n.addr, "acme", files, "")
	if err := acme.Put(ctx, []byte("k"), []byte("by certificate")); err != nil {
		t.Fatalf("a certificate's own tenant: %v", err)
	}
	if got, err := acme.GetAuto(ctx, []byte("k")); err != nil || string(got) != "by certificate" {
		t.Fatalf("GET: %q %v", got, err)
	}
	globex := tlsClient(t, n.addr, "globex", files, "")
	if err := globex.Put(ctx, []byte("k"), []byte("x")); !errors.Is(err, wire.StatusForbidden) {
		t.Fatalf("a certificate addressing another tenant: %v", err)
	}
	// A certificate whose name no credential lists gets nothing; a token
	// on top of it still works (bob's, for globex).
	stranger := ca.Client(t, "stranger", "nobody")
	sfiles := tlsconf.ClientFiles{CA: ca.File, Cert: stranger.Cert, Key: stranger.Key}
	if err := tlsClient(t, n.addr, "acme", sfiles, "").Put(ctx, []byte("k"), []byte("x")); !errors.Is(err, wire.StatusUnauthenticated) {
		t.Fatalf("an unlisted certificate: %v", err)
	}
	if err := tlsClient(t, n.addr, "globex", sfiles, bobToken).Put(ctx, []byte("k"), []byte("bob")); err != nil {
		t.Fatalf("a token over mutual TLS: %v", err)
	}
	// Without a certificate the handshake fails.
	_, err = tlsClient(t, n.addr, "acme", tlsconf.ClientFiles{CA: ca.File}, aliceToken).Exist(ctx, []byte("k"))
	if err == nil || !strings.Contains(err.Error(), "certificate") || errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("no client certificate under mutual TLS (must not read as a miss): %v", err)
	}
}

// BenchmarkTLSCost compares a TLS node with a plaintext one in one run,
// interleaved in rounds: GET of 1 MiB at 16 connections and EXIST at 16
// connections, through the Go client on loopback.
//
//	go test ./roles/server -run '^$' -bench TLSCost -benchtime 4000x
func BenchmarkTLSCost(b *testing.B) {
	for _, c := range []struct {
		op   string
		size int
	}{{"GET-1MiB", 1 << 20}, {"EXIST", 64}} {
		b.Run(c.op, func(b *testing.B) {
			ca := testcerts.NewCA(b, "bench")
			p := ca.Server(b, "node")
			ts, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: p.Cert, Key: p.Key, Setting: "x"}, nil)
			if err != nil {
				b.Fatal(err)
			}
			ccfg, err := tlsconf.Client(tlsconf.ClientFiles{CA: ca.File})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var cls [2]*client.Client
			for i, cfg := range []*tls.Config{nil, ts.Config()} {
				n := startBenchMem(b, cfg)
				var clientTLS *tls.Config
				if cfg != nil {
					clientTLS = ccfg
				}
				cl, err := client.Open(client.Options{Members: []string{n}, Namespace: []byte("bench"), TLS: clientTLS, PoolSize: 16,
					MaxBlockBytes: 4 << 20, SharedMemory: client.ShmOff, Timeout: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cl.Close() })
				if err := cl.Put(ctx, []byte("k"), bytes.Repeat([]byte("v"), c.size)); err != nil {
					b.Fatal(err)
				}
				cls[i] = cl
			}
			var spent [2]time.Duration
			const round = 64
			b.SetBytes(int64(c.size))
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				for i, cl := range cls {
					start := time.Now()
					runConcurrent(b, 16, min(round, b.N-done), func(buf []byte) error {
						if c.op == "EXIST" {
							_, err := cl.Exist(ctx, []byte("k"))
							return err
						}
						_, _, err := cl.Get(ctx, []byte("k"), buf)
						return err
					}, c.size)
					spent[i] += time.Since(start)
				}
			}
			b.ReportMetric(float64(spent[0])/float64(spent[1]), "tls/plain-throughput")
		})
	}
}

// startBenchMem starts a memory-engine node for a benchmark, serving TLS
// when cfg is set, and returns its address.
func startBenchMem(b *testing.B, cfg *tls.Config) string {
	b.Helper()
	n := startNode(b, newMemEngine(), func(o *Options) { o.TLS = cfg; o.MaxBlockBytes = 4 << 20 })
	return n.addr
}

// runConcurrent runs n calls of fn spread over conc goroutines, each with
// its own buffer of size bytes.
func runConcurrent(b *testing.B, conc, n int, fn func(buf []byte) error, size int) {
	errs := make(chan error, conc)
	per := (n + conc - 1) / conc
	for g := 0; g < conc; g++ {
		go func() {
			buf := make([]byte, size)
			for i := 0; i < per; i++ {
				if err := fn(buf); err != nil {
					errs <- fmt.Errorf("call: %w", err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range conc {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}
