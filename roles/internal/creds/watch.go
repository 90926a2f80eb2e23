package creds

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/roles/internal/filestamp"
)

// pollEvery is how often a Watch looks at its file.
const pollEvery = time.Second

// Watch keeps the latest good reading of one credentials file. Current
// costs one atomic load, so a connection may ask it per request.
type Watch[T any] struct {
	path string
	what string // "credentials file", for logs
	load func(string) (*T, error)
	log  *slog.Logger
	cur  atomic.Pointer[T]

	mu    sync.Mutex // serializes reloads
	stamp filestamp.Stamp
	bad   string // the error the file's current content was refused with (logged once)
}

// NewWatch reads path with load; an error refuses the start.
func NewWatch[T any](path, what string, load func(string) (*T, error), log *slog.Logger) (*Watch[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stamp, err := filestamp.Of(path)
	if err != nil {
		return nil, err
	}
	v, err := load(path)
	if err != nil {
		return nil, err
	}
	w := &Watch[T]{path: path, what: what, load: load, log: log, stamp: stamp}
	w.cur.Store(v)
	return w, nil
}

// Current is the reading in force.
func (w *Watch[T]) Current() *T { return w.cur.Load() }

// Reload reads the file again whether or not it looks changed (SIGHUP).
func (w *Watch[T]) Reload() { w.reload(true) }

// Run reloads the file when its contents change, until ctx ends.
func (w *Watch[T]) Run(ctx context.Context) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.reload(false)
		}
	}
}

func (w *Watch[T]) reload(force bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	stamp, err := filestamp.Of(w.path)
	if err == nil && !force && stamp == w.stamp {
		return
	}
	var v *T
	if err == nil {
		v, err = w.load(w.path)
	}
	if err != nil {
		// Logged once per distinct error: a file left broken is polled
		// every second and must not flood the log.
		if msg := err.Error(); msg != w.bad {
			w.bad = msg
			w.log.Error(w.what+" could not be reloaded; the credentials read before stay in force", "file", w.path, "error", msg)
		}
		return
	}
	w.bad = ""
	w.stamp = stamp
	w.cur.Store(v)
	w.log.Info(w.what+" reloaded", "file", w.path)
}
