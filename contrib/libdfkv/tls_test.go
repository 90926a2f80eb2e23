package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// testCA is a throwaway certificate authority whose PEM files live in a
// test's temporary directory (roles/internal/testcerts does this for
// roles/, but Go's internal rule keeps it from contrib/).
type testCA struct {
	dir, file string
	cert      *x509.Certificate
	key       *ecdsa.PrivateKey
}

var certSerial atomic.Int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(certSerial.Add(1)), Subject: pkix.Name{CommonName: "libdfkv test CA " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.file = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate and key signed by ca: for serving 127.0.0.1
// and localhost when server is set, else a client certificate named cn.
func (ca *testCA) issue(t *testing.T, name, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(certSerial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsTestNode starts a node serving TLS with a certificate of ca; with
// mutual, it requires client certificates of ca and takes the
// credentials in credText (cert_common_name or token_sha256 ones).
func tlsTestNode(t *testing.T, ca *testCA, mutual bool, credText string) string {
	t.Helper()
	cert, key := ca.issue(t, "node", "localhost", true)
	flags := map[string][]string{"tls-cert": {cert}, "tls-key": {key}}
	if mutual {
		flags["tls-client-ca"] = []string{ca.file}
	}
	if credText != "" {
		path := filepath.Join(t.TempDir(), "credentials.toml")
		if err := os.WriteFile(path, []byte(credText), 0o600); err != nil {
			t.Fatal(err)
		}
		flags["credentials-file"] = []string{path}
	}
	return startNode(t, flags)
}

// openTLS opens a handle on namespace with the TLS settings the C options
// f and the environment env give, as dfkv_open_v2 resolves them.
func openTLS(t *testing.T, addr, namespace string, f tlsFields, env map[string]string) *state {
	t.Helper()
	s, err := tryOpenTLS(t, addr, namespace, f, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tryOpenTLS(t *testing.T, addr, namespace string, f tlsFields, env map[string]string) (*state, error) {
	t.Helper()
	o := openOptions{members: addr, namespace: []byte(namespace), timeoutMS: 10000, shm: 1}
	o.token, o.tokenFrom = resolveToken("", envOf(env))
	var err error
	if o.tls, err = resolveTLS(f, envOf(env)); err != nil {
		return nil, err
	}
	h, err := open(o)
	if err != nil {
		return nil, err
	}
	s, err := lookup(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := release(h); err == nil {
			s.close()
		}
	})
	return s, nil
}

// roundTrip puts, reads and removes values one by one and in batches.
func roundTrip(t *testing.T, s *state, prefix string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	big := []byte(strings.Repeat("0123456789abcdef", 40000)) // several TLS records
	if err := s.put([]byte(prefix+"big"), big); err != nil {
		t.Fatalf("put over TLS: %v", err)
	}
	if n, err := s.get([]byte(prefix+"big"), buf); err != nil || string(buf[:n]) != string(big) {
		t.Fatalf("get over TLS: %d bytes, %v", n, err)
	}
	var keys, vals [][]byte
	for i := range 5 {
		keys = append(keys, []byte(prefix+"k"+strconv.Itoa(i)))
		vals = append(vals, []byte(strings.Repeat("v", i+1)))
	}
	for i, err := range s.putBatch(keys, vals) {
		if err != nil {
			t.Fatalf("put batch item %d over TLS: %v", i, err)
		}
	}
	dsts := make([][]byte, len(keys))
	for i := range dsts {
		dsts[i] = make([]byte, 16)
	}
	for i, r := range s.getBatch(keys, dsts) {
		if r.Err != nil || string(dsts[i][:r.Stored]) != string(vals[i]) {
			t.Fatalf("get batch item %d over TLS: %q, %v", i, dsts[i][:r.Stored], r.Err)
		}
	}
	if hits, err := s.existPrefix(keys, false); err != nil || hits != len(keys) {
		t.Fatalf("exist prefix over TLS: %d, %v", hits, err)
	}
	for i, err := range s.removeBatch(keys) {
		if err != nil {
			t.Fatalf("remove batch item %d over TLS: %v", i, err)
		}
	}
	if err := s.remove([]byte(prefix + "big")); err != nil {
		t.Fatalf("remove over TLS: %v", err)
	}
}

// TestResolveTLS: each setting is its field when set, else its
// environment variable; tls DFKV_TLS_ENV takes $DFKV_CLIENT_TLS.
func TestResolveTLS(t *testing.T) {
	env := map[string]string{envTLS: "1", envTLSCA: "/env/ca.pem", envTLSCert: "/env/c.pem", envTLSKey: "/env/k.pem", envTLSServerName: "env.example"}
	s, err := resolveTLS(tlsFields{}, envOf(env))
	if err != nil || !s.on || s.from != envTLS || s.ca != (tlsValue{"/env/ca.pem", envTLSCA}) || s.cert != (tlsValue{"/env/c.pem", envTLSCert}) ||
		s.key != (tlsValue{"/env/k.pem", envTLSKey}) || s.serverName != (tlsValue{"env.example", envTLSServerName}) || s.fieldSet != "" {
		t.Fatalf("from the environment: %+v, %v", s, err)
	}
	s, err = resolveTLS(tlsFields{mode: tlsModeOff, ca: "/f/ca.pem", serverName: "f.example"}, envOf(env))
	if err != nil || s.on || s.from != tlsField || s.ca != (tlsValue{"/f/ca.pem", tlsCAField}) || s.cert.from != envTLSCert ||
		s.serverName != (tlsValue{"f.example", tlsServerNameField}) || s.fieldSet != tlsCAField {
		t.Fatalf("fields over the environment: %+v, %v", s, err)
	}
	for v, on := range map[string]bool{"1": true, "true": true, "on": true, "yes": true, "0": false, "false": false, "off": false, "no": false} {
		if s, err := resolveTLS(tlsFields{}, envOf(map[string]string{envTLS: v})); err != nil || s.on != on || s.from != envTLS {
			t.Errorf("$DFKV_CLIENT_TLS=%s: %+v, %v", v, s, err)
		}
	}
	for _, env := range []map[string]string{nil, {envTLS: ""}, {envTLSCA: "/env/ca.pem"}} {
		if s, err := resolveTLS(tlsFields{}, envOf(env)); err != nil || s.on || s.from != "" {
			t.Errorf("%v: %+v, %v", env, s, err)
		}
	}
	if s, err := resolveTLS(tlsFields{mode: tlsModeOn}, envOf(map[string]string{envTLS: "0"})); err != nil || !s.on || s.from != tlsField {
		t.Errorf("DFKV_TLS_ON over $DFKV_CLIENT_TLS=0: %+v, %v", s, err)
	}
	if s, err := resolveTLS(tlsFields{mode: tlsModeOff}, envOf(map[string]string{envTLS: "1"})); err != nil || s.on {
		t.Errorf("DFKV_TLS_OFF over $DFKV_CLIENT_TLS=1: %+v, %v", s, err)
	}
	if _, err := resolveTLS(tlsFields{mode: 3}, envOf(nil)); wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), "tls is 3") {
		t.Errorf("tls 3: %v", err)
	}
	if _, err := resolveTLS(tlsFields{}, envOf(map[string]string{envTLS: "2"})); wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), `$DFKV_CLIENT_TLS is "2"`) {
		t.Errorf("$DFKV_CLIENT_TLS=2: %v", err)
	}
}

// TestTLSOptionsRefusedAtOpen: half a client certificate, a file that
// cannot be read or holds no PEM, a TLS file with TLS off, and TLS for an
// embedded store fail the open with INVALID naming the settings and the
// files.
func TestTLSOptionsRefusedAtOpen(t *testing.T) {
	ca := newTestCA(t, "a")
	cert, key := ca.issue(t, "client", "team-a", false)
	_, otherKey := ca.issue(t, "other", "other", false)
	missing := filepath.Join(t.TempDir(), "no-such-ca.pem")
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	on := uint32(tlsModeOn)
	for _, c := range []struct {
		name string
		f    tlsFields
		env  map[string]string
		msgs []string
	}{
		{"cert without key", tlsFields{mode: on, cert: cert}, nil, []string{tlsCertField + " is set and " + tlsKeyField + " ($DFKV_CLIENT_TLS_KEY) is not"}},
		{"key without cert", tlsFields{mode: on, key: key}, nil, []string{tlsKeyField + " is set and " + tlsCertField + " ($DFKV_CLIENT_TLS_CERT) is not"}},
		{"cert from env without key", tlsFields{}, map[string]string{envTLS: "1", envTLSCert: cert}, []string{"$DFKV_CLIENT_TLS_CERT is set and " + tlsKeyField}},
		{"unreadable CA", tlsFields{mode: on, ca: missing}, nil, []string{"TLS CA file " + missing + " (from " + tlsCAField + ")", "no such file"}},
		{"unreadable CA from env", tlsFields{}, map[string]string{envTLS: "1", envTLSCA: missing}, []string{"TLS CA file " + missing + " (from $DFKV_CLIENT_TLS_CA)"}},
		{"CA without PEM", tlsFields{mode: on, ca: junk}, nil, []string{"TLS CA file " + junk, "holds no PEM certificate"}},
		{"certificate without PEM", tlsFields{mode: on, cert: junk, key: key}, nil, []string{"TLS client certificate " + junk + " (from " + tlsCertField + ") and key " + key}},
		{"key of another certificate", tlsFields{mode: on, cert: cert, key: otherKey}, nil, []string{"TLS client certificate " + cert, "and key " + otherKey, "does not match"}},
		{"CA field with TLS off", tlsFields{ca: ca.file}, nil, []string{tlsCAField + " is set but TLS is off (" + tlsField + " is DFKV_TLS_ENV and $DFKV_CLIENT_TLS is unset)"}},
		{"server name with $DFKV_CLIENT_TLS=0", tlsFields{serverName: "localhost"}, map[string]string{envTLS: "0"}, []string{tlsServerNameField + " is set but TLS is off (from $DFKV_CLIENT_TLS)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tryOpenTLS(t, "127.0.0.1:1", "acme", c.f, c.env)
			if wire.StatusOf(err) != wire.StatusInvalid {
				t.Fatalf("%v: want INVALID", err)
			}
			for _, m := range c.msgs {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%v\nwant it to contain %q", err, m)
				}
			}
		})
	}
	// DFKV_TLS_OFF with files set is an explicit off; files in the
	// environment with TLS off are ignored, as the tools ignore them.
	if _, err := tryOpenTLS(t, "127.0.0.1:1", "acme", tlsFields{mode: tlsModeOff, ca: missing}, nil); err != nil {
		t.Errorf("DFKV_TLS_OFF with a CA file: %v", err)
	}
	if _, err := tryOpenTLS(t, "127.0.0.1:1", "acme", tlsFields{}, map[string]string{envTLSCA: missing, envTLSCert: cert}); err != nil {
		t.Errorf("TLS files in the environment, TLS off: %v", err)
	}
	// An embedded store has no connection to encrypt.
	empty := ""
	for _, f := range []tlsFields{{mode: on}, {ca: ca.file}} {
		s, err := resolveTLS(f, envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := open(openOptions{namespace: []byte("acme"), embedded: &empty, tls: s}); wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), "embedded store") {
			t.Errorf("embedded with %+v: %v", f, err)
		}
	}
}

// TestTLSAgainstNodes: against a real node serving TLS, values travel
// both ways, one by one and in batches, with TLS from the fields or from
// $DFKV_CLIENT_TLS and $DFKV_CLIENT_TLS_CA; a CA that did not sign the
// node's certificate, or a server name it does not carry, fails with a
// message about the certificate and the settings in force; a client
// without TLS is told the node requires it, and a TLS client of a
// plaintext node that the node does not speak TLS.
func TestTLSAgainstNodes(t *testing.T) {
	ca := newTestCA(t, "a")
	addr := tlsTestNode(t, ca, false, "")

	t.Run("round trip, fields", func(t *testing.T) {
		roundTrip(t, openTLS(t, addr, "acme", tlsFields{mode: tlsModeOn, ca: ca.file}, nil), "fields-")
	})
	t.Run("round trip, environment", func(t *testing.T) {
		s := openTLS(t, addr, "acme", tlsFields{}, map[string]string{envTLS: "1", envTLSCA: ca.file})
		if !s.tls.on || s.tls.from != envTLS || s.tls.ca.from != envTLSCA {
			t.Fatalf("settings: %+v", s.tls)
		}
		roundTrip(t, s, "env-")
	})
	t.Run("round trip, server name", func(t *testing.T) {
		roundTrip(t, openTLS(t, addr, "acme", tlsFields{mode: tlsModeOn, ca: ca.file, serverName: "localhost"}, nil), "name-")
	})

	expect := func(t *testing.T, s *state, st wire.Status, msgs ...string) {
		t.Helper()
		code, msg := lastErr(s, s.put([]byte("k"), []byte("v")))
		if code != int(st) {
			t.Errorf("put: status %d (%q), want %s", code, msg, st)
		}
		for _, m := range msgs {
			if !strings.Contains(msg, m) {
				t.Errorf("put: %q\nwant it to contain %q", msg, m)
			}
		}
		// A read fails the same way: a TLS misconfiguration is not a
		// miss, which an engine would silently recompute around for ever.
		buf := make([]byte, 8)
		_, err := s.get([]byte("k"), buf)
		if code, msg := lastErr(s, err); code != int(st) || strings.Contains(msg, "answered as a miss") || !strings.Contains(msg, msgs[0]) {
			t.Errorf("get: status %d, %q", code, msg)
		}
	}
	t.Run("another CA", func(t *testing.T) {
		other := newTestCA(t, "b")
		s := openTLS(t, addr, "acme", tlsFields{mode: tlsModeOn, ca: other.file}, nil)
		expect(t, s, wire.StatusUnauthenticated, "certificate", "the CA file "+other.file+" (from "+tlsCAField+")")
	})
	t.Run("another CA from the environment", func(t *testing.T) {
		other := newTestCA(t, "b")
		s := openTLS(t, addr, "acme", tlsFields{}, map[string]string{envTLS: "yes", envTLSCA: other.file})
		expect(t, s, wire.StatusUnauthenticated, "certificate", "TLS is on (from $DFKV_CLIENT_TLS)", "the CA file "+other.file+" (from $DFKV_CLIENT_TLS_CA)")
	})
	t.Run("system roots", func(t *testing.T) {
		s := openTLS(t, addr, "acme", tlsFields{mode: tlsModeOn}, nil)
		expect(t, s, wire.StatusUnauthenticated, "certificate", "the system's roots")
	})
	t.Run("another server name", func(t *testing.T) {
		s := openTLS(t, addr, "acme", tlsFields{mode: tlsModeOn, ca: ca.file, serverName: "node.other.example"}, nil)
		expect(t, s, wire.StatusUnauthenticated, "certificate", `as "node.other.example" (from `+tlsServerNameField+")")
	})
	t.Run("plaintext client", func(t *testing.T) {
		for _, env := range []map[string]string{nil, {envTLS: "0", envTLSCA: ca.file}} {
			s := openTLS(t, addr, "acme", tlsFields{}, env)
			code, msg := lastErr(s, s.put([]byte("k"), []byte("v")))
			if code != int(wire.StatusEpochMismatch) || !strings.Contains(msg, "requires TLS") || !strings.Contains(msg, "TLS is off") ||
				!strings.Contains(msg, "$DFKV_CLIENT_TLS=1") {
				t.Errorf("%v: status %d, %q", env, code, msg)
			}
		}
	})
	t.Run("TLS client, plaintext node", func(t *testing.T) {
		plain := startNode(t, nil)
		s := openTLS(t, plain, "acme", tlsFields{}, map[string]string{envTLS: "1", envTLSCA: ca.file})
		expect(t, s, wire.StatusEpochMismatch, "does not speak TLS", "TLS is on (from $DFKV_CLIENT_TLS)")
	})
}

// TestMutualTLS: a node that requires client certificates serves one
// whose common name a credential lists (cert_common_name) with no token,
// within that credential's tenants only: another tenant is FORBIDDEN on
// reads, writes and batches alike. A client without a certificate does
// not get through the handshake.
func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t, "a")
	creds := fmt.Sprintf(`[[credential]]
name = "team-a"
cert_common_name = "team-a"
tenants = ["acme"]
allow = ["read", "write", "remove"]

[[credential]]
name = "bob"
token_sha256 = %q
tenants = ["globex"]
allow = ["read", "write", "remove"]
`, sha256Hex(bobToken))
	addr := tlsTestNode(t, ca, true, creds)
	cert, key := ca.issue(t, "team-a", "team-a", false)
	files := tlsFields{mode: tlsModeOn, ca: ca.file, cert: cert, key: key}

	roundTrip(t, openTLS(t, addr, "acme", files, nil), "mtls-")
	// The same from the environment.
	env := map[string]string{envTLS: "1", envTLSCA: ca.file, envTLSCert: cert, envTLSKey: key}
	roundTrip(t, openTLS(t, addr, "acme", tlsFields{}, env), "mtls-env-")

	// Bob's block in globex, through his token over mutual TLS.
	bob := openTLS(t, addr, "globex", files, map[string]string{envToken: bobToken})
	if err := bob.put([]byte("victim"), []byte("bob's")); err != nil {
		t.Fatalf("a token over mutual TLS: %v", err)
	}
	m := openTLS(t, addr, "globex", files, nil)
	forbidden := func(op string, err error) {
		t.Helper()
		if code, msg := lastErr(m, err); code != int(wire.StatusForbidden) || !strings.Contains(msg, "client certificate "+cert) {
			t.Errorf("%s on another tenant: status %d (%q), want FORBIDDEN naming the certificate", op, code, msg)
		}
	}
	buf := make([]byte, 16)
	_, err := m.get([]byte("victim"), buf)
	forbidden("get", err)
	_, err = m.exist([]byte("victim"))
	forbidden("exist", err)
	forbidden("put", m.put([]byte("victim"), []byte("overwritten")))
	forbidden("remove", m.remove([]byte("victim")))
	for i, err := range m.putBatch([][]byte{[]byte("victim"), []byte("new")}, [][]byte{[]byte("x"), []byte("y")}) {
		forbidden("put batch item "+strconv.Itoa(i), err)
	}
	for i, r := range m.getBatch([][]byte{[]byte("victim")}, [][]byte{buf}) {
		forbidden("get batch item "+strconv.Itoa(i), r.Err)
	}
	if n, err := bob.get([]byte("victim"), buf); err != nil || string(buf[:n]) != "bob's" {
		t.Fatalf("bob's block after the refused calls: %q, %v", buf[:n], err)
	}

	// A certificate no credential names, without a token: UNAUTHENTICATED,
	// naming the certificate.
	strangerCert, strangerKey := ca.issue(t, "stranger", "nobody", false)
	st := openTLS(t, addr, "acme", tlsFields{mode: tlsModeOn, ca: ca.file, cert: strangerCert, key: strangerKey}, nil)
	if code, msg := lastErr(st, st.put([]byte("k"), []byte("v"))); code != int(wire.StatusUnauthenticated) || !strings.Contains(msg, "client certificate "+strangerCert) {
		t.Errorf("an unlisted certificate: status %d, %q", code, msg)
	}
	// No certificate at all: the node ends the connection with a
	// "certificate required" alert (read back even when the client's
	// write met a broken pipe first), and the message says none was
	// presented.
	none := openTLS(t, addr, "acme", tlsFields{mode: tlsModeOn, ca: ca.file}, nil)
	code, msg := lastErr(none, none.put([]byte("k"), []byte("v")))
	if code != int(wire.StatusUnauthenticated) || !strings.Contains(msg, "presenting no client certificate") {
		t.Errorf("no client certificate under mutual TLS: status %d, %q", code, msg)
	}
}
