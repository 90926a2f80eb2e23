package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// NewTLSDialer returns a dialer that speaks TLS over what inner dials
// (nil: a plain net.Dialer), for callers that dial with their own Dialer
// (an MDSClient); Options.TLS does the same for a Client.
func NewTLSDialer(inner Dialer, cfg *tls.Config) Dialer {
	if inner == nil {
		inner = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	return &tlsDialer{inner: inner, cfg: cfg}
}

// tlsDialer completes a TLS handshake on every connection its inner
// dialer makes, within the dial's context: to the nodes, their liveness
// probes and the MDS alike. The server name verified is the config's,
// else the host of the address dialed.
type tlsDialer struct {
	inner  Dialer
	cfg    *tls.Config
	mu     sync.Mutex
	byHost map[string]*tls.Config
}

func (t *tlsDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nc, err := t.inner.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	tc := tls.Client(nc, t.configFor(address))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		// A peer that is not TLS, a certificate that does not verify, or
		// an alert from the peer is a configuration error: it wraps
		// ErrAuth, so calls fail with it at once instead of backing the
		// node off and answering reads as misses. A network failure
		// during the handshake is one like any other.
		var rhe tls.RecordHeaderError
		var cve *tls.CertificateVerificationError
		switch {
		case errors.As(err, &rhe):
			return nil, fmt.Errorf("TLS handshake with %s: the peer does not speak TLS on this port (a node or MDS without TLS? then turn client TLS off): %v: %w", address, err, tlsErr(wire.StatusEpochMismatch))
		case errors.As(err, &cve), tlsRefusal(err):
			return nil, fmt.Errorf("TLS handshake with %s (client.tls_ca, tls_cert, tls_server_name): %w: %w", address, err, tlsErr(wire.StatusUnauthenticated))
		}
		return nil, fmt.Errorf("TLS handshake with %s: %w", address, err)
	}
	return tc, nil
}

// ErrTLS is wrapped, with ErrAuth, by the error of a call whose TLS
// handshake failed for a reason of configuration: the peer does not
// speak TLS (EPOCH_MISMATCH), or a certificate was not accepted, by the
// client or by the node (UNAUTHENTICATED).
var ErrTLS = errors.New("dfkv TLS handshake refused")

// tlsErr is the tail of a TLS configuration error: ErrTLS, ErrAuth and st.
func tlsErr(st wire.Status) error { return &tlsError{st: st} }

type tlsError struct{ st wire.Status }

func (e *tlsError) Error() string   { return ErrTLS.Error() + ": " + e.st.String() }
func (e *tlsError) Unwrap() []error { return []error{ErrTLS, ErrAuth, e.st} }

// tlsRefused is the error of a call whose node refused the client's
// certificate with a TLS alert (under TLS 1.3, on the first read).
func tlsRefused(addr string, err error) error {
	return fmt.Errorf("dfkv node %s refused this client's TLS certificate (client.tls_cert, tls_key): %v: %w", addr, err, tlsErr(wire.StatusUnauthenticated))
}

// configFor is the configuration for address: one clone per host with
// its name as ServerName, unless the config names one.
func (t *tlsDialer) configFor(address string) *tls.Config {
	if t.cfg.ServerName != "" {
		return t.cfg
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.byHost[host]; ok {
		return c
	}
	if t.byHost == nil {
		t.byHost = map[string]*tls.Config{}
	}
	c := t.cfg.Clone()
	c.ServerName = host
	t.byHost[host] = c
	return c
}
