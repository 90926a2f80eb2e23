package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/wire"
)

// Tenant credentials on the data port.
//
// With Options.Credentials set, a connection must present a token in an
// AUTH frame before anything but PING and SHM_INFO; a request before it
// is answered UNAUTHENTICATED and the connection closed. Afterwards every
// request is checked against the grant of that token in the credentials
// reading in force: a key of a tenant the grant does not cover for the
// op is answered FORBIDDEN (a batch item: that item's status) and nothing
// is read, written or removed, so the answer never says whether the key
// exists. A reload that withdraws the token ends the connection at its
// next request. The checks cost an atomic load and a map lookup per key;
// the token is hashed once per connection.

// authReason indexes the authentication failures counted.
type authReason int

const (
	authNoToken   authReason = iota // a request before AUTH
	authBadToken                    // AUTH with a token no credential has
	authWithdrawn                   // the token left the credentials file
	authTwice                       // a second AUTH on one connection
	authReasons
)

var authReasonNames = [authReasons]string{"no_token", "bad_token", "withdrawn", "auth_twice"}

// authCounters are the server's authentication numbers.
type authCounters struct {
	ok        atomic.Uint64
	failures  [authReasons]atomic.Uint64
	mu        sync.Mutex
	forbidden map[string]uint64 // by tenant label (forbiddenLabel)
}

// connAuth is a connection's authentication: the hash of the token it
// presented and the grant that token has in the reading in force.
type connAuth struct {
	done  bool   // AUTH succeeded, or a client certificate was accepted
	cn    string // the verified client certificate's common name, when it authenticated the connection
	sum   creds.Sum
	set   *creds.Tenants // the reading grant was looked up in
	grant *creds.Grant
}

// requiresAuth reports whether op must come after AUTH on a node with
// credentials: everything but a liveness probe and the shared-memory
// discovery (which, with credentials on, finds none).
func requiresAuth(op wire.Op) bool {
	return op != wire.OpPing && op != wire.OpShmInfo && op != wire.OpAuth
}

// authenticated checks, before a request is served, that the connection
// presented a token that is still granted. Its error is a FrameError:
// the connection is answered and closed.
func (c *conn) authenticated() error {
	if !c.auth.done && c.certAuth() {
		return nil
	}
	if !c.auth.done {
		c.s.authFailed(authNoToken, c)
		return &wire.FrameError{Status: wire.StatusUnauthenticated,
			Message: "this node requires credentials: send AUTH with a token first (client.token / DFKV_TOKEN)"}
	}
	if set := c.s.opts.Credentials.Current(); set != c.auth.set {
		c.auth.set, c.auth.grant = set, c.auth.lookup(set)
		if c.auth.grant == nil {
			c.s.authFailed(authWithdrawn, c)
			return &wire.FrameError{Status: wire.StatusUnauthenticated,
				Message: "the connection's token is no longer in the node's credentials file; reconnect with a current token"}
		}
	}
	return nil
}

// lookup finds the connection's grant in set: by certificate name or by
// token hash, whichever authenticated it.
func (a *connAuth) lookup(set *creds.Tenants) *creds.Grant {
	if a.cn != "" {
		return set.LookupCN(a.cn)
	}
	return set.Lookup(a.sum)
}

// certAuth authenticates a connection by its TLS client certificate, if
// it presented one that the handshake verified (server.tls_client_ca)
// and whose common name a credential lists.
func (c *conn) certAuth() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return false
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return false
	}
	cn := st.PeerCertificates[0].Subject.CommonName
	set := c.s.opts.Credentials.Current()
	g := set.LookupCN(cn)
	if cn == "" || g == nil {
		return false
	}
	c.auth = connAuth{done: true, cn: cn, set: set, grant: g}
	c.s.auth.ok.Add(1)
	return true
}

// tlsFailed handles a connection whose TLS handshake failed: a plaintext
// dfkv client (or curl) gets a plaintext refusal it can read, and the
// failure is counted and logged (rate-limited). It reports whether err
// was such a failure.
func (c *conn) tlsFailed(err error) bool {
	if _, ok := c.nc.(*tls.Conn); !ok || isTimeout(err) {
		return false
	}
	var rhe tls.RecordHeaderError
	reason := err.Error()
	if errors.As(err, &rhe) && rhe.Conn != nil {
		reason = "the client does not speak TLS"
		msg := "this dfkv node's data port requires TLS: turn on the client's TLS (client.tls) and give it the CA (client.tls_ca)"
		_ = rhe.Conn.SetWriteDeadline(c.s.opts.Clock.Now().Add(time.Second))
		_, _ = rhe.Conn.Write(append(wire.AppendResponse(nil, &wire.ResponseHeader{Status: wire.StatusEpochMismatch, BodyLen: uint64(len(msg))}), msg...))
	} else if errors.Is(err, io.EOF) {
		return false // the client left before or during the handshake
	}
	c.s.stats.tlsFailures.Add(1)
	c.s.tlsWarn.Warn(c.s.log, time.Now(), "closing connection: TLS handshake failed", "remote", c.nc.RemoteAddr().String(), "reason", reason)
	return true
}

// allows reports whether the connection may do r to tenant; false is
// counted and answered FORBIDDEN by the caller. A node without
// credentials allows everything.
func (c *conn) allows(tenant uint64, r creds.Right) bool {
	if c.s.opts.Credentials == nil || c.auth.grant.Allows(tenant, r) {
		return true
	}
	c.s.forbid(c, forbiddenLabel(c.auth.set, tenant), r)
	return false
}

// blindRemove is the answer to a REMOVE of tenant's key that the engine
// answered err: a credential that may remove but not read the tenant's
// keys gets OK for a key that was not there, as for one that was, so it
// cannot learn from removing which keys exist.
func (c *conn) blindRemove(tenant uint64, err error) error {
	if c.s.opts.Credentials != nil && wire.StatusOf(err) == wire.StatusNotFound && !c.auth.grant.Allows(tenant, creds.Read) {
		return nil
	}
	return err
}

// blindQuota is the answer to a PUT of tenant's key that its quota
// refused: for a credential that may write but not read the tenant's
// keys, the quota's message, whose bytes "new" are the value's size less
// the size of the value it would replace, becomes one that says nothing
// of the key, so refused PUTs cannot tell which keys exist and how long
// they are.
func (c *conn) blindQuota(tenant uint64, err error) error {
	if c.s.opts.Credentials != nil && wire.StatusOf(err) == wire.StatusQuotaExceeded && !c.auth.grant.Allows(tenant, creds.Read) {
		return errBlindQuota(tenant)
	}
	return err
}

func errBlindQuota(tenant uint64) error {
	return fmt.Errorf("tenant 0x%016x: the PUT does not fit its node quota: %w", tenant, wire.StatusQuotaExceeded)
}

// blindOver reports whether a PUT of n bytes to tenant, by a credential
// that may write but not read the tenant's keys, does not fit its quota
// as if its key were new. The quota itself charges a PUT its size less
// the size of the value it replaces, so at the quota's edge its answer
// would tell such a credential whether the key exists and how long it
// is; refused here, an existing key and an absent one get the same
// answer. In a batch (inRun) the items of the run not yet stored count
// too (blindJoin), so a run is judged as if all its keys were new.
//
// This closes the one-request probe, not every channel: the bytes a
// stored replacement frees still show in how much later PUTs may store,
// which such a credential can measure with PUTs that are refused.
func (c *conn) blindOver(tenant, n uint64, inRun bool) bool {
	if !c.blind(tenant) {
		return false
	}
	q := c.s.quotas()
	limit := q.Limit(tenant)
	used := uint64(max(q.Used(tenant), 0))
	if inRun {
		used += c.blindRun[tenant]
	}
	return used > limit || n > limit-used
}

// blindJoin counts n bytes of tenant's item in the BATCH_PUT run not yet
// stored, for blindOver (the run's store clears it).
func (c *conn) blindJoin(tenant, n uint64) {
	if !c.blind(tenant) {
		return
	}
	if c.blindRun == nil {
		c.blindRun = map[uint64]uint64{}
	}
	c.blindRun[tenant] += n
}

// blind reports whether the connection may write tenant's keys without
// reading them and tenant has a quota: its PUTs are judged as new keys.
func (c *conn) blind(tenant uint64) bool {
	if c.s.opts.Credentials == nil || c.auth.grant.Allows(tenant, creds.Read) {
		return false
	}
	q := c.s.quotas()
	return q != nil && q.Limit(tenant) != 0
}

// errForbidden is the message of a refused scalar request. It names the
// credential, the right and the tenant the client addressed (its own
// namespace's, which it knows), not the key: whether the key exists is
// the tenant's business.
func (c *conn) errForbidden(r creds.Right, tenant uint64) error {
	what := fmt.Sprintf("tenant 0x%016x", tenant)
	if r == creds.Stats {
		what = "this node"
	}
	return errors.New("credential " + strconv.Quote(c.auth.grant.Name) + " does not grant " + rightName(r) + " on " + what)
}

func rightName(r creds.Right) string {
	switch r {
	case creds.Read:
		return "read"
	case creds.Write:
		return "write"
	case creds.Remove:
		return "remove"
	}
	return "stats"
}

// handleAuth serves AUTH: it reads the token, hashes it and looks it up.
// A node without credentials reads and ignores it and answers OK with
// stored 0, so a client configured with a token works against an open
// node; an accepted token is OK with stored 1.
func (c *conn) handleAuth(h *wire.RequestHeader) error {
	var buf [wire.MaxTokenBytes]byte
	tok := buf[:h.BodyLen] // DecodeRequest bounds it
	if err := c.readFull(tok); err != nil {
		return err
	}
	w := c.s.opts.Credentials
	if w == nil {
		c.respond(wire.StatusOK, 0, nil)
		return nil
	}
	if c.auth.done {
		c.s.auth.failures[authTwice].Add(1) // logged as the malformed frame it is
		return &wire.FrameError{Status: wire.StatusInvalid, Message: "AUTH sent twice on one connection; a connection authenticates once"}
	}
	sum := creds.SumOf(tok)
	clear(buf[:])
	set := w.Current()
	g := set.Lookup(sum)
	if g == nil {
		c.s.authFailed(authBadToken, c)
		return &wire.FrameError{Status: wire.StatusUnauthenticated, Message: "token not accepted by this node's credentials file"}
	}
	c.auth = connAuth{done: true, sum: sum, set: set, grant: g}
	c.s.auth.ok.Add(1)
	c.respond(wire.StatusOK, 1, nil)
	return nil
}

// authFailed counts and logs (rate-limited) a failed authentication.
func (s *Server) authFailed(reason authReason, c *conn) {
	s.auth.failures[reason].Add(1)
	s.authWarn.Warn(s.log, time.Now(), "closing connection: authentication failed",
		"remote", c.nc.RemoteAddr().String(), "reason", authReasonNames[reason])
}

// forbiddenLabel names a tenant in metrics: by the name the credentials
// file lists it under, else "unlisted", so a client sending random
// tenants cannot grow the label set. A refused STATS counts as "(stats)".
func forbiddenLabel(set *creds.Tenants, tenant uint64) string {
	if n := set.TenantName(tenant); n != "" {
		return n
	}
	return "unlisted"
}

// forbid counts under label and logs (rate-limited) a request refused
// for lack of a right.
func (s *Server) forbid(c *conn, label string, r creds.Right) {
	s.auth.mu.Lock()
	if s.auth.forbidden == nil {
		s.auth.forbidden = map[string]uint64{}
	}
	s.auth.forbidden[label]++
	s.auth.mu.Unlock()
	s.forbidWarn.Warn(s.log, time.Now(), "request refused: the credential does not grant it",
		"remote", c.nc.RemoteAddr().String(), "credential", c.auth.grant.Name, "tenant", label, "right", rightName(r))
}

// AuthStats are the authentication numbers STATS reports.
type AuthStats struct {
	Required    bool              `json:"required"`
	Credentials int               `json:"credentials"`
	File        string            `json:"file,omitempty"`
	Accepted    uint64            `json:"accepted"`
	Failures    map[string]uint64 `json:"failures,omitempty"`
	Forbidden   map[string]uint64 `json:"forbidden,omitempty"`
}

// AuthStats reports whether the node requires credentials and what its
// checks refused.
func (s *Server) AuthStats() AuthStats {
	st := AuthStats{Accepted: s.auth.ok.Load()}
	if w := s.opts.Credentials; w != nil {
		set := w.Current()
		st.Required, st.Credentials, st.File = true, set.Len(), set.Path
	}
	for i := range authReasons {
		if n := s.auth.failures[i].Load(); n > 0 {
			if st.Failures == nil {
				st.Failures = map[string]uint64{}
			}
			st.Failures[authReasonNames[i]] = n
		}
	}
	s.auth.mu.Lock()
	for k, v := range s.auth.forbidden {
		if st.Forbidden == nil {
			st.Forbidden = map[string]uint64{}
		}
		st.Forbidden[k] = v
	}
	s.auth.mu.Unlock()
	return st
}

var (
	descAuthRequired  = prometheus.NewDesc("dfkv_auth_required", "1 when the data port requires a token (server.credentials_file), 0 when any client may address every tenant.", nil, nil)
	descAuthCreds     = prometheus.NewDesc("dfkv_auth_credentials", "Credentials in the reading of server.credentials_file in force.", nil, nil)
	descAuthAccepted  = prometheus.NewDesc("dfkv_auth_accepted_total", "Connections whose token was accepted.", nil, nil)
	descAuthFailures  = prometheus.NewDesc("dfkv_auth_failures_total", "Connections closed for failed authentication, by reason: no_token (a request before AUTH), bad_token, withdrawn (the token left the file), auth_twice.", []string{"reason"}, nil)
	descTLSFailures   = prometheus.NewDesc("dfkv_tls_handshake_failures_total", "Data-port connections whose TLS handshake failed (a plaintext client, a certificate the node does not accept); the log says which, rate-limited.", nil, nil)
	descAuthForbidden = prometheus.NewDesc("dfkv_auth_forbidden_total", "Requests and batch items refused FORBIDDEN because the credential does not grant the op on the tenant, by tenant (as named in the credentials file, else \"unlisted\").", []string{"tenant"}, nil)
)

// authCollector exports AuthStats.
type authCollector struct{ srv *Server }

func (a authCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAuthRequired, descAuthCreds, descAuthAccepted, descAuthFailures, descAuthForbidden, descTLSFailures} {
		ch <- d
	}
}

func (a authCollector) Collect(ch chan<- prometheus.Metric) {
	st := a.srv.AuthStats()
	req := 0.0
	if st.Required {
		req = 1
	}
	ch <- prometheus.MustNewConstMetric(descAuthRequired, prometheus.GaugeValue, req)
	ch <- prometheus.MustNewConstMetric(descAuthCreds, prometheus.GaugeValue, float64(st.Credentials))
	ch <- prometheus.MustNewConstMetric(descAuthAccepted, prometheus.CounterValue, float64(st.Accepted))
	ch <- prometheus.MustNewConstMetric(descTLSFailures, prometheus.CounterValue, float64(a.srv.stats.tlsFailures.Load()))
	for _, r := range authReasonNames {
		ch <- prometheus.MustNewConstMetric(descAuthFailures, prometheus.CounterValue, float64(st.Failures[r]), r)
	}
	for t, n := range st.Forbidden {
		ch <- prometheus.MustNewConstMetric(descAuthForbidden, prometheus.CounterValue, float64(n), t)
	}
}
