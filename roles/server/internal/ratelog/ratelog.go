// Package ratelog bounds how often a warning of one kind is logged. The
// node warns about things a flood can repeat thousands of times a second
// (bad connections, accept failures, an MDS that does not answer); one
// line per interval, with a count of the lines held back, keeps the log
// readable and cheap while the metrics still count every event.
package ratelog

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is how often a per-connection warning of one kind may be
// logged: once a port scanner, a health checker that only connects, or a
// misconfigured client fleet hits the data port, the node would otherwise
// write one line per connection.
const DefaultEvery = 10 * time.Second

// Limiter logs a warning of one kind at most once per Every
// (DefaultEvery when zero), adding how many it held back since the last
// line ("suppressed"); the counters in /metrics still count every event.
// Its zero value is ready to use.
type Limiter struct {
	Every time.Duration
	mu    sync.Mutex
	last  time.Time
	held  int
}

// Warn logs msg at WARN unless a line of this Limiter was logged less
// than Every before now.
func (r *Limiter) Warn(log *slog.Logger, now time.Time, msg string, args ...any) {
	every := r.Every
	if every == 0 {
		every = DefaultEvery
	}
	r.mu.Lock()
	if !r.last.IsZero() && now.Sub(r.last) < every {
		r.held++
		r.mu.Unlock()
		return
	}
	held := r.held
	r.last, r.held = now, 0
	r.mu.Unlock()
	if held > 0 {
		args = append(args, "suppressed", held)
	}
	log.Warn(msg, args...)
}

// Reset forgets the last line, so the next warning is logged at once.
func (r *Limiter) Reset() {
	r.mu.Lock()
	r.last, r.held = time.Time{}, 0
	r.mu.Unlock()
}
