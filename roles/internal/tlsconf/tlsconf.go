// Package tlsconf builds the TLS configurations of dfkv's listeners and
// clients from files, and keeps a listener's certificate current while
// the process runs: a renewed certificate (cert-manager rewriting a
// Kubernetes Secret, certbot, an operator's cp) is picked up on SIGHUP
// or within a second of the files changing, for new connections, with no
// restart. A reload that fails (a key that does not match its
// certificate, a half-written file) keeps what was in force and is
// logged once.
//
// TLS 1.3 is the minimum unless the operator lowers it to 1.2; Go's
// defaults choose the cipher suites.
package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/roles/internal/filestamp"
)

// MinVersion parses a minimum TLS version setting: "1.3" or "1.2".
func MinVersion(s string) (uint16, error) {
	switch s {
	case "", "1.3":
		return tls.VersionTLS13, nil
	case "1.2":
		return tls.VersionTLS12, nil
	}
	return 0, fmt.Errorf("TLS version %q: want 1.3 or 1.2", s)
}

// ServerFiles name a listener's certificate, key and, for mutual TLS,
// the CA its clients' certificates must chain to.
type ServerFiles struct {
	Cert, Key string
	ClientCA  string // empty: clients present no certificate
	// Setting names the settings, for errors ("server.tls_cert / …").
	Setting    string
	MinVersion uint16
}

// Server is a listener's TLS configuration, reloaded from its files.
type Server struct {
	files ServerFiles
	log   *slog.Logger
	cur   atomic.Pointer[tls.Config] // with the client CA, for the data or control port
	plain atomic.Pointer[tls.Config] // the certificate alone, for the HTTP side

	mu    sync.Mutex // serializes reloads
	stamp string     // sizes and times of the files last loaded
	bad   string     // the error the files' current content was refused with
}

// NewServer loads the files; an error refuses the start.
func NewServer(files ServerFiles, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if files.MinVersion == 0 {
		files.MinVersion = tls.VersionTLS13
	}
	s := &Server{files: files, log: log}
	cfg, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", files.Setting, err)
	}
	s.store(cfg)
	s.stamp = s.stampNow()
	return s, nil
}

// Config is the configuration to serve with: each handshake takes the
// reading in force (certificate and client CA) at that moment.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: s.files.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
}

// HTTPConfig is Config for an HTTP listener: the same certificate, and no
// client certificate asked for, so probes and scrapers that carry none
// (they present the bearer token instead) are served.
func (s *Server) HTTPConfig() *tls.Config {
	return &tls.Config{
		MinVersion: s.files.MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.plain.Load(), nil
		},
	}
}

func (s *Server) store(cfg *tls.Config) {
	plain := cfg.Clone()
	plain.ClientCAs, plain.ClientAuth = nil, tls.NoClientCert
	s.cur.Store(cfg)
	s.plain.Store(plain)
}

// ClientCertificate is a tls.Config.GetClientCertificate that presents
// this listener's certificate as in force at each handshake: a node that
// reaches its MDS over mutual TLS with its own certificate keeps
// presenting the renewed one.
func (s *Server) ClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return &s.cur.Load().Certificates[0], nil
}

// MutualTLS reports whether clients must present a certificate.
func (s *Server) MutualTLS() bool { return s.files.ClientCA != "" }

func (s *Server) load() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return nil, fmt.Errorf("certificate %s and key %s: %w", s.files.Cert, s.files.Key, err)
	}
	cfg := &tls.Config{MinVersion: s.files.MinVersion, Certificates: []tls.Certificate{pair}}
	if s.files.ClientCA != "" {
		pool, err := loadPool(s.files.ClientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// stampNow describes the files' contents: a change in any of them is a
// reason to reload.
func (s *Server) stampNow() string {
	stamp, err := filestamp.Of(s.files.Cert, s.files.Key, s.files.ClientCA)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return string(stamp[:])
}

// Reload reads the files again whether or not they look changed (SIGHUP).
func (s *Server) Reload() { s.reload(true) }

// Run reloads the files when they change, until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.reload(false)
		}
	}
}

func (s *Server) reload(force bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stamp := s.stampNow()
	if !force && stamp == s.stamp {
		return
	}
	cfg, err := s.load()
	if err != nil {
		if msg := err.Error(); msg != s.bad {
			s.bad = msg
			s.log.Error("TLS certificate could not be reloaded; the one loaded before stays in force", "setting", s.files.Setting, "error", msg)
		}
		return
	}
	s.bad, s.stamp = "", stamp
	s.store(cfg)
	s.log.Info("TLS certificate reloaded", "setting", s.files.Setting, "cert", s.files.Cert)
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// ClientFiles configure a client's TLS: the CA that signs the servers'
// certificates (empty: the system's roots), an optional certificate and
// key for mutual TLS, and the name to verify (empty: the host of the
// address dialed).
type ClientFiles struct {
	CA, Cert, Key string
	ServerName    string
	MinVersion    uint16
}

// Client builds a client configuration.
func Client(f ClientFiles) (*tls.Config, error) {
	if f.MinVersion == 0 {
		f.MinVersion = tls.VersionTLS13
	}
	// The session cache lets a pool's later connections resume rather
	// than repeat the full handshake.
	cfg := &tls.Config{MinVersion: f.MinVersion, ServerName: f.ServerName, ClientSessionCache: tls.NewLRUClientSessionCache(256)}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
