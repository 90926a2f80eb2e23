package main

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/embed"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// state is what one dfkv_client token stands for.
type state struct {
	c        *client.Client
	maxBlock uint64
	// release lets go of the embedded node c is a client of; nil when c
	// connects to nodes.
	release func() error
	// tokenFrom says where the token came from (tokenField or an
	// environment name), "" when there is none: a refusal's message names
	// it, never the token.
	tokenFrom string
	// tls is the TLS in force (files and where each setting came from),
	// for messages.
	tls tlsSettings

	lastErr errSlot
}

func (s *state) setErr(err error) { s.lastErr.set(s.explain(err).Error()) }

// explain adds to a refusal of the token (or client certificate) where
// this library took it from, which the node's and wire/client's words
// (client.token, the tools' setting) do not say, and never the token
// itself; and to a TLS failure the TLS settings in force (tlsSettings.
// explain). Other errors are returned as they are.
func (s *state) explain(err error) error {
	err = s.tls.explain(err)
	if errors.Is(err, client.ErrTLS) {
		return err // about certificates, not the token
	}
	cert := s.tls.cert
	if wire.StatusOf(err) == wire.StatusForbidden && s.tokenFrom != "" {
		return fmt.Errorf("the token from %s does not grant this on the namespace's tenant: %w", tokenSource(s.tokenFrom), err)
	}
	if wire.StatusOf(err) == wire.StatusForbidden && cert.v != "" {
		return fmt.Errorf("no token set, and the client certificate %s (from %s) does not grant this on the namespace's tenant: %w", cert.v, source(cert.from), err)
	}
	if wire.StatusOf(err) != wire.StatusUnauthenticated && !errors.Is(err, client.ErrAuth) {
		return err
	}
	if s.tokenFrom == "" && cert.v != "" {
		return fmt.Errorf("no token set (libdfkv takes %s, else $%s, else $%s; all are empty), and the node does not take the client certificate %s (from %s) in place of one: %w",
			tokenField, envToken, envTokenOld, cert.v, source(cert.from), err)
	}
	if s.tokenFrom == "" {
		return fmt.Errorf("no token set (libdfkv takes %s, else $%s, else $%s; all are empty): %w", tokenField, envToken, envTokenOld, err)
	}
	return fmt.Errorf("token from %s (libdfkv takes %s, else $%s, else $%s): %w", tokenSource(s.tokenFrom), tokenField, envToken, envTokenOld, err)
}

// close closes the client, and the embedded store if there is one.
func (s *state) close() error {
	err := s.c.Close()
	if s.release != nil {
		if rerr := s.release(); rerr != nil {
			return rerr
		}
	}
	return err
}

func (s *state) getErr() string { return s.lastErr.get() }

// openErr is the last-error slot for failures with no handle: dfkv_open_v2
// and calls made with a NULL, closed or forged handle.
var openErr errSlot

func setGlobalErr(err error) { openErr.set(err.Error()) }

func globalErr() string { return openErr.get() }

// maxErrThreads bounds an errSlot's per-thread messages; past it, the
// oldest message (most likely a thread long gone) makes room.
const maxErrThreads = 1024

// errSlot is a last-error message kept per calling thread, like errno: a
// caller reads the message right after its failed call on the same
// thread, so with one handle shared by a thread pool (SGLang's and
// LMCache's I/O threads) each thread gets its own failure's message, not
// the latest of any thread. A thread with no message of its own gets the
// latest of any thread. An exported function runs on the calling C thread
// for the whole call (cgo locks the goroutine to it), so gettid names that
// thread.
type errSlot struct {
	mu       sync.Mutex
	latest   string
	seq      uint64
	byThread map[int]threadErr
}

type threadErr struct {
	msg string
	seq uint64 // when it was set, to evict the oldest first
}

func (e *errSlot) set(msg string) {
	tid := unix.Gettid()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.latest = msg
	e.seq++
	if e.byThread == nil {
		e.byThread = map[int]threadErr{}
	}
	if _, ok := e.byThread[tid]; !ok && len(e.byThread) >= maxErrThreads {
		oldest, at := 0, uint64(0)
		for t, te := range e.byThread {
			if at == 0 || te.seq < at {
				oldest, at = t, te.seq
			}
		}
		delete(e.byThread, oldest)
	}
	e.byThread[tid] = threadErr{msg: msg, seq: e.seq}
}

func (e *errSlot) get() string {
	tid := unix.Gettid()
	e.mu.Lock()
	defer e.mu.Unlock()
	if te, ok := e.byThread[tid]; ok {
		return te.msg
	}
	return e.latest
}

// errBadHandle is returned for a NULL, closed or forged dfkv_client token.
var errBadHandle = fmt.Errorf("dfkv_client handle is NULL, closed or not from dfkv_open_v2: %w", wire.StatusInvalid)

// lookup returns the state of token h. cgo.Handle.Value panics on a
// handle it does not know; that is a caller error here, not a crash.
func lookup(h uintptr) (s *state, err error) {
	if h == 0 {
		return nil, errBadHandle
	}
	defer func() {
		if recover() != nil {
			s, err = nil, errBadHandle
		}
	}()
	s, ok := cgo.Handle(h).Value().(*state)
	if !ok {
		return nil, errBadHandle
	}
	return s, nil
}

// release invalidates token h. Two racing closes of one handle: the loser
// gets errBadHandle.
func release(h uintptr) (s *state, err error) {
	s, err = lookup(h)
	if err != nil {
		return nil, err
	}
	defer func() {
		if recover() != nil {
			s, err = nil, errBadHandle
		}
	}()
	cgo.Handle(h).Delete()
	return s, nil
}

// openOptions is dfkv_client_options_v2 read out of C memory.
type openOptions struct {
	members, mds, group string
	namespace           []byte // a view of C memory, copied by open
	batchConcurrency    uint32
	poolSize            uint32
	timeoutMS           uint64
	dialTimeoutMS       uint64
	maxBlockBytes       uint64
	shm                 uint32  // DFKV_SHM_*
	embedded            *string // embedded_config; nil = connect to nodes
	// token is presented to nodes that require credentials; "" = none.
	// tokenFrom is where it came from (resolveToken). Never printed.
	token, tokenFrom string
	// tls is TLS with the nodes and MDS, resolved (resolveTLS); its files
	// are read by open.
	tls tlsSettings
}

// Where the token comes from: the options field, else the environment
// under the names the dfkv tools read (client.token), the current one
// first.
const (
	tokenField  = "dfkv_client_options_v2.token"
	envToken    = "DFKV_CLIENT_TOKEN"
	envTokenOld = "DFKV_TOKEN"
)

// resolveToken returns the token to present and where it came from: the
// field when it is non-empty, else the first non-empty of $DFKV_CLIENT_TOKEN
// and $DFKV_TOKEN, else none ("", "").
func resolveToken(field string, lookup func(string) (string, bool)) (token, from string) {
	if field != "" {
		return field, tokenField
	}
	for _, name := range []string{envToken, envTokenOld} {
		if v, ok := lookup(name); ok && v != "" {
			return v, name
		}
	}
	return "", ""
}

// tokenSource names a token's source in a message: the field as it is,
// an environment variable with its $.
func tokenSource(from string) string {
	if from == tokenField {
		return from
	}
	return "$" + from
}

// minTokenBytes is the shortest token accepted, as for the dfkv tools'
// client.token: anything shorter is too easy to guess to protect a tenant.
const minTokenBytes = 16

// checkToken refuses a token no node would accept, as the tools refuse
// client.token. The message says where the token came from and what is
// wrong with it, never what it is.
func checkToken(token, from string) error {
	if token == "" {
		return nil
	}
	want := fmt.Sprintf("want %d..%d bytes without spaces or control characters", minTokenBytes, wire.MaxTokenBytes)
	if len(token) < minTokenBytes || len(token) > wire.MaxTokenBytes {
		return fmt.Errorf("dfkv_open_v2: the token from %s is %d bytes; %s: %w", tokenSource(from), len(token), want, wire.StatusInvalid)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] == 0x7f {
			return fmt.Errorf("dfkv_open_v2: the token from %s holds a space or control character at byte %d; %s: %w", tokenSource(from), i+1, want, wire.StatusInvalid)
		}
	}
	return nil
}

// open builds the client state and returns its token.
func open(o openOptions) (uintptr, error) {
	if err := checkToken(o.token, o.tokenFrom); err != nil {
		return 0, err
	}
	members := splitList(o.members)
	mds := splitList(o.mds)
	if o.embedded != nil {
		return openEmbedded(o, len(members)+len(mds) > 0)
	}
	tlsCfg, err := o.tls.config()
	if err != nil {
		return 0, err
	}
	switch {
	case len(mds) > 0 && len(members) > 0:
		return 0, fmt.Errorf("dfkv_open_v2: both members (%q) and mds_addrs (%q) are set; give exactly one: %w", o.members, o.mds, wire.StatusInvalid)
	case len(mds) == 0 && len(members) == 0:
		return 0, fmt.Errorf("dfkv_open_v2: no membership: set members to a comma-separated host:port list, or mds_addrs: %w", wire.StatusInvalid)
	case len(mds) == 0 && o.group != "":
		return 0, fmt.Errorf("dfkv_open_v2: group %q is only meaningful with mds_addrs: %w", o.group, wire.StatusInvalid)
	}
	group := o.group
	if len(mds) > 0 && group == "" {
		group = "default"
	}
	if len(o.namespace) == 0 {
		return 0, fmt.Errorf("dfkv_open_v2: namespace is NULL or empty: %w", wire.StatusInvalid)
	}
	const maxTimeoutMS = uint64(24 * time.Hour / time.Millisecond)
	if o.timeoutMS > maxTimeoutMS || o.dialTimeoutMS > maxTimeoutMS {
		return 0, fmt.Errorf("dfkv_open_v2: timeout_ms %d / dial_timeout_ms %d over a day: %w", o.timeoutMS, o.dialTimeoutMS, wire.StatusInvalid)
	}
	shmMode, ok := map[uint32]string{0: client.ShmAuto, 1: client.ShmOff, 2: client.ShmOn}[o.shm]
	if !ok {
		return 0, fmt.Errorf("dfkv_open_v2: shm %d: want DFKV_SHM_AUTO (0), DFKV_SHM_OFF (1) or DFKV_SHM_ON (2): %w", o.shm, wire.StatusInvalid)
	}
	if o.maxBlockBytes > 1<<40 {
		return 0, fmt.Errorf("dfkv_open_v2: max_block_bytes %d is over 1 TiB: %w", o.maxBlockBytes, wire.StatusInvalid)
	}
	// DFKV_RDMA in the engine's environment asks for RDMA; a library
	// built without it (the default) or a host without a device uses TCP.
	// Read through getenv, as the token is: an engine may set it after
	// loading libdfkv, which Go's copy of the environment would miss.
	rdmaOpts, _ := rdma.ClientFromEnv(cEnv)
	c, err := client.Open(client.Options{
		Namespace:        append([]byte(nil), o.namespace...),
		Members:          members,
		MDS:              mds,
		Group:            group,
		Timeout:          time.Duration(o.timeoutMS) * time.Millisecond,
		DialTimeout:      time.Duration(o.dialTimeoutMS) * time.Millisecond,
		PoolSize:         int(o.poolSize),
		BatchConcurrency: int(o.batchConcurrency),
		MaxBlockBytes:    o.maxBlockBytes,
		SharedMemory:     shmMode,
		RDMA:             rdmaOpts,
		Token:            o.token,
		TLS:              tlsCfg,
	})
	if err != nil {
		return 0, fmt.Errorf("dfkv_open_v2: %w", err)
	}
	maxBlock := o.maxBlockBytes
	if maxBlock == 0 {
		maxBlock = 64 << 20 // client.Options default
	}
	return uintptr(cgo.NewHandle(&state{c: c, maxBlock: maxBlock, tokenFrom: o.tokenFrom, tls: o.tls})), nil
}

// openEmbedded opens an embedded store and a handle on its client.
func openEmbedded(o openOptions, membership bool) (uintptr, error) {
	switch {
	case membership:
		return 0, fmt.Errorf("dfkv_open_v2: embedded_config is set together with members or mds_addrs; an embedded store is its own single member: leave them empty: %w", wire.StatusInvalid)
	case len(o.namespace) == 0:
		return 0, fmt.Errorf("dfkv_open_v2: namespace is NULL or empty: %w", wire.StatusInvalid)
	case o.shm == 2:
		return 0, fmt.Errorf("dfkv_open_v2: shm is DFKV_SHM_ON, but an embedded store is reached in-process, not through shared memory: %w", wire.StatusInvalid)
	case o.tls.on && o.tls.from == tlsField:
		return 0, fmt.Errorf("dfkv_open_v2: tls is DFKV_TLS_ON, but an embedded store is reached in-process, with no connection to encrypt: %w", wire.StatusInvalid)
	case o.tls.fieldSet != "":
		return 0, fmt.Errorf("dfkv_open_v2: %s is set, but an embedded store is reached in-process, with no connection to encrypt: %w", o.tls.fieldSet, wire.StatusInvalid)
	}
	const maxTimeoutMS = uint64(24 * time.Hour / time.Millisecond)
	if o.timeoutMS > maxTimeoutMS {
		return 0, fmt.Errorf("dfkv_open_v2: timeout_ms %d over a day: %w", o.timeoutMS, wire.StatusInvalid)
	}
	// DFKV_SERVER_* through getenv, as the engine's process has them now.
	node, release, err := embed.Shared(*o.embedded, cEnv)
	if err != nil {
		if _, ok := errors.AsType[wire.Status](err); !ok {
			err = fmt.Errorf("%w: %w", err, wire.StatusInvalid) // a configuration the store refused
		}
		return 0, fmt.Errorf("dfkv_open_v2: %w", err)
	}
	c, err := node.Client(client.Options{
		Namespace:        append([]byte(nil), o.namespace...),
		Timeout:          time.Duration(o.timeoutMS) * time.Millisecond,
		PoolSize:         int(o.poolSize),
		BatchConcurrency: int(o.batchConcurrency),
		MaxBlockBytes:    o.maxBlockBytes,
		Token:            o.token, // for an embedded node with server.credentials_file
	})
	if err != nil {
		_ = release()
		return 0, fmt.Errorf("dfkv_open_v2: %w", err)
	}
	maxBlock := o.maxBlockBytes
	if maxBlock == 0 {
		maxBlock = node.MaxBlockBytes() // as the client took it
	}
	return uintptr(cgo.NewHandle(&state{c: c, release: release, maxBlock: maxBlock, tokenFrom: o.tokenFrom})), nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// statusOf maps an error to the C return code. A token the node refused
// as malformed (INVALID to AUTH) is UNAUTHENTICATED, as any refused token
// is: the call's own arguments were fine.
func statusOf(err error) int {
	st := wire.StatusOf(err)
	if !st.Known() {
		return int(wire.StatusInternal)
	}
	if st == wire.StatusInvalid && errors.Is(err, client.ErrAuth) {
		return int(wire.StatusUnauthenticated)
	}
	return int(st)
}

// itemErr prefixes a batch item's error with its index for the last-error
// message.
func itemErr(i int, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("item %d: %w", i, err)
}

// errInternal wraps a recovered panic.
func errInternal(fn string, r any, stack []byte) error {
	if len(stack) > 2048 {
		stack = stack[:2048]
	}
	return fmt.Errorf("%s: internal fault (please report): %v\n%s: %w", fn, r, stack, wire.StatusInternal)
}
