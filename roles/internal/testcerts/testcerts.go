// Package testcerts writes a throwaway certificate authority and the
// certificates tests need (a server certificate for loopback, client
// certificates by common name) as PEM files, so TLS is tested with real
// handshakes and real files rather than a switch that turns it off.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority whose files live in Dir.
type CA struct {
	Dir  string
	File string // the CA certificate, PEM
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// NewCA makes a CA in a temporary directory of t (name distinguishes
// several CAs in one test).
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "dfkv test CA " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Dir: t.TempDir(), cert: cert, key: key}
	ca.File = filepath.Join(ca.Dir, name+"-ca.pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Pair is a certificate and its key on disk.
type Pair struct{ Cert, Key string }

// Server issues a certificate for 127.0.0.1, ::1 and localhost, usable
// both to serve and as a client certificate (a node presents its own to
// the MDS). file names it within the CA's directory.
func (ca *CA) Server(t testing.TB, file string) Pair {
	return ca.issue(t, file, "localhost", true)
}

// Client issues a client certificate with common name cn.
func (ca *CA) Client(t testing.TB, file, cn string) Pair {
	return ca.issue(t, file, cn, false)
}

func (ca *CA) issue(t testing.TB, file, cn string, server bool) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{Cert: filepath.Join(ca.Dir, file+".pem"), Key: filepath.Join(ca.Dir, file+"-key.pem")}
	writePEM(t, p.Key, "EC PRIVATE KEY", kder)
	writePEM(t, p.Cert, "CERTIFICATE", der)
	return p
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	// Written to a temporary name and renamed, as a certificate manager
	// would: a reader never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
