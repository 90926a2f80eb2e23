// Package httpauth keeps HTTP endpoints that show what a node or the MDS
// knows (/metrics names tenants and nodes; /members lists the cluster)
// behind a bearer token, while the probes (/healthz, /readyz) stay open
// for a kubelet or a load balancer that carries no secret.
//
// The token lives in a file, as a Kubernetes Secret mounts it and as
// Prometheus's authorization.credentials_file reads it: its first line,
// surrounding whitespace trimmed. The file is read at start (a missing,
// unreadable, empty or too short token refuses the start, naming the
// file) and again when it changes, checked at most once a second on a
// request; a change that leaves no usable token keeps the old one and is
// logged once. Only the token's SHA-256 is kept, and requests are
// compared in constant time.
package httpauth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MinTokenBytes is the shortest token accepted: anything shorter is too
// easy to guess to protect anything.
const MinTokenBytes = 16

// Guard checks bearer tokens against the file's.
type Guard struct {
	path   string
	log    *slog.Logger
	sum    atomic.Pointer[[sha256.Size]byte]
	mu     sync.Mutex                // serializes reloads
	nextAt atomic.Pointer[time.Time] // the next look at the file; nil: at once
	bad    bool                      // the file's current content was refused (logged once)
}

// Load reads the token file at path; setting names the setting that
// gave it, for errors.
func Load(path, setting string, log *slog.Logger) (*Guard, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Guard{path: path, log: log}
	sum, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", setting, path, err)
	}
	g.sum.Store(&sum)
	return g, nil
}

// read returns the SHA-256 of the token in the file at path.
func read(path string) ([sha256.Size]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 4096).ReadSlice('\n')
	if err != nil && len(line) == 0 {
		return [sha256.Size]byte{}, errors.New("the file is empty: its first line must be the token")
	}
	if errors.Is(err, bufio.ErrBufferFull) {
		return [sha256.Size]byte{}, errors.New("the token's line is longer than 4 KiB")
	}
	tok := bytes.TrimSpace(line)
	if len(tok) < MinTokenBytes {
		return [sha256.Size]byte{}, fmt.Errorf("the token is %d bytes; at least %d are needed (e.g. openssl rand -hex 32)", len(tok), MinTokenBytes)
	}
	return sha256.Sum256(tok), nil
}

// refresh reloads the file if it changed since it was last read; it
// looks at most once a second.
func (g *Guard) refresh() {
	// Instants, not Unix nanoseconds: time.Now's monotonic reading keeps
	// a backward step of the wall clock from postponing the next look
	// (and a revoked token's refusal) by as long as the step.
	now := time.Now()
	if next := g.nextAt.Load(); next != nil && now.Before(*next) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if next := g.nextAt.Load(); next != nil && now.Before(*next) {
		return
	}
	next := now.Add(time.Second)
	g.nextAt.Store(&next)
	// The token itself is compared, not the file's size and time: a
	// same-length token written within the filesystem's timestamp
	// granularity, or by a tool that keeps times, would be missed.
	sum, err := read(g.path)
	if err != nil {
		if !g.bad {
			g.bad = true
			g.log.Error("HTTP token file changed and has no usable token; the previous token stays in force", "file", g.path, "err", err)
		}
		return
	}
	g.bad = false
	if old := g.sum.Load(); *old != sum {
		g.sum.Store(&sum)
		g.log.Info("HTTP token reloaded", "file", g.path)
	}
}

// Allowed reports whether r carries the token.
func (g *Guard) Allowed(r *http.Request) bool {
	g.refresh()
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) <= len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(auth[len(prefix):])))
	want := g.sum.Load()
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// Wrap serves h only to requests that carry the token; the others get
// 401 with a WWW-Authenticate challenge and no hint of the content.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	if g == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.Allowed(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dfkv"`)
			http.Error(w, "unauthorized: this endpoint needs the bearer token of its http_token_file", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
